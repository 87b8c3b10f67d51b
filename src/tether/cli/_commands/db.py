"""``tether db init|check|status [--db] URL``: create a deployment's database and tables (once),
check that it is there, or say which application versions are present on it (a rolling upgrade).
Client commands never create a database (a mistyped URL fails in seconds instead of queueing runs
where no worker looks): this and ``tether worker --init`` do.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tether.cli._commands._options import add_actions, add_db, add_json
from tether.clisupport.output import NEEDS_DURABLE, fail, outcome
from tether.errors import ConfigError


def register(sub: Any) -> None:
    p, acts = add_actions(
        sub, "db", dest="action", help="a durable deployment's database: init (create once), check, status"
    )
    for name, text in (
        ("init", "create the database if missing and migrate its tables"),
        ("check", "check the deployment exists and can be reached (creates nothing)"),
        ("status", "as check, and the versions present: workers alive, runs queued or in flight"),
    ):
        a = acts.add_parser(name, help=text)
        a.add_argument("url", nargs="?", default=None, help="storage URL (as --db; default $TETHER_DB)")
        add_json(a)
    add_db(p, acts, "storage URL, as every other command takes it (default $TETHER_DB)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.url and args.db and args.url != args.db:
        why = f"two storage URLs: {args.url!r} and --db {args.db!r}; give one"
        return fail(f"tether db {args.action}", why, as_json=args.json, error="usage")
    url = args.url or args.db or os.environ.get("TETHER_DB")
    if not url:
        need = "needs the deployment's storage URL: pass --db URL or set TETHER_DB"
        return fail(f"tether db {args.action}", need, as_json=args.json, error="no_db")
    try:
        from tether.durable._deploy import DeploymentUnavailable, check_migrations, init_deployment
        from tether.durable._status import describe, status_deployment
    except ImportError as err:
        return fail("tether db", f"{NEEDS_DURABLE}: {err}", as_json=args.json)
    try:
        act = {"init": init_deployment, "check": check_migrations, "status": status_deployment}
        out = act[args.action](url)
    except DeploymentUnavailable as err:
        return fail(f"tether db {args.action}", err, as_json=args.json, code=err.exit)
    except ConfigError as err:  # schema_too_new: a later release's migration this one refuses
        return fail(f"tether db {args.action}", err, as_json=args.json)
    if args.action == "status":
        return outcome(out, describe(out), as_json=args.json)
    text = f"{out['target']}: ready"
    if out.get("pending"):
        text += f"; migrations to apply (tether db init, or a worker's start): {', '.join(out['pending'])}"
    if out.get("later"):
        text += f"; a later release's migrations, worked beside: {', '.join(out['later'])}"
    if args.action == "init":
        made = "created" if out["database_created"] else "exists"
        text = f"{out['target']}: database {made}; DBOS schema {out['dbos_schema']} and tether's tables ready"
    return outcome(out, text, as_json=args.json)
