"""tether: a governed harness for tool-using LLM agents. The model proposes; the host decides."""

# Names are imported on first use (PEP 562), so ``import tether`` — and ``tether --help`` —
# does not pay for pydantic, the MCP SDK or the host until they are needed. To export a
# name, add it to the TYPE_CHECKING imports, ``_EXPORTS`` and ``__all__`` (a test pins them).
from typing import TYPE_CHECKING

from tether.core._exports import lazy_exports

if TYPE_CHECKING:
    from tether.core.stop import Limits, StopReason
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
    from tether.runners._desk import ProposalDesk
    from tether.runners._workflow import AgentNode, Step, Workflow
    from tether.runs._values import Agent, RunResult, RunState
    from tether.tools import Effect, Target, Tool, ToolContext, tool

_EXPORTS = {
    name: module
    for module, names in {
        "tether.core.stop": "Limits StopReason",
        "tether.errors": (
            "ApprovalError ConfigError DependencyUnavailable HandoffError ModelError NotFoundError "
            "PolicyError RunError TetherError ToolError ToolInputError UpstreamError"
        ),
        "tether.host": "Host",
        "tether.policy": "Approvals DictCatalog Permissions Policy Reviewer TrustedContext",
        "tether.runners._desk": "ProposalDesk",
        "tether.runners._workflow": "AgentNode Step Workflow",
        "tether.runs._values": "Agent RunResult RunState",
        "tether.tools": "Effect Target Tool ToolContext tool",
    }.items()
    for name in names.split()
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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
