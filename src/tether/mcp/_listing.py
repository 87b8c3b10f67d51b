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

from tether.mcp._config import offered_name
from tether.mcp._pinning import Pins, ToolCheck, canonical_definition, check_listing
from tether.trace._events import EventKind

__all__ = ["PinnedListing"]


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

    async def absorb(self, tools: Sequence[Any]) -> None:
        """Compare a (whole) listing with the pins."""
        definitions = [canonical_definition(t) for t in tools]
        self.live = {d["name"]: d for d in definitions}
        if self.pins is None:
            self.pinned = dict(self.live)
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
                self._block(c.tool, c.status, c.why, sha256=c.sha256, pinned_sha256=c.pinned_sha256)
        for name in sorted(set(self.pinned) - set(self.live)):
            self.pinned.pop(name)
            self._block(name, "removed", "no longer listed by the server")

    def _block(self, name: str, status: str, why: str, **more: Any) -> None:
        """Block one remote tool; traced when the model was offered it (or everything is)."""
        self.blocked[name] = why
        if self.offered is None or name in self.offered:
            self.emit(
                EventKind.MCP_CAPABILITY_BLOCKED,
                server=self.server,
                tool=offered_name(self.server, name),
                status=status,
                why=why,
                **more,
            )
