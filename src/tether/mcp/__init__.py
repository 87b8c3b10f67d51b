"""The MCP host: real MCP servers (official SDK) under the host's authority (SPEC X1–X5).

Server authors only need ``tether.mcp.confirm`` (the "confirm first" pattern). Building a host
from a config file and running questions over it is ``tether.mcpapp``.
"""

# Names are imported on first use (PEP 562): a review connects its one server without loading
# the MCP SDK before the server process is already starting.
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.mcp.approve import ServerReview, approve_server, review_server
    from tether.mcp.clean import clean_result_text
    from tether.mcp.config import McpConfig, ServerConfig, load_config
    from tether.mcp.elicitation import Answer, ConsoleResponder, ElicitationGate, Responder, ScriptedResponder
    from tether.mcp.pinning import PinStore
    from tether.mcp.roots import RootsGate
    from tether.mcp.sampling import SamplingGate, SamplingPrompt
    from tether.mcp.source import McpServerSource

_EXPORTS = {
    "Answer": "tether.mcp.elicitation",
    "ConsoleResponder": "tether.mcp.elicitation",
    "ElicitationGate": "tether.mcp.elicitation",
    "McpConfig": "tether.mcp.config",
    "McpServerSource": "tether.mcp.source",
    "PinStore": "tether.mcp.pinning",
    "Responder": "tether.mcp.elicitation",
    "RootsGate": "tether.mcp.roots",
    "SamplingGate": "tether.mcp.sampling",
    "SamplingPrompt": "tether.mcp.sampling",
    "ScriptedResponder": "tether.mcp.elicitation",
    "ServerConfig": "tether.mcp.config",
    "ServerReview": "tether.mcp.approve",
    "approve_server": "tether.mcp.approve",
    "clean_result_text": "tether.mcp.clean",
    "load_config": "tether.mcp.config",
    "review_server": "tether.mcp.approve",
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether.mcp' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
