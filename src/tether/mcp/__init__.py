"""The MCP host: real MCP servers (official SDK) under the host's authority (SPEC X1–X5).

Server authors only need ``tether.mcp._confirm`` (the "confirm first" pattern). Building a host
from a config file and running questions over it is ``tether.mcphost``.
"""

# Imported on first use (PEP 562): a review's server starts before the MCP SDK is loaded.
from typing import TYPE_CHECKING

from tether.core._exports import lazy_exports

if TYPE_CHECKING:
    from tether.mcp._approve import ServerReview, approve_server, review_server
    from tether.mcp._clean import clean_result_text
    from tether.mcp._config import McpConfig, ServerConfig, load_config
    from tether.mcp._elicitation import (
        Answer,
        ConsoleResponder,
        ElicitationGate,
        Responder,
        ScriptedResponder,
    )
    from tether.mcp._pinning import PinStore
    from tether.mcp._roots import RootsGate
    from tether.mcp._sampling import SamplingGate, SamplingPrompt
    from tether.mcp._source import McpServerSource

_EXPORTS = {
    "Answer": "tether.mcp._elicitation",
    "ConsoleResponder": "tether.mcp._elicitation",
    "ElicitationGate": "tether.mcp._elicitation",
    "McpConfig": "tether.mcp._config",
    "McpServerSource": "tether.mcp._source",
    "PinStore": "tether.mcp._pinning",
    "Responder": "tether.mcp._elicitation",
    "RootsGate": "tether.mcp._roots",
    "SamplingGate": "tether.mcp._sampling",
    "SamplingPrompt": "tether.mcp._sampling",
    "ScriptedResponder": "tether.mcp._elicitation",
    "ServerConfig": "tether.mcp._config",
    "ServerReview": "tether.mcp._approve",
    "approve_server": "tether.mcp._approve",
    "clean_result_text": "tether.mcp._clean",
    "load_config": "tether.mcp._config",
    "review_server": "tether.mcp._approve",
}

__all__ = [
    "Answer",
    "ConsoleResponder",
    "ElicitationGate",
    "McpConfig",
    "McpServerSource",
    "PinStore",
    "Responder",
    "RootsGate",
    "SamplingGate",
    "SamplingPrompt",
    "ScriptedResponder",
    "ServerConfig",
    "ServerReview",
    "approve_server",
    "clean_result_text",
    "load_config",
    "review_server",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
