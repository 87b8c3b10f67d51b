"""What the chokepoint (``HostCore.call_turn``) works with and returns.

A runner hands the calls of one turn, with their ``CallScope``, to ``Host.call_turn`` and gets
back a ``Turn``, settled: what was decided and observed per call, the results as the model reads
them (``Turn.messages``) and the stop the host requires, if any. A turn that must pause comes
back checkpointed (``settle``, ``checkpoint_pause``), so no runner has to remember to. Also here:
recording denials and observations, and approval settlement against the store."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from tether.chokepoint._labels import host_note
from tether.core._imports import raised_at
from tether.core.messages import ToolMessage
from tether.core.stop import StopReason
from tether.core.types import Decision, GateOutcome, Observation, ToolCall, Trust
from tether.errors import ApprovalError, DependencyUnavailable, ToolError
from tether.policy._intake import Proposal, content_hash
from tether.policy._store import AUTOMATIC_APPROVAL
from tether.runs._checkpoint import state_to_json
from tether.runs._values import CallRecord, RunState
from tether.tools._contract import ToolContext, ToolOutput, ToolSpec
from tether.trace._events import EventKind

if TYPE_CHECKING:
    from tether.policy._approvals import Approvals
    from tether.trace._tracer import Tracer

__all__ = [
    "CallScope",
    "Harness",
    "Turn",
    "checkpoint_pause",
    "crash_observation",
    "crash_text",
    "error_output",
    "record_denial",
    "record_observation",
    "record_rejection",
    "refuse_shared",
    "settle",
    "shared_ids",
]

Clock = Callable[[], datetime]


class Harness(Protocol):
    """Tools the host itself provides to one run (TODO, skills, tool search, subagents)."""

    def owns(self, name: str) -> bool: ...

    def intercept(self, call: ToolCall) -> GateOutcome | None: ...

    def trust(self, name: str) -> Trust:
        """``trusted`` only for the host's own text (a TODO list, a reviewed skill), else ``untrusted``."""
        ...

    async def execute(
        self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext
    ) -> tuple[Observation, BaseException | None]: ...


@dataclass
class CallScope:
    """The run a call belongs to: its state, tracer, the tools it was offered."""

    state: RunState
    tracer: Tracer
    offered: Sequence[ToolSpec]
    harness: Harness | None = None
    proposed_by: str = "model"
    checkpoint: bool = True  # a pause checkpoints the run state for resume
    stop_on_denial: bool | None = None  # None: the host's ``on_denied``
    proposals: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Turn:
    """What the host decided and observed for the calls of one turn, in proposal order."""

    outcomes: list[GateOutcome]
    observations: dict[str, Observation] = field(default_factory=dict)
    denied: list[GateOutcome] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # proposal ids pending a person's decision
    refused: list[str] = field(default_factory=list)  # approvals denied, invalidated or mismatched
    unsettled: list[str] = field(default_factory=list)  # effects whose outcome a person must resolve
    unsettled_errors: list[ApprovalError] = field(default_factory=list)
    crashes: list[tuple[str, BaseException]] = field(default_factory=list)
    halted: bool = False  # stopped before execution (denial or approval): nothing of the turn ran
    # Calls waiting for a person's answer (MCP elicitation), by call id: why.
    questions: dict[str, str] = field(default_factory=dict)
    checkpointed: bool = False  # the run paused here and its state is saved for ``resume``

    @property
    def executed(self) -> list[GateOutcome]:
        return [o for o in self.outcomes if o.call.id in self.observations]

    def messages(self) -> list[ToolMessage]:
        """The turn's results as the model reads them, in proposal order; none for a call whose
        effect's outcome is unknown or that waits for an answer in a checkpointed turn."""
        out: list[ToolMessage] = []
        for o in self.outcomes:
            call = o.call
            obs = self.observations.get(call.id)
            if obs is not None:
                if not (self.checkpointed and call.id in self.questions):
                    out.append(ToolMessage(call.id, obs.render(), obs.tool))
            elif o.status != "allow":
                message = o.error or (f"denied by policy: {o.decision.reason}" if o.decision else "denied")
                body = json.dumps({"error": o.status, "message": message}, ensure_ascii=False)
                out.append(ToolMessage(call.id, host_note(body), call.name))
        return out

    def stop(self) -> tuple[StopReason, str] | None:
        """The stop the host requires after this turn, or None when the runner may go on."""
        if self.denied and self.halted:
            first = self.denied[0]
            reason = first.decision.reason if first.decision else "denied"
            return StopReason.POLICY_DENIED, f"{first.call.name}: {reason}"
        if self.refused:
            return StopReason.APPROVAL_DENIED, "; ".join(self.refused)
        if self.waiting:
            return StopReason.APPROVAL_REQUIRED, "waiting for approval of " + ", ".join(self.waiting)
        if self.unsettled or self.questions:
            return StopReason.APPROVAL_REQUIRED, "; ".join([*self.unsettled, *self.questions.values()])
        if self.crashes:
            name, crash = self.crashes[0]
            return StopReason.INTERNAL_ERROR, f"tool {name} raised {crash_text(crash)}"
        return None


