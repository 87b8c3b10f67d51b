"""Capability pinning: an approved tool is a sha256 of its canonical definition.

The canonical definition is the part of a tool the model reads or the host relies on:
name, title, description, input and output schema, annotations, ``execution`` (task
support), ``icons`` and ``_meta``. It is serialised as
JSON with sorted keys and no insignificant whitespace, so the same definition hashes the
same whatever order a server lists its keys in. Every listing is compared with the pins;
a changed or new tool is blocked until a person approves it again.

``SqlPinStore`` holds the pins' operations once, for SQLite (``PinStore``, a file) and
PostgreSQL (``tether.mcp._pg_state``); its tables are declared in ``tether.sql._tables``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection, delete, select

from tether.sql._database import Database, Synchronous
from tether.sql._tables import pin_history as H
from tether.sql._tables import pins as T
from tether.sql._tables import upsert

__all__ = [
    "Pin",
    "PinStatus",
    "PinStore",
    "SqlPinStore",
    "ToolCheck",
    "bad_tool_name",
    "canonical_definition",
    "check_listing",
    "digest",
]

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# ``execution`` (whether a tool runs as a task), ``icons`` (what a person is shown) and ``_meta``
# are pinned too: a change in any of them is a change to review.
_FIELDS = (
    "name", "title", "description", "inputSchema", "outputSchema", "annotations",
    "execution", "icons", "_meta",
)  # fmt: skip

PinStatus = Literal["pinned", "changed", "new"]


def bad_tool_name(name: str) -> str | None:
    """Why a server's tool name cannot be namespaced safely, or ``None``."""
    if "__" in name:
        return "the name contains '__' and could impersonate another server's namespaced tool"
    if not _TOOL_NAME.match(name):
        return "the name has characters outside [A-Za-z0-9_.-] or is longer than 64"
    return None


def canonical_definition(tool: Any) -> dict[str, Any]:
    """The pinned part of a tool (an ``mcp_types.Tool`` or its wire dict), in wire names."""
    wire = (
        tool if isinstance(tool, Mapping) else tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    return {k: wire[k] for k in _FIELDS if wire.get(k) is not None}


def canonical_json(definition: Mapping[str, Any]) -> str:
    return json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(definition: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(definition).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Pin:
    server: str
    tool: str
    sha256: str
    definition: dict[str, Any]
    endpoint: str  # sha256 of the launch command / URL the pin was approved for
    approved_by: str
    approved_at: str


@dataclass(frozen=True, slots=True)
class ToolCheck:
    """One listed tool compared with its pin."""

    tool: str
    status: PinStatus
    sha256: str
    definition: dict[str, Any]
    pinned_sha256: str | None = None
    why: str = ""


def check_listing(
    tools: Iterable[Mapping[str, Any]], pins: Mapping[str, Pin], endpoint: str
) -> list[ToolCheck]:
    """Compare canonical definitions with pins; a pin approved for another endpoint does not count."""
    out = []
    tools = list(tools)
    counts: dict[str, int] = {}
    for definition in tools:
        counts[str(definition["name"])] = counts.get(str(definition["name"]), 0) + 1
    for definition in tools:
        name = str(definition["name"])
        sha = digest(definition)
        pin = pins.get(name)
        if counts[name] > 1:
            # Two definitions under one name: which one runs is the server's choice, not ours.
            out.append(ToolCheck(name, "new", sha, dict(definition), why="listed more than once"))
        elif (bad := bad_tool_name(name)) is not None:
            out.append(ToolCheck(name, "new", sha, dict(definition), why=bad))
        elif pin is None:
            out.append(ToolCheck(name, "new", sha, dict(definition), why="not approved"))
        elif pin.endpoint != endpoint:
            out.append(
                ToolCheck(
                    name, "changed", sha, dict(definition), pin.sha256, why="server command/url changed"
                )
            )
        elif pin.sha256 != sha:
            changed = sorted(k for k in _FIELDS if pin.definition.get(k) != definition.get(k))
            out.append(
                ToolCheck(
                    name, "changed", sha, dict(definition), pin.sha256, why="changed: " + ", ".join(changed)
                )
            )
        else:
            out.append(ToolCheck(name, "pinned", sha, dict(definition), pin.sha256))
    return sorted(out, key=lambda c: c.tool)


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- operations (one transaction each) --------------------------------------------------------------


def _history(conn: Connection, server: str, tool: str, sha256: str, action: str, actor: str, at: str) -> None:
    conn.execute(
        H.insert().values(server=server, tool=tool, sha256=sha256, action=action, actor=actor, at=at)
    )


def _pins(conn: Connection, server: str) -> dict[str, Pin]:
    rows = conn.execute(select(T).where(T.c.server == server))
    return {
        r.tool: Pin(
            r.server, r.tool, r.sha256, json.loads(r.definition), r.endpoint, r.approved_by, r.approved_at
        )
        for r in rows
    }


def _approve(
    conn: Connection, server: str, checks: tuple[ToolCheck, ...], endpoint: str, actor: str
) -> list[str]:
    now = _stamp()
    for c in checks:
        insert = upsert(conn, T).values(
            server=server, tool=c.tool, sha256=c.sha256, definition=canonical_json(c.definition),
            endpoint=endpoint, approved_by=actor, approved_at=now,
        )  # fmt: skip
        keep = ("sha256", "definition", "endpoint", "approved_by", "approved_at")
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=["server", "tool"], set_={k: insert.excluded[k] for k in keep}
            )
        )
        _history(conn, server, c.tool, c.sha256, "approve", actor, now)
    return [c.tool for c in checks]


def _revoke(conn: Connection, server: str, tool: str, actor: str) -> bool:
    count = conn.execute(delete(T).where(T.c.server == server, T.c.tool == tool)).rowcount
    if count:
        _history(conn, server, tool, "", "revoke", actor, _stamp())
    return bool(count)


class SqlPinStore:
    """Approved tool definitions per server id, on a ``Database``: each method is one
    transaction; the ``a``-prefixed twin runs it without blocking the event loop."""

    def __init__(self, db: Database) -> None:
        self.db = db
        db.migrate("pins")

    def close(self) -> None:
        self.db.close()

    def pins(self, server: str) -> dict[str, Pin]:
        return self.db.snapshot(_pins, server)

    def approve(self, server: str, checks: Iterable[ToolCheck], *, endpoint: str, actor: str) -> list[str]:
        """Pin these definitions (all in one transaction). Returns the tool names pinned."""
        return self.db.run(_approve, server, tuple(checks), endpoint, actor)

    def revoke(self, server: str, tool: str, *, actor: str) -> bool:
        return self.db.run(_revoke, server, tool, actor)

    async def apins(self, server: str) -> dict[str, Pin]:
        return await self.db.read(_pins, server)

    async def aapprove(
        self, server: str, checks: Iterable[ToolCheck], *, endpoint: str, actor: str
    ) -> list[str]:
        return await self.db.write(_approve, server, tuple(checks), endpoint, actor)

    async def arevoke(self, server: str, tool: str, *, actor: str) -> bool:
        return await self.db.write(_revoke, server, tool, actor)


class PinStore(SqlPinStore):
    """Approved tool definitions per server id, in the SQLite file at ``path``."""

    def __init__(
        self, path: str | Path, *, busy_timeout_s: float = 30.0, synchronous: Synchronous = "NORMAL"
    ) -> None:
        super().__init__(Database.sqlite(path, busy_timeout_s=busy_timeout_s, synchronous=synchronous))
        self.path = Path(path)
