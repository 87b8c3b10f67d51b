"""Capability pinning: an approved tool is a sha256 of its canonical definition (``_FIELDS``,
JSON with sorted keys). A changed or new tool is blocked until approved again. Tables:
``tether.sql._tables``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from sqlalchemy import Connection, select

from tether.sql._database import SqlStore
from tether.sql._tables import pin_history as H
from tether.sql._tables import pins as T
from tether.sql._tables import seconds_now, upsert

__all__ = [
    "Pin",
    "PinStatus",
    "PinStore",
    "Pins",
    "ToolCheck",
    "bad_tool_name",
    "canonical_definition",
    "check_listing",
    "digest",
]

# What the spec allows a tool name (2025-11-25: 1 to 128 of these); the model is offered a name every
# provider takes (``offered_name``: 64 at most), the server called by its own.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# A change in any of these, ``execution``, ``icons`` and ``_meta`` included, is a change to review.
_FIELDS = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "execution",
    "icons",
    "_meta",
)

PinStatus = Literal["pinned", "changed", "new"]


def bad_tool_name(name: str) -> str | None:
    """Why a server's tool name cannot be namespaced safely, or ``None``."""
    if "__" in name:
        return "the name contains '__' and could impersonate another server's namespaced tool"
    if not _TOOL_NAME.match(name):
        return "the name has characters outside [A-Za-z0-9_.-] or is longer than 128"
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
    counts = Counter(str(definition["name"]) for definition in tools)
    for definition in tools:
        name = str(definition["name"])
        sha = digest(definition)
        pin = pins.get(name)
        status: PinStatus = "new"
        if counts[name] > 1:  # which of two definitions runs would be the server's choice
            why = "listed more than once"
        elif (bad := bad_tool_name(name)) is not None:
            why = bad
        elif pin is None:
            why = "not approved"
        else:
            status, why = "changed", "server command/url changed"
            if pin.endpoint == endpoint and pin.sha256 != sha:
                changed = sorted(k for k in _FIELDS if pin.definition.get(k) != definition.get(k))
                why = "changed: " + ", ".join(changed)
            elif pin.endpoint == endpoint:
                status, why = "pinned", ""
        pinned = pin.sha256 if status != "new" and pin is not None else None
        out.append(ToolCheck(name, status, sha, dict(definition), pinned, why=why))
    return sorted(out, key=lambda c: c.tool)


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
    now = seconds_now()
    for c in checks:
        insert = upsert(conn, T).values(
            server=server,
            tool=c.tool,
            sha256=c.sha256,
            definition=canonical_json(c.definition),
            endpoint=endpoint,
            approved_by=actor,
            approved_at=now,
        )
        keep = ("sha256", "definition", "endpoint", "approved_by", "approved_at")
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=["server", "tool"], set_={k: insert.excluded[k] for k in keep}
            )
        )
        conn.execute(
            H.insert().values(
                server=server, tool=c.tool, sha256=c.sha256, action="approve", actor=actor, at=now
            )
        )
    return [c.tool for c in checks]


@runtime_checkable
class Pins(Protocol):
    """The pins concern, async only: what a host, a review and the console do with pins."""

    async def pins(self, server: str) -> dict[str, Pin]: ...

    async def approve(
        self, server: str, checks: Iterable[ToolCheck], *, endpoint: str, actor: str
    ) -> list[str]: ...


class PinStore(SqlStore):
    """Approved tool definitions per server id (``Pins``) in an ``SqlStore``."""

    concern = "pins"

    async def pins(self, server: str) -> dict[str, Pin]:
        return await self.db.read(_pins, server)

    async def approve(
        self, server: str, checks: Iterable[ToolCheck], *, endpoint: str, actor: str
    ) -> list[str]:
        """Pin these definitions (all in one transaction). Returns the tool names pinned."""
        return await self.db.write(_approve, server, tuple(checks), endpoint, actor)
