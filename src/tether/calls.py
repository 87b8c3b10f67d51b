"""The chokepoint: the one path of a tool call, whichever runner proposed it.

The agent loop, workflows, plan-then-execute, subagents, the approval desk and the MCP
elicitation resume never execute a tool themselves. They hand the calls of one turn to
``Host.call_turn`` (or one call to ``Host.call``), which does, in order:

    resolve → harness-tool intercept → strict intake → contract validation → Policy
    → approval settlement → effect ledger (side effects) → rate limit → execution
    → truncation → untrusted labelling and provenance → one trace event per decision
    and per outcome

and returns a ``Turn``, settled: what was decided and observed for each call, the results as
the model reads them (``Turn.messages``), and the stop the host requires (denied, waiting for
approval, refused, outcome unknown, a question for a person, crashed), if any. A turn that
must pause comes back paused: its run is checkpointed here (``run_paused``), so no runner has
to remember to. What a runner does with a turn that did not stop (append its messages, extract
fields, read the next step) is its own business; what may run, and how, is not.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from tether.checkpoint import state_to_json
from tether.effects import run_effect
from tether.errors import ApprovalError
from tether.messages import ToolMessage
from tether.policy.approvals import idempotency_key
from tether.policy.intake import Proposal, content_hash
from tether.run import CallRecord, RunState
from tether.stop import StopReason
from tether.tools.contract import ToolContext, ToolSpec
from tether.trace.events import EventKind
from tether.types import Decision, GateOutcome, Observation, ToolCall, wrap_untrusted

if TYPE_CHECKING:
    from tether.hostcore import HostCore as Host
    from tether.trace.tracer import Tracer

__all__ = ["CallScope", "Harness", "Turn", "record_denial", "record_observation"]


class Harness(Protocol):
    """Tools the host itself provides to one run (TODO, skills, tool search, subagents)."""

    def owns(self, name: str) -> bool: ...

    def intercept(self, call: ToolCall) -> GateOutcome | None: ...

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
    # Whether a pause (approval pending, outcome unknown) checkpoints the run state for resume.
    checkpoint: bool = True
    # A denied call stops the turn before anything runs (the host's ``on_denied``) unless a
    # runner's semantics say otherwise (plan mode skips a denied step and goes on).
    stop_on_denial: bool | None = None
    # Proposals already stored for these call ids (the approval desk executes one by its id).
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
    # Calls waiting for a person's answer (MCP elicitation), by call id: why. When the turn was
    # checkpointed they have no result, so a resume runs them again and the server finds the answer.
    questions: dict[str, str] = field(default_factory=dict)
    checkpointed: bool = False  # the run paused here and its state is saved for ``resume``

    @property
    def executed(self) -> list[GateOutcome]:
        return [o for o in self.outcomes if o.call.id in self.observations]

    def messages(self) -> list[ToolMessage]:
        """The turn's results as the model reads them, in proposal order: each observation with
        its labels (``Observation.render``), a host-written error for a call that did not run.
        A call whose effect's outcome is unknown, or that waits for an answer in a checkpointed
        turn, has none (resume settles it)."""
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
                text = wrap_untrusted(body, source="host", trust="trusted")
                out.append(ToolMessage(call.id, text, call.name))
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
            return StopReason.INTERNAL_ERROR, f"tool {name} raised {type(crash).__name__}: {crash}"
        return None


# -- recording (one place for every runner) ---------------------------------------------------


def record_denial(
    tracer: Any, state: RunState, call: ToolCall, rule: str, reason: str, details: Any = None
) -> None:
    """Trace a refused call and keep it in the run's call list."""
    tracer.emit(
        EventKind.POLICY_DENIED,
        call_id=call.id,
        tool=call.name,
        rule=rule,
        reason=reason,
        details=details or {},
    )
    state.calls.append(CallRecord(call.id, call.name, call.arguments, "denied", reason))


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
    )


# -- the pipeline -----------------------------------------------------------------------------


