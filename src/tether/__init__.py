"""tether: a governed harness for tool-using LLM agents. The model proposes; the host decides."""

# Names are imported on first use (PEP 562), so ``import tether`` — and ``tether --help`` —
# does not pay for pydantic, the MCP SDK or the host until they are needed. To export a
# name, add it to the TYPE_CHECKING imports, ``_EXPORTS`` and ``__all__`` (a test pins them).
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.desk import ProposalDesk
    from tether.errors import (
        ApprovalError,
        ConfigError,
        DependencyUnavailable,
        HandoffError,
        ModelError,
        NotFoundError,
        PolicyError,
        RunError,
        TetherError,
        ToolError,
        ToolInputError,
        UpstreamError,
    )
    from tether.host import Host
    from tether.policy import Approvals, DictCatalog, Permissions, Policy, Reviewer, TrustedContext
    from tether.run import Agent, RunResult, RunState
    from tether.stop import Limits, StopReason
    from tether.tools import Effect, Target, Tool, ToolContext, tool
    from tether.workflow import AgentNode, Step, Workflow

_EXPORTS = {
    "Agent": "tether.run",
    "AgentNode": "tether.workflow",
    "ApprovalError": "tether.errors",
    "Approvals": "tether.policy",
    "ConfigError": "tether.errors",
    "DependencyUnavailable": "tether.errors",
    "DictCatalog": "tether.policy",
    "Effect": "tether.tools",
    "HandoffError": "tether.errors",
    "Host": "tether.host",
    "Limits": "tether.stop",
    "ModelError": "tether.errors",
    "NotFoundError": "tether.errors",
    "Permissions": "tether.policy",
    "Policy": "tether.policy",
    "PolicyError": "tether.errors",
    "ProposalDesk": "tether.desk",
    "Reviewer": "tether.policy",
    "RunError": "tether.errors",
    "RunResult": "tether.run",
    "RunState": "tether.run",
    "Step": "tether.workflow",
    "StopReason": "tether.stop",
    "Target": "tether.tools",
    "TetherError": "tether.errors",
    "Tool": "tether.tools",
    "ToolContext": "tether.tools",
    "ToolError": "tether.errors",
    "ToolInputError": "tether.errors",
    "TrustedContext": "tether.policy",
    "UpstreamError": "tether.errors",
    "Workflow": "tether.workflow",
    "tool": "tether.tools",
}

__all__ = [
    "Agent",
    "AgentNode",
    "ApprovalError",
    "Approvals",
    "ConfigError",
    "DependencyUnavailable",
    "DictCatalog",
    "Effect",
    "HandoffError",
    "Host",
    "Limits",
    "ModelError",
    "NotFoundError",
    "Permissions",
    "Policy",
    "PolicyError",
    "ProposalDesk",
    "Reviewer",
    "RunError",
    "RunResult",
    "RunState",
    "Step",
    "StopReason",
    "Target",
    "TetherError",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolInputError",
    "TrustedContext",
    "UpstreamError",
    "Workflow",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
