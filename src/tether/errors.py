"""The error tree of tether.

Two channels, never mixed:

    TetherError                      base of everything tether raises on purpose
    ├── ToolError                    recoverable: becomes a tool result the model reads
    │   ├── ToolInputError           the arguments are wrong ("provide exactly one of …")
    │   ├── NotFoundError            the target does not exist
    │   └── UpstreamError            the system behind the tool failed or timed out
    │       └── DependencyUnavailable  the tool source itself is gone (server died, down)
    ├── PolicyError                  a proposal the host refuses (intake, allowlist, tenant, egress)
    │   ├── SchemaViolation          (tether.core._schema) a value that does not match its schema
    │   └── UnusableSchema           (tether.core._schema) a schema that cannot be used (never fetched)
    ├── ApprovalError                approval workflow misuse (unknown id, revoked, not approved)
    ├── MemoryPolicyError            a memory write refused (provenance, scope, conflict, duplicate)
    ├── HandoffError                 a handoff that fails validation
    ├── ConfigError                  the application wired the host wrongly
    └── RunError                     ends a run: carries the stop reason
        └── ModelError               the model backend failed or returned garbage

Anything else raised inside a tool is a programming error: the run ends loudly with
stop_reason ``model_error``/``internal`` and the exception is kept in the trace.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApprovalError",
    "ConfigError",
    "DependencyUnavailable",
    "HandoffError",
    "MemoryPolicyError",
    "ModelError",
    "NotFoundError",
    "PolicyError",
    "RunError",
    "TetherError",
    "ToolError",
    "ToolInputError",
    "UpstreamError",
]


class TetherError(Exception):
    """Base class of every error tether raises on purpose."""


class ToolError(TetherError):
    """A recoverable tool failure. Its message is written for the model, with a fix hint."""

    kind = "tool_error"

    def __init__(self, message: str, *, hint: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}

    def to_result(self) -> dict[str, Any]:
        """The structured tool result the model sees."""
        out: dict[str, Any] = {"error": self.kind, "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        if self.details:
            out["details"] = self.details
        return out


class ToolInputError(ToolError):
    kind = "invalid_arguments"


class NotFoundError(ToolError):
    kind = "not_found"


class UpstreamError(ToolError):
    kind = "upstream_error"


class DependencyUnavailable(UpstreamError):
    kind = "dependency_unavailable"


class _Refusal(TetherError):
    """An error with a machine-readable ``reason``; its message defaults to the reason."""

    def __init__(self, reason: str, message: str | None = None):
        super().__init__(message or reason)
        self.reason = reason


class PolicyError(_Refusal):
    """A proposal refused by the host. ``reason`` is machine-readable (e.g. ``tool_not_allowed``)."""

    def __init__(self, reason: str, message: str | None = None, **details: Any):
        super().__init__(reason, message)
        self.details = details


class ApprovalError(_Refusal):
    """Approval workflow misuse: unknown id, not approved, revoked, wrong tenant."""


class MemoryPolicyError(_Refusal):
    """A memory write the host refuses. ``reason``: provenance, scope, duplicate, conflict …"""


class HandoffError(TetherError):
    """A handoff that fails validation; ``problems`` lists every failed check."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


class ConfigError(TetherError):
    """The application configured tether inconsistently."""


class RunError(TetherError):
    """Ends a run with a stop reason."""

    def __init__(self, stop_reason: str, message: str):
        super().__init__(message)
        self.stop_reason = stop_reason


class ModelError(RunError):
    """The model backend failed (transport, protocol, malformed output beyond retries).
    ``usage`` and ``cost_usd``: what the provider billed for the attempts that failed (a
    stream cut after it reported its usage, an answer refused as garbled), which the run's
    budgets count all the same; None and 0.0 when it reported nothing. ``retries``: each retry
    taken before it (kind, attempt, the wait in seconds, and the model of a fallback chain),
    for the trace. ``fallback_from``: each model of a fallback chain that failed (model,
    provider, error), when every one did."""

    def __init__(
        self,
        message: str,
        *,
        usage: Any = None,
        cost_usd: float = 0.0,
        retries: list[dict[str, Any]] | None = None,
        fallback_from: list[dict[str, Any]] | None = None,
    ):
        super().__init__("model_error", message)
        self.usage = usage
        self.cost_usd = cost_usd
        self.retries = list(retries or ())
        self.fallback_from = list(fallback_from or ())
