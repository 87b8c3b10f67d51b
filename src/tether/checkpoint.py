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
from typing import TYPE_CHECKING, Any

from tether.context.untrusted import Observation
from tether.errors import ApprovalError
from tether.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from tether.policy.intake import Proposal, content_hash
from tether.policy.rules import Decision
from tether.policy.store import ProposalStatus
from tether.policy.trusted import Permissions, TrustedContext
from tether.run import CallRecord, RunState
from tether.stop import StopReason
from tether.trace.events import EventKind

if TYPE_CHECKING:
    from tether.host import GateOutcome, Host
    from tether.loop import AgentLoop
    from tether.run import Agent, RunResult

__all__ = [
    "pause",
    "pending_calls",
    "restore_trace",
    "resume_run",
    "settle_approvals",
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
    from datetime import datetime

    from tether.memory import MemoryRecord

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


# -- the loop side ---------------------------------------------------------------------------


def settle_approvals(
    loop: AgentLoop, outcomes: list[GateOutcome]
) -> tuple[list[GateOutcome], tuple[StopReason, str] | None]:
    """Turn the gate's "approve" outcomes into "allow" (approved: stored arguments), a stop with
    ``approval_denied``, or a checkpointed pause with ``approval_required``."""
    host, s, t = loop.host, loop.state, loop.tracer
    approvals = host.approvals
    assert approvals is not None
    settled: list[GateOutcome] = []
    waiting: list[str] = []
    refused: list[str] = []
    for o in outcomes:
        if o.status != "approve":
            settled.append(o)
            continue
        assert o.spec is not None and o.arguments is not None
        stored = approvals.store.find_for_call(s.run_id, s.steps, o.call.id)
        if stored is None:
            proposal = Proposal.of(
                o.spec.name, o.arguments, s.context.tenant, effect=str(o.spec.effect), needs_approval=True
            )
            stored = approvals.submit(
                proposal,
                proposed_by=f"model:{loop.agent.model.name}",
                run_id=s.run_id,
                step=s.steps,
                call_id=o.call.id,
            )
            if o.decision is not None and "provenance" in o.decision.details:
                # Where each argument came from (policy/provenance_rules.py) goes into the
                # proposal's history, so the reviewer sees it next to what will run.
                why = {"rule": o.decision.rule, "reason": o.decision.reason, **o.decision.details}
                approvals.store.add_event(
                    stored.id,
                    "policy",
                    actor=f"rule:{o.decision.rule}",
                    detail=json.dumps(why, ensure_ascii=False, sort_keys=True, default=str)[:8000],
                    now=host.clock(),
                )
            t.emit(
                EventKind.APPROVAL_REQUESTED,
                proposal_id=stored.id,
                call_id=o.call.id,
                tool=o.spec.name,
                effect=stored.effect,
                content_hash=stored.content_hash,
            )
        if stored.content_hash != content_hash(o.spec.name, o.arguments) or stored.tenant != s.context.tenant:
            # The call being resumed is not what was proposed: never run it on an old approval.
            t.emit(
                EventKind.APPROVAL_DENIED, proposal_id=stored.id, tool=o.spec.name, reason="content_mismatch"
            )
            refused.append(f"{stored.id}: content_mismatch")
            settled.append(o)
            continue
        if stored.status is ProposalStatus.APPROVED:
            t.emit(
                EventKind.APPROVAL_GRANTED,
                proposal_id=stored.id,
                call_id=o.call.id,
                tool=stored.tool,
                content_hash=stored.content_hash,
                reviewer=stored.decided_by,
                decided_at=stored.decided_at.isoformat() if stored.decided_at else None,
                reason=stored.decision_reason,
            )
            decision = Decision("allow", "approval", "approved", {"proposal_id": stored.id})
            settled.append(
                dataclasses.replace(
                    o,
                    status="allow",
                    arguments=json.loads(stored.arguments),
                    decision=decision,
                    proposal_id=stored.id,
                )
            )
        elif stored.status is ProposalStatus.PENDING:
            waiting.append(stored.id)
            settled.append(o)
        else:
            t.emit(
                EventKind.APPROVAL_DENIED,
                proposal_id=stored.id,
                call_id=o.call.id,
                tool=stored.tool,
                status=str(stored.status),
                reviewer=stored.decided_by,
                decided_at=stored.decided_at.isoformat() if stored.decided_at else None,
                reason=stored.decision_reason,
            )
            refused.append(f"{stored.id}: {stored.status}")
            s.calls.append(CallRecord(o.call.id, o.call.name, o.call.arguments, "denied", str(stored.status)))

    def save(status: str, reason: StopReason) -> None:
        approvals.store.save_checkpoint(
            s.run_id,
            app=approvals.app,
            state=state_to_json(s),
            status=status,
            stop_reason=str(reason),
            now=host.clock(),
        )

    if refused:
        save("finished", StopReason.APPROVAL_DENIED)
        return settled, (StopReason.APPROVAL_DENIED, "; ".join(refused))
    if waiting:
        save("paused", StopReason.APPROVAL_REQUIRED)
        t.emit(EventKind.RUN_PAUSED, proposals=waiting, app=approvals.app)
        return settled, (StopReason.APPROVAL_REQUIRED, "waiting for approval of " + ", ".join(waiting))
    return settled, None


def pause(loop: AgentLoop, problems: list[str]) -> str:
    """Checkpoint a run whose side-effecting call has an unknown outcome (a person must resolve
    it) or is held by another process; ``tether resume`` continues once that is settled."""
    host, s = loop.host, loop.state
    approvals = host.approvals
    assert approvals is not None
    approvals.store.save_checkpoint(
        s.run_id,
        app=approvals.app,
        state=state_to_json(s),
        status="paused",
        stop_reason=str(StopReason.APPROVAL_REQUIRED),
        now=host.clock(),
    )
    detail = "; ".join(problems)
    loop.tracer.emit(EventKind.RUN_PAUSED, problems=problems, app=approvals.app)
    return detail


def restore_trace(tracer: Any, path: Any) -> None:
    """Load the events already written for this run so the tracer continues their numbering."""
    from tether.trace.events import TraceEvent
    from tether.trace.tracer import read_trace

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


async def resume_run(host: Host, agent: Agent, run_id: str) -> RunResult:
    """Continue a paused run. Raises ``ApprovalError`` (``unknown_run``, ``run_finished``)."""
    from tether.loop import AgentLoop

    approvals = host.approvals
    if approvals is None:
        raise ApprovalError("no_store", "this host has no approval store to resume from")
    cp = approvals.store.load_checkpoint(run_id)
    if cp is None:
        raise ApprovalError("unknown_run", f"no checkpoint for run {run_id!r}")
    if cp.status == "finished":
        raise ApprovalError("run_finished", f"run {run_id} already ended ({cp.stop_reason})")
    state = state_from_json(cp.state)
    result = await AgentLoop(host, agent, state.objective, state.context, state=state).run()
    if result.stop_reason is not StopReason.APPROVAL_REQUIRED:
        approvals.store.save_checkpoint(
            run_id,
            app=cp.app,
            state=state_to_json(state),
            status="finished",
            stop_reason=str(result.stop_reason),
            now=host.clock(),
        )
    return result
