"""The MCP host: real MCP servers (official SDK) under the host's authority (SPEC X1–X5).

Server authors only need ``tether.mcp.confirm`` (the "confirm first" pattern).
"""

# Names are imported on first use (PEP 562): a review connects its one server without loading
# the host, the runner or the MCP SDK before the server process is already starting.
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.mcp.approve import ServerReview, approve_server, review_server
    from tether.mcp.clean import clean_result_text
    from tether.mcp.config import McpConfig, ServerConfig, load_config
    from tether.mcp.elicitation import Answer, ConsoleResponder, ElicitationGate, Responder, ScriptedResponder
    from tether.mcp.hosting import build_host
    from tether.mcp.pinning import PinStore
    from tether.mcp.roots import RootsGate
    from tether.mcp.runner import ScriptStep, resume_pause, run_question
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
    "ScriptStep": "tether.mcp.runner",
    "ScriptedResponder": "tether.mcp.elicitation",
    "ServerConfig": "tether.mcp.config",
    "ServerReview": "tether.mcp.approve",
    "approve_server": "tether.mcp.approve",
    "build_host": "tether.mcp.hosting",
    "clean_result_text": "tether.mcp.clean",
    "load_config": "tether.mcp.config",
    "resume_pause": "tether.mcp.runner",
    "review_server": "tether.mcp.approve",
    "run_question": "tether.mcp.runner",
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
    "ScriptStep",
    "ScriptedResponder",
    "ServerConfig",
    "ServerReview",
    "approve_server",
    "build_host",
    "clean_result_text",
    "load_config",
    "resume_pause",
    "review_server",
    "run_question",
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
