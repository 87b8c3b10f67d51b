"""The declared payload of every trace event kind: one ``TypedDict`` per ``EventKind``.

The fields an event of a kind may carry and their types *as written to the trace* (after
sanitising). The tracer checks field *names* against ``FIELDS``; ``check_payload`` checks
required fields and types too (strict tracers; ``TETHER_TRACE_STRICT=1`` in tests)."""

import functools
from typing import Any, Required

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict

from tether.core._problems import validation_problems
from tether.trace._events import EventKind, TraceSchemaError

__all__ = ["FIELDS", "PAYLOADS", "check_payload"]


# -- payloads, one per kind ------------------------------------------------------------------
# ``Required`` marks what every emitter supplies; the rest may be absent. Field types are JSON
# types; ``Any`` only where the payload is itself open data (a rule's details).


class _Payload(TypedDict, total=False):
    pass


class RunStarted(_Payload, total=False):
    design: Required[str]  # "agent" | "workflow" | "plan"
    objective: Required[str]
    tools: list[str]
    agent: str
    model: str
    workflow: str
    tenant: str
    roles: list[str]


class ContextComposed(_Payload, total=False):
    messages: Required[int]
    tools: Required[int]
    tools_enabled: Required[bool]
    request_tokens: int
    request_bytes: int
    common_prefix_bytes: int
    prefix_reuse: float | None
    cached_share: float | None
    status_strategy: str | None


class ModelRequest(_Payload, total=False):
    """Declared for readers of older traces; the loop traces ``context_composed`` instead."""


class ModelResponse(_Payload, total=False):
    model: Required[str]
    text: Required[str]
    tool_calls: Required[list[dict[str, str]]]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_usd: float
    # backend facts (ModelResponse.meta)
    finish_reason: str | None  # the provider's own value
    response_id: str  # the provider's id of this completion (exported as gen_ai.response.id)
    finish: str  # the same in tether's words: stop, tool_calls, length, refused, paused, unknown
    cache_write_tokens: int  # prompt tokens the provider wrote to its prefix cache (Anthropic)
    provider: str  # openai-chat, openai-responses or anthropic
    fallback_from: list[dict[str, str]]  # models that failed before this one: model, error
    retries: list[dict[str, Any]]  # one entry per retry: kind, attempt, delay_s
    unpriced: bool


class ModelError(_Payload, total=False):
    error: Required[str]


class ToolProposed(_Payload, total=False):
    call_id: Required[str]
    tool: Required[str]
    arguments: str


class PolicyAllowed(_Payload, total=False):
    call_id: Required[str]
    tool: Required[str]
    rule: Required[str]


class PolicyDenied(_Payload, total=False):
    tool: Required[str]
    reason: Required[str]
    call_id: str
    rule: str
    details: dict[str, Any]


class ToolObservation(_Payload, total=False):
    tool: Required[str]
    source: Required[str]
    is_error: Required[bool]
    call_id: str
    trust: str
    observed_at: str
    error_kind: str | None
    chars: int
    truncated: bool
    cleaned: dict[str, Any]  # hidden characters removed, markup neutralised (tether.mcp._clean)


class ToolError(_Payload, total=False):
    tool: Required[str]
    error: Required[str]
    call_id: str
    message: str


class ToolCrashed(_Payload, total=False):
    tool: Required[str]
    error: Required[str]


class _Sandbox(_Payload, total=False):
    """How a stdio server is confined, as its launch and its sandbox events report it."""

    sandbox: str
    confined: bool
    launcher: str
    read_only: list[str]
    read_write: list[str]
    network: str  # none | any | allowlist
    network_allow: list[str]  # the allowlist's host:port entries
    withheld: list[str]
    sandbox_warning: str
    sandbox_refused: str
    sandbox_problem: str


class ServerLaunch(_Sandbox, total=False):
    source: Required[str]
    state: str  # launching | failed | running | not_started
    at: str
    error: str
    transport: str
    command: str
    env_keys: list[str]
    url: str | None
    header_keys: list[str]
    protocol: str | None
    restart: int
    stderr_log: str
    detail: str  # a failed start for the person: the server's last stderr lines, a sandbox hint


class McpConnection(_Payload, total=False):
    server: Required[str]
    action: Required[str]  # lost | restarting | new_session | http_error | quarantined | listening | relisted
    phase: str
    cause: str
    attempt: int
    max_restarts: int
    why: str
    stderr_tail: list[str]
    sandbox_hint: str | None


class McpSandbox(_Sandbox, total=False):
    server: Required[str]
    action: Required[str]  # confined | unconfined | refused | cannot_confine | network_refused
    why: str | None
    destination: str  # network_refused: the host:port the server asked for


class McpTask(_Payload, total=False):
    server: Required[str]
    tool: Required[str]
    action: Required[str]  # created | finished | cancel_sent
    task_id: str
    status: str
    polls: int
    accepted: bool  # cancel_sent: whether the server accepted the cancellation


class McpProgress(_Payload, total=False):
    server: Required[str]
    tool: str
    progress: float
    total: float | None
    message: str
    held_back: int  # notifications not traced (over the rate) since the last one that was


