"""``tether submit --agent module:factory "objective" [--tenant T]``: enqueue a durable run.

Prints the run id (the JSON last line with ``--json``). Any worker serving the app takes it.
``--wait S`` waits for the run to end or pause and exits with its stop reason's code.
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("submit", help="enqueue a durable run for the workers")
    p.add_argument("objective")
    p.add_argument("--agent", required=True, help="the app: module:factory returning (host, agent)")
    p.add_argument("--tenant", default="default", help="trusted tenant of the run (default 'default')")
    p.add_argument("--role", action="append", default=[], help="trusted role; repeatable")
    p.add_argument("--user", default=None)
    p.add_argument("--run-id", default=None, help="choose the run id (default: a fresh one)")
    p.add_argument("--db", default=None, help="storage URL (default $TETHER_DB)")
    p.add_argument(
        "--wait", type=float, default=None, help="wait up to S seconds for the run to end or pause"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tether.clisupport.approvals_db import EXIT_CODES
    from tether.clisupport.output import emit_json
    from tether.policy.trusted import TrustedContext

    url = args.db or os.environ.get("TETHER_DB")
    if not url:
        print("tether submit needs --db URL (or $TETHER_DB)")
        return 1
    if args.agent.endswith((".yaml", ".yml", ".toml")):
        print("agent files are not supported by this build's worker; pass --agent module:factory")
        return 1
    from tether.durable import DurableClient

    client = DurableClient(url)
    try:
        ctx = TrustedContext(tenant=args.tenant, roles=frozenset(args.role), user=args.user)
        run_id = client.submit(args.agent, args.objective, ctx, run_id=args.run_id)
        if args.wait is None:
            emit_json({"run_id": run_id, "status": "queued"}, exit=0) if args.json else print(run_id)
            return 0
        view = client.wait(run_id, timeout_s=args.wait)
    except TimeoutError as err:
        print(str(err))
        return 1
    finally:
        client.close()
    summary = view.summary()
    if args.json:
        emit_json(summary, exit=EXIT_CODES.get(str(view.stop_reason), 7))
    else:
        print(f"run: {run_id}\nstatus: {view.status}\nstop_reason: {view.stop_reason}")
    return EXIT_CODES.get(str(view.stop_reason), 7)
