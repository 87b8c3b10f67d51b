"""The console served as ``tether serve`` serves it (uvicorn with its deadline protocol, real
HTTP on 127.0.0.1, SQLite stores), in process, for the round-four penetration tests: the
``console`` fixture (one per module; ``Console.serve`` starts more over the same stores), and
raw-request helpers. Imported by name, like ``console_world``."""

from __future__ import annotations

import logging
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from _notes_app import APP as NOTES_APP
from console_world import PASSWORD, PEOPLE, NotesServer, World, paused_runs, write_mcp_config

from tether.console import create_app, sqlite_sources
from tether.console._users import UserStore
from tether.policy import Approvals, SqliteApprovalStore
from tether.policy._intake import Proposal
from tether.sql._database import blocking

__all__ = [
    "KEY", "NOTES_TOKEN", "Console", "Stores", "console", "csrf", "head", "login_form", "protected", "raw",
    "session_name", "sign_in",
]  # fmt: skip

NOTES_TOKEN = "s3cr3t-notes-token-value"


KEY = b"round-four-console-key-9f3c2a71d6e84b05"


class _Log(logging.Handler):
    """Every log record of the served console, kept for the test to read."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@dataclass
class Stores:
    """What a served console's tests read and write in its world's stores directly: a proposal
    submitted as an agent's desk would, and a proposal's status. Shared with round two's
    ``Served`` (a ``tether serve`` subprocess over the same kind of world)."""

    world: World

    def submit(self, tenant: str = "tenant-a", order: str = "order-a1") -> str:
        approvals = Approvals(SqliteApprovalStore(self.world.db))
        try:
            done = blocking(
                approvals.submit,
                Proposal.of("add_note", {"order_id": order, "note": "n"}, tenant, effect="write"),
                proposed_by="desk:ops",
            )
            return str(done.id)
        finally:
            approvals.store.close()

    def status(self, pid: str) -> str:
        with sqlite3.connect(self.world.db) as conn:
            [(status,)] = conn.execute("SELECT status FROM proposals WHERE id = ?", (pid,)).fetchall()
        return str(status)


@dataclass
class Console(Stores):
    base: str
    port: int
    log: _Log
    servers: list[Any] = field(default_factory=list)

    def client(self, base: str = "", **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=base or self.base, timeout=30, follow_redirects=True, **kw)

    def login(self, name: str, password: str = PASSWORD, base: str = "", **kw: Any) -> httpx.Client:
        client = self.client(base, **kw)
        assert sign_in(client, name, password).status_code == 303
        return client

    def audit(self, action: str = "") -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.world.users_db) as conn:
            return conn.execute(
                "SELECT actor, action, target, outcome, detail FROM audit"
                + (" WHERE action = ?" if action else "")
                + " ORDER BY seq",
                (action,) if action else (),
            ).fetchall()

    def serve(
        self,
        users_db: Path | None = None,
        key: bytes = KEY,
        config: Path | None = None,
        trusted_proxy: str = "",
        max_requests: int | None = None,
        **options: Any,
    ) -> tuple[str, int]:
        """One more console (as ``tether serve`` runs it) over this world's stores, or over
        another user store or MCP config, or behind a proxy at ``trusted_proxy`` (as
        ``--trusted-proxy``: its X-Forwarded-For is believed); its base URL and port."""
        import uvicorn

        from tether.cli._commands.serve import server_options

        w = self.world
        users = UserStore(users_db or w.users_db, scrypt_n=2**10)
        sources = sqlite_sources(
            users_db=users.path,
            approvals_db=w.db,
            trace_dir=w.traces,
            mcp_config=config or w.config,
            users=users,
            resume_apps=(NOTES_APP,),
        )
        if max_requests:
            options["max_requests"] = max_requests
        app = create_app(sources, secret_key=key, **options)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        config = uvicorn.Config(
            app, **server_options(), lifespan="on",
            proxy_headers=bool(trusted_proxy), forwarded_allow_ips=trusted_proxy or None,
        )  # fmt: skip
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        self.servers.append((server, thread, sock))
        deadline = time.monotonic() + 30
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        port = int(sock.getsockname()[1])
        return f"http://127.0.0.1:{port}", port


def sign_in(client: httpx.Client, name: str, password: str, **headers: str) -> httpx.Response:
    page = client.get("/login", headers=headers)
    token = re.search(r'name="csrf_login" value="([^"]+)"', page.text)
    assert token is not None, page.text
    return client.post(
        "/login", headers=headers, follow_redirects=False,
        data={"username": name, "password": password, "csrf_login": token.group(1), "next": "/"},
    )  # fmt: skip


def csrf(client: httpx.Client) -> str:
    return str(client.get("/api/me").json()["csrf_token"])


def raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, notes_server: NotesServer) -> Iterator[Console]:
    env = pytest.MonkeyPatch()
    env.setenv("CONSOLE_TEST_NOTES_TOKEN", NOTES_TOKEN)
    root = tmp_path_factory.mktemp("round4")
    world = World(
        root=root, db=root / "approvals.db", users_db=root / "console.db", traces=root / "traces",
        config=write_mcp_config(root, notes_server.url),
    )  # fmt: skip
    paused_runs(world)
    users = UserStore(world.users_db, scrypt_n=2**10)
    for name, grants in PEOPLE.items():
        users.add_user(name, PASSWORD)
        for tenant, role in grants.items():
            users.grant(name, tenant, role)
    users.close()
    log = _Log()
    logging.getLogger().addHandler(log)
    c = Console(world, "", 0, log)
    c.base, c.port = c.serve()
    try:
        yield c
    finally:
        logging.getLogger().removeHandler(log)
        for server, thread, sock in c.servers:
            server.should_exit = True
            thread.join(timeout=10)
            sock.close()
        env.undo()


def head(reply: bytes) -> tuple[int, dict[str, str]]:
    """The status and the (lower-cased) headers of a raw HTTP reply."""
    lines = reply.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1]) if lines[0].startswith("HTTP/1.1 ") else 0
    pairs = [line.split(":", 1) for line in lines[1:] if ":" in line]
    return status, {k.strip().lower(): v.strip() for k, v in pairs}


def protected(headers: Any) -> bool:
    return (
        "frame-ancestors 'none'" in headers.get("content-security-policy", "")
        and headers.get("x-frame-options") == "DENY"
        and headers.get("x-content-type-options") == "nosniff"
        and headers.get("cache-control") == "no-store"
    )


def session_name(client: httpx.Client) -> str:
    [name] = [n for n in client.cookies if n.startswith(("tether_session", "__Host-tether_session"))]
    return name


def login_form(client: httpx.Client, base: str = "") -> tuple[str, str]:
    """A fresh sign-in form's token and the cookie it came with (``name=value``)."""
    page = client.get(base + "/login")
    token = re.search(r'name="csrf_login" value="([^"]+)"', page.text)
    assert token is not None
    [cookie] = [c.split(";")[0] for c in page.headers.get_list("set-cookie") if "tether_login" in c]
    return token.group(1), cookie
