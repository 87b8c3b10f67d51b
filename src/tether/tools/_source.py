"""Where tools come from: the ``ToolSource`` seam and the local-function source."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from tether.errors import ConfigError, NotFoundError
from tether.tools._contract import Tool, ToolContext, ToolOutput, ToolSpec

__all__ = ["LocalTools", "ToolSource"]


@runtime_checkable
class ToolSource(Protocol):
    """A provider of tools (local functions, an MCP server). ``call`` receives arguments the host's
    gate validated; it raises ``ToolError`` subclasses for recoverable failures and
    ``DependencyUnavailable`` when the source itself is gone."""

    name: str

    async def start(self) -> None: ...

    async def list_tools(self) -> list[ToolSpec]: ...

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext) -> ToolOutput: ...

    async def close(self) -> None: ...


class LocalTools:
    """Python functions declared with ``@tool``."""

    def __init__(self, tools: Iterable[Tool] = (), *, name: str = "local") -> None:
        self.name = name
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, t: Tool) -> None:
        if not isinstance(t, Tool):
            raise ConfigError(f"{t!r} is not a tool: declare it with @tool")
        if t.name in self._tools:
            raise ConfigError(f"duplicate tool name {t.name!r}")
        self._tools[t.name] = t

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise NotFoundError(f"no tool named {name!r}") from None

    async def start(self) -> None:
        return None

    async def list_tools(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    def validate(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.get(name).validate(arguments)

    def received_arguments(self, spec: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """``arguments`` as the tool's function receives them, where its validators change them
        (``Tool.received``); ``None`` where they do not."""
        return self.get(spec.remote_name or spec.name).received(arguments)

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        return await self.get(spec.remote_name or spec.name).invoke(arguments, context)

    async def close(self) -> None:
        return None
