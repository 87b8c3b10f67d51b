"""A server's tools as last listed, checked against the approved pins (X2).

Every listing passes ``absorb``: a tool matching its pin is offered with the pinned definition; a
new, changed, duplicated or vanished one is blocked (and traced) until approved again. A partial
listing never unlists a tool; a tool outside the config's ``tools`` is blocked but not traced. A
tool whose definition is larger than a model is offered (``MAX_DEFINITION_CHARS``) is left out as
invalid, as a tool the SDK refuses is: offered, one megabyte of harmless prose went into every
request of the run, past every model's context window. For the same reason a server whose
offered tools come to more than ``MAX_OFFERED_CHARS`` is offered none (``too_much``). Only what
a model is offered counts (``offered_size``): a tool's icon, a ``data:`` URI of some kilobytes
(as the spec allows), had the tool left out. A tool its server declares for its app only (MCP
Apps: ``_meta.ui.visibility`` without ``"model"``) is left out too (``app_only``), named: the spec
has the host keep it from the model, and it was offered (the published system-monitor server's
``poll-system-stats``, "App-only"), a model calling what its server says no model may call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tether.errors import UpstreamError
from tether.mcp._clean import escape_for_review
from tether.mcp._config import offered_name
from tether.mcp._deep import CUT
from tether.mcp._mend import refused
from tether.mcp._pinning import Pins, ToolCheck, canonical_definition, canonical_json, check_listing
from tether.tools._contract import ToolSpec
from tether.trace._events import EventKind

__all__ = [
    "MAX_DEFINITION_CHARS",
    "MAX_LISTED_TOOLS",
    "MAX_LISTING_CHARS",
    "MAX_OFFERED_CHARS",
    "PinnedListing",
    "all_pages",
    "app_only",
    "offered_size",
    "usable_listing",
    "without_repeats",
]

MAX_LISTED_TOOLS = 10_000  # a listing past it is refused whole (its pages are never all taken)
# The same for the size of its definitions in JSON and its cursors, all pages together: each page
# (or cursor) may come near the host's message limit, so 100 pages held 800 MiB.
MAX_LISTING_CHARS = 32 * 1024 * 1024
MAX_DEFINITION_CHARS = 65_536  # one tool's definition (as pinned, in JSON): about 16k tokens
MAX_OFFERED_CHARS = 524_288  # all of one server's offered definitions: about 128k tokens
# What of a definition a model is offered (``McpServerSource.specs``): its icons (``data:`` URIs of
# images, as the spec allows), annotations and ``_meta`` are pinned and reviewed, never offered.
_OFFERED = ("name", "description", "inputSchema")


def offered_size(definition: Mapping[str, Any]) -> int:
    """The size, in JSON, of what a model is offered of a tool's definition."""
    return len(canonical_json({k: definition[k] for k in _OFFERED if k in definition}))


