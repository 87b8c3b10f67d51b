"""Tool search (C5): with many tools, the prefix carries names and one-line descriptions only.

Above ``threshold`` offered tools, every tool not in ``always_loaded`` is *deferred*: a stub in
the byte-stable prefix. ``tool_search`` (BM25) returns the full schemas of the best matches as
its result; a call to a deferred tool whose schema was never loaded is refused with a hint.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from tether.context._bm25 import BM25
from tether.context._store import FrozenStore
from tether.tools._contract import Tool, ToolSpec, tool

__all__ = ["ToolSearch", "ToolSearchConfig", "one_line"]


@dataclass(frozen=True)
class ToolSearchConfig:
    threshold: int = 20  # more offered tools than this and schemas are deferred
    always_loaded: Sequence[str] = ()
    max_results: int = 5

    def __post_init__(self) -> None:
        if self.threshold < 1 or self.max_results < 1:
            raise ValueError("threshold and max_results must be positive")


def one_line(text: str, limit: int = 120) -> str:
    first = (text.strip().splitlines() or [""])[0].strip()
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


def _document(spec: ToolSpec) -> str:
    props = spec.parameters.get("properties", {}) if isinstance(spec.parameters, dict) else {}
    params = " ".join(f"{k} {v.get('description', '')}" for k, v in props.items() if isinstance(v, dict))
    return f"{spec.name} {spec.remote_name} {spec.description} {params}"


class ToolSearch:
    """Which tools are deferred, which schemas were loaded, and the search tool itself."""

    def __init__(self, config: ToolSearchConfig, specs: Sequence[ToolSpec], store: FrozenStore) -> None:
        self.config = config
        self.specs = sorted(specs, key=lambda s: s.name)
        self.store = store
        self.active = len(self.specs) > config.threshold
        keep = set(config.always_loaded)
        self.deferred = {s.name for s in self.specs if self.active and s.name not in keep}
        self._index = BM25([_document(s) for s in self.specs])
        self.loaded: set[str] = set(store.record("tools_loaded") or ())

    def wire_tools(self) -> list[dict[str, Any]]:
        """The ``tools`` entries for the prefix: full for loaded-always tools, stubs for deferred ones."""
        stub = " [schema deferred: find it with tool_search]"
        return [
            {
                "type": "function",
                "function": {
                    "name": s.name,
                    "description": one_line(s.description) + stub,
                    "parameters": {"type": "object"},
                },
            }
            if s.name in self.deferred
            else s.wire()
            for s in self.specs
        ]

    def refusal(self, name: str) -> str | None:
        """Why a call to ``name`` cannot run yet (its schema was never loaded), or None."""
        match = [s.name for s in self.specs if name in (s.name, s.remote_name)]
        if match and match[0] in self.deferred and match[0] not in self.loaded:
            return (
                f"the schema of {match[0]} is not loaded: call tool_search with what you need "
                "first, then call the tool with arguments that match its full schema"
            )
        return None

    def search(self, query: str, limit: int) -> dict[str, Any]:
        hits = self._index.top(query, len(self.specs))  # filtered below: only deferred tools count
        found: list[dict[str, Any]] = []
        already: list[str] = []
        for i, score in hits:
            spec = self.specs[i]
            if spec.name not in self.deferred:
                continue
            if spec.name in self.loaded:
                already.append(spec.name)
                continue
            if len(found) >= min(limit, self.config.max_results):
                break
            found.append({"score": round(score, 3), **spec.wire()["function"]})
        newly = [f["name"] for f in found]
        if newly:
            self.loaded.update(newly)
            self.store.set_record("tools_loaded", sorted(self.loaded))
        return {"query": query, "tools": found, "already_loaded": already}

    @tool(name="tool_search")
    def tool_search(
        self,
        query: Annotated[str, Field(min_length=1, max_length=300, description="What the tool should do.")],
        limit: Annotated[int, Field(ge=1, le=10, description="How many tools to return (1-10).")] = 5,
    ) -> str:
        """Find tools by what they do; returns their full schemas so you can call them."""
        return json.dumps(self.search(query, limit), ensure_ascii=False, sort_keys=True)

    def tool(self) -> Tool:
        return self.tool_search
