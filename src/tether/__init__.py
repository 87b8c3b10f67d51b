"""tether: a governed harness for tool-using LLM agents. The model proposes; the host decides."""

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
