"""Pausing a run for approval and resuming it, possibly in another process (T5 in the loop).

When the model proposes calls that need approval, every one of them is stored as a pending
proposal (keyed by run and call id), the run state is checkpointed in the approval store and the
run stops with ``approval_required``. Nothing of that turn has run yet. ``resume_run`` restores
the state and settles the same turn again: approved calls run with their *stored* arguments
(through the effect ledger, so a call is never repeated), a denied or invalidated one ends the
run ``approval_denied``, a still-pending one pauses it again.

The checkpoint holds the run's working state (trajectory, observations, counters), never more:
the agent's configuration and the host's authority are rebuilt by the application.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import datetime
from typing import Any

from tether.errors import ApprovalError
from tether.memory import MemoryRecord
from tether.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from tether.policy.trusted import Permissions, TrustedContext
from tether.run import CallRecord, RunState
from tether.trace.events import EventKind, TraceEvent
from tether.trace.tracer import read_trace
from tether.types import Observation

__all__ = [
    "pending_calls",
    "restore_trace",
    "state_from_json",
    "state_to_json",
]

CHECKPOINT_VERSION = 1


# -- run state <-> JSON -----------------------------------------------------------------------


def _message_to(m: Message) -> dict[str, Any]:
    data = dataclasses.asdict(m)
    if isinstance(m, AssistantMessage):
        data["tool_calls"] = [dataclasses.asdict(c) for c in m.tool_calls]
    return data


def _message_from(d: dict[str, Any]) -> Message:
    kind = d["kind"]
    if kind == "system":
        return SystemMessage(d["content"])
    if kind == "user":
        return UserMessage(d["content"], d.get("origin", "user"))
    if kind == "assistant":
        calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in d.get("tool_calls") or ())
        return AssistantMessage(d.get("content"), calls, d.get("reasoning"))
    if kind == "tool":
        return ToolMessage(d["tool_call_id"], d["content"], d.get("name", ""))
    raise ValueError(f"unknown message kind {kind!r}")


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


def state_to_json(s: RunState) -> str:
    """The checkpoint of a run's working state, as JSON text."""
    c = s.context
    data = {
        "version": CHECKPOINT_VERSION,
        "run_id": s.run_id,
        "objective": s.objective,
        "context": {
            "tenant": c.tenant,
            "roles": sorted(c.roles),
            "user": c.user,
            "permissions": {"read": sorted(c.permissions.read), "write": sorted(c.permissions.write)},
        },
        "started_at": s.started_at.isoformat(),
        "trajectory": [_message_to(m) for m in s.trajectory],
        "observations": [
            {**dataclasses.asdict(o), "observed_at": o.observed_at.isoformat(), "data": _jsonable(o.data)}
            for o in s.observations
        ],
        "calls": [{**dataclasses.asdict(r), "arguments": _jsonable(r.arguments)} for r in s.calls],
        "evidence": sorted(s.evidence),
        "memory": [r.model_dump(mode="json") for r in s.memory],
        "steps": s.steps,
        "llm_calls": s.llm_calls,
        "usage": {
            "prompt_tokens": s.usage.prompt_tokens,
            "completion_tokens": s.usage.completion_tokens,
            "cached_tokens": s.usage.cached_tokens,
        },
        "cost_usd": s.cost_usd,
        "malformed_turns": s.malformed_turns,
        "unavailable": s.unavailable,
        "outputs": {k: v for k, v in s.outputs.items() if _jsonable(v) is not None},
    }
    return json.dumps(data, ensure_ascii=False, sort_keys=True, default=str)


def state_from_json(text: str) -> RunState:
    """Rebuild a ``RunState`` from ``state_to_json``; the deadline clock restarts on resume."""
    d = json.loads(text)
    if d.get("version") != CHECKPOINT_VERSION:
        raise ApprovalError("bad_checkpoint", f"checkpoint version {d.get('version')!r} is not supported")
    c = d["context"]
    context = TrustedContext(
        tenant=c["tenant"],
        roles=frozenset(c["roles"]),
        user=c["user"],
        permissions=Permissions(frozenset(c["permissions"]["read"]), frozenset(c["permissions"]["write"])),
    )
    state = RunState(
        run_id=d["run_id"],
        objective=d["objective"],
        context=context,
        started=time.monotonic(),
        started_at=datetime.fromisoformat(d["started_at"]),
    )
    state.trajectory = [_message_from(m) for m in d["trajectory"]]
    state.observations = [
        Observation(**{**o, "observed_at": datetime.fromisoformat(o["observed_at"])})
        for o in d["observations"]
    ]
    state.calls = [CallRecord(**r) for r in d["calls"]]
    state.evidence = set(d["evidence"])
    state.memory = [MemoryRecord.model_validate(r) for r in d["memory"]]
    state.steps = d["steps"]
    state.llm_calls = d["llm_calls"]
    state.usage = Usage(**d["usage"])
    state.cost_usd = d["cost_usd"]
    state.malformed_turns = d["malformed_turns"]
    state.unavailable = dict(d["unavailable"])
    state.outputs = dict(d["outputs"])
    return state


# -- resuming ----------------------------------------------------------------------------------


def restore_trace(tracer: Any, path: Any) -> None:
    """Load the events already written for this run so the tracer continues their numbering."""
    if path is None or not path.exists():
        return
    for line in read_trace(path):
        try:
            kind = EventKind(line.pop("kind"))
        except ValueError:
            continue
        run_id, seq, ts = line.pop("run_id", ""), line.pop("seq", 0), line.pop("ts", "")
        tracer.events.append(TraceEvent(run_id, int(seq), str(ts), kind, line))


def pending_calls(state: RunState) -> list[ToolCall]:
    """The tool calls of the turn a checkpoint stopped at (the last assistant message)."""
    for m in reversed(state.trajectory):
        if isinstance(m, AssistantMessage):
            answered = {x.tool_call_id for x in state.trajectory if isinstance(x, ToolMessage)}
            return [c for c in m.tool_calls if c.id not in answered]
    return []
