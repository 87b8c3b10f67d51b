"""``tether submit --agent agent.yaml|module:factory "objective"``: enqueue a durable run.

The run goes into the deployment's intake by plain SQL (no DBOS, no SQLAlchemy:
``tether.durable._intake``); any worker serving the app's version takes it. An agent file is
bound to its digest (only a worker with the same files runs it) and gives the run's trusted
context unless ``--tenant``/``--role``/``--user`` say otherwise.

``--batch FILE`` (``-``: stdin): one JSON object a line (``objective``, and optionally ``agent``,
``tenant``, ``roles``, ``user``, ``run_id``), all checked before any is stored, then stored in
one transaction; prints one JSON line per run, then the summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

from tether.clisupport.output import NEEDS_DURABLE, fail, outcome
from tether.errors import ConfigError

# A run's objective travels in the queue row: larger ones are refused before anything is stored.
MAX_OBJECTIVE_CHARS = 100_000


def register(sub: Any) -> None:
    p = sub.add_parser("submit", help="enqueue a durable run for the workers (or a batch of them)")
    p.add_argument("objective", nargs="?")
    p.add_argument(
        "--agent", help="the app: an agent file (.yaml/.yml/.toml) or module:factory returning (host, agent)"
    )
    p.add_argument("--tenant", help="trusted tenant of the run (default: the agent file's, else 'default')")
    p.add_argument("--role", action="append", default=[], help="trusted role; repeatable")
    p.add_argument("--user")
    p.add_argument("--run-id", help="choose the run id (default: a fresh one)")
    p.add_argument("--batch", metavar="FILE", help="JSON lines of runs to submit (- for stdin)")
    p.add_argument("--db", help="storage URL (default $TETHER_DB)")
    p.add_argument("--wait", type=float, help="wait up to S seconds for the run to end or pause")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run, quick_exit=True)  # cli.main: a client command, closed when it returns


class _Bad(Exception):
    """A run that cannot be submitted as given (nothing was stored)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass
class _Run:
    app: str
    digest: str | None
    objective: str
    context: Any
    run_id: str | None


def _prepare(
    agent: str | None,
    objective: str | None,
    tenant: str | None,
    roles: list[str],
    user: str | None,
    run_id: str | None,
    files: dict[str, Any],
) -> _Run:
    """Check one run and resolve its app; raises ``_Bad``. ``files``: agent files read so far."""
    from tether.core._names import is_agent_file
    from tether.policy._trusted import TrustedContext

    if not agent:
        raise _Bad("--agent is required (an agent file or module:factory)")
    if not isinstance(objective, str) or not objective.strip():
        raise _Bad("an objective is required")
    if len(objective) > MAX_OBJECTIVE_CHARS:
        raise _Bad(f"the objective has {len(objective)} characters; the limit is {MAX_OBJECTIVE_CHARS}")
    ctx = TrustedContext(tenant=tenant or "default", roles=frozenset(roles), user=user)
    if not is_agent_file(agent):
        return _Run(agent, None, objective, ctx, run_id)
    from tether.agents._build import trusted_context
    from tether.agents._file import agent_digest, load_agent_file

    if agent not in files:
        try:
            af = load_agent_file(agent)
        except ConfigError as err:  # a configuration error, as for tether run: exit 1, nothing stored
            raise _Bad(str(err)) from None
        assert af.path is not None
        files[agent] = (af, agent_digest(af))
    af, digest = files[agent]
    base = trusted_context(af)
    ctx = dataclasses.replace(
        base,
        tenant=tenant or base.tenant,
        roles=frozenset(roles) if roles else base.roles,
        user=user if user is not None else base.user,
    )
    return _Run(str(af.path.resolve()), digest, objective, ctx, run_id)


