"""Tool contracts and tool sources."""

from tether.tools.contract import (
    Effect,
    Target,
    Tool,
    ToolContext,
    ToolOutput,
    ToolSpec,
    render_result,
    tool,
    unwrap_exception_group,
)
from tether.tools.source import LocalTools, ToolSource

__all__ = [
    "Effect",
    "LocalTools",
    "Target",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolSource",
    "ToolSpec",
    "render_result",
    "tool",
    "unwrap_exception_group",
]
