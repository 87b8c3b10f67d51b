"""``tether runs ACTION``: the durable runs of a deployment, read from the shared databases (any
machine; no worker needed). A decision or an answer given here is resumed by a worker on its own;
``resume RUN`` enqueues the continuation of a paused run (once per paused state, whoever asks).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tether.cli._commands._options import add_actions, add_answer, add_db, add_json, add_resolve, answer_of
from tether.clisupport.output import NEEDS_DURABLE, emit_json, fail, outcome, safe, table
from tether.errors import ApprovalError, ConfigError


def register(sub: Any) -> None:
    p, acts = add_actions(
        sub,
        "runs",
        dest="action",
        help="durable runs: list, show, cancel, resume, approve, deny, pauses, answer, resolve, workers,"
        " escalations, move",
    )
    ls = acts.add_parser("list", help="recent runs, newest first")
    ls.add_argument("--limit", type=int, default=50)
    statuses = ("queued", "running", "paused", "finished", "failed", "cancelled")
    ls.add_argument("--status", choices=statuses)
    ls.add_argument("--tenant")
    ls.add_argument("--version", help="runs bound to this application version")
    ls.add_argument("--older-than", metavar="AGE", help="started more than AGE ago: 90, 30s, 15m, 2h, 1d")
    show = acts.add_parser("show", help="a run: status, stop reason, workflows, proposals, effects")
    show.add_argument("run_id")
    show.add_argument("--events", action="store_true", help="print its trace events (from the trace index)")
    for name, helptext in (
        ("cancel", "cancel a queued, running or paused run (its proposals and questions too)"),
        ("resume", "resume a paused run"),
    ):
        a = acts.add_parser(name, help=helptext)
        a.add_argument("run_id")
        a.add_argument("--wait", type=float, help="wait up to S seconds for it to end or pause")
        if name == "cancel":
            a.add_argument("--reason", default="run cancelled", help="why (kept in the audit log)")
    for name in ("approve", "deny"):
        d = acts.add_parser(name, help=f"{name} a proposal on the shared store")
        d.add_argument("proposal_id")
        d.add_argument("--reviewer", help="who decides (default: $USER)")
        d.add_argument("--reason", default="", help="why (a denial needs one)")
        d.add_argument("--content-hash", help="the content hash read (`approvals show`): held to it")
    acts.add_parser("pauses", help="questions (MCP elicitations) runs wait on, unanswered")
    ans = acts.add_parser("answer", help="answer a paused question; a worker then resumes the run")
    ans.add_argument("pause_id")
    add_answer(ans, by="$USER")
    add_resolve(acts, "record what became of an escalated effect (outcome unknown)")
    mv = acts.add_parser("move", help="bind a paused run to another version (after an upgrade)")
    mv.add_argument("run_id")
    mv.add_argument("--to", default="latest", help="a live worker's version, or latest (default)")
    w = acts.add_parser("workers", help="workers and their heartbeats (alive, draining, stopped, dead)")
    w.add_argument(
        "--dead-after", type=float, default=15.0, help="seconds of silence that mark a worker dead"
    )
    acts.add_parser("escalations", help="effects whose outcome a person must resolve, with the command")
    for action in acts.choices.values():
        add_json(action)
    add_db(p, acts, "storage URL (default $TETHER_DB)")  # before or after the action
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    url = args.db or os.environ.get("TETHER_DB")
    if not url:
        need = "needs the deployment's storage URL: pass --db URL or set TETHER_DB"
        return fail(f"tether runs {args.action}", need, as_json=args.json, error="no_db")
    client = open_client(url, "tether runs", as_json=args.json)
    if isinstance(client, int):
        return client
    try:
        return _ACTIONS[args.action](client, args)
    except ApprovalError as err:  # the action was refused: nothing changed
        return _refused(err, args)
    finally:
        client.close()


def open_client(url: str, command: str, *, as_json: bool) -> Any:
    """A ``DurableClient`` on ``url``, or the exit code after one line saying why not."""
    try:
        from tether.durable import DurableClient
        from tether.durable._deploy import DeploymentUnavailable
    except ImportError as err:
        return fail(command, f"{NEEDS_DURABLE}: {err}", as_json=as_json)
    try:
        return DurableClient(url)
    except DeploymentUnavailable as err:
        return fail(command, err, as_json=as_json, code=err.exit)
    except ConfigError as err:
        return fail(command, err, as_json=as_json)


def _list(client: Any, args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    try:
        older = parse_age(args.older_than) if args.older_than else None
    except ValueError as err:
        return fail("tether runs list", err, as_json=args.json)
    views = client.runs(
        limit=args.limit, status=args.status, tenant=args.tenant, older_than_s=older, version=args.version
    )
    now = datetime.now(UTC)
    rows = [
        {
            "run_id": v.run_id,
            "tenant": v.tenant or "",
            "status": v.status,
            "stop_reason": v.stop_reason or "",
            "age": _age(
                (now - v.workflows[0].created_at).total_seconds() if v.workflows[0].created_at else 0
            ),
            "workflows": len(v.workflows),
            "executor": v.latest.executor or "",
            "version": v.version or "",
        }
        for v in views
    ]
    columns = ["run_id", "tenant", "status", "stop_reason", "age", "executor", "version"]
    text = table(rows, columns, "no durable runs")
    return outcome({"count": len(rows), "runs": rows}, text, as_json=args.json)


def parse_age(text: str) -> float:
    """``90`` or ``90s``, ``15m``, ``2h``, ``1d`` -> seconds; raises ``ValueError``."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    t = text.strip().lower()
    scale = units.get(t[-1:])
    number = t[:-1] if scale is not None else t
    try:
        value = float(number) * (scale or 1)
    except ValueError:
        raise ValueError(f"--older-than {text!r}: use seconds or a number with s, m, h or d") from None
    if value < 0:
        raise ValueError(f"--older-than {text!r} is negative")
    return value


