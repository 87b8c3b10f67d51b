"""Fixtures for the console tests: two tenants' paused runs in a real approval store, console
users with different roles, and signed-in clients (Starlette's TestClient over the real app)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the console extra is not installed")
pytest.importorskip("jinja2", reason="the console extra is not installed")

from _notes_app import APP as NOTES_APP
from console_world import PASSWORD, PEOPLE, NotesServer, World, login, paused_runs, write_mcp_config
from starlette.testclient import TestClient

from tether.console import create_app, sqlite_sources
from tether.console._users import UserStore


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
        resume_apps=(NOTES_APP,),  # as tether serve --resume-app
    )
    for name, grants in PEOPLE.items():
        sources.users.add_user(name, PASSWORD)
        for tenant, role in grants.items():
            sources.users.grant(name, tenant, role)
    w.sources = sources
    app = create_app(sources, secret_key=b"console-test-key-52e1b7a09c4d3f86", allowed_hosts=("testserver",))
    for name in PEOPLE:
        w.clients[name] = login(TestClient(app, base_url="http://testserver"), name)
    w.clients["anonymous"] = TestClient(app, base_url="http://testserver")
    yield w
    for c in w.clients.values():
        c.close()
    sources.close()
