"""The host's index of offered tools: built at its start, and again at a run's start for a source
whose listing changed since (an MCP server that said its tools changed, or whose re-listing
offered or blocked a tool), so a long-lived host offers the next run what its servers list now.

A run's own tool set is fixed at its start (what the model is offered, traced once): a tool a
server adds mid-run is listed and checked against its pin at once, and offered from the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from tether.errors import ConfigError, ToolError
from tether.tools._contract import ToolSpec
from tether.tools._source import ToolSource

__all__ = ["Index", "index_offers", "listing_version", "relisted"]

Index = dict[str, tuple[ToolSpec, ToolSource]]
_log = logging.getLogger("tether.host")


def listing_version(source: ToolSource) -> int:
    """How often ``source`` said (or was seen) to change its tools; 0 for a fixed one."""
    version = getattr(source, "listing_version", 0)
    return version if isinstance(version, int) else 0


def index_offers(offers: Iterable[tuple[ToolSource, Sequence[ToolSpec]]]) -> Index:
    """Each offered name to its tool. Two of the host's own tools sharing a name is a
    ``ConfigError``; a server tool sharing a name with another tool is offered for neither."""
    by_name: dict[str, list[tuple[ToolSpec, ToolSource]]] = {}
    for source, specs in offers:
        for spec in specs:
            by_name.setdefault(spec.name, []).append((spec, source))
    index: Index = {}
    for name, offered in by_name.items():
        kept = [(spec, source) for spec, source in offered if not hasattr(source, "refuse_offered_name")]
        if len(kept) > 1:
            raise ConfigError(f"tool {name!r} offered by two sources")
        for spec, source in offered if len(offered) > 1 else ():
            if (refuse := getattr(source, "refuse_offered_name", None)) is not None:
                refuse(spec, [s.name for _, s in offered])
        if kept or len(offered) == 1:
            index[name] = (kept or offered)[0]
    return index


async def relisted(
    index: Index, sources: Sequence[ToolSource], versions: dict[str, int]
) -> tuple[Index, dict[str, int]]:
    """``index`` with the tools of each of ``sources`` whose listing version moved since
    ``versions`` listed again (checked against its pins as every listing is); a source that
    cannot list now keeps what it offered (its calls fail as its own), the failure logged."""
    offers: list[tuple[ToolSource, Sequence[ToolSpec]]] = []
    for source in sources:
        specs = [spec for spec, owner in index.values() if owner is source]
        if listing_version(source) != versions.get(source.name, 0):
            try:
                specs = await source.list_tools()
            except ToolError as err:
                _log.warning("tools of %s not listed again: %s", source.name, err)
        offers.append((source, specs))
    return index_offers(offers), {s.name: listing_version(s) for s in sources}
