"""The declared payload of every trace event kind: the fields an event of a kind may carry and
their types *as written to the trace* (after sanitising). ``Required`` marks what every emitter
supplies; the rest may be absent. Types are JSON types; ``Any`` only where the payload is open data.

The tracer checks field *names* against ``FIELDS``; ``check_payload`` checks required fields and
types too (strict tracers; ``TETHER_TRACE_STRICT=1`` in tests)."""

import functools
from typing import Any, Required

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict

from tether.core._problems import validation_problems
from tether.trace._events import EventKind, TraceSchemaError

__all__ = ["FIELDS", "PAYLOADS", "check_payload"]

# A float as the tracer writes it: a number, or its name (``NaN``, ``Infinity``, ``-Infinity``)
# where JSON has none (``tether.trace._sanitize.finite``).
Number = float | str

# How a stdio server is confined, as its launch and its sandbox events report it.
_SANDBOX: dict[str, Any] = {
    "sandbox": str,
    "confined": bool,
    "launcher": str,
    "read_only": list[str],
    "read_write": list[str],
    "network": str,  # none | any | allowlist
    "network_allow": list[str],  # the allowlist's host:port entries
    "withheld": list[str],
    "not_shown": list[str],  # host paths its command names that the sandbox does not show
    "sandbox_warning": str,
    "sandbox_refused": str,
    "sandbox_problem": str,
}
_EFFECT: dict[str, Any] = {"key": Required[str], "tool": Required[str], "proposal_id": str | None}
_RUN_STARTED: dict[str, Any] = {
    "design": Required[str],  # "agent" | "workflow" | "plan"
    "objective": Required[str],
    "tools": list[str],
    "agent": str,
    "model": str,
    "workflow": str,
    "tenant": str,
    "roles": list[str],
}

