"""``tether db init --db URL`` (or ``tether db init URL``): create a deployment's database (if
missing) and its tables, once.

Client commands (``tether submit``, ``tether runs``) never create a database, so a mistyped URL
fails in seconds instead of queueing runs where no worker looks; this command (or
``tether worker --init``) is the one explicit place a deployment comes into being.
``tether db check --db URL`` says whether a deployment is there, without creating anything.
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def register(sub: Any) -> None:
    from tether.cli._commands._options import add_actions, add_db, add_json

    p, acts = add_actions(
        sub, "db", dest="action", help="a durable deployment's database: init (create once), check"
    )
    for name, text in (
        ("init", "create the database if missing and migrate its tables"),
        ("check", "check the deployment exists and can be reached (creates nothing)"),
    ):
        a = acts.add_parser(name, help=text)
        a.add_argument("url", nargs="?", default=None, help="storage URL (as --db; default $TETHER_DB)")
        add_json(a)
    add_db(p, acts, "storage URL, as every other command takes it (default $TETHER_DB)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tether.clisupport.output import emit_json, fail
    from tether.errors import ConfigError

    if args.url and args.db and args.url != args.db:
        why = f"two storage URLs: {args.url!r} and --db {args.db!r}; give one"
        return fail(f"tether db {args.action}", why, as_json=args.json, error="usage")
    url = args.url or args.db or os.environ.get("TETHER_DB")
    if not url:
        need = "needs the deployment's storage URL: pass --db URL or set TETHER_DB"
        return fail(f"tether db {args.action}", need, as_json=args.json, error="no_db")
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
