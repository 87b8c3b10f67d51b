"""Applications of the MCP host: build a host from a config file, run a question over its servers,
resume a paused elicitation. (``tether.mcp`` is the client side: connections, gates, pins.)"""

from tether.mcphost._build import build_host
from tether.mcphost._runner import ScriptStep, resume_pause, run_question

__all__ = ["ScriptStep", "build_host", "resume_pause", "run_question"]
