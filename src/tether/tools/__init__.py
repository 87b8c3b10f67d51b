"""Tool contracts and tool sources."""

from tether.tools._contract import (
    Effect,
    Target,
    Tool,
    ToolContext,
    ToolOptions,
    ToolOutput,
    ToolSpec,
    render_result,
    tool,
    unwrap_exception_group,
)
from tether.tools._source import LocalTools, ToolSource

__all__ = [
    "Effect",
    "LocalTools",
    "Target",
    "Tool",
    "ToolContext",
    "ToolOptions",
    "ToolOutput",
    "ToolSource",
    "ToolSpec",
    "render_result",
    "tool",
    "unwrap_exception_group",
]