def crash_text(crash: BaseException) -> str:
    """``KeyError: 'b' (at /app/tools.py:12)``: a tool's crash with the line of the user's code it
    came from, for the stop detail and the ``tool_crashed`` event (never the model's context)."""
    return f"{type(crash).__name__}: {crash}{raised_at(crash)}"


# -- a tool's failure as the model reads it ------------------------------------------------------


def error_output(err: ToolError, tracer: Any = None, call_id: str = "", tool: str = "") -> ToolOutput:
    """A recoverable tool error as the result the model reads. A call that timed out while its
    thread runs on (``TimedOut.late``: a plain function's) is traced on ``tracer`` when that thread
    ends (``_late_ended``); what it returns then is dropped."""
    meta = {"unavailable": isinstance(err, DependencyUnavailable), **getattr(err, "meta", {})}
    text = json.dumps(err.to_result(), ensure_ascii=False, sort_keys=True)
    if (late := getattr(err, "late", None)) is not None and tracer is not None:
        late.when_done(functools.partial(_late_ended, tracer, call_id, tool))
    return ToolOutput(text, err.to_result(), is_error=True, error_kind=err.kind, meta=meta)


def _late_ended(tracer: Any, call_id: str, tool: str, outcome: str) -> None:
    """A timed-out call's thread has ended (on the run's event loop): a ``tool_error`` event
    ``late_result_discarded`` while its run is still open; nothing once it has stopped."""
    events = getattr(tracer, "events", None)
    if not events or events[-1].kind is EventKind.STOP:
        return
    message = f"{tool} {outcome} after its timeout; its result was discarded"
    with contextlib.suppress(ValueError):  # (a trace file closed meanwhile)
        tracer.emit(
            EventKind.TOOL_ERROR, tool=tool, call_id=call_id, error="late_result_discarded", message=message
        )


def crash_observation(spec: ToolSpec, source: str, now: datetime, err: BaseException) -> Observation:
    """What is kept of a tool's programming error (the run ends on it; the model never reads it)."""
    return Observation(
        "",
        spec.name,
        source,
        now,
        "internal error",
        is_error=True,
        error_kind="internal_error",
        meta={"exception": f"{type(err).__name__}: {err}"},
    )


# -- recording (one place for every runner) ---------------------------------------------------


def _record_refused(
    tracer: Any, state: RunState, call: ToolCall, kind: EventKind, status: str, note: str, **data: Any
) -> None:
    """Trace a call refused before it ran (``kind``, with ``data``) and keep it in the run's call
    list as ``status``, with ``note``."""
    tracer.emit(kind, call_id=call.id, tool=call.name, **data)
    state.calls.append(CallRecord(call.id, call.name, call.arguments, status, note))


def record_denial(
    tracer: Any, state: RunState, call: ToolCall, rule: str, reason: str, details: Any = None
) -> None:
    """A call the policy denied."""
    data = {"rule": rule, "reason": reason, "details": details or {}}
    _record_refused(tracer, state, call, EventKind.POLICY_DENIED, "denied", reason, **data)


def record_rejection(tracer: Any, state: RunState, call: ToolCall, message: str) -> None:
    """A proposed call refused as malformed or unknown, before any policy."""
    data = {"error": "proposal_rejected", "message": message}
    _record_refused(tracer, state, call, EventKind.TOOL_ERROR, "rejected", message, **data)