class McpLog(_Payload, total=False):
    server: Required[str]
    level: str
    logger: str | None
    message: str
    held_back: int  # notifications not traced (over the rate) since the last one that was


class MemoryRetrieved(_Payload, total=False):
    subject: Required[str]
    record_id: str | None
    source: str
    confidence: str
    conflict: bool


class MemoryRejected(_Payload, total=False):
    subject: Required[str | None]
    reason: Required[str]
    record_id: str


class MemoryWritten(_Payload, total=False):
    subject: Required[str]
    record_id: str | None
    status: str
    conflicts_with: list[str]
    valid_until: str


class MemoryRefused(_Payload, total=False):
    subject: Required[str]
    reason: Required[str]
    message: str


class HandoffValidated(_Payload, total=False):
    evidence: Required[list[str]]


class HandoffRejected(_Payload, total=False):
    problems: Required[list[str]]


class VerificationFailed(_Payload, total=False):
    problem: Required[str]


class BudgetExhausted(_Payload, total=False):
    reason: Required[str]
    detail: str
    answered_by: str
    final_turn_refused: str


class RepetitionDetected(_Payload, total=False):
    detail: Required[str]


class Rollback(_Payload, total=False):
    from_design: Required[str]
    to_design: Required[str]
    failed_run_id: Required[str]  # the run rolled back from (the event's own run_id is the new run)
    stop_reason: str
    trace: str | None
    disabled_sources: list[str]
    disabled_memory: list[str]


class WorkflowStep(_Payload, total=False):
    step: Required[str]
    index: int
    child_run: str
    stop_reason: str
    calls: list[str]


class Stop(_Payload, total=False):
    reason: Required[str]
    steps: int
    detail: str
    llm_calls: int
    design: str


class McpCapabilityBlocked(_Payload, total=False):
    server: Required[str]
    tool: Required[str]
    status: Required[str]
    why: str
    sha256: str
    pinned_sha256: str | None


class McpCapabilityCheck(_Payload, total=False):
    server: Required[str]
    trigger: str
    fallback: str
    why: str


class McpResultRejected(_Payload, total=False):
    server: Required[str]
    tool: Required[str]
    reason: Required[str]
    why: str
    chars: int
    cleaned: dict[str, Any]
    raw_escaped: str
    paths: list[str]


class McpElicitation(_Payload, total=False):
    server: Required[str]
    outcome: Required[str]
    tool: str | None
    reason: str
    message: str
    pause_id: str
    answered_by: str
    fields: list[str]
    url: str
    domain: str
    action: str


class McpSampling(_Payload, total=False):
    server: Required[str]
    outcome: Required[str]
    tool: str | None
    reason: str
    tokens: int
    calls_used: int
    dropped_tool_calls: int
    include_context_requested: str | None
    system_prompt_dropped: Any


class McpRoots(_Payload, total=False):
    server: Required[str]
    action: Required[str]
    roots: list[str]


class ApprovalRequested(_Payload, total=False):
    proposal_id: Required[str]
    call_id: Required[str]
    tool: Required[str]
    effect: str
    content_hash: str
    rule: str  # the policy rule that asked for approval


class ApprovalGranted(_Payload, total=False):
    proposal_id: Required[str]
    call_id: Required[str]
    tool: Required[str]
    content_hash: str
    reviewer: str | None
    decided_at: str | None
    reason: str | None


class ApprovalDenied(_Payload, total=False):
    proposal_id: Required[str]
    tool: Required[str]
    call_id: str
    reason: str | None
    status: str
    reviewer: str | None
    decided_at: str | None


class RunPaused(_Payload, total=False):
    app: Required[str | None]
    proposals: list[str]
    problems: list[str]


class RunResumed(RunStarted, total=False):
    pass


class _Effect(_Payload, total=False):
    key: Required[str]
    tool: Required[str]
    proposal_id: str | None


class EffectIntent(_Effect, total=False):
    attempt: int


class EffectRecorded(_Effect, total=False):
    is_error: bool


class EffectReplayed(_Effect, total=False):
    pass


class EffectReconciled(_Effect, total=False):
    happened: Required[bool]


class EffectEscalated(_Effect, total=False):
    why: Required[str]


class ContextCompressed(_Payload, total=False):
    strategy: Required[str]
    results: Required[int]
    tokens_before: int | None
    chars_before: int
    chars_after: int
    summary_tokens: int


class CompressionFailed(_Payload, total=False):
    call_id: Required[str]
    tool: Required[str]
    error: Required[str]


class CompressionCircuitOpen(_Payload, total=False):
    failures: Required[int]


class ContextCompacted(_Payload, total=False):
    start: Required[int]
    upto: Required[int]
    chars: int


class ContextOverflow(_Payload, total=False):
    tokens: Required[int]
    window: Required[int]


class OutputStored(_Payload, total=False):
    call_id: Required[str]
    tool: Required[str]
    ref: Required[str]
    chars: int