def app_only(definition: Mapping[str, Any]) -> str | None:
    """Why a tool is never offered to a model because its server says so (MCP Apps'
    ``_meta.ui.visibility``, or the flat ``ui/visibility`` of its early drafts, a list without
    ``"model"``), else ``None``: no visibility, or one that is no list of names, is the spec's
    default (both audiences)."""
    meta = definition.get("_meta")
    if not isinstance(meta, Mapping):
        return None
    ui = meta.get("ui")
    for seen in (ui.get("visibility") if isinstance(ui, Mapping) else None, meta.get("ui/visibility")):
        if isinstance(seen, list) and all(isinstance(v, str) for v in seen) and "model" not in seen:
            shown = escape_for_review(json.dumps(seen, ensure_ascii=False), limit=200)
            return f"its server declares it for its app only (_meta.ui.visibility {shown}), never a model"
    return None


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
        self.invalid: dict[str, str] = {}  # listed, but invalid (left out of the listing) -> why
        self.checks: list[ToolCheck] = []
        self.version = 0  # bumped when what may be offered changes (and at each list-changed notice)

    def _offerable(self) -> tuple[tuple[str, str], ...]:
        return tuple(
            sorted((name, canonical_json(d)) for name, d in self.pinned.items() if name not in self.blocked)
        )

    async def absorb(self, tools: Sequence[Any], invalid: Mapping[str, str] | None = None) -> None:
        """Compare a whole listing with the pins; ``invalid`` (name → why) are blocked regardless.
        ``version`` is bumped when what may be offered changed (the host indexes it again)."""
        before = self._offerable()
        await self._absorb(tools, invalid)
        if self._offerable() != before:
            self.version += 1

    async def _absorb(self, tools: Sequence[Any], invalid: Mapping[str, str] | None = None) -> None:
        self.invalid = dict(invalid or {})
        definitions = []
        for tool in tools:
            definition = canonical_definition(tool)
            if (size := offered_size(definition)) > MAX_DEFINITION_CHARS:
                name = escape_for_review(definition["name"], limit=200)
                self.invalid[name] = (
                    f"its definition is {size} characters, more than the host offers a model "
                    f"({MAX_DEFINITION_CHARS})"
                )
            elif (hidden := app_only(definition)) is not None:
                self.invalid[escape_for_review(definition["name"], limit=200)] = hidden
            else:
                definitions.append(definition)
        self.live = {d["name"]: d for d in definitions}
        for name, why in self.invalid.items():
            self.pinned.pop(name, None)
            if self.blocked.get(name) != why:
                self.block(name, "invalid", why)
        if self.pins is None:
            self.pinned = {name: d for name, d in self.live.items() if name not in self.invalid}
            return
        checks = check_listing(definitions, await self.pins.pins(self.server), self.endpoint())
        self.checks = checks
        duplicated = {c.tool for c in checks if c.why == "listed more than once"}
        for name in duplicated:
            self.pinned.pop(name, None)
        for c in checks:
            if c.tool in self.invalid:
                continue  # a name also listed with an invalid definition: blocked as invalid
            if c.status == "pinned" and c.tool not in duplicated:
                self.blocked.pop(c.tool, None)  # back to the approved definition
                self.pinned[c.tool] = c.definition
                continue
            if self.blocked.get(c.tool) != c.why:
                self.block(c.tool, c.status, c.why, sha256=c.sha256, pinned_sha256=c.pinned_sha256)
        for name in sorted(set(self.pinned) - set(self.live)):
            self.pinned.pop(name)
            self.block(name, "removed", "no longer listed by the server")

    def too_much(self, offered: Sequence[str]) -> str | None:
        """Why the approved definitions of ``offered`` are more than a model is offered from one
        server (``None``: they are not)."""
        size = sum(offered_size(self.pinned[name]) for name in offered if name in self.pinned)
        if size <= MAX_OFFERED_CHARS:
            return None
        return (
            f"the definitions of its {len(offered)} offered tools come to {size} characters, more "
            f"than the host offers from one server ({MAX_OFFERED_CHARS}): narrow them with the "
            "config's tools"
        )

    def refuse_offered_name(self, spec: ToolSpec, sources: list[str]) -> None:
        """``spec``'s offered name is also another tool's (of ``sources``): block it (traced)."""
        why = f"its offered name {spec.name} is also that of another tool (of {', '.join(sources)})"
        self.block(spec.remote_name or spec.name, "name_collision", why)

    def block(self, name: str, status: str, why: str, **more: Any) -> None:
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


def _refused(result: Mapping[str, Any], version: str) -> str | None:
    """Why the SDK would refuse this ``tools/list`` result (as it checks it), or ``None``."""
    import mcp_types as types

    return refused("tools/list", result, version, types.ListToolsResult)


