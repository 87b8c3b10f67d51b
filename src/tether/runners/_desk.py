"""``ProposalDesk``: the direct API of T5 on a host: propose, review, approve, execute.

desk = ProposalDesk(host)                       # host built with Host(approvals=Approvals(store))
p = await desk.propose(context, raw_json)       # strict intake + policy; stored, pending
await desk.approve(reviewer, p.id)              # a Reviewer is host-side authority
await desk.execute(context, p.id)               # runs the stored arguments, at most once"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.chokepoint._calls import Turn
from tether.core.messages import ToolCall
from tether.core.stop import StopReason
from tether.core.types import GateOutcome, Observation
from tether.errors import ApprovalError, ConfigError, PolicyError
from tether.policy._approvals import Approvals, Review, Reviewer, idempotency_key
from tether.policy._decisions import DecisionAudit, HumanDecision, decide_proposal
from tether.policy._intake import Proposal, parse_envelope
from tether.policy._store import AUTOMATIC_APPROVAL, ProposalStatus, StoredProposal
from tether.policy._trusted import TrustedContext
from tether.runners._scope import RunScope

if TYPE_CHECKING:
    from tether.chokepoint._authority import HostCore as Host

__all__ = ["Execution", "ProposalDesk"]


@dataclass(frozen=True, slots=True)
class Execution:
    proposal_id: str
    key: str
    observation: Observation
    replayed: bool

    @property
    def data(self) -> Any:
        return self.observation.data


class ProposalDesk:
    """Propose → review → approve → execute against a started host with an approval store."""

    def __init__(self, host: Host, *, audit: DecisionAudit | None = None) -> None:
        """``audit``: where a person's decisions are recorded (the console's ``UserStore``)."""
        if host.approvals is None:
            raise ConfigError("ProposalDesk needs Host(approvals=Approvals(store))")
        self.host = host
        self.approvals: Approvals = host.approvals
        self.audit = audit

    async def propose(
        self, context: TrustedContext, raw_json: str | bytes, *, proposed_by: str = "model"
    ) -> StoredProposal:
        """Intake (T3), tenant ownership (T4), egress (T8); then store, already approved by
        ``policy:automatic`` when no approval is needed. Raises ``PolicyError``."""
        outcome = self._decide(context, raw_json)
        if outcome.status == "unknown":
            raise PolicyError("unknown_tool", outcome.error, tool=outcome.call.name[:80])
        if outcome.status == "reject":
            raise PolicyError(outcome.error_reason or "invalid_arguments", outcome.error)
        d = outcome.decision
        assert d is not None
        if outcome.status == "deny":
            raise PolicyError(d.reason, f"{d.rule}: {d.reason}", **d.details)
        assert outcome.spec is not None and outcome.arguments is not None
        proposal = Proposal.of(
            outcome.spec.name,
            outcome.arguments,
            context.tenant,
            effect=str(outcome.spec.effect),
            needs_approval=outcome.status == "approve",
        )
        stored = await self.approvals.submit(proposal, proposed_by=proposed_by)
        if proposal.needs_approval:
            await self.approvals.record_policy(stored.id, d.rule, d.reason, d.details)
        else:
            stored = await self.approvals.store.decide(
                stored.id,
                ProposalStatus.APPROVED,
                allowed_from=frozenset({ProposalStatus.PENDING}),
                actor=AUTOMATIC_APPROVAL,
                audited_as=AUTOMATIC_APPROVAL,
                reason="no approval needed for this effect",
                now=self.approvals.clock(),
            )
        return stored

    def _decide(self, context: TrustedContext, raw_json: str | bytes) -> GateOutcome:
        """The chokepoint's decision stage for a proposal envelope, traced like any call."""
        host = self.host
        name, arguments = parse_envelope(raw_json)  # strict intake of the envelope (T3)
        call = ToolCall(f"desk-{uuid.uuid4().hex[:12]}", name, json.dumps(arguments, ensure_ascii=False))
        # Only decided, never run: a scope for its trace, no start or stop.
        run = RunScope(host, design="desk", objective="proposal", context=context, run_id=call.id)
        try:
            return host.decide(call, run.calls(host.offered(), proposed_by="desk"))
        finally:
            run.tracer.close()

    async def review(self, context: TrustedContext, proposal_id: str) -> Review:
        return await self.approvals.review(context, proposal_id)

    async def approve(
        self, reviewer: Reviewer, proposal_id: str, *, reason: str = "", content_hash: str | None = None
    ) -> StoredProposal:
        """A person's approval, checked and audited as every entry point's (``decide_proposal``)."""
        return await self._person(reviewer, HumanDecision("approve", proposal_id, reason, content_hash))

    async def deny(self, reviewer: Reviewer, proposal_id: str, *, reason: str = "") -> StoredProposal:
        """A person's denial (it needs a reason), checked and audited as every entry point's."""
        return await self._person(reviewer, HumanDecision("deny", proposal_id, reason))

    async def _person(self, reviewer: Reviewer, decision: HumanDecision) -> StoredProposal:
        if not isinstance(reviewer, Reviewer):
            raise ApprovalError("not_a_reviewer", "decisions need a Reviewer built by the host")
        actor = f"reviewer:{reviewer.name}"
        return await decide_proposal(self.approvals, reviewer, decision, actor=actor, audit=self.audit)

    async def invalidate(
        self, context: TrustedContext, proposal_id: str, *, reason: str = "invalidated"
    ) -> StoredProposal:
        return await self.approvals.invalidate(context, proposal_id, reason=reason)

    async def execute(self, context: TrustedContext, proposal_id: str) -> Execution:
        """Run the stored, approved arguments of ``proposal_id`` (at most once) through the host's
        chokepoint like any call: policy applied again, approval settled, effect through the ledger.

        Raises ``ApprovalError`` (``not_approved``, ``denied``, ``invalidated``, ``unknown_proposal``,
        ``outcome_unknown``) or ``PolicyError``; a programming error inside the tool propagates."""
        host = self.host
        p = await self.approvals.executable(context, proposal_id)
        run_id, call_id, step = p.run_id or p.id, p.call_id or p.id, p.step or 0
        # The proposal's own run id and step: the ledger key its run would use.
        run = RunScope(
            host,
            design="desk",
            objective=f"proposal {p.id}",
            context=context,
            run_id=run_id,
            checkpoints=False,
            trace_id=f"{run_id}-desk-{p.id}",
            step=step,
        )
        offered = host.offered()
        await run.start(offered)
        scope = run.calls(offered, proposed_by="desk", stop_on_denial=True, proposals={call_id: p.id})
        reason, detail = StopReason.INTERNAL_ERROR, "the call raised"
        try:
            turn = await host.call(ToolCall(call_id, p.tool, p.arguments), scope)
            reason, detail = _stop(turn)
        finally:
            await run.finish(reason, detail=detail)
        outcome = turn.outcomes[0]
        if outcome.status == "unknown":
            raise PolicyError("tool_not_allowed", f"{p.tool} is no longer offered")
        if outcome.status == "reject":
            raise PolicyError("invalid_arguments", outcome.error)
        if turn.denied:
            d = turn.denied[0].decision
            assert d is not None
            raise PolicyError(d.reason, f"{d.rule}: {d.reason}", **d.details)
        if turn.refused:
            raise ApprovalError("not_approved", "; ".join(turn.refused))
        if turn.unsettled_errors:
            raise turn.unsettled_errors[0]
        if turn.crashes:
            raise turn.crashes[0][1]
        obs = turn.observations[call_id]
        key = obs.meta.get("idempotency_key") or idempotency_key(
            run_id, step, call_id, p.tool, json.loads(p.arguments)
        )
        return Execution(p.id, str(key), obs, bool(obs.meta.get("replayed")))


def _stop(turn: Turn) -> tuple[StopReason, str]:
    """The stop of a desk execution: the host's, or why the call did not run, or accepted."""
    if (stop := turn.stop()) is not None:
        return stop
    outcome = turn.outcomes[0]
    if outcome.call.id in turn.observations:
        return StopReason.ACCEPTED, ""
    return StopReason.POLICY_DENIED, outcome.error or outcome.status