def shared_ids(calls: Sequence[ToolCall]) -> frozenset[str]:
    """The ids that more than one of a turn's ``calls`` gives. Everything the host counts and
    remembers of a call goes by its id: the turn-mates a cumulative bound adds up (those proposed
    before it), the proposal an approval settles on (``find_for_call``), the effect ledger's key
    and the result the model reads. Two calls under one id are one call to each of them, so two
    payments each within a bound ran together past it, and one approval ran both."""
    seen: set[str] = set()
    shared: set[str] = set()
    for c in calls:
        (shared if c.id in seen else seen).add(c.id)
    return frozenset(shared)


def refuse_shared(call: ToolCall, scope: CallScope) -> GateOutcome:
    """A call whose id another call of its turn gives (``shared_ids``): refused before any policy
    or approval sees it, traced and recorded as a rejected proposal; it never runs."""
    proposed = {"call_id": call.id, "tool": call.name, "arguments": call.arguments[:2000]}
    scope.tracer.emit(EventKind.TOOL_PROPOSED, **proposed)
    message = f"duplicate_call_id: another call of this turn has the id {call.id[:200]!r}; none of them ran"
    record_rejection(scope.tracer, scope.state, call, message)
    return GateOutcome(call, "reject", error=message, error_reason="duplicate_call_id")


def record_observation(tracer: Any, state: RunState, obs: Observation, arguments: Any) -> None:
    """Keep an observation in the run state and trace it with its trust label."""
    state.observations.append(obs)
    status = "error" if obs.is_error else "ok"
    state.calls.append(CallRecord(obs.call_id, obs.tool, arguments, status, obs.error_kind or ""))
    tracer.emit(
        EventKind.TOOL_OBSERVATION,
        call_id=obs.call_id,
        tool=obs.tool,
        source=obs.source,
        trust=obs.trust,
        observed_at=obs.observed_at.isoformat(),
        is_error=obs.is_error,
        error_kind=obs.error_kind,
        chars=len(obs.text),
        truncated=bool(obs.meta.get("truncated")),
        **({"cleaned": obs.meta["cleaned"]} if obs.meta.get("cleaned") else {}),
        **({"timed_out": True} if obs.meta.get("timed_out") else {}),
    )


# -- approval settlement (the chokepoint's store work, ``HostCore.call_turn``) ---------------------


async def settle(approvals: Approvals, clock: Clock, turn: Turn, scope: CallScope) -> list[GateOutcome]:
    """The turn's outcomes with each "approve" settled: "allow" when approved (on the stored
    arguments), refused, or waiting (the run checkpointed). A call whose content or tenant differs
    from its proposal is refused."""
    s, t = scope.state, scope.tracer
    settled: list[GateOutcome] = []
    for o in turn.outcomes:
        settled.append(o if o.status != "approve" else await _settle_one(approvals, clock, o, turn, scope))
    s.pending = list(turn.waiting)
    if scope.checkpoint:
        if turn.refused:
            await _checkpoint(approvals, clock, scope, "finished", StopReason.APPROVAL_DENIED)
        elif turn.waiting:
            await _checkpoint(approvals, clock, scope, "paused", StopReason.APPROVAL_REQUIRED)
            t.emit(EventKind.RUN_PAUSED, proposals=turn.waiting, app=approvals.app)
    return settled


