"""``tether db init URL``: create a deployment's database (if missing) and its tables, once.

Client commands (``tether submit``, ``tether runs``) never create a database, so a mistyped URL
fails in seconds instead of queueing runs where no worker looks; this command (or
``tether worker --init``) is the one explicit place a deployment comes into being.
``tether db check URL`` says whether a deployment is there, without creating anything.
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("db", help="a durable deployment's database: init (create once), check")
    acts = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (
        ("init", "create the database if missing and migrate its tables"),
        ("check", "check the deployment exists and can be reached (creates nothing)"),
    ):
        a = acts.add_parser(name, help=text)
        a.add_argument("url", nargs="?", default=None, help="storage URL (default $TETHER_DB)")
        a.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tether.clisupport.output import emit_json, fail
    from tether.errors import ConfigError

    url = args.url or os.environ.get("TETHER_DB")
    if not url:
        return fail("tether db", "needs a storage URL (or $TETHER_DB)", as_json=args.json)
    try:
        from tether.durable._deploy import DeploymentUnavailable, check_deployment, init_deployment
    except ImportError as err:
        need = f"needs the durable extra (pip install 'tether[durable]'): {err}"
        return fail("tether db", need, as_json=args.json)
    try:
        out = init_deployment(url) if args.action == "init" else {"target": check_deployment(url).describe()}
    except DeploymentUnavailable as err:
        return fail(f"tether db {args.action}", err, as_json=args.json, code=err.exit)
    except ConfigError as err:
        return fail(f"tether db {args.action}", err, as_json=args.json)
    if args.json:
        emit_json(out, exit=0)
    elif args.action == "init":
        made = "created" if out["database_created"] else "exists"
        print(f"{out['target']}: database {made}; DBOS schema {out['dbos_schema']} and tether's tables ready")
    else:
        print(f"{out['target']}: ready")
    return 0