def _batch_runs(args: argparse.Namespace) -> list[_Run]:
    source = sys.stdin if args.batch == "-" else open(args.batch, encoding="utf-8")  # noqa: SIM115
    files: dict[str, Any] = {}
    runs = []
    try:
        for number, line in enumerate(source, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                if not isinstance(item, dict):
                    raise ValueError("not a JSON object")
                roles = item.get("roles", args.role)
                if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
                    raise ValueError("roles must be a list of strings")
                runs.append(
                    _prepare(
                        item.get("agent", args.agent),
                        item.get("objective"),
                        item.get("tenant", args.tenant),
                        roles,
                        item.get("user", args.user),
                        item.get("run_id"),
                        files,
                    )
                )
            except (ValueError, _Bad) as err:
                raise _Bad(f"line {number}: {err}", getattr(err, "code", 1)) from None
    finally:
        if source is not sys.stdin:
            source.close()
    return runs


def run(args: argparse.Namespace) -> int:
    url = args.db or os.environ.get("TETHER_DB")
    if not url:
        return fail("tether submit", "needs --db URL (or $TETHER_DB)", as_json=args.json)
    try:
        if args.batch is not None:
            if args.objective is not None or args.wait is not None:
                raise _Bad("--batch takes its objectives from the file, and does not --wait")
            runs = _batch_runs(args)
        else:
            runs = [_prepare(args.agent, args.objective, args.tenant, args.role, args.user, args.run_id, {})]
    except OSError as err:
        return fail("tether submit", f"cannot read {args.batch}: {err.strerror or err}", as_json=args.json)
    except _Bad as err:
        return fail("tether submit", err, as_json=args.json, code=err.code)
    ids = _put(url, runs, as_json=args.json)
    if isinstance(ids, int):
        return ids
    if args.batch is not None:
        for rid in ids:
            print(json.dumps({"run_id": rid}))
        return outcome({"submitted": len(ids)}, None, as_json=args.json)
    if args.wait is None:
        return outcome({"run_id": ids[0], "status": "queued"}, ids[0], as_json=args.json)
    return _wait(url, ids[0], args)


def _put(url: str, runs: list[_Run], *, as_json: bool) -> list[str] | int:
    """Store the runs in the deployment's intake, all or none (through DBOS's client on one made
    before the intake); their ids, or the exit code."""
    try:
        from tether.durable._config import context_to_json
        from tether.durable._deploy import DeploymentUnavailable
        from tether.durable._intake import IntakeMissing, Submitter, new_run_id, start_row
    except ImportError as err:
        return fail("tether submit", f"{NEEDS_DURABLE}: {err}", as_json=as_json)

    try:
        submitter = Submitter(url)
    except DeploymentUnavailable as err:
        return fail("tether submit", err, as_json=as_json, code=err.exit)
    except ConfigError as err:
        return fail("tether submit", err, as_json=as_json)
    except IntakeMissing:
        return _enqueue(url, runs, as_json=as_json)
    try:
        bound: dict[tuple[str, str | None], tuple[str, str | None]] = {}
        rows = []
        for r in runs:
            key = (r.app, r.digest)
            if key not in bound:
                bound[key] = submitter.version_for(*key)
            version, digest = bound[key]
            context = context_to_json(r.context)
            rid = r.run_id or new_run_id()
            rows.append(start_row(rid, r.app, r.objective, context, version=version, app_digest=digest))
        submitter.put(rows)
    except IntakeMissing:
        return _enqueue(url, runs, as_json=as_json)
    finally:
        submitter.close()
    return [row.run_id for row in rows]


def _enqueue(url: str, runs: list[_Run], *, as_json: bool) -> list[str] | int:
    """Onto DBOS's queue through its client (a deployment without the intake)."""
    from tether.cli._commands.runs import open_client

    client = open_client(url, "tether submit", as_json=as_json)
    if isinstance(client, int):
        return client
    try:
        return [
            client.submit(r.app, r.objective, r.context, run_id=r.run_id, app_digest=r.digest) for r in runs
        ]
    finally:
        client.close()


def _wait(url: str, run_id: str, args: argparse.Namespace) -> int:
    from tether.cli._commands.runs import open_client, report_view, wait_timeout

    client = open_client(url, "tether submit", as_json=args.json)
    if isinstance(client, int):
        return client
    try:
        view = client.wait(run_id, timeout_s=args.wait)
    except TimeoutError as err:
        return wait_timeout("tether submit", err, run_id, as_json=args.json)
    finally:
        client.close()
    return report_view(view, as_json=args.json)
