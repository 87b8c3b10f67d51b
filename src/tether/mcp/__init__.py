"""The MCP host: real MCP servers (official SDK) under the host's authority (SPEC X1–X5).

Server authors only need ``tether.mcp.confirm`` (the "confirm first" pattern).
"""

from tether.mcp.approve import ServerReview, approve_server, review_server
from tether.mcp.config import McpConfig, ServerConfig, load_config
from tether.mcp.elicitation import Answer, ConsoleResponder, ElicitationGate, Responder, ScriptedResponder
from tether.mcp.hosting import build_host
from tether.mcp.pinning import PinStore
from tether.mcp.roots import RootsGate
from tether.mcp.runner import ScriptStep, resume_pause, run_question
from tether.mcp.sampling import SamplingGate, SamplingPrompt
from tether.mcp.source import McpServerSource

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
    "load_config",
    "resume_pause",
    "review_server",
    "run_question",
]
