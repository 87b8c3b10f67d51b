"""``tether users ACTION``: console accounts. Passwords are read from the terminal (twice) or
``--password-stdin``; tokens are printed once; both are stored only hashed."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.cli._commands._options import add_actions, add_json
from tether.clisupport.output import fail, outcome, table

if TYPE_CHECKING:
    from tether.console._users import UserStore


def default_users_db() -> Path:
    return Path(os.environ.get("TETHER_OUT", "tether-output")) / "console.db"


def register(sub: Any) -> None:
    p, acts = add_actions(
        sub, "users", dest="action", help="console accounts: people, roles per tenant, API tokens"
    )
    p.add_argument("--db", type=Path, default=None, help=f"user store (default {default_users_db()})")
    add = acts.add_parser("add", help="create a person (asks for a password)")
    add.add_argument("name")
    add.add_argument("--tenant", action="append", default=[], help="tenant for --role (repeatable; * = all)")
    add.add_argument("--role", choices=("viewer", "reviewer", "admin"), default="viewer")
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    grant = acts.add_parser("grant", help="give a role for a tenant (replaces the role there)")
    grant.add_argument("name")
    grant.add_argument("--tenant", required=True)
    grant.add_argument("--role", choices=("viewer", "reviewer", "admin"), required=True)
    revoke = acts.add_parser("revoke", help="remove a person's role for a tenant")
    revoke.add_argument("name")
    revoke.add_argument("--tenant", required=True)
    token = acts.add_parser("token", help="create an API token (printed once)")
    token.add_argument("name")
    token.add_argument("--label", default="")
    token.add_argument("--days", type=float, default=None, help="expires after this many days")
    tokens = acts.add_parser("tokens", help="list tokens (never their secrets)")
    tokens.add_argument("name", nargs="?")
    rt = acts.add_parser("revoke-token", help="revoke a token by id")
    rt.add_argument("token_id")
    pw = acts.add_parser("password", help="set a new password (ends the person's sessions)")
    pw.add_argument("name")
    pw.add_argument("--password-stdin", action="store_true")
    dis = acts.add_parser("disable", help="disable a person: sessions end, tokens revoked, sign-in refused")
    dis.add_argument("name")
    en = acts.add_parser("enable", help="let a disabled person sign in again (tokens stay revoked)")
    en.add_argument("name")
    acts.add_parser("list", help="people and their roles")
    for action in acts.choices.values():
        add_json(action)
    p.set_defaults(handler=run)


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n")  # a Windows line end too
    import getpass

    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise ValueError("the passwords differ")
    return first


def run(args: argparse.Namespace) -> int:
    command, as_json = f"tether users {args.action}", args.json
    try:
        from tether.console._users import CLIENT, AuthError, UserStore
    except ImportError as err:
        need = f"needs the console extra: pip install 'tether[console]' ({err.name} missing)"
        return fail(command, need, as_json=as_json)
    CLIENT.set("cli")  # every audit entry below records where it came from
    store = UserStore(args.db or default_users_db())
    try:
        out = _act(store, args)
    except (AuthError, ValueError) as err:
        return fail(command, err, as_json=as_json)
    finally:
        store.close()
    if args.action == "token":
        text = f"token {out['token_id']} for {args.name} (shown once, stored only hashed):\n{out['token']}"
    elif args.action == "tokens":
        text = table(out["tokens"], ["id", "user", "label", "created", "expires", "revoked"], "no tokens")
    elif args.action == "list":
        text = table(out["users"], ["name", "disabled", "roles"], "no users")
    else:
        text = " ".join(f"{k}={v}" for k, v in out.items())
    return outcome(out, text, as_json=as_json)


def _act(store: UserStore, args: argparse.Namespace) -> dict[str, Any]:
    """Carry out the action; what to report."""
    if args.action == "add":
        # One transaction: a bad tenant among several creates nobody (nor an unaudited account).
        store.add_user(args.name, _password(args), dict.fromkeys(args.tenant, args.role))
        store.audit("cli", "user_add", target=args.name, detail=f"{args.role}: {', '.join(args.tenant)}")
        return {"user": args.name, "grants": store.grants(args.name)}
    if args.action == "grant":
        store.grant(args.name, args.tenant, args.role)
        store.audit("cli", "grant", tenant=args.tenant, target=args.name, detail=args.role)
        return {"user": args.name, "grants": store.grants(args.name)}
    if args.action == "revoke":
        removed = store.revoke_grant(args.name, args.tenant)
        done = "ok" if removed else "none"
        store.audit("cli", "revoke", tenant=args.tenant, target=args.name, outcome=done)
        return {"user": args.name, "removed": removed, "grants": store.grants(args.name)}
    if args.action == "token":
        secret, info = store.create_token(args.name, label=args.label, days=args.days)
        store.audit("cli", "token_create", target=args.name, detail=f"token {info.id}")
        return {"user": args.name, "token_id": info.id, "token": secret, "expires_at": info.expires_at}
    if args.action == "tokens":
        return {
            "tokens": [
                {
                    "id": t.id,
                    "user": t.user,
                    "label": t.label,
                    "created": t.created_at,
                    "expires": t.expires_at or "",
                    "revoked": t.revoked,
                }
                for t in store.tokens(args.name)
            ]
        }
    if args.action == "revoke-token":
        if not store.revoke_token(args.token_id):  # a mistyped id must not read as done
            raise ValueError(f"no token {args.token_id!r} (tether users tokens lists them)")
        store.audit("cli", "token_revoke", target=args.token_id)
        return {"token_id": args.token_id, "revoked": True}
    if args.action == "password":
        store.set_password(args.name, _password(args))
        store.audit("cli", "password", target=args.name, detail="sessions ended, API tokens revoked")
        return {"user": args.name, "password": "changed"}
    if args.action in ("disable", "enable"):
        store.set_disabled(args.name, args.action == "disable")
        store.audit("cli", f"user_{args.action}", target=args.name)
        return {"user": args.name, "disabled": args.action == "disable"}
    return {
        "users": [
            {
                "name": u["name"],
                "disabled": "yes" if u["disabled"] else "",
                "roles": ", ".join(f"{r}@{t}" for t, r in sorted(u["grants"].items())),
            }
            for u in store.users()
        ]
    }