def _age(seconds: float) -> str:
    s = int(seconds)
    for unit, size in (("s", 1), ("m", 60), ("h", 3600)):
        if s < 120 * size:
            return f"{s // size}{unit}"
    return f"{s // 86400}d"


def _show(client: Any, args: argparse.Namespace) -> int:
    from tether.sql._database import blocking

    view = client.run(args.run_id)
    if view is None:
        why = f"no durable run {args.run_id!r}"
        return fail("tether runs show", why, as_json=args.json, error="unknown_run", run_id=args.run_id)
    out = view.summary()
    store = client.stores.approvals
    out["proposals"] = [
        {"id": p.id, "tool": p.tool, "status": str(p.status), "decided_by": p.decided_by}
        for p in blocking(store.list_proposals, run_id=args.run_id)
    ]
    out["effects"] = [
        {"key": e.key, "tool": e.tool, "status": str(e.status), "attempts": e.attempts, "note": e.note}
        for e in blocking(store.ledger_for_run, args.run_id)
    ]
    traces = client.stores.traces
    if args.events and traces is not None:
        out["events"] = traces.events(args.run_id)
    code: int = view.exit_code  # the run's, by the rule of `tether run`
    if args.json:
        emit_json(out, exit=code)
        return code
    lines = [f"{key}: {out[key]}" for key in SHOWN if out.get(key)]
    lines += [
        f"workflow {w['workflow_id']}: {w['op']} {w['status']} on {w['executor']} -> {w['stop_reason']}"
        for w in out["workflows"]
    ]
    for p in out["proposals"]:
        by = f" by {p['decided_by']}" if p["decided_by"] else ""
        lines.append(f"proposal {p['id']}: {p['tool']} {p['status']}{by}")
    for e in out["effects"]:
        tried = f"(attempts {e['attempts']})"
        lines.append(f"effect {e['key']}: {e['tool']} {e['status']} {tried} {e['note']}".rstrip())
    lines += [f"  {ev['seq']:>4} {ev['kind']}" for ev in out.get("events", [])]
    # The answer, details, tool names and notes are a model's or a server's words: shown inert.
    outcome(out, "\n".join(lines) or None, as_json=False)
    _print_problems(out)
    return code


SHOWN = ("run_id", "tenant", "status", "stop_reason", "version", "answer", "detail")


def _print_problems(out: dict[str, Any]) -> None:
    if out.get("stop_reason") == "accepted" and out.get("problems"):
        print(safe(f"note: {out['message']}"))
    if out.get("stop_reason") is not None:
        print(f"exit: {out['exit']}")


def report_view(view: Any, *, as_json: bool) -> int:
    """A durable run that ended or paused, as ``submit --wait`` and ``resume`` report it."""
    out = view.summary()
    if as_json:
        emit_json(out, exit=out["exit"])
    else:
        print(f"run: {view.run_id}\nstatus: {view.status}\nstop_reason: {view.stop_reason}")
        _print_problems(out)
    return int(out["exit"])


