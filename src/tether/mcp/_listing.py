"""A server's tools as last listed, checked against the approved pins (X2).

Every listing the host makes (at start, the re-check before a call, after a list-changed
notice or listen event, after a task) passes ``absorb``: a tool whose canonical definition
matches its pin is offered with the pinned definition; a new, changed, duplicated or vanished
tool is blocked (and traced) until a person approves it again. A partial listing (one page)
never unlists a tool. A tool the config never offers (outside its server's ``tools``) is
blocked too but not traced: the config, not the pin check, decided it (a server listing dozens
of tools would otherwise add a row for each at every launch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tether.mcp._pinning import Pins, ToolCheck, canonical_definition, check_listing
from tether.trace._events import EventKind

__all__ = ["SEPARATOR", "PinnedListing"]

SEPARATOR = "__"


class PinnedListing:
    def __init__(
        self,
        server: str,
        pins: Pins | None,
        endpoint: Callable[[], str],
        emit: Callable[..., None],
        offered: frozenset[str] | None = None,
    ) -> None:
        self.server = server
        self.offered = offered  # the config's ``tools`` (None: every approved tool)
        self.pins = pins
        self.endpoint = endpoint
        self.emit = emit
        self.pinned: dict[str, dict[str, Any]] = {}  # remote name -> approved canonical definition
        self.live: dict[str, dict[str, Any]] = {}  # remote name -> last listed definition
        self.blocked: dict[str, str] = {}  # remote name -> why
        self.checks: list[ToolCheck] = []

    async def absorb(self, tools: Sequence[Any], *, complete: bool = True) -> None:
        """Compare a listing with the pins. A partial listing (one page) never unlists tools."""
        definitions = [canonical_definition(t) for t in tools]
        listed = {d["name"]: d for d in definitions}
        self.live = listed if complete else {**self.live, **listed}
        if self.pins is None:
            self.pinned = dict(self.live)
            return
        if not complete and not definitions:
            return
        checks = check_listing(definitions, await self.pins.pins(self.server), self.endpoint())
        self.checks = checks
        duplicated = {c.tool for c in checks if c.why == "listed more than once"}
        for name in duplicated:
            self.pinned.pop(name, None)
        for c in checks:
            if c.status == "pinned" and c.tool not in duplicated:
                if c.tool in self.blocked:
                    # Back to the approved definition: unblock (the pin never changed).
                    del self.blocked[c.tool]
                self.pinned[c.tool] = c.definition
                continue
            if self.blocked.get(c.tool) != c.why:
                self.blocked[c.tool] = c.why
                if self.offered is not None and c.tool not in self.offered:
                    continue
                self.emit(
                    EventKind.MCP_CAPABILITY_BLOCKED,
                    server=self.server,
                    tool=f"{self.server}{SEPARATOR}{c.tool}",
                    status=c.status,
                    why=c.why,
                    sha256=c.sha256,
                    pinned_sha256=c.pinned_sha256,
                )
        if complete:
            for name in sorted(set(self.pinned) - set(self.live)):
                self.pinned.pop(name)
                self.blocked[name] = "no longer listed by the server"
                if self.offered is not None and name not in self.offered:
                    continue
                self.emit(
                    EventKind.MCP_CAPABILITY_BLOCKED,
                    server=self.server,
                    tool=f"{self.server}{SEPARATOR}{name}",
                    status="removed",
                    why=self.blocked[name],
                )