class SkillLoaded(_Payload, total=False):
    skill: Required[str]
    digest: str
    via: str  # "command" | "tool"


class SkillRefused(_Payload, total=False):
    path: Required[str]
    reason: Required[str]
    digest: str | None


class ToolSchemasLoaded(_Payload, total=False):
    tools: Required[list[str]]


class SubagentFinished(_Payload, total=False):
    child_run_id: Required[str]
    stop_reason: Required[str]
    child_trace: str | None
    conclusion_chars: int
    child_tokens: int


PAYLOADS: dict[EventKind, type[_Payload]] = {
    EventKind.RUN_STARTED: RunStarted,
    EventKind.CONTEXT_COMPOSED: ContextComposed,
    EventKind.MODEL_REQUEST: ModelRequest,
    EventKind.MODEL_RESPONSE: ModelResponse,
    EventKind.MODEL_ERROR: ModelError,
    EventKind.TOOL_PROPOSED: ToolProposed,
    EventKind.POLICY_ALLOWED: PolicyAllowed,
    EventKind.POLICY_DENIED: PolicyDenied,
    EventKind.TOOL_OBSERVATION: ToolObservation,
    EventKind.TOOL_ERROR: ToolError,
    EventKind.TOOL_CRASHED: ToolCrashed,
    EventKind.SERVER_LAUNCH: ServerLaunch,
    EventKind.MCP_CONNECTION: McpConnection,
    EventKind.MCP_SANDBOX: McpSandbox,
    EventKind.MCP_PROGRESS: McpProgress,
    EventKind.MCP_LOG: McpLog,
    EventKind.MCP_TASK: McpTask,
    EventKind.MEMORY_RETRIEVED: MemoryRetrieved,
    EventKind.MEMORY_REJECTED: MemoryRejected,
    EventKind.MEMORY_WRITTEN: MemoryWritten,
    EventKind.MEMORY_REFUSED: MemoryRefused,
    EventKind.HANDOFF_VALIDATED: HandoffValidated,
    EventKind.HANDOFF_REJECTED: HandoffRejected,
    EventKind.VERIFICATION_FAILED: VerificationFailed,
    EventKind.BUDGET_EXHAUSTED: BudgetExhausted,
    EventKind.REPETITION_DETECTED: RepetitionDetected,
    EventKind.ROLLBACK: Rollback,
    EventKind.WORKFLOW_STEP: WorkflowStep,
    EventKind.STOP: Stop,
    EventKind.MCP_CAPABILITY_BLOCKED: McpCapabilityBlocked,
    EventKind.MCP_CAPABILITY_CHECK: McpCapabilityCheck,
    EventKind.MCP_RESULT_REJECTED: McpResultRejected,
    EventKind.MCP_ELICITATION: McpElicitation,
    EventKind.MCP_SAMPLING: McpSampling,
    EventKind.MCP_ROOTS: McpRoots,
    EventKind.APPROVAL_REQUESTED: ApprovalRequested,
    EventKind.APPROVAL_GRANTED: ApprovalGranted,
    EventKind.APPROVAL_DENIED: ApprovalDenied,
    EventKind.RUN_PAUSED: RunPaused,
    EventKind.RUN_RESUMED: RunResumed,
    EventKind.EFFECT_INTENT: EffectIntent,
    EventKind.EFFECT_RECORDED: EffectRecorded,
    EventKind.EFFECT_REPLAYED: EffectReplayed,
    EventKind.EFFECT_RECONCILED: EffectReconciled,
    EventKind.EFFECT_ESCALATED: EffectEscalated,
    EventKind.CONTEXT_COMPRESSED: ContextCompressed,
    EventKind.COMPRESSION_FAILED: CompressionFailed,
    EventKind.COMPRESSION_CIRCUIT_OPEN: CompressionCircuitOpen,
    EventKind.CONTEXT_COMPACTED: ContextCompacted,
    EventKind.CONTEXT_OVERFLOW: ContextOverflow,
    EventKind.OUTPUT_STORED: OutputStored,
    EventKind.SKILL_LOADED: SkillLoaded,
    EventKind.SKILL_REFUSED: SkillRefused,
    EventKind.TOOL_SCHEMAS_LOADED: ToolSchemasLoaded,
    EventKind.SUBAGENT_FINISHED: SubagentFinished,
}

FIELDS: dict[EventKind, frozenset[str]] = {k: frozenset(p.__annotations__) for k, p in PAYLOADS.items()}


@functools.cache
def _adapter(kind: EventKind) -> TypeAdapter[Any]:
    return TypeAdapter(with_config(ConfigDict(extra="forbid", strict=True))(PAYLOADS[kind]))


def check_payload(kind: EventKind, data: dict[str, Any]) -> None:
    """Raise ``TraceSchemaError`` unless ``data`` (as sanitised for the trace) is exactly a
    payload of ``kind``: declared names only, required ones present, declared types."""
    try:
        _adapter(kind).validate_python(data)
    except ValidationError as err:
        raise TraceSchemaError(f"{kind} event: {validation_problems(err)}") from None
