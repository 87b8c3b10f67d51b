"""``tether serve``: the console (``tether[console]``), on 127.0.0.1 unless ``--secure-cookies``
(behind an HTTPS proxy) or ``--insecure-bind``."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from tether.errors import ConfigError, TetherError


def register(sub: Any) -> None:
    out = Path(os.environ.get("TETHER_OUT", "tether-output"))
    p = sub.add_parser(
        "serve",
        help="the console: approvals, questions, MCP servers and runs in a browser",
        description="Serve the console over the host's stores. Create a user first: "
        "tether users add NAME --tenant TENANT --role reviewer",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8700)
    p.add_argument(
        "--db",
        help=f"approval store (default {out / 'approvals.db'}), or a deployment's storage URL"
        " (postgresql://… or sqlite:///dir: its shared proposals, questions and pins; workers resume runs)",
    )
    p.add_argument("--users", type=Path, help=f"user store (default {out / 'console.db'})")
    p.add_argument("--traces", type=Path, help=f"trace folder (default {out / 'traces'})")
    p.add_argument("--config", type=Path, help="MCP host config: servers, pins and questions")
    p.add_argument(
        "--no-resume", action="store_true", help="record decisions only; runs resume via tether resume"
    )
    p.add_argument(
        "--resume-app",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION",
        help="a factory whose runs the console may resume (repeatable; as a worker's --app; 'agent-files'"
        " for runs started from agent files): a run naming any other is left to tether resume (a"
        " checkpoint names the code that rebuilds it)",
    )
    p.add_argument("--secure-cookies", action="store_true", help="mark cookies Secure (serve behind HTTPS)")
    p.add_argument("--insecure-bind", action="store_true", help="allow a non-loopback address without HTTPS")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the console answers to (repeatable; the loopback names and --host always):"
        " requests naming any other host are refused (DNS rebinding)",
    )
    p.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDR",
        help="the address of a reverse proxy whose X-Forwarded-For/-Proto headers are believed"
        " (repeatable; by default none are: any client could name another address and so evade"
        " the sign-in throttle or forge the audit log's client address)",
    )
    p.add_argument(
        "--max-requests",
        type=int,
        default=None,
        metavar="N",
        help="requests served at once (default 128; idle connections hold none); past it a request is "
        "answered 503 at once",
    )
    p.add_argument(
        "--session-idle",
        type=float,
        default=30.0,
        metavar="MINUTES",
        help="a session unused this long ends (default 30; sessions end 12 hours after sign-in anyway)",
    )
    p.set_defaults(handler=run)


def server_options() -> dict[str, Any]:
    """uvicorn's settings for the console (``tether serve``, and the tests that serve it so). The
    requests served at once are bounded by the app (``create_app(max_requests=)``), not by
    uvicorn's ``limit_concurrency``, which counts idle connections: one client holding that many
    open made the console answer 503 to everyone; the connections held open, by the protocol
    (``deadline_protocol``: the longest idle is closed past ``connection_cap``)."""
    from tether.console._serving import ACCEPT_BACKLOG, deadline_protocol

    return {
        "log_level": "warning",
        "server_header": False,
        "http": deadline_protocol(),
        "backlog": ACCEPT_BACKLOG,
    }


def trusted_proxies(values: list[str]) -> list[str]:
    """The ``--trusted-proxy`` values as uvicorn reads them: each an IP address or a network.
    Raises ``ConfigError`` for ``*`` or a network of every address (uvicorn then believes the
    first X-Forwarded-For entry, which the client writes: any client names its own address to
    the sign-in throttle and the audit log), and for anything else (which would never match)."""
    out = []
    for value in values:
        text = value.strip()
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            network = None
        if text == "*" or (network is not None and network.prefixlen == 0):
            raise ConfigError(
                f"--trusted-proxy {value!r} believes every client's X-Forwarded-For (any client could"
                " evade the sign-in throttle): name the proxy's address or network"
            )
        if network is None:
            raise ConfigError(f"--trusted-proxy {value!r} is not an IP address or network")
        out.append(str(network) if "/" in text else str(network.network_address))
    return out


def _notes(args: argparse.Namespace, *, has_users: bool) -> None:
    """What the operator is told as the console starts."""
    if not has_users:
        print("no console users yet: tether users add NAME --tenant TENANT --role reviewer", file=sys.stderr)
    if not (args.no_resume or args.resume_app or (args.db and "://" in args.db)):
        # A deployment's workers resume its runs (each serves only its own --app).
        print(
            "the console resumes no runs: name their apps with --resume-app MODULE:FUNCTION"
            " (--resume-app agent-files for runs started from agent files)",
            file=sys.stderr,
        )
    print(f"tether console on {listening_url(args.host, args.port)}", file=sys.stderr, flush=True)


def listening_url(host: str, port: int) -> str:
    """The URL a browser opens for the console bound to ``host``: an IPv6 address in brackets
    (``http://[::1]:8700/``; bare, its port would read as part of it), a zone's ``%`` as ``%25``."""
    if ":" in host and not host.startswith("["):
        host = "[" + host.replace("%", "%25") + "]"
    return f"http://{host}:{port}/"


def _resume_apps(args: argparse.Namespace) -> list[str]:
    """``--resume-app`` as factories: ``agent-files`` names the one that rebuilds a run from the
    agent file it recorded (every such file the store names is then trusted code)."""
    from tether.agents._build import APP

    return [APP if app == "agent-files" else app for app in args.resume_app]


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from tether.console import create_app, deployment_sources, sqlite_sources
        from tether.console._app import LOOPBACK_HOSTS
        from tether.console._users import UserStore
        from tether.console._web import load_secret_key
    except ImportError as err:
        print(
            f"tether serve needs the console extra: pip install 'tether[console]' ({err.name} missing)",
            file=sys.stderr,
        )
        return 1
    out = Path(os.environ.get("TETHER_OUT", "tether-output"))
    if args.host not in LOOPBACK_HOSTS and not (args.secure_cookies or args.insecure_bind):
        print(
            f"refusing to serve sign-in cookies over plain HTTP on {args.host}: use --secure-cookies "
            "behind HTTPS (or --insecure-bind)",
            file=sys.stderr,
        )
        return 1
    users_db = args.users or out / "console.db"
    traces = args.traces
    if traces is None and args.config is None:
        traces = out / "traces"
    if not ((args.max_requests is None or args.max_requests > 0) and 0 < args.session_idle <= 12 * 60):
        print(
            "tether serve: --max-requests must be positive, --session-idle 0 to 720 minutes", file=sys.stderr
        )
        return 2
    stores: dict[str, Any] = {
        "users_db": users_db,
        "users": UserStore(users_db, session_idle=timedelta(minutes=args.session_idle)),
        "trace_dir": traces,
        "mcp_config": args.config,
        "allow_resume": not args.no_resume,  # a deployment's console too: --no-resume records only
    }
    try:
        if args.db and "://" in args.db:
            sources = deployment_sources(url=args.db, **stores)
        else:
            approvals_db = Path(args.db) if args.db else out / "approvals.db"
            sources = sqlite_sources(approvals_db=approvals_db, resume_apps=_resume_apps(args), **stores)
    except (TetherError, OSError) as err:
        stores["users"].close()
        print(f"tether serve: {err}", file=sys.stderr)
        return int(getattr(err, "exit", 1))  # 6: the deployment's server does not answer
    key_file = users_db.with_name(users_db.name + ".key")
    hosts = [*LOOPBACK_HOSTS, *args.allowed_host]
    if args.host not in ("0.0.0.0", "::"):
        hosts.append(args.host)
    try:
        key = os.environ.get("TETHER_CONSOLE_KEY", "").encode("utf-8") or load_secret_key(key_file)
        proxies = trusted_proxies(args.trusted_proxy)
        app = create_app(
            sources,
            secret_key=key,
            secure_cookies=args.secure_cookies,
            allowed_hosts=hosts,
            **({} if args.max_requests is None else {"max_requests": args.max_requests}),
        )
    except (TetherError, OSError) as err:  # a proxy or host that names no address, a weak key
        sources.close()  # refused: the stores opened for it are closed (the app's lifespan never runs)
        print(f"tether serve: {err}", file=sys.stderr)
        return 1
    _notes(args, has_users=sources.users.has_users())
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        **server_options(),
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
    )
    return 0
