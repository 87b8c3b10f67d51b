"""What a person's cancel of a run closes, decided through the one home of a decision: each
proposal the run still waited for is invalidated by ``decide_proposal`` and each question it
asked cancelled by ``answer_question``, audited as every entry point's are; the cancel itself is
audited (``run_cancel``: who, which tenant's run, why)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.errors import ApprovalError

if TYPE_CHECKING:
    from tether.policy._decisions import DecisionAudit
    from tether.stores._url import Stores

__all__ = ["CANCEL_REASON", "close_decisions"]

CANCEL_REASON = "run cancelled"


async def close_decisions(
    stores: Stores,
    run_id: str,
    *,
    by: str,
    actor: str,
    audit: DecisionAudit | None,
    tenant: str = "",
    reason: str = CANCEL_REASON,
) -> dict[str, list[str]]:
    """Invalidate what the cancelled ``run_id`` still waited for (proposals, questions) as
    reviewer ``by``, audited as ``actor`` in ``audit``, then audit the cancel itself."""
    from tether.mcp._answers import answer_question
    from tether.policy import Approvals, Reviewer
    from tether.policy._decisions import HumanDecision, decide_proposal

    store, why = stores.approvals, reason.strip() or CANCEL_REASON
    desk, reviewer = Approvals(store), Reviewer.for_all_tenants(by)
    invalidated = []
    for p in await store.list_proposals(run_id=run_id):
        if str(p.status) not in ("pending", "approved") or await store.ledger_for(p.id):
            continue  # decided for good, or its effect already happened (kept in the ledger)
        try:
            decision = HumanDecision("invalidate", p.id, why)
            await decide_proposal(desk, reviewer, decision, actor=actor, audit=audit)
            invalidated.append(p.id)
        except ApprovalError:
            pass  # decided in the meantime (its refusal audited): the run is cancelled, it runs nothing
    closed = []
    pauses = stores.pauses
    for q in await pauses.for_run(run_id) if pauses is not None else []:
        if str(q.status) != "pending":
            continue
        try:
            await answer_question(
                pauses,
                q.id,
                "cancel",
                None,
                answered_by=f"operator:{by}",
                actor=actor,
                audit=audit,
                tenant=tenant,
            )
        except ApprovalError:
            continue  # answered in the meantime
        await pauses.complete(q.id, why)
        closed.append(q.id)
    if audit is not None:
        detail = f"{why} ({len(invalidated)} proposal(s) invalidated, {len(closed)} question(s) closed)"
        audit.audit(actor, "run_cancel", tenant=tenant, target=run_id, outcome="cancelled", detail=detail)
    return {"proposals_invalidated": invalidated, "questions_closed": closed}