class CallPipeline:
    """The host's one path for tool calls. Built by ``Host``; runners use ``Host.call_turn``."""

    def __init__(self, host: Host) -> None:
        self.host = host

    # decide ------------------------------------------------------------------------------

    def decide(self, call: ToolCall, scope: CallScope) -> GateOutcome:
        """resolve → harness intercept → intake → validation → policy, traced and recorded."""
        s, t, host = scope.state, scope.tracer, self.host
        if t.redactor.declared(call.name):  # learn secrets from the whole call, not the cut below
            t.redactor.learn(call.name, call.arguments)
        t.emit(EventKind.TOOL_PROPOSED, call_id=call.id, tool=call.name, arguments=call.arguments[:2000])
        outcome = None
        if scope.harness is not None:
            outcome = scope.harness.intercept(call)
            if outcome is not None and outcome.status == "allow" and outcome.spec is not None:
                # Harness tools are tools like any other: the policy decides them too.
                outcome = host.judge(outcome, s.context, s)
        if outcome is None:
            outcome = host.gate(call, s.context, scope.offered, s)
        if outcome.status == "deny" and outcome.decision is not None:
            d = outcome.decision
            record_denial(t, s, call, d.rule, d.reason, d.details)
        elif outcome.status in ("reject", "unknown"):
            t.emit(
                EventKind.TOOL_ERROR,
                call_id=call.id,
                tool=call.name,
                error="proposal_rejected",
                message=outcome.error,
            )
            s.calls.append(CallRecord(call.id, call.name, call.arguments, "rejected", outcome.error))
        elif outcome.status == "allow":
            assert outcome.decision is not None
            t.emit(EventKind.POLICY_ALLOWED, call_id=call.id, tool=call.name, rule=outcome.decision.rule)
        return outcome

    # a turn ------------------------------------------------------------------------------

    async def turn(self, calls: Sequence[ToolCall], scope: CallScope) -> Turn:
        host = self.host
        outcomes = [self.decide(call, scope) for call in calls]
        if scope.proposals:
            outcomes = [
                dataclasses.replace(o, proposal_id=scope.proposals[o.call.id])
                if o.status == "allow" and o.call.id in scope.proposals
                else o
                for o in outcomes
            ]
        turn = Turn(outcomes)
        turn.denied = [o for o in outcomes if o.status == "deny"]
        stop_on_denial = scope.stop_on_denial
        if stop_on_denial is None:
            stop_on_denial = host.on_denied == "stop"
        if turn.denied and stop_on_denial:
            turn.halted = True
            return turn
        if any(o.status == "approve" for o in outcomes):
            # Nothing of this turn runs until every call needing approval has one. Settling is
            # store work a run's deadline does not cut in half (proposals, their history, the
            # checkpoint): it is shielded, and what runs after it is cancelled at once.
            with anyio.CancelScope(shield=True):
                turn.outcomes = await self._settle(turn, scope)
            if turn.refused or turn.waiting:
                turn.halted = True
                return turn
        await self._execute_allowed(turn, scope)
        for name, crash in turn.crashes:
            scope.tracer.emit(EventKind.TOOL_CRASHED, tool=name, error=f"{type(crash).__name__}: {crash}")
        turn.questions = {
            call_id: f"{obs.tool}: paused for input: {obs.meta['pause']}"
            for call_id, obs in turn.observations.items()
            if obs.meta.get("pause")
        }
        if (turn.unsettled or turn.questions) and scope.checkpoint and host.approvals is not None:
            with anyio.CancelScope(shield=True):
                await self._pause(turn, scope, [*turn.unsettled, *turn.questions.values()])
        return turn

    # approval settlement -----------------------------------------------------------------

    async def _settle(self, turn: Turn, scope: CallScope) -> list[GateOutcome]:
        """ "approve" outcomes become "allow" (approved: the stored arguments), refusals, or a
        checkpointed wait. A call whose content or tenant differs from its proposal is refused."""
        host, s, t = self.host, scope.state, scope.tracer
        approvals = host.approvals
        assert approvals is not None
        store = approvals.store
        settled: list[GateOutcome] = []
        for o in turn.outcomes:
            if o.status != "approve":
                settled.append(o)
                continue
            assert o.spec is not None and o.arguments is not None
            known = scope.proposals.get(o.call.id)
            if known is not None:
                stored = await store.aget_proposal(known)
            else:
                stored = await store.afind_for_call(s.run_id, s.steps, o.call.id)
            if stored is None:
                proposal = Proposal.of(
                    o.spec.name, o.arguments, s.context.tenant, effect=str(o.spec.effect), needs_approval=True
                )
                stored = await approvals.asubmit(
                    proposal, proposed_by=scope.proposed_by, run_id=s.run_id, step=s.steps, call_id=o.call.id
                )
                if o.decision is not None:
                    # Why the policy asked (rule, reason, argument provenance) goes into the
                    # proposal's history, so the reviewer sees it next to what will run.
                    why = {"rule": o.decision.rule, "reason": o.decision.reason, **o.decision.details}
                    detail = json.dumps(why, ensure_ascii=False, sort_keys=True, default=str)[:8000]
                    await store.aadd_event(
                        stored.id, "policy", actor=f"rule:{o.decision.rule}", detail=detail, now=host.clock()
                    )
                t.emit(
                    EventKind.APPROVAL_REQUESTED,
                    proposal_id=stored.id,
                    call_id=o.call.id,
                    tool=o.spec.name,
                    effect=stored.effect,
                    content_hash=stored.content_hash,
                    rule=o.decision.rule if o.decision else "",
                )
            if (
                stored.content_hash != content_hash(o.spec.name, o.arguments)
                or stored.tenant != s.context.tenant
            ):
                # The call being settled is not what was proposed: never run it on that approval.
                t.emit(
                    EventKind.APPROVAL_DENIED,
                    proposal_id=stored.id,
                    call_id=o.call.id,
                    tool=o.spec.name,
                    reason="content_mismatch",
                )
                turn.refused.append(f"{stored.id}: content_mismatch")
                s.calls.append(
                    CallRecord(o.call.id, o.call.name, o.call.arguments, "denied", "content_mismatch")
                )
                settled.append(o)
                continue
            if stored.status.value == "approved":
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
            elif stored.status.value == "pending":
                turn.waiting.append(stored.id)
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
                turn.refused.append(f"{stored.id}: {stored.status}")
                s.calls.append(
                    CallRecord(o.call.id, o.call.name, o.call.arguments, "denied", str(stored.status))
                )
                settled.append(o)
        s.pending = list(turn.waiting)
        if scope.checkpoint:
            if turn.refused:
                await self._checkpoint(scope, "finished", StopReason.APPROVAL_DENIED)
            elif turn.waiting:
                await self._checkpoint(scope, "paused", StopReason.APPROVAL_REQUIRED)
                t.emit(EventKind.RUN_PAUSED, proposals=turn.waiting, app=approvals.app)
        return settled

    async def _pause(self, turn: Turn, scope: CallScope, problems: Sequence[str]) -> None:
        """Checkpoint a run paused for a person (an effect's unknown outcome, a question). The
        checkpoint holds the turn's other results as the model will read them, so a resume runs
        only the calls that have none."""
        approvals = self.host.approvals
        assert approvals is not None
        turn.checkpointed = True
        s = scope.state
        after = dataclasses.replace(s, trajectory=[*s.trajectory, *turn.messages()])
        await self._checkpoint(scope, "paused", StopReason.APPROVAL_REQUIRED, state=after)
        scope.tracer.emit(EventKind.RUN_PAUSED, problems=list(problems), app=approvals.app)

    async def _checkpoint(
        self, scope: CallScope, status: str, reason: StopReason, *, state: RunState | None = None
    ) -> str:
        """Save the run's working state in the approval store (resume continues from it)."""
        approvals = self.host.approvals
        assert approvals is not None
        s = scope.state
        text = state_to_json(state or s)
        with anyio.CancelScope(shield=True):  # a run's deadline never leaves half a checkpoint
            await approvals.store.save_checkpoint(
                s.run_id,
                app=approvals.app,
                state=text,
                status=status,
                stop_reason=str(reason),
                now=self.host.clock(),
            )
        return status

    # execution ---------------------------------------------------------------------------

    async def _execute_allowed(self, turn: Turn, scope: CallScope) -> None:
        allowed = [o for o in turn.outcomes if o.status == "allow"]
        if not allowed:
            return
        # A run's deadline is the runner's cancel scope around its steps (``AgentLoop``), not one per turn.
        if len(allowed) == 1:
            await self._execute_one(allowed[0], turn, scope)  # no task group for a single call
            return
        async with anyio.create_task_group() as tg:
            for o in allowed:
                tg.start_soon(self._execute_one, o, turn, scope)

    async def _execute_one(self, o: GateOutcome, turn: Turn, scope: CallScope) -> None:
        host, s, t = self.host, scope.state, scope.tracer
        assert o.spec is not None and o.arguments is not None
        ctx = ToolContext(
            run_id=s.run_id,
            tenant=s.context.tenant,
            roles=s.context.roles,
            user=s.context.user,
            call_id=o.call.id,
            now=host.clock(),
        )
        harness = scope.harness if scope.harness is not None and scope.harness.owns(o.spec.name) else None
        if o.spec.effect.side_effecting:
            flush = getattr(t, "flush", None)
            if flush is not None:
                flush()  # every decision before an effect is on disk before the effect happens
        if harness is None and host.approvals is not None and o.spec.effect.side_effecting:
            try:
                obs, crash = await self._effect(o, ctx, scope)
            except ApprovalError as err:  # outcome unknown, or held by another process
                turn.unsettled.append(f"{o.spec.name}: {err.reason}: {err}")
                turn.unsettled_errors.append(err)
                return
        else:
            obs, crash = await host.run_tool(o.spec, o.arguments, ctx, harness)
        if crash is not None:
            turn.crashes.append((o.spec.name, crash))
            s.calls.append(
                CallRecord(o.call.id, o.call.name, o.call.arguments, "crashed", type(crash).__name__)
            )
            return
        turn.observations[o.call.id] = obs
        record_observation(t, s, obs, o.arguments)

    async def _effect(
        self, o: GateOutcome, ctx: ToolContext, scope: CallScope
    ) -> tuple[Observation, BaseException | None]:
        assert o.spec is not None and o.arguments is not None
        s = scope.state
        # Each time this call paused for a person's answer (MCP elicitation), the server was told
        # "cancel"; the next attempt is a new effect under its own key, not a replay of the pause.
        pauses = sum(1 for x in s.observations if x.call_id == o.call.id and x.meta.get("pause"))
        key = None
        if pauses:
            attempt = f"{o.call.id}#after-pause-{pauses}"
            key = idempotency_key(s.run_id, s.steps, attempt, o.spec.name, o.arguments)
        return await run_effect(
            self.host,
            o.spec,
            o.arguments,
            ctx,
            step=s.steps,
            proposal_id=o.proposal_id,
            key=key,
            emit=scope.tracer.emit,
        )
