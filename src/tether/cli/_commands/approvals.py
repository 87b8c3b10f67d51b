"""``tether approvals list | show ID | approve ID | deny ID | invalidate ID | resolve KEY``: the
person at this console is the reviewer (``--reviewer``, default $USER), for every tenant."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.cli._commands._audit import CliAudit, cli_actor
from tether.cli._commands._options import add_actions, add_db, add_json, add_resolve
from tether.clisupport.approvals_db import default_db
from tether.clisupport.output import emit_json, fail, missing_extra, outcome, table
from tether.errors import ApprovalError, ConfigError

if TYPE_CHECKING:
    from tether.policy import Approvals
    from tether.stores._url import Stores


def register(sub: Any) -> None:
    p, acts = add_actions(
        sub, "approvals", dest="action", help="list, inspect and decide proposals waiting for approval"
    )
    ls = acts.add_parser("list", help="proposals (default: pending)")
    ls.add_argument("--status", default="pending", help="pending|approved|denied|invalidated|all")
    show = acts.add_parser("show", help="exactly what would run, and its history")
    show.add_argument("id")
    for name, helptext in (
        ("approve", "approve this stored proposal"),
        ("deny", "deny it"),
        ("invalidate", "revoke it: it can never run (again)"),
    ):
        a = acts.add_parser(name, help=helptext)
        a.add_argument("id")
        a.add_argument("--reviewer", default=None, help="who decides (default: $USER)")
        a.add_argument("--reason", default="", help="why (a denial needs one)")
        a.add_argument("--content-hash", help="the content hash read (`show`): the decision is held to it")
    add_resolve(acts, "record what became of an escalated call (outcome unknown)")
    for action in acts.choices.values():
        add_json(action)
    db_help = (
        f"approval store: a SQLite file (default {default_db()}) or a deployment's storage URL"
        " (postgresql://… or sqlite:///dir)"
    )
    add_db(p, acts, db_help)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    db = str(args.db or default_db())
    as_json = getattr(args, "json", False)
    opened = _open(args, db, as_json)
    if isinstance(opened, int):
        return opened
    approvals, stores = opened
    try:
        if args.action == "list":
            return _list(approvals, args.status, db, as_json)
        if args.action == "show":
            return _show(approvals, args.id, as_json)
        out = _decide(approvals, args)
        workers = _live_workers(stores) if stores is not None and out.get("run") else 0
    except (ApprovalError, ValueError) as err:
        return fail(f"tether approvals {args.action}", err, as_json=as_json)
    finally:
        if stores is not None:
            stores.close()
    _print_decision(out, db, as_json=as_json, deployment=stores is not None, workers=workers)
    return 0


def _live_workers(stores: Stores) -> int | None:
    """How many workers of the deployment beat lately (``None`` on SQLite: not listed)."""
    from sqlalchemy.exc import ProgrammingError

    from tether.durable._versions import live_workers

    if stores.db is None:
        return None
    try:
        return len(stores.db.run(live_workers))
    except ProgrammingError:  # no workers table yet: no worker was ever deployed here
        return 0


def _open(args: argparse.Namespace, db: str, as_json: bool) -> tuple[Approvals, Stores | None] | int:
    """The approvals over ``db`` (and the deployment's stores to close), or the exit code."""
    from tether.policy import Approvals, SqliteApprovalStore

    if "://" in db:  # a deployment: the store every worker shares
        from tether.durable._deploy import DeploymentUnavailable, check_stores
        from tether.stores._url import open_stores

        try:
            check_stores(db)  # one line in seconds, and a mistyped database or schema is not created
            stores = open_stores(db)
        except DeploymentUnavailable as err:
            return fail(f"tether approvals {args.action}", err, as_json=as_json, code=err.exit)
        except Exception as err:  # a bad URL or a missing extra: say so, as for a missing file
            if (needs := missing_extra(err)) is not None:
                return fail(f"tether approvals {args.action}", needs, as_json=as_json, error="missing_extra")
            return fail(f"tether approvals {args.action}", err, as_json=as_json)
        return Approvals(stores.approvals), stores
    if not Path(db).exists():  # never create a store just to look into it
        # A missing file is most often a mistyped path: an error (exit 1), not an empty queue.
        given = "" if args.db else " (the default store; pass --db FILE: the run's policy.approvals_db)"
        why = f"no approval store at {db}{given}"
        return fail(f"tether approvals {args.action}", why, as_json=as_json, db=db)
    try:
        return Approvals(SqliteApprovalStore(db)), None
    except ConfigError as err:  # a folder, or a file that is not a SQLite database
        why = f"{db} is not an approval store: {err}"
        return fail(f"tether approvals {args.action}", why, as_json=as_json, db=db)


def _list(approvals: Approvals, status_name: str, db: str, as_json: bool) -> int:
    from tether.policy import ProposalStatus
    from tether.sql._database import blocking

    known = [str(s) for s in ProposalStatus]
    if status_name not in (*known, "all"):
        raise ValueError(f"--status {status_name!r}: one of {', '.join(known)}, all")
    status = None if status_name == "all" else ProposalStatus(status_name)
    rows = [
        {
            "id": p.id,
            "status": str(p.status),
            "tenant": p.tenant,
            "tool": p.tool,
            "run": p.run_id or "",
            "created": p.created_at.isoformat(timespec="seconds"),
        }
        for p in blocking(approvals.store.list_proposals, status=status)
    ]
    text = table(rows, ["id", "status", "tenant", "tool", "run", "created"], "no proposals")
    return outcome({"db": str(db), "count": len(rows), "proposals": rows}, text, as_json=as_json)


def _show(approvals: Approvals, proposal_id: str, as_json: bool) -> int:
    from tether.sql._database import blocking

    review = blocking(approvals.inspect, proposal_id).summary()
    return outcome(review, "\n".join(f"{key}: {value}" for key, value in review.items()), as_json=as_json)


def _decide(approvals: Approvals, args: argparse.Namespace) -> dict[str, Any]:
    """Approve, deny, invalidate or resolve, as the person at this console; what was decided."""
    import getpass

    from tether.policy import Reviewer
    from tether.policy._decisions import HumanDecision, decide_proposal
    from tether.sql._database import blocking

    # An operator with the store open at the console acts for every tenant in it.
    reviewer = Reviewer.for_all_tenants(args.reviewer or getpass.getuser())
    if args.action == "resolve":
        entry = blocking(
            approvals.resolve, reviewer, args.key, happened=args.happened == "yes", note=args.note
        )
        return {"key": entry.key, "status": str(entry.status), "note": entry.note}
    decision = HumanDecision(args.action, args.id, args.reason, args.content_hash)
    actor = cli_actor(reviewer.name)
    p = blocking(decide_proposal, approvals, reviewer, decision, actor=actor, audit=CliAudit())
    decided_at = p.decided_at.isoformat() if p.decided_at else None
    return {
        "id": p.id,
        "status": str(p.status),
        "decided_by": p.decided_by,
        "decided_at": decided_at,
        "run": p.run_id,
    }


def _print_decision(
    out: dict[str, Any], db: str, *, as_json: bool, deployment: bool, workers: int | None
) -> None:
    """The decision; then how its run goes on: by hand, or by one of ``workers`` live ones."""
    if out.get("run"):
        out["resume"] = f"tether resume {out['run']} --db {shlex.quote(db)}"
        if deployment and workers is not None:
            out["live_workers"] = workers
    if as_json:
        emit_json(out, exit=0)
    else:
        print(" ".join(f"{k}={v}" for k, v in out.items() if k not in ("resume", "live_workers")))
        if out.get("resume") and deployment and workers != 0:
            print(f"a worker resumes the run by itself (or: {out['resume']})")
        elif out.get("resume") and deployment:
            print(f"no worker is live now: the run resumes when one starts (or: {out['resume']})")
        elif out.get("resume"):
            print(f"continue the run with: {out['resume']}")