def _cancel(client: Any, args: argparse.Namespace) -> int:
    from tether.cli._commands._audit import CliAudit, cli_actor

    # A person's decision: closed through the one home of a decision, audited as ``cli:<person>``.
    who = _who()
    done = client.cancel(args.run_id, by=who, actor=cli_actor(who), audit=CliAudit(), reason=args.reason)
    text = "\n".join(
        [
            f"cancelled {args.run_id}: {len(done['workflows'])} workflow(s),"
            f" {len(done['proposals_invalidated'])} proposal(s) invalidated,"
            f" {len(done['questions_closed'])} question(s) closed,"
            f" {len(done['tasks_cancelled'])} MCP task(s) cancelled on their servers",
            *(f"  task not cancelled: {left}" for left in done["tasks_not_cancelled"]),
        ]
    )
    return _done(args, {"run_id": args.run_id, **done}, text)


def _resume(client: Any, args: argparse.Namespace) -> int:
    try:
        workflow_id = client.resume(args.run_id)
    except ApprovalError as err:
        refusal = {"run_id": args.run_id, "error": err.reason, "message": str(err)}
        return outcome(refusal, f"cannot resume: {err.reason}: {err}", as_json=args.json, exit=1)
    if args.wait is None:
        return _done(args, {"run_id": args.run_id, "workflow_id": workflow_id}, workflow_id)
    try:
        view = client.wait(args.run_id, timeout_s=args.wait)
    except TimeoutError as err:
        return wait_timeout("tether runs resume", err, args.run_id, as_json=args.json)
    return report_view(view, as_json=args.json)


def wait_timeout(command: str, err: TimeoutError, run_id: str, *, as_json: bool) -> int:
    """``--wait`` ran out before the run ended or paused (it goes on; ``runs show`` follows it)."""
    return fail(command, err, as_json=as_json, error="wait_timeout", run_id=run_id)


def _decide(client: Any, args: argparse.Namespace) -> int:
    from tether.cli._commands._audit import CliAudit, cli_actor
    from tether.policy import Approvals, Reviewer
    from tether.policy._decisions import HumanDecision, decide_proposal
    from tether.sql._database import blocking

    approvals = Approvals(client.stores.approvals)
    reviewer = Reviewer.for_all_tenants(args.reviewer or _who())
    decision = HumanDecision(args.action, args.proposal_id, args.reason, args.content_hash)
    actor = cli_actor(reviewer.name)
    p = blocking(decide_proposal, approvals, reviewer, decision, actor=actor, audit=CliAudit())
    out = {"id": p.id, "status": str(p.status), "run_id": p.run_id, "decided_by": p.decided_by}
    return _done(args, out, f"{p.id}: {p.status} by {p.decided_by} (run {p.run_id})")


def _pauses(client: Any, args: argparse.Namespace) -> int:
    from tether.cli._commands._pauses import pause_listing
    from tether.sql._database import blocking

    listing = pause_listing(blocking(client.stores.pauses.pending))
    text = table(
        listing["pauses"], ["id", "run", "server", "tool", "asked", "message"], "no questions waiting"
    )
    return outcome(listing, text, as_json=args.json)


def _answer(client: Any, args: argparse.Namespace) -> int:
    from tether.cli._commands._audit import CliAudit, cli_actor
    from tether.mcp._answers import answer_question
    from tether.sql._database import blocking

    action, content = answer_of(args)
    who = args.by or _who()
    pauses = client.stores.pauses
    pause = blocking(
        answer_question,
        pauses,
        args.pause_id,
        action,
        content,
        answered_by=who,
        actor=cli_actor(who),
        audit=CliAudit(),
        tenant=_pause_tenant(client, args.pause_id),
    )
    out = {"id": pause.id, "status": str(pause.status), "action": action, "run_id": pause.run_id}
    line = f"{pause.id}: {action} by {pause.answered_by}; a worker resumes run {pause.run_id}"
    return _done(args, out, line)


def _pause_tenant(client: Any, pause_id: str) -> str:
    """The tenant of the run a question pauses, as the audit log names it ("" if unknown)."""
    from tether.sql._database import blocking

    try:
        pause = blocking(client.stores.pauses.get, pause_id)
    except ApprovalError:  # unknown: refused, and audited, by the answer itself
        return ""
    view = client.run(pause.run_id)
    return str(view.tenant or "") if view is not None else ""