PAYLOADS: dict[EventKind, dict[str, Any]] = {
    EventKind.RUN_STARTED: _RUN_STARTED,
    EventKind.CONTEXT_COMPOSED: {
        "messages": Required[int],
        "tools": Required[int],
        "tools_enabled": Required[bool],
        "request_tokens": int,
        "request_bytes": int,
        "common_prefix_bytes": int,
        "prefix_reuse": Number | None,
        "cached_share": Number | None,
        "status_strategy": str | None,
    },
    EventKind.MODEL_REQUEST: {},  # for readers of older traces: the loop traces context_composed
    EventKind.MODEL_RESPONSE: {
        "model": Required[str],
        "text": Required[str],
        "tool_calls": Required[list[dict[str, str]]],
        "prompt_tokens": int,
        "completion_tokens": int,
        "cached_tokens": int,
        "cost_usd": Number,
        # backend facts (ModelResponse.meta)
        "finish_reason": str | None,  # the provider's own value
        "response_id": str,  # the provider's id of this completion (exported as gen_ai.response.id)
        "finish": str,  # the same in tether's words: stop, tool_calls, length, refused, paused, unknown
        "cache_write_tokens": int,  # prompt tokens the provider wrote to its prefix cache (Anthropic)
        "provider": str,  # openai-chat, openai-responses or anthropic
        # models that failed before this one: model, error, and the retries taken on it
        "fallback_from": list[dict[str, Any]],
        "retries": list[dict[str, Any]],  # one entry per retry: kind, attempt, delay_s
        "unpriced": bool,
        "priced_as": str,  # the model the answer names, priced as it (another than the one asked)
        "usage_estimated": list[str],  # counts the server left out, estimated: prompt_tokens …
        # what attempts that failed before this answer were billed (counted in the figures above):
        # prompt_tokens, completion_tokens, cost_usd; by this model's retries, by models left
        "failed_attempts_billed": dict[str, Any],
        "fallback_billed": dict[str, Any],
        "reasoning_not_kept": int,  # reasoning items that could not be sent back (no id), not kept
        "call_ids_renamed": list[list[str]],  # [old, new] per call whose id an earlier call had
        "call_names_shortened": list[list[Any]],  # [shown, length] per call named past every tool
        "stream_restarts": int,  # completions a stream began again (a proxy's retry): the last read
    },
    EventKind.MODEL_ERROR: {
        "error": Required[str],
        # what the failed attempts were billed, counted against the run's budgets all the same
        "prompt_tokens": int,
        "completion_tokens": int,
        "cost_usd": Number,
        "retries": list[dict[str, Any]],  # the retries taken before it: kind, attempt, delay_s (model)
        "fallback_from": list[dict[str, Any]],  # a chain's models that failed (before a cut call, or all)
    },
    EventKind.TOOL_PROPOSED: {"call_id": Required[str], "tool": Required[str], "arguments": str},
    EventKind.POLICY_ALLOWED: {"call_id": Required[str], "tool": Required[str], "rule": Required[str]},
    EventKind.POLICY_DENIED: {
        "tool": Required[str],
        "reason": Required[str],
        "call_id": str,
        "rule": str,
        "details": dict[str, Any],
    },
    EventKind.TOOL_OBSERVATION: {
        "tool": Required[str],
        "source": Required[str],
        "is_error": Required[bool],
        "call_id": str,
        "trust": str,
        "observed_at": str,
        "error_kind": str | None,
        "chars": int,
        "truncated": bool,
        "cleaned": dict[str, Any],  # hidden characters removed, markup neutralised (tether.mcp._clean)
        "timed_out": bool,  # the call ran past its tool's timeout_s (a thread's may still end later)
    },
    EventKind.TOOL_ERROR: {"tool": Required[str], "error": Required[str], "call_id": str, "message": str},
    EventKind.TOOL_CRASHED: {"tool": Required[str], "error": Required[str]},
    EventKind.SERVER_LAUNCH: {
        **_SANDBOX,
        "source": Required[str],
        "state": str,  # launching | failed | running | not_started
        "at": str,
        "error": str,
        "transport": str,
        "command": str,
        "env_keys": list[str],
        "url": str | None,
        "header_keys": list[str],
        "protocol": str | None,
        "restart": int,
        "stderr_log": str,
        "detail": str,  # a failed start for the person: the server's last stderr lines, a sandbox hint
    },
    EventKind.MCP_CONNECTION: {
        "server": Required[str],
        # lost | restarting | new_session | http_error | quarantined | listening | relisted | unsent_dropped
        # | stream_ended
        "action": Required[str],
        "tool": str,  # stream_ended: the call whose answer's event stream ended without it
        "phase": str,
        "cause": str,
        "attempt": int,
        "max_restarts": int,
        "why": str,
        "stderr_tail": list[str],
        "exit": str,  # lost: how a stdio server's process ended ("code 3", "signal 9"), once it had
        "sandbox_hint": str | None,
        "waiting": int,  # unsent_dropped: the host's messages waiting for the server to read them
        "dropped": int,  # unsent_dropped: the host's answers and notices dropped so far
    },
    EventKind.MCP_SANDBOX: {
        **_SANDBOX,
        "server": Required[str],
        # confined | unconfined | refused | cannot_confine | network_refused | write_refused
        "action": Required[str],
        "why": str | None,
        "destination": str,  # network_refused: the host:port the server asked for
        "tool": str,  # write_refused: the tool whose call failed on a write the sandbox refused
        "hint": str,  # write_refused: what to change (for the person)
    },
    EventKind.MCP_PROGRESS: {
        "server": Required[str],
        "tool": str,
        "progress": Number,
        "total": Number | None,
        "message": str,
        "held_back": int,  # notifications not traced (over the rate) since the last one that was
    },
    EventKind.MCP_LOG: {
        "server": Required[str],
        "level": str,
        "logger": str | None,
        "message": str,
        "held_back": int,  # notifications not traced (over the rate) since the last one that was
    },
    EventKind.MCP_TASK: {
        "server": Required[str],
        "tool": Required[str],
        "action": Required[str],  # created | finished | cancel_sent
        "task_id": str,
        "status": str,
        "polls": int,
        "accepted": bool,  # cancel_sent: whether the server accepted the cancellation
    },
    EventKind.MEMORY_RETRIEVED: {
        "subject": Required[str],
        "record_id": str | None,
        "source": str,
        "confidence": str,
        "conflict": bool,
    },
    EventKind.MEMORY_REJECTED: {"subject": Required[str | None], "reason": Required[str], "record_id": str},
    EventKind.MEMORY_WRITTEN: {
        "subject": Required[str],
        "record_id": str | None,
        "status": str,
        "conflicts_with": list[str],
        "valid_until": str,
    },
    EventKind.MEMORY_REFUSED: {"subject": Required[str], "reason": Required[str], "message": str},
    EventKind.HANDOFF_VALIDATED: {"evidence": Required[list[str]]},
    EventKind.HANDOFF_REJECTED: {"problems": Required[list[str]]},
    EventKind.VERIFICATION_FAILED: {"problem": Required[str]},
    EventKind.BUDGET_EXHAUSTED: {
        "reason": Required[str],
        "detail": str,
        "answered_by": str,
        "final_turn_refused": str,
    },
    EventKind.REPETITION_DETECTED: {"detail": Required[str]},
    EventKind.ROLLBACK: {
        "from_design": Required[str],
        "to_design": Required[str],
        "failed_run_id": Required[str],  # the run rolled back from (the event's own run_id is the new run)
        "stop_reason": str,
        "trace": str | None,
        "disabled_sources": list[str],
        "disabled_memory": list[str],
    },
    EventKind.WORKFLOW_STEP: {
        "step": Required[str],
        "index": int,
        "child_run": str,
        "stop_reason": str,
        "calls": list[str],
        "replayed": bool,  # an agent node an earlier attempt of the run finished: its answer kept
    },
    EventKind.STOP: {"reason": Required[str], "steps": int, "detail": str, "llm_calls": int, "design": str},
    EventKind.MCP_CAPABILITY_BLOCKED: {
        "server": Required[str],
        "tool": Required[str],
        "status": Required[str],
        "why": str,
        "sha256": str,
        "pinned_sha256": str | None,
    },
    EventKind.MCP_CAPABILITY_CHECK: {"server": Required[str], "trigger": str, "fallback": str, "why": str},
    EventKind.MCP_RESULT_REJECTED: {
        "server": Required[str],
        "tool": Required[str],
        "reason": Required[str],
        "why": str,
        "chars": int,
        "cleaned": dict[str, Any],
        "raw_escaped": str,
        "paths": list[str],
    },
    EventKind.MCP_ELICITATION: {
        "server": Required[str],
        "outcome": Required[str],
        "tool": str | None,
        "reason": str,
        "message": str,
        "pause_id": str,
        "answered_by": str,
        "fields": list[str],
        "url": str,
        "domain": str,
        "action": str,
    },
    EventKind.MCP_SAMPLING: {
        "server": Required[str],
        "outcome": Required[str],
        "tool": str | None,
        "reason": str,
        "tokens": int,
        "calls_used": int,
        "dropped_tool_calls": int,
        "include_context_requested": str | None,
        "system_prompt_dropped": Any,
    },
    EventKind.MCP_ROOTS: {"server": Required[str], "action": Required[str], "roots": list[str]},
    EventKind.APPROVAL_REQUESTED: {
        "proposal_id": Required[str],
        "call_id": Required[str],
        "tool": Required[str],
        "effect": str,
        "content_hash": str,
        "rule": str,  # the policy rule that asked for approval
    },
    EventKind.APPROVAL_GRANTED: {
        "proposal_id": Required[str],
        "call_id": Required[str],
        "tool": Required[str],
        "content_hash": str,
        "reviewer": str | None,
        "decided_at": str | None,
        "reason": str | None,
    },
    EventKind.APPROVAL_DENIED: {
        "proposal_id": Required[str],
        "tool": Required[str],
        "call_id": str,
        "reason": str | None,
        "status": str,
        "reviewer": str | None,
        "decided_at": str | None,
    },
    EventKind.RUN_PAUSED: {"app": Required[str | None], "proposals": list[str], "problems": list[str]},
    EventKind.RUN_RESUMED: _RUN_STARTED,
    EventKind.EFFECT_INTENT: {**_EFFECT, "attempt": int},
    EventKind.EFFECT_RECORDED: {**_EFFECT, "is_error": bool},
    EventKind.EFFECT_REPLAYED: _EFFECT,
    EventKind.EFFECT_RECONCILED: {**_EFFECT, "happened": Required[bool]},
    EventKind.EFFECT_ESCALATED: {**_EFFECT, "why": Required[str]},
    EventKind.CONTEXT_COMPRESSED: {
        "strategy": Required[str],
        "results": Required[int],
        "tokens_before": int | None,
        "chars_before": int,
        "chars_after": int,
        "summary_tokens": int,
    },
    EventKind.COMPRESSION_FAILED: {"call_id": Required[str], "tool": Required[str], "error": Required[str]},
    EventKind.COMPRESSION_CIRCUIT_OPEN: {"failures": Required[int]},
    EventKind.CONTEXT_COMPACTED: {"start": Required[int], "upto": Required[int], "chars": int},
    EventKind.CONTEXT_OVERFLOW: {"tokens": Required[int], "window": Required[int]},
    EventKind.OUTPUT_STORED: {
        "call_id": Required[str],
        "tool": Required[str],
        "ref": Required[str],
        "chars": int,
    },
    EventKind.SKILL_LOADED: {
        "skill": Required[str],
        "digest": str,
        "via": str,  # "command" | "tool"
    },
    EventKind.SKILL_REFUSED: {"path": Required[str], "reason": Required[str], "digest": str | None},
    EventKind.TOOL_SCHEMAS_LOADED: {"tools": Required[list[str]]},
    EventKind.SUBAGENT_FINISHED: {
        "child_run_id": Required[str],
        "stop_reason": Required[str],
        "child_trace": str | None,
        "conclusion_chars": int,
        "child_tokens": int,
    },
}


FIELDS: dict[EventKind, frozenset[str]] = {k: frozenset(p) for k, p in PAYLOADS.items()}
_typed_dict: Any = TypedDict  # called with the table's field dicts, which mypy cannot check


@functools.cache
def _adapter(kind: EventKind) -> TypeAdapter[Any]:
    payload = _typed_dict(f"{kind}_payload", PAYLOADS[kind], total=False)
    return TypeAdapter(with_config(ConfigDict(extra="forbid", strict=True))(payload))


def check_payload(kind: EventKind, data: dict[str, Any]) -> None:
    """Raise ``TraceSchemaError`` unless ``data`` (as sanitised) is exactly a payload of ``kind``."""
    try:
        _adapter(kind).validate_python(data)
    except ValidationError as err:
        raise TraceSchemaError(f"{kind} event: {validation_problems(err)}") from None
