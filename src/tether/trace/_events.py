"""Typed trace events: one frozen value per decision the host takes.

Every ``EventKind`` has a declared payload (``tether.trace._payloads``). ``run_id``, ``seq``,
``ts`` and ``kind`` belong to the event itself and are never payload fields.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self

__all__ = ["RESERVED", "EventKind", "TraceEvent", "TraceSchemaError"]


class EventKind(StrEnum):
    RUN_STARTED = "run_started"
    CONTEXT_COMPOSED = "context_composed"
    MODEL_REQUEST = "model_request"
    MODEL_RESPONSE = "model_response"
    MODEL_ERROR = "model_error"
    TOOL_PROPOSED = "tool_proposed"
    POLICY_ALLOWED = "policy_allowed"
    POLICY_DENIED = "policy_denied"
    TOOL_OBSERVATION = "tool_observation"
    TOOL_ERROR = "tool_error"
    TOOL_CRASHED = "tool_crashed"
    SERVER_LAUNCH = "server_launch"
    MEMORY_RETRIEVED = "memory_retrieved"
    MEMORY_REJECTED = "memory_rejected"
    MEMORY_WRITTEN = "memory_written"
    MEMORY_REFUSED = "memory_refused"
    HANDOFF_VALIDATED = "handoff_validated"
    HANDOFF_REJECTED = "handoff_rejected"
    VERIFICATION_FAILED = "verification_failed"
    BUDGET_EXHAUSTED = "budget_exhausted"
    REPETITION_DETECTED = "repetition_detected"
    ROLLBACK = "rollback"
    WORKFLOW_STEP = "workflow_step"
    STOP = "stop"
    MCP_CAPABILITY_BLOCKED = "mcp_capability_blocked"
    MCP_CAPABILITY_CHECK = "mcp_capability_check"
    MCP_RESULT_REJECTED = "mcp_result_rejected"
    MCP_ELICITATION = "mcp_elicitation"
    MCP_SAMPLING = "mcp_sampling"
    MCP_ROOTS = "mcp_roots"
    MCP_CONNECTION = "mcp_connection"  # a connection lost or restarted
    MCP_SANDBOX = "mcp_sandbox"  # a stdio server confined, unconfined (warning) or refused
    MCP_PROGRESS = "mcp_progress"
    MCP_LOG = "mcp_log"  # a server's log notification (notifications/message), escaped and cut
    MCP_TASK = "mcp_task"  # a task-augmented tool call: created, polled to its end, or cancelled
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_GRANTED = "approval_granted"
    APPROVAL_DENIED = "approval_denied"
    RUN_PAUSED = "run_paused"
    RUN_RESUMED = "run_resumed"
    EFFECT_INTENT = "effect_intent"
    EFFECT_RECORDED = "effect_recorded"
    EFFECT_REPLAYED = "effect_replayed"
    EFFECT_RECONCILED = "effect_reconciled"
    EFFECT_ESCALATED = "effect_escalated"
    # context engine (C1-C7)
    CONTEXT_COMPRESSED = "context_compressed"
    COMPRESSION_FAILED = "compression_failed"
    COMPRESSION_CIRCUIT_OPEN = "compression_circuit_open"
    CONTEXT_COMPACTED = "context_compacted"
    CONTEXT_OVERFLOW = "context_overflow"
    OUTPUT_STORED = "output_stored"
    SKILL_LOADED = "skill_loaded"
    SKILL_REFUSED = "skill_refused"
    TOOL_SCHEMAS_LOADED = "tool_schemas_loaded"
    SUBAGENT_FINISHED = "subagent_finished"


RESERVED = frozenset({"run_id", "seq", "ts", "kind"})


class TraceSchemaError(ValueError):
    """An event whose payload is not the one declared for its kind (a programming error)."""


@dataclass(frozen=True, slots=True)
class TraceEvent:
    run_id: str
    seq: int
    ts: str
    kind: EventKind
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not RESERVED.isdisjoint(self.data):
            clash = sorted(RESERVED.intersection(self.data))
            raise TraceSchemaError(f"payload fields {clash} would overwrite the event's own fields")

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "seq": self.seq, "ts": self.ts, "kind": str(self.kind), **self.data}

    @classmethod
    def from_json(cls, line: Mapping[str, Any]) -> Self:
        """The event of one trace line. Raises ``ValueError`` for an unknown kind."""
        data = {k: v for k, v in line.items() if k not in RESERVED}
        return cls(
            str(line.get("run_id", "")),
            int(line.get("seq", 0)),
            str(line.get("ts", "")),
            EventKind(line["kind"]),
            data,
        )
