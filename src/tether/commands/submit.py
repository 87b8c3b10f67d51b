"""``tether submit --agent agent.yaml|module:factory "objective" [--tenant T]``: enqueue a durable run.

Prints the run id (the JSON last line with ``--json``). Any worker serving the app takes it. An
agent file is named by its absolute path and its sha256: only a worker started with the same
file (``tether worker --app agent.yaml``) runs it; its policy gives the run's tenant, roles, user
and permissions unless ``--tenant``/``--role``/``--user`` say otherwise. ``--wait S`` waits for
the run to end or pause and exits with its stop reason's code.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("submit", help="enqueue a durable run for the workers")
    p.add_argument("objective")
    p.add_argument(
        "--agent",
        required=True,
        help="the app: an agent file (.yaml/.yml/.toml) or module:factory returning (host, agent)",
    )
    p.add_argument(
        "--tenant", default=None, help="trusted tenant of the run (default: the agent file's, else 'default')"
    )
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
    from tether.agentfile import is_agent_file
    from tether.clisupport.output import emit_json
    from tether.policy.trusted import TrustedContext

    url = args.db or os.environ.get("TETHER_DB")
    if not url:
        print("tether submit needs --db URL (or $TETHER_DB)")
        return 1
    app, digest = args.agent, None
    ctx = TrustedContext(tenant=args.tenant or "default", roles=frozenset(args.role), user=args.user)
    if is_agent_file(args.agent):
        from tether.agentfile import agent_digest, load_agent_file, trusted_context
        from tether.errors import ConfigError

        try:
            af = load_agent_file(args.agent)
        except ConfigError as err:
            print(f"tether submit: {err}")
            return 2
        assert af.path is not None
        app, digest = str(af.path.resolve()), agent_digest(af)
        base = trusted_context(af)
        ctx = dataclasses.replace(
            base,
            tenant=args.tenant or base.tenant,
            roles=frozenset(args.role) if args.role else base.roles,
            user=args.user if args.user is not None else base.user,
        )
    from tether.commands.runs import open_client, report_view

    client = open_client(url, "tether submit", as_json=args.json)
    if isinstance(client, int):
        return client
    try:
        run_id = client.submit(app, args.objective, ctx, run_id=args.run_id, app_digest=digest)
        if args.wait is None:
            emit_json({"run_id": run_id, "status": "queued"}, exit=0) if args.json else print(run_id)
            return 0
        view = client.wait(run_id, timeout_s=args.wait)
    except TimeoutError as err:
        print(str(err))
        return 1
    finally:
        client.close()
    return report_view(view, as_json=args.json)