async def _settle_one(
    approvals: Approvals, clock: Clock, o: GateOutcome, turn: Turn, scope: CallScope
) -> GateOutcome:
    assert o.spec is not None and o.arguments is not None
    s, t = scope.state, scope.tracer
    stored = await _proposal(approvals, o, scope)
    # What runs is the stored row: it must still be what was proposed (and shown to the
    # reviewer), its arguments hashing to its content hash, not only name that hash.
    mismatch = None if approvals.intact(stored) else "tampered"
    if stored.content_hash != content_hash(o.spec.name, o.arguments) or stored.tenant != s.context.tenant:
        mismatch = "content_mismatch"
    elif stored.effect != str(o.spec.effect):
        # The hash covers the tool and its arguments: the effect the reviewer read (and approved)
        # is the stored one; a tool declared anew since (``delete`` for ``write``) is not it.
        mismatch = "effect_changed"
    elif mismatch is None and stored.status.value == "approved" and stored.decided_by == AUTOMATIC_APPROVAL:
        # The policy let it through for the context that proposed it, as the policy then was; it
        # now asks a person (another user's roles, a tightened rule): no person approved it.
        mismatch = "not_reviewed"
    if mismatch is not None:
        t.emit(
            EventKind.APPROVAL_DENIED,
            proposal_id=stored.id,
            call_id=o.call.id,
            tool=o.spec.name,
            reason=mismatch,
        )
        turn.refused.append(f"{stored.id}: {mismatch}")
        s.calls.append(CallRecord(o.call.id, o.call.name, o.call.arguments, "denied", mismatch))
        return o
    decided = {
        "proposal_id": stored.id,
        "call_id": o.call.id,
        "tool": stored.tool,
        "reviewer": stored.decided_by,
        "decided_at": stored.decided_at.isoformat() if stored.decided_at else None,
        "reason": stored.decision_reason,
    }
    if stored.status.value == "approved":
        t.emit(EventKind.APPROVAL_GRANTED, content_hash=stored.content_hash, **decided)
        decision = Decision("allow", "approval", "approved", {"proposal_id": stored.id})
        arguments = json.loads(stored.arguments)
        return dataclasses.replace(
            o, status="allow", arguments=arguments, decision=decision, proposal_id=stored.id
        )
    if stored.status.value == "pending":
        turn.waiting.append(stored.id)
        return o
    t.emit(EventKind.APPROVAL_DENIED, status=str(stored.status), **decided)
    turn.refused.append(f"{stored.id}: {stored.status}")
    s.calls.append(CallRecord(o.call.id, o.call.name, o.call.arguments, "denied", str(stored.status)))
    return o


async def _proposal(approvals: Approvals, o: GateOutcome, scope: CallScope) -> Any:
    """The stored proposal this call settles on: the one named for it, the one submitted for it
    earlier in this run, or a new one."""
    assert o.spec is not None and o.arguments is not None
    s, store = scope.state, approvals.store
    known = scope.proposals.get(o.call.id)
    if known is not None:
        found = await store.get_proposal(known)
    else:
        found = await store.find_for_call(s.run_id, s.steps, o.call.id)
    if found is not None:
        return found
    proposal = Proposal.of(
        o.spec.name, o.arguments, s.context.tenant, effect=str(o.spec.effect), needs_approval=True
    )
    stored = await approvals.submit(
        proposal, proposed_by=scope.proposed_by, run_id=s.run_id, step=s.steps, call_id=o.call.id
    )
    if o.decision is not None:
        # Why the policy asked goes into the proposal's history, for the reviewer.
        await approvals.record_policy(stored.id, o.decision.rule, o.decision.reason, o.decision.details)
    scope.tracer.emit(
        EventKind.APPROVAL_REQUESTED,
        proposal_id=stored.id,
        call_id=o.call.id,
        tool=o.spec.name,
        effect=stored.effect,
        content_hash=stored.content_hash,
        rule=o.decision.rule if o.decision else "",
    )
    return stored


async def checkpoint_pause(
    approvals: Approvals, clock: Clock, turn: Turn, scope: CallScope, problems: Sequence[str]
) -> None:
    """Checkpoint a run paused for a person, with the turn's other results as the model will
    read them, so a resume runs only the calls that have none."""
    turn.checkpointed = True
    s = scope.state
    after = dataclasses.replace(s, trajectory=[*s.trajectory, *turn.messages()])
    await _checkpoint(approvals, clock, scope, "paused", StopReason.APPROVAL_REQUIRED, state=after)
    scope.tracer.emit(EventKind.RUN_PAUSED, problems=list(problems), app=approvals.app)


async def _checkpoint(
    approvals: Approvals,
    clock: Clock,
    scope: CallScope,
    status: str,
    reason: StopReason,
    state: RunState | None = None,
) -> None:
    """Save the run's working state in the approval store (resume continues from it)."""
    s = scope.state
    text = state_to_json(state or s)
    with anyio.CancelScope(shield=True):  # a run's deadline never leaves half a checkpoint
        await approvals.store.save_checkpoint(
            s.run_id, app=approvals.app, state=text, status=status, stop_reason=str(reason), now=clock()
        )
