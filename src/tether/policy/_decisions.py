"""One home for a person's decision on a stored proposal (approve / deny / invalidate).

Every entry point that decides (the console, ``tether approvals``, ``tether runs approve|deny``,
a ``ProposalDesk``) calls ``decide_proposal``: the decision is checked here the same way (a known action, a
reason within bounds and given for a denial, the hash of what the person read where it is named,
then the store's own checks: the reviewer's tenants, the proposal still pending, unchanged since it
was read, all in one conditional write) and recorded here the same way, in the audit log the entry
point hands in (who, what, which tenant, which content, the outcome and the reason), refused or
not. What only one entry point knows (a console session's visibility and role) is checked there,
before."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tether.errors import ApprovalError
from tether.policy._approvals import Approvals, Reviewer
from tether.policy._store import StoredProposal

__all__ = ["DECISIONS", "REASON_CHARS", "DecisionAudit", "HumanDecision", "decide_proposal"]

DECISIONS = ("approve", "deny", "invalidate")
REASON_CHARS = 2000  # a decision's reason, refused whole past this (never kept cut)


class DecisionAudit(Protocol):
    """Where decisions are recorded (the console's audit log: ``UserStore``)."""

    def audit(
        self,
        actor: str,
        action: str,
        *,
        tenant: str = "",
        target: str = "",
        content_hash: str = "",
        outcome: str = "ok",
        detail: str = "",
    ) -> None: ...

    def refused(self, actor: str, action: str, err: Exception, **fields: str) -> None: ...


@dataclass(frozen=True, slots=True)
class HumanDecision:
    """What a person decided: ``action`` (one of ``DECISIONS``) on ``proposal_id``, why, and what
    they read: the ``content_hash`` (tool and arguments) and, in ``read``, the ``effect`` and
    ``tenant`` shown, each binding an approval where given."""

    action: str
    proposal_id: str
    reason: str = ""
    content_hash: str | None = None
    read: Mapping[str, str] = field(default_factory=dict)


async def decide_proposal(
    approvals: Approvals,
    reviewer: Reviewer,
    decision: HumanDecision,
    *,
    actor: str,
    audit: DecisionAudit | None = None,
    require_hash: bool = False,
    admit: Callable[[StoredProposal | None], Awaitable[None]] | None = None,
) -> StoredProposal:
    """Check and record ``decision`` by ``reviewer``, audited as ``actor`` either way. An approval
    is held to what was read atomically (the store's conditional update); ``require_hash``: an
    approval must name the content hash read; ``admit``: the entry point's own check of the
    stored row (``None``: unknown) before anything else is said of it, whose refusals it audits
    itself (the console's: the session sees it, as a reviewer). Raises ``ApprovalError`` (``bad_action``,
    ``bad_request``, ``reason_required``, ``content_hash_required``, ``content_changed``,
    ``reviewer_not_allowed``, ``unknown_proposal``, ``approved``/``denied``/… when no longer
    pending); a refused decision writes nothing but its audit entry."""
    action, seen_hash, tenant = decision.action, decision.content_hash or "", ""
    try:
        if not isinstance(reviewer, Reviewer):  # host-side authority, never a look-alike
            raise ApprovalError("not_a_reviewer", "decisions need a Reviewer built by the host")
        if action not in DECISIONS:
            raise ApprovalError("bad_action", f"action must be one of {', '.join(DECISIONS)}")
        found = await approvals.store.get_proposal(decision.proposal_id)
        if admit is not None:
            await admit(found)
        if found is None:
            raise ApprovalError("unknown_proposal", f"no proposal {decision.proposal_id!r}")
        tenant = found.tenant
        reason = _checked(decision, found, require_hash)
        done = await _apply(approvals, reviewer, decision, reason, actor)
    except ApprovalError as err:
        if audit is not None:
            audit.refused(
                actor, action, err, tenant=tenant, target=decision.proposal_id, content_hash=seen_hash
            )
        raise
    if audit is not None:
        audit.audit(
            actor,
            action,
            tenant=done.tenant,
            target=done.id,
            content_hash=done.content_hash,
            outcome=str(done.status),
            detail=reason,
        )
    return done


def _checked(decision: HumanDecision, found: StoredProposal, require_hash: bool) -> str:
    """The decision's reason, stripped, once the decision is well formed and of what was read.
    Raises ``ApprovalError``."""
    if decision.action == "approve" and require_hash and not decision.content_hash:
        raise ApprovalError("content_hash_required", "approve names the content hash that was reviewed")
    if decision.content_hash and decision.content_hash != found.content_hash:
        raise ApprovalError("content_changed", "the proposal is not the one reviewed (content hash differs)")
    if not isinstance(decision.reason, str):
        raise ApprovalError("bad_request", "a reason is text")
    reason = decision.reason.strip()
    if len(reason) > REASON_CHARS:  # refused whole: a reason cut to its start, unsaid, was kept
        raise ApprovalError("bad_request", f"a reason holds at most {REASON_CHARS} characters")
    if decision.action == "deny" and not reason:
        raise ApprovalError("reason_required", "a denial needs a reason")
    return reason


async def _apply(
    approvals: Approvals, reviewer: Reviewer, decision: HumanDecision, reason: str, actor: str
) -> StoredProposal:
    """The store's decision, in one conditional write (``Approvals.decided``) that also writes its
    history entry naming ``actor`` as the audit log does (who, when, why: one transaction)."""
    seen = None
    if decision.action == "approve":
        read = {k: decision.read[k] for k in ("effect", "tenant") if k in decision.read}
        seen = {"content_hash": decision.content_hash, **read}
    elif decision.action == "invalidate":
        reason = reason or "invalidated"
    return await approvals.decided(reviewer, decision.action, decision.proposal_id, reason, seen, actor)
