"""What the console tests share: two tenants' paused runs in a real approval store
(``World``, ``paused_runs``), the notes MCP server's handle, and signing in. Imported by name
(``from console_world import ...``) so that no other folder's ``conftest`` can shadow it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import yaml
from _notes_app import TENANT_A, TENANT_B, Outbox, build
from starlette.testclient import TestClient

from tether.console._sources import ConsoleSources

PASSWORD = "correct horse battery"
# who -> {tenant: role}
PEOPLE = {
    "ana": {"tenant-a": "reviewer"},
    "bob": {"tenant-b": "reviewer"},
    "vic": {"tenant-a": "viewer"},
    "root": {"*": "admin"},
}


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