def usable_listing(result: dict[str, Any], version: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    """A ``tools/list`` result without the tools the SDK would refuse it for, and those tools
    (name or ``#index`` → why); unchanged when the SDK takes it or refuses something else. Each
    tool is first ``mended``; one the SDK refuses only for its icons is kept without them."""
    version = version or "2025-11-25"
    tools = result.get("tools")
    if not isinstance(tools, list):
        return result, {}
    mended = [_mended(tool) for tool in tools]
    if any(m is not t for m, t in zip(mended, tools, strict=True)):
        result, tools = {**result, "tools": mended}, mended
    cut = any(isinstance(tool, dict) and CUT in tool for tool in tools)  # by the transport: too deep
    if not cut and _refused(result, version) is None:
        return result, {}
    if _refused({**result, "tools": []}, version) is not None:
        return result, {}
    kept: list[Any] = []
    dropped: dict[str, str] = {}
    for index, tool in enumerate(tools):
        why = _refused({**result, "tools": [tool]}, version)
        if isinstance(tool, dict) and CUT in tool:
            why = str(tool[CUT])
        elif why is None:
            kept.append(tool)
            continue
        elif isinstance(tool, dict) and "icons" in tool:  # (display only: never offered a model)
            plain = {k: v for k, v in tool.items() if k != "icons"}
            if _refused({**result, "tools": [plain]}, version) is None:
                kept.append(plain)
                continue
        name = tool.get("name") if isinstance(tool, dict) else None
        shown = escape_for_review(name, limit=200) if isinstance(name, str) and name else f"#{index}"
        dropped[shown] = f"invalid definition ({escape_for_review(why.replace('tools.0.', '', 1), 400)})"
    return {**result, "tools": kept}, dropped


def _mended(tool: Any) -> Any:
    """A listed tool whose input schema names no ``type`` (``{}`` for a tool of no arguments, or
    ``properties`` alone, as servers on SDKs that never checked it write) with ``type: object``,
    what its arguments always are (JSON-RPC params): the SDK refused the tool, left out of the
    listing. Any other as it is."""
    schema = tool.get("inputSchema") if isinstance(tool, dict) else None
    if isinstance(schema, dict) and "type" not in schema:
        return {**tool, "inputSchema": {"type": "object", **schema}}
    return tool


def without_repeats(tools: Sequence[Any]) -> list[Any]:
    """A listing's tools, each listed again exactly as before (a page repeating the end of the one
    before it, as offset paging does when the list moves) taken once: it was blocked as a name
    listed more than once. The same name listed with another definition is kept twice (blocked:
    which one runs would be the server's choice)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for tool in tools:
        key = (tool.name, tool.model_dump_json(by_alias=True, exclude_none=True))
        if key not in seen:
            seen.add(key)
            out.append(tool)
    return out


async def all_pages(client: Any, server: str) -> list[Any]:
    """Every page of ``server``'s ``tools/list`` now (not the SDK's cache), its tools as listed.
    Raises ``UpstreamError`` past ``MAX_LISTED_TOOLS`` or ``MAX_LISTING_CHARS``, at a cursor
    given before, or past 100 pages listing no tool: a page listing some nears the tools' bound
    (a server of one tool a page had 150 tools refused past 100 pages). A server declaring no
    ``tools`` capability that has no ``tools/list`` either (``-32601``: prompts or resources
    only) lists none: it could not be started ("Method not found")."""
    cursor: str | None = None
    tools: list[Any] = []
    cursors: set[bytes] = set()  # digests: a cursor may come near the message limit
    size = empty = 0
    while True:
        try:
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        except Exception as err:
            if cursor is None and _no_tools(client, err):
                return []
            raise
        tools.extend(page.tools)
        size += sum(len(tool.model_dump_json(by_alias=True, exclude_none=True)) for tool in page.tools)
        size += len(page.next_cursor or "")  # held and sent back: 100 of 7 MB held 800 MiB
        if len(tools) > MAX_LISTED_TOOLS or size > MAX_LISTING_CHARS:
            what = (
                f"{MAX_LISTED_TOOLS} tools"
                if size <= MAX_LISTING_CHARS
                else f"{MAX_LISTING_CHARS} characters"
            )
            raise UpstreamError(f"server {server} failed: its tool listing went past {what}")
        # An empty cursor ends it too, as clients written in JavaScript read it (``while (cursor)``).
        if not (cursor := page.next_cursor):
            return tools
        digest = hashlib.sha256(cursor.encode("utf-8", "surrogatepass")).digest()
        empty += not page.tools
        if digest in cursors or empty > 100:  # never taken for a whole listing
            why = (
                "named a page it had already given"
                if digest in cursors
                else "went past 100 pages of no tools"
            )
            raise UpstreamError(f"server {server} failed: its tool listing never ended ({why})")
        cursors.add(digest)


def _no_tools(client: Any, err: Exception) -> bool:
    """Whether ``err`` (from a first ``tools/list``) is a server's ``-32601`` that declared no
    ``tools`` capability: a server with no tools, not a failure."""
    from mcp.shared.exceptions import MCPError

    if not isinstance(err, MCPError) or err.error.code != -32601:
        return False
    try:
        capabilities = client.server_capabilities
    except Exception:  # (not connected: no capabilities to read)
        return False
    return getattr(capabilities, "tools", None) is None
