"""Fixtures for the console tests: two tenants' paused runs in a real approval store, console
users with different roles, and signed-in clients (Starlette's TestClient over the real app)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

pytest.importorskip("starlette", reason="the console extra is not installed")
pytest.importorskip("jinja2", reason="the console extra is not installed")

from _notes_app import TENANT_A, TENANT_B, Outbox, build
from starlette.testclient import TestClient

from tether.console import create_app, sqlite_sources
from tether.console._sources import ConsoleSources
from tether.console._users import UserStore

PASSWORD = "correct horse battery"
# who -> {tenant: role}
PEOPLE = {
    "ana": {"tenant-a": "reviewer"},
    "bob": {"tenant-b": "reviewer"},
    "vic": {"tenant-a": "viewer"},
    "root": {"*": "admin"},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class World:
    root: Path
    db: Path
    users_db: Path
    traces: Path
    config: Path
    run_a: str = ""
    run_b: str = ""
    proposal_a: str = ""
    proposal_b: str = ""
    sources: ConsoleSources | None = None
    clients: dict[str, TestClient] = field(default_factory=dict)

    def outbox(self) -> list[tuple[Any, ...]]:
        return Outbox(self.db.with_name("outbox.db")).rows()

    def resume(self, run_id: str) -> Any:
        async def go() -> Any:
            host, agent = build(self.db)
            try:
                return await host.resume(agent, run_id)
            finally:
                await host.aclose()

        return anyio.run(go)


@dataclass
class NotesServer:
    url: str
    server: Any

    def change_lookup(self, changed: bool) -> None:
        from _mcp_server import change_lookup

        change_lookup(self.server, changed)


@pytest.fixture(scope="session")
def notes_server() -> Iterator[NotesServer]:
    """The notes MCP server over Streamable HTTP on 127.0.0.1 (a free port), in a thread."""
    import socket
    import threading

    import uvicorn
    from _mcp_server import build_server

    server = build_server()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn accepts them
    web = uvicorn.Server(uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=web.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield NotesServer(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", server)
    finally:
        web.should_exit = True
        thread.join(timeout=10)
        sock.close()


def write_mcp_config(root: Path, url: str) -> Path:
    data = {
        "host": {"pins": "pins.db", "state": "state.db", "trace_dir": "traces", "tenant": "tenant-a"},
        "servers": [
            {
                "name": "notes",
                "transport": "http",
                "url": url,
                "credentials": {"NOTES_TOKEN": "env:CONSOLE_TEST_NOTES_TOKEN"},
                "headers": {"Authorization": "Bearer {NOTES_TOKEN}"},
                "elicitation": {"enabled": True},
            }
        ],
    }
    path = root / "mcp.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def paused_runs(world: World) -> None:
    async def go() -> None:
        host, agent = build(world.db)
        a = await host.run(agent, "Note on order-a1: call back tomorrow\u200b please", context=TENANT_A)
        b = await host.run(agent, "Note on order-b1: beta customer note", context=TENANT_B)
        assert str(a.stop_reason) == str(b.stop_reason) == "approval_required"
        assert host.approvals is not None
        [pa] = await host.approvals.store.list_proposals(run_id=a.run_id)
        [pb] = await host.approvals.store.list_proposals(run_id=b.run_id)
        world.run_a, world.run_b, world.proposal_a, world.proposal_b = a.run_id, b.run_id, pa.id, pb.id
        await host.aclose()

    anyio.run(go)


def login(client: TestClient, name: str, password: str = PASSWORD) -> TestClient:
    page = client.get("/login")
    token = re.search(r'name="csrf_login" value="([^"]+)"', page.text)
    assert token is not None
    done = client.post(
        "/login", data={"username": name, "password": password, "csrf_login": token.group(1), "next": "/"}
    )
    assert done.status_code == 200 and "/login" not in str(done.url), done.text
    return client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, notes_server: NotesServer) -> Iterator[World]:
    monkeypatch.setenv("CONSOLE_TEST_NOTES_TOKEN", "s3cr3t-notes-token-value")
    w = World(
        root=tmp_path,
        db=tmp_path / "approvals.db",
        users_db=tmp_path / "console.db",
        traces=tmp_path / "traces",
        config=write_mcp_config(tmp_path, notes_server.url),
    )
    paused_runs(w)
    sources = sqlite_sources(
        users_db=w.users_db,
        approvals_db=w.db,
        trace_dir=w.traces,
        mcp_config=w.config,
        users=UserStore(w.users_db, scrypt_n=2**10),  # cheap hashes: the tests sign in often
    )
    for name, grants in PEOPLE.items():
        sources.users.add_user(name, PASSWORD)
        for tenant, role in grants.items():
            sources.users.grant(name, tenant, role)
    w.sources = sources
    app = create_app(sources, secret_key=b"console-test-key-" * 3, allowed_hosts=("testserver",))
    for name in PEOPLE:
        w.clients[name] = login(TestClient(app, base_url="http://testserver"), name)
    w.clients["anonymous"] = TestClient(app, base_url="http://testserver")
    yield w
    for c in w.clients.values():
        c.close()
    sources.close()
