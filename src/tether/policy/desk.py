"""``ProposalDesk``: the direct API of T5 on a host — propose, review, approve, execute.

    desk = ProposalDesk(host)                       # host built with Host(approvals=Approvals(store))
    p = desk.propose(context, raw_json)             # strict intake + policy; stored, pending
    desk.review(context, p.id)                      # exactly what will run
    desk.approve(reviewer, p.id)                    # a Reviewer is host-side authority
    await desk.execute(context, p.id)               # runs the stored arguments, at most once

``execute`` takes no payload: it runs what was stored and approved. Replaying it returns the
first outcome without a second effect. The same content proposed again is a new proposal with
its own id and needs its own approval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.context.untrusted import Observation
from tether.errors import ConfigError, PolicyError
from tether.policy.approvals import Approvals, Review, Reviewer, idempotency_key
from tether.policy.intake import propose
from tether.policy.rules import ProposedCall
from tether.policy.store import ProposalStatus, StoredProposal
from tether.policy.trusted import TrustedContext
from tether.tools.contract import ToolContext, ToolSpec

if TYPE_CHECKING:
    from tether.host import Host

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

    def __init__(self, host: Host) -> None:
        if host.approvals is None:
            raise ConfigError("ProposalDesk needs Host(approvals=Approvals(store))")
        self.host = host
        self.approvals: Approvals = host.approvals

    def _tools(self) -> dict[str, ToolSpec]:
        return {s.name: s for s in self.host.offered()}

    def propose(
        self, context: TrustedContext, raw_json: str | bytes, *, proposed_by: str = "model"
    ) -> StoredProposal:
        """Intake (T3), tenant ownership (T4), egress (T8); then store. Raises ``PolicyError``.

        A proposal the policy lets run without approval is stored already approved by
        ``policy:automatic``; every other one is pending.
        """
        tools = self._tools()
        proposal = propose(context, raw_json, tools=tools, policy=self.host.policy)  # the one schema check
        stored = self.approvals.submit(proposal, proposed_by=proposed_by)
        if not proposal.needs_approval:
            stored = self.approvals.store.decide(
                stored.id,
                ProposalStatus.APPROVED,
                allowed_from=frozenset({ProposalStatus.PENDING}),
                actor="policy:automatic",
                reason="no approval needed for this effect",
                now=self.approvals.clock(),
            )
        return stored

    def review(self, context: TrustedContext, proposal_id: str) -> Review:
        return self.approvals.review(context, proposal_id)

    def approve(self, reviewer: Reviewer, proposal_id: str, *, reason: str = "") -> StoredProposal:
        return self.approvals.approve(reviewer, proposal_id, reason=reason)

    def deny(self, reviewer: Reviewer, proposal_id: str, *, reason: str = "") -> StoredProposal:
        return self.approvals.deny(reviewer, proposal_id, reason=reason)

    def invalidate(
        self, context: TrustedContext, proposal_id: str, *, reason: str = "invalidated"
    ) -> StoredProposal:
        return self.approvals.invalidate(context, proposal_id, reason=reason)

    async def execute(self, context: TrustedContext, proposal_id: str) -> Execution:
        """Run the stored, approved arguments of ``proposal_id`` for ``context`` (at most once).

        Raises ``ApprovalError`` (``not_approved``, ``denied``, ``invalidated``,
        ``unknown_proposal`` — also for another tenant's id —, ``outcome_unknown``) or
        ``PolicyError`` when the policy no longer allows the call (ownership is checked again).
        A programming error inside the tool propagates.
        """
        from tether.effects import run_effect

        p = self.approvals.executable(context, proposal_id)
        spec = self._tools().get(p.tool)
        if spec is None:
            raise PolicyError("tool_not_allowed", f"{p.tool} is no longer offered")
        arguments = json.loads(p.arguments)
        decision = self.host.policy.check(ProposedCall(p.id, spec, arguments), context)
        if decision.verdict == "deny":
            raise PolicyError(decision.reason, f"{decision.rule}: {decision.reason}", **decision.details)
        run_id, call_id, step = p.run_id or p.id, p.call_id or p.id, p.step or 0
        key = idempotency_key(run_id, step, call_id, spec.name, arguments)
        ctx = ToolContext(
            run_id=run_id,
            tenant=context.tenant,
            roles=context.roles,
            user=context.user,
            call_id=call_id,
            now=self.host.clock(),
        )
        obs, crash = await run_effect(self.host, spec, arguments, ctx, step=step, proposal_id=p.id, key=key)
        if crash is not None:
            raise crash
        return Execution(p.id, key, obs, bool(obs.meta.get("replayed")))
