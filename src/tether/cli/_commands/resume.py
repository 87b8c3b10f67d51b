"""``tether resume RUN``: continue a run that paused for an approval or a person's answer.

The checkpoint names the application factory (``module:function``, chosen by the application
that started the run, never by the model) that rebuilds the host and the agent; runs of an agent
file name ``tether.agents._record:rebuild``, which rebuilds it from the file recorded beside the
approval store.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tether.cli._commands._options import add_output_options
from tether.cli._commands._progress import ProgressSink, progress_wanted
from tether.clisupport.approvals_db import default_db
from tether.clisupport.output import fail
from tether.clisupport.telemetry import add_otel_flags, apply_otel_flags
from tether.errors import ApprovalError, ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "resume",
        help="continue a run paused for approval or for an answer",
        description="Continue a paused run. Exit codes as for `tether run` (5: still waiting).",
    )
    p.add_argument("run_id")
    p.add_argument("--db", help="approval store file, or a deployment URL: postgresql://… or sqlite:///dir")
    p.add_argument("--app", help="factory module:function (default: the one the run recorded)")
    add_output_options(p)
    add_otel_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    apply_otel_flags(args)
    import anyio

    from tether.cli._commands.run import report
    from tether.policy import SqliteApprovalStore
    from tether.runners._interrupt import on_signals_stop
    from tether.runners._scope import rebuild, resume_rebuilt
    from tether.sql._database import blocking

    if "://" in str(args.db or ""):  # a deployment URL (postgresql or sqlite): any worker continues it
        from tether.cli._commands.runs import resume_durable

        return resume_durable(args.run_id, args.db, as_json=args.json)
    db: Path = Path(args.db) if args.db else default_db()
    if not db.exists():
        return fail("tether resume", f"no approval store at {db} (pass the run's --db)", as_json=args.json)
    try:
        store = SqliteApprovalStore(db)
    except ConfigError as err:  # a folder, or a file that is not a SQLite database: named, left as it is
        return fail("tether resume", err, as_json=args.json, error="not_an_approval_store", db=str(db))
    try:
        checkpoint = blocking(store.load_checkpoint, args.run_id)
    finally:
        store.close()
    app = args.app or (checkpoint.app if checkpoint else None)
    if checkpoint is None or not app:
        why = f"no resumable checkpoint for run {args.run_id} in {db}"
        return fail("tether resume", why, as_json=args.json, error="unknown_run", run_id=args.run_id)
    try:
        host, agent = rebuild(app, db, args.run_id)  # the one rebuild path (the console's too)
    except (ConfigError, ValueError) as err:
        return fail("tether resume", err, as_json=args.json)
    if progress_wanted(args.json):
        host.extra_sinks.append(ProgressSink())

    try:
        result = anyio.run(on_signals_stop, resume_rebuilt, host, agent, args.run_id)
    except ApprovalError as err:
        return fail("tether resume", err, as_json=args.json, run_id=args.run_id)
    return report(
        result,
        host,
        args,
        db=db,
        trace_results=args.trace_results or _file_keeps_results(db, args.run_id),
        tools=agent.tools,
        model=agent.model.name,
        backend=agent.model,
    )


def _file_keeps_results(db: Path, run_id: str) -> bool:
    """Whether the agent file recorded for ``run_id`` keeps tool results (``trace.results``), as
    ``tether run`` read it: a resumed run keeps them as the run it continues did."""
    from tether.agents._record import load_record, record_path

    if not record_path(db, run_id).exists():
        return False
    try:
        return bool(load_record(db, run_id).spec.trace.results)
    except ConfigError:
        return False
