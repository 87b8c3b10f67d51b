"""``tether resume RUN``: continue a run that paused for approval.

The checkpoint names the application factory (``module:function``, called with the store's
path) that rebuilds the host and the agent; the factory is host code chosen by the application
that started the run, never by the model.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("resume", help="continue a run paused for approval")
    p.add_argument("run_id")
    p.add_argument("--db", default=None, help="approval store file, or a postgresql:// URL (durable runs)")
    p.add_argument("--app", default=None, help="factory module:function (default: the one the run recorded)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import importlib

    import anyio

    from tether.commands._approvals_db import EXIT_CODES, default_db
    from tether.commands._output import emit_json
    from tether.errors import ApprovalError
    from tether.policy import SqliteApprovalStore

    if str(args.db or "").startswith(("postgresql://", "postgres://")):
        from tether.commands.runs import resume_durable  # a durable run: any worker continues it

        return resume_durable(args.run_id, args.db, as_json=args.json)
    db: Path = Path(args.db) if args.db else default_db()
    if not db.exists():
        print(f"no approval store at {db}")
        return 1
    store = SqliteApprovalStore(db)
    checkpoint = store.load_checkpoint(args.run_id)
    store.close()
    app = args.app or (checkpoint.app if checkpoint else None)
    if checkpoint is None or not app:
        print(f"no resumable checkpoint for run {args.run_id}")
        return 1
    module_name, _, function = app.partition(":")
    host, agent = getattr(importlib.import_module(module_name), function)(db)

    async def go() -> Any:
        try:
            return await host.resume(agent, args.run_id)
        finally:
            await host.aclose()

    try:
        result = anyio.run(go)
    except ApprovalError as err:
        if args.json:
            emit_json({"run_id": args.run_id, "error": err.reason, "message": str(err)})
        else:
            print(f"cannot resume: {err.reason}: {err}")
        return 1
    summary = result.summary()
    if args.json:
        emit_json(summary)
    else:
        print(f"run: {result.run_id}\nstop_reason: {result.stop_reason}")
        for key in ("answer", "detail", "trace"):
            if summary.get(key):
                print(f"{key}: {summary[key]}")
    return EXIT_CODES.get(str(result.stop_reason), 7)