def _resolve(client: Any, args: argparse.Namespace) -> int:
    from tether.policy import Approvals, Reviewer
    from tether.sql._database import blocking

    reviewer = Reviewer.for_all_tenants(args.reviewer or _who())
    resolve = Approvals(client.stores.approvals).resolve
    entry = blocking(resolve, reviewer, args.key, happened=args.happened == "yes", note=args.note)
    out = {"key": entry.key, "status": str(entry.status), "run_id": entry.run_id, "note": entry.note}
    return _done(args, out, f"{entry.key}: {entry.status} ({entry.note}); resume run {entry.run_id}")


def _move(client: Any, args: argparse.Namespace) -> int:
    moved = client.move(args.run_id, args.to, by=_who())
    now = "its queued resume moved there" if moved["resume_moved"] else "its resume runs there"
    if moved["from"] == moved["to"]:  # a SQLite deployment's one version: a refused resume again
        return _done(args, moved, f"{args.run_id}: its resume enqueued again on {moved['to']}")
    return _done(args, moved, f"{args.run_id}: {moved['from']} -> {moved['to']}; {now}")


def _workers(client: Any, args: argparse.Namespace) -> int:
    from tether.durable._worker import _workers as op

    db = client.stores.db
    rows = db.run(op, args.dead_after) if db is not None else []
    columns = ["executor_id", "state", "host", "pid", "silent_s", "app_version", "recovered_by"]
    return outcome({"workers": rows}, table(rows, columns, "no workers have registered"), as_json=args.json)


def _escalations(client: Any, args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from tether.durable._events import resolve_command
    from tether.policy._ledger import untokened
    from tether.policy._store import LedgerStatus
    from tether.sql._database import blocking

    store = client.stores.approvals
    now = datetime.now(UTC)
    # Escalated, those whose call raised that no one is reconciling, and those an earlier
    # release's process (host:pid, no token) holds past its lease: all wait for a person.
    statuses = (LedgerStatus.ESCALATED, LedgerStatus.RECONCILING, LedgerStatus.INTENT)
    waiting = [
        e
        for e in blocking(store.ledger_in, *statuses)
        if e.status is LedgerStatus.ESCALATED
        or (e.lease_until <= now and (e.status is LedgerStatus.RECONCILING or untokened(e.owner)))
    ]
    rows = [
        {
            "key": e.key,
            "run_id": e.run_id or "",
            "tool": e.tool,
            "status": str(e.status),
            "since": e.updated_at,
            "note": e.note,
            "resolve": resolve_command(e.key),
        }
        for e in waiting
    ]
    text = safe(table(rows, ["key", "run_id", "tool", "since", "resolve"], "no effects wait for a person"))
    return outcome({"count": len(rows), "escalations": rows}, text, as_json=args.json)


def _who() -> str:
    """Who acts from this terminal: ``$USER``, else the login name."""
    import getpass

    return os.environ.get("USER") or getpass.getuser()


def _refused(err: Any, args: argparse.Namespace) -> int:
    """An ``ApprovalError`` that refused the action: its reason, as JSON or a line; exit 1."""
    refusal = {"error": err.reason, "message": str(err)}
    return outcome(refusal, f"{err.reason}: {err}", as_json=args.json, exit=1)


def _done(args: argparse.Namespace, out: dict[str, Any], line: str) -> int:
    return outcome(out, line, as_json=args.json)


def resume_durable(run_id: str, url: str, *, as_json: bool, wait: float = 300.0) -> int:
    """``tether resume RUN --db postgresql://…``: the same as ``tether runs resume --wait``."""
    client = open_client(url, "tether resume", as_json=as_json)
    if isinstance(client, int):
        return client
    try:
        return _resume(client, argparse.Namespace(run_id=run_id, wait=wait, json=as_json))
    finally:
        client.close()


_ACTIONS = {
    "list": _list,
    "show": _show,
    "cancel": _cancel,
    "resume": _resume,
    "approve": _decide,
    "deny": _decide,
    "pauses": _pauses,
    "answer": _answer,
    "resolve": _resolve,
    "workers": _workers,
    "escalations": _escalations,
    "move": _move,
}
