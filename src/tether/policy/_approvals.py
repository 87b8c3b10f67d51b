"""Approvals (T5, T6) and exactly-once effects: the rules, on top of an ``ApprovalStore``.

- A side-effecting proposal is stored immutably under a fresh random id with a content hash;
  the same content proposed again is a new proposal that needs its own approval.
- ``approve``/``deny`` take a ``Reviewer`` (host-side authority); ``invalidate`` revokes and
  blocks further execution while history stays. A reviewer's decision goes through the one home of
  a person's decision (``_decisions.decide_proposal``: its rules, audited in ``audit`` if given).
- Every side-effecting call gets an idempotency key derived from (run, step, call, tool,
  arguments) and handed to the tool. The effect ledger records intent before the call and the
  outcome after it; a recorded outcome is replayed, never repeated. An entry whose owner died
  between intent and outcome is reconciled by asking the tool by key (a ``Reconciler``) or,
  when the tool cannot say, escalated to a person. Nothing is blindly re-run.

The ledger's primitives (keys, entry ownership, outcomes) are in ``_ledger``, re-exported here.
"""

from __future__ import annotations

import contextlib
import enum
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio

from tether.core._names import name_set
from tether.errors import ApprovalError
from tether.policy._intake import Proposal, content_hash
from tether.policy._ledger import EffectOutcome, Reconciler, _owner, busy, idempotency_key, owner_dead
from tether.policy._record import policy_record
from tether.policy._store import (
    ApprovalEvent,
    ApprovalStore,
    Claim,
    LedgerEntry,
    LedgerStatus,
    NewProposal,
    ProposalStatus,
    StoredProposal,
    lacking_async,
    result_json,
)
from tether.policy._trusted import TrustedContext
from tether.sql._postgres import StoreUnavailable

if TYPE_CHECKING:
    from tether.policy._decisions import DecisionAudit

__all__ = [
    "ALL_TENANTS",
    "Approvals",
    "EffectOutcome",
    "Reconciler",
    "Review",
    "Reviewer",
    "idempotency_key",
    "owner_dead",
]


class _AllTenants(enum.Enum):
    ALL_TENANTS = "all_tenants"

    def __repr__(self) -> str:
        return "ALL_TENANTS"


ALL_TENANTS: Final = _AllTenants.ALL_TENANTS
_Seen = Mapping[str, str | None] | None  # what a reviewer read of a proposal (``approve``)
# How often an outcome is offered to a store that lost its connection (about 3 s in all).
_RECORD_TRIES: Final = 6
"""A reviewer's scope that covers every tenant: must be given explicitly, never implied."""


@dataclass(frozen=True, slots=True)
class Reviewer:
    """A person (or service) allowed to decide proposals. Built by the application, never from
    model output. ``tenants`` is required: the tenants this reviewer decides for, or
    ``ALL_TENANTS`` for an operator at the host's console (``Reviewer.for_all_tenants(name)``).

    Raises ``TypeError`` for a bare string or ``None`` as ``tenants``, ``ValueError`` for an
    empty name."""

    name: str
    tenants: frozenset[str] | Literal[_AllTenants.ALL_TENANTS]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("Reviewer.name must be a non-empty string")
        if self.tenants is ALL_TENANTS:
            return
        if self.tenants is None:
            raise TypeError(
                "Reviewer.tenants is required: name the tenants, or pass ALL_TENANTS "
                "(Reviewer.for_all_tenants(name)) for a reviewer of every tenant"
            )
        # An empty set is allowed: a reviewer of no tenant decides nothing (fails closed).
        object.__setattr__(self, "tenants", name_set(self.tenants, what="Reviewer.tenants"))

    @classmethod
    def for_all_tenants(cls, name: str) -> Reviewer:
        """A reviewer of every tenant (an operator at the host's console)."""
        return cls(name, tenants=ALL_TENANTS)

    @property
    def reviews_all_tenants(self) -> bool:
        return self.tenants is ALL_TENANTS

    def may_review(self, tenant: str) -> bool:
        return self.tenants is ALL_TENANTS or tenant in self.tenants


@dataclass(frozen=True, slots=True)
class Review:
    """Exactly what will run if this proposal is executed, and its history."""

    id: str
    tenant: str
    tool: str
    arguments: dict[str, Any]
    content_hash: str
    effect: str
    status: ProposalStatus
    created_at: datetime
    proposed_by: str
    run_id: str | None
    decided_by: str | None
    decided_at: datetime | None
    history: tuple[ApprovalEvent, ...]
    executions: tuple[LedgerEntry, ...]

    def summary(self) -> dict[str, Any]:
        return {
            **{name: _as_json(getattr(self, name)) for name in _PROPOSAL},
            "history": [
                {"op": e.op, "actor": e.actor, "at": e.at.isoformat(), "detail": e.detail}
                for e in self.history
            ],
            "executions": [
                {"key": x.key, "status": str(x.status), "attempts": x.attempts, "note": x.note}
                for x in self.executions
            ],
        }


# A review's fields of the proposal itself, and those of them it shows as the store keeps them
# (the arguments it parses).
_PROPOSAL = tuple(f.name for f in fields(Review) if f.name not in ("history", "executions"))
_AS_STORED = tuple(name for name in _PROPOSAL if name != "arguments")


def _as_json(value: Any) -> Any:
    """A proposal's field as JSON has it: an instant in ISO form, a status as its word."""
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value) if isinstance(value, enum.Enum) else value


@dataclass
class Approvals:
    """The approval desk and effect ledger of a host. Give it to ``Host(approvals=...)``.

    ``reconcilers`` maps tool names to a ``Reconciler``; ``app`` names a factory
    (``"module:function"``) that rebuilds ``(host, agent)`` so ``tether resume`` can continue a
    paused run in another process; ``wait_s`` bounds how long a caller waits for another live
    process that is executing the same call; ``audit``: where a reviewer's decisions taken here
    (``approve``, ``deny``, ``invalidate``) are audited, refused or not (the store's history
    keeps each decision either way).
    """

    store: ApprovalStore
    reconcilers: Mapping[str, Reconciler] = field(default_factory=dict)
    app: str | None = None
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    wait_s: float = 30.0
    lease_margin_s: float = 60.0
    audit: DecisionAudit | None = None

    def __post_init__(self) -> None:
        missing = lacking_async(self.store)
        if missing:
            # Checked at wiring: otherwise perform() would fail mid-call, between intent and outcome.
            raise TypeError(
                f"{type(self.store).__name__} is not an ApprovalStore: it lacks async " + ", ".join(missing)
            )

    # -- proposals ---------------------------------------------------------------------------

    async def submit(
        self,
        proposal: Proposal,
        *,
        proposed_by: str,
        run_id: str | None = None,
        step: int | None = None,
        call_id: str | None = None,
    ) -> StoredProposal:
        """Store a proposal that passed intake and policy, pending approval, under a fresh id."""
        new = NewProposal.of(proposal, proposed_by, run_id, step, call_id)
        return await self.store.add_proposal(new, now=self.clock())

    async def record_policy(
        self, proposal_id: str, rule: str, reason: str, details: Mapping[str, Any]
    ) -> None:
        """Why the policy asked for approval (rule, reason, argument provenance, the arguments the
        tool declares secret) in the proposal's history, where a reviewer reads it."""
        detail = policy_record({"rule": rule, "reason": reason, **details})  # whole JSON, bounded
        await self.store.add_event(
            proposal_id, "policy", actor=f"rule:{rule}", detail=detail, now=self.clock()
        )

    async def get(self, proposal_id: str) -> StoredProposal:
        """The stored proposal, checked against its content hash. Raises ``ApprovalError``
        (``unknown_proposal``, ``tampered``)."""
        found = await self.stored(proposal_id)
        _verify(found)
        return found

    async def stored(self, proposal_id: str) -> StoredProposal:
        """The row as stored, *not* checked against its content hash: for refusing it (deny,
        invalidate) and for showing a reviewer what was changed. Never for running it."""
        found = await self.store.get_proposal(proposal_id)
        if found is None:
            raise ApprovalError("unknown_proposal", f"no proposal {proposal_id!r}")
        return found

    def intact(self, p: StoredProposal) -> bool:
        """Whether the stored arguments still hash to the stored content hash."""
        try:
            _verify(p)
        except (ApprovalError, ValueError):
            return False
        return True

    async def review(self, context: TrustedContext, proposal_id: str) -> Review:
        """What would run: the stored tool and arguments, verbatim. Raises ``ApprovalError``
        (``unknown_proposal`` also for another tenant's id, ``tampered``)."""
        return await self._review(await self._for_tenant(proposal_id, context.tenant))

    async def inspect(self, proposal_id: str) -> Review:
        """``review`` for the host's operator (any tenant)."""
        return await self._review(await self.get(proposal_id))

    async def _review(self, p: StoredProposal) -> Review:
        return Review(
            **{name: getattr(p, name) for name in _AS_STORED},
            arguments=json.loads(p.arguments),
            history=tuple(await self.store.events(p.id)),
            executions=tuple(await self.store.ledger_for(p.id)),
        )

    async def approve(
        self,
        reviewer: Reviewer,
        proposal_id: str,
        *,
        reason: str = "",
        content_hash: str | None = None,
        effect: str | None = None,
        tenant: str | None = None,
    ) -> StoredProposal:
        """Approve exactly this stored proposal (of the ``content_hash``, ``effect`` and ``tenant``
        the reviewer read, each if given), as verified: the store's update is conditional on the
        row being unchanged since; checked and audited as every entry point's decision
        (``decide_proposal``). Raises ``ApprovalError`` (``content_changed`` …)."""
        read = {k: v for k, v in (("effect", effect), ("tenant", tenant)) if v is not None}
        return await self._person(reviewer, "approve", proposal_id, reason, content_hash, read)

    async def deny(self, reviewer: Reviewer, proposal_id: str, *, reason: str = "") -> StoredProposal:
        """Deny a pending proposal (a denial needs a reason), as every entry point's decision."""
        return await self._person(reviewer, "deny", proposal_id, reason)

    async def _person(
        self, reviewer: Reviewer, action: str, proposal_id: str, reason: str, *seen: Any
    ) -> StoredProposal:
        """A reviewer's decision through its one home, audited as ``reviewer:<name>``."""
        from tether.policy._decisions import HumanDecision, decide_proposal

        decision = HumanDecision(action, proposal_id, reason, *seen)
        actor = f"reviewer:{getattr(reviewer, 'name', '?')}"
        return await decide_proposal(self, reviewer, decision, actor=actor, audit=self.audit)

    async def decided(
        self, reviewer: Reviewer, action: str, proposal_id: str, reason: str, seen: _Seen, audited_as: str
    ) -> StoredProposal:
        """The store's write of a decision ``decide_proposal`` checked (its one caller): one
        conditional update, the reviewer's tenants, the proposal still pending (or approved, to
        invalidate it) and, for an approval, unchanged since it was read."""
        if not isinstance(reviewer, Reviewer):
            raise ApprovalError("not_a_reviewer", "decisions need a Reviewer built by the host")
        if action not in ("approve", "deny"):
            return await self._revoke(reviewer, proposal_id, reason, audited_as)
        # A refusal needs no intact row: a tampered proposal can (and should) be denied.
        approve = action == "approve"
        p = await (self.get(proposal_id) if approve else self.stored(proposal_id))
        if changed := [k for k, v in (seen or {}).items() if v is not None and v != getattr(p, k)]:
            raise ApprovalError("content_changed", f"proposal {p.id} is not the one reviewed ({changed})")
        if not reviewer.may_review(p.tenant):
            raise ApprovalError("reviewer_not_allowed", f"{reviewer.name} may not review for {p.tenant}")
        return await self.store.decide(
            proposal_id,
            ProposalStatus.APPROVED if approve else ProposalStatus.DENIED,
            allowed_from=frozenset({ProposalStatus.PENDING}),
            reason=reason,
            actor=f"reviewer:{reviewer.name}",
            audited_as=audited_as,
            now=self.clock(),
            unchanged=p if approve else None,
        )

    async def invalidate(
        self, authority: TrustedContext | Reviewer, proposal_id: str, *, reason: str = "invalidated"
    ) -> StoredProposal:
        """Revoke a pending or approved proposal: it can never run (again). Effects already made
        stay in the ledger and the history. A reviewer's is a person's decision
        (``decide_proposal``); a context's is the host's own."""
        if isinstance(authority, Reviewer):
            return await self._person(authority, "invalidate", proposal_id, reason)
        return await self._revoke(authority, proposal_id, reason)

    async def _revoke(
        self, authority: TrustedContext | Reviewer, proposal_id: str, reason: str, audited_as: str = ""
    ) -> StoredProposal:
        if isinstance(authority, TrustedContext):
            await self._for_tenant(proposal_id, authority.tenant)
            actor = f"context:{authority.user or authority.tenant}"
        elif isinstance(authority, Reviewer):
            p = await self.stored(proposal_id)  # a tampered proposal can be invalidated
            if not authority.may_review(p.tenant):
                raise ApprovalError("reviewer_not_allowed", f"{authority.name} may not act for {p.tenant}")
            actor = f"reviewer:{authority.name}"
        else:
            raise ApprovalError("not_authorised", "invalidation needs a TrustedContext or a Reviewer")
        return await self.store.decide(
            proposal_id,
            ProposalStatus.INVALIDATED,
            actor=actor,
            audited_as=audited_as or actor,
            reason=reason,
            now=self.clock(),
            allowed_from=frozenset({ProposalStatus.PENDING, ProposalStatus.APPROVED}),
        )

    async def executable(self, context: TrustedContext, proposal_id: str) -> StoredProposal:
        """The stored proposal if ``context`` may execute it now; raises ``ApprovalError``
        (``not_approved``, ``denied``, ``invalidated``, ``unknown_proposal``, ``tampered``)."""
        return _executable(await self._for_tenant(proposal_id, context.tenant))

    async def _for_tenant(self, proposal_id: str, tenant: str) -> StoredProposal:
        return _own(await self.get(proposal_id), proposal_id, tenant)

    # -- the effect ledger ---------------------------------------------------------------------

    async def perform(
        self,
        key: str,
        *,
        tool: str,
        arguments: Mapping[str, Any],
        call: Callable[[], Awaitable[dict[str, Any]]],
        timeout_s: float = 30.0,
        proposal_id: str | None = None,
        run_id: str | None = None,
        tenant: str | None = None,
        on_event: Callable[..., Any] | None = None,
    ) -> EffectOutcome:
        """Run ``call`` at most once for ``key``, recording intent before and outcome after.

        ``call`` returns the JSON-ready outcome. If ``call`` raises, the outcome is unknown:
        the entry is left for reconciliation and the exception propagates. Raises
        ``ApprovalError`` (``outcome_unknown`` when a person must decide, ``in_progress`` when
        another live process holds the call beyond ``wait_s``, ``key_conflict``, ``run_id_taken``
        for another tenant's recorded call).
        """
        emit = on_event or (lambda *a, **k: None)
        args_hash = content_hash(tool, arguments)
        owner = _owner()
        deadline = anyio.current_time() + self.wait_s
        delay = 0.005
        while True:
            now = self.clock()
            claim: Claim = await self.store.claim(
                key,
                tool=tool,
                arguments_hash=args_hash,
                owner=owner,
                lease_until=now + timedelta(seconds=timeout_s + self.lease_margin_s),
                now=now,
                owner_dead=owner_dead,
                proposal_id=proposal_id,
                run_id=run_id,
                tenant=tenant,
            )
            if claim.action == "done":
                await self._event(proposal_id, "replayed", key)
                emit("effect_replayed", key=key, tool=tool)
                return EffectOutcome(
                    key, _load(claim.entry.result), replayed=True, attempts=claim.entry.attempts
                )
            if claim.action == "escalated":
                raise ApprovalError(
                    "outcome_unknown", f"{tool} {key}: outcome unknown; a person must resolve it"
                )
            if claim.action == "busy":
                if anyio.current_time() >= deadline:
                    raise ApprovalError("in_progress", busy(tool, key, claim.entry, self.clock()))
                await anyio.sleep(delay)  # another live process owns it: wait for its outcome
                delay = min(delay * 2, 0.2)
                continue
            if claim.action == "reconcile":
                outcome = await self._reconcile(claim.entry, owner, timeout_s, proposal_id, emit)
                if outcome is not None:
                    return outcome
            break
        emit("effect_intent", key=key, tool=tool, attempt=claim.entry.attempts)
        return await self._execute(key, tool, owner, call, proposal_id, emit)

    async def _execute(
        self,
        key: str,
        tool: str,
        owner: str,
        call: Callable[[], Awaitable[dict[str, Any]]],
        proposal_id: str | None,
        emit: Callable[..., Any],
    ) -> EffectOutcome:
        """Make the claimed call once and record its outcome; if it raises, leave the entry to
        be reconciled and let the exception propagate."""
        try:
            result = await call()
        except BaseException:
            # Whether the effect happened is unknown: expire the lease so the next attempt
            # reconciles instead of waiting for (or blindly repeating) this one.
            now = self.clock()
            with contextlib.suppress(Exception), anyio.CancelScope(shield=True):
                await self.store.set_ledger_status(
                    key,
                    LedgerStatus.RECONCILING,
                    owner=owner,
                    note="call failed mid-way",
                    now=now,
                    lease_until=now,
                )
            raise
        # The effect happened: its outcome is recorded even if this task is being cancelled.
        with anyio.CancelScope(shield=True):
            entry = await self._record(key, owner, result_json(result))
            await self._event(proposal_id, "executed", key)
        emit("effect_recorded", key=key, tool=tool, is_error=bool(result.get("is_error")))
        return EffectOutcome(key, result, attempts=entry.attempts)

    async def _record(self, key: str, owner: str, result: str) -> LedgerEntry:
        """Record the outcome of a call that ran here. A store that loses its connection (the
        commit's fate unknown: ``StoreUnavailable``) is asked again, with backoff: the effect
        happened, so its outcome must not be left in limbo for a person. A retry that finds the
        entry already done with this very result (the first commit landed) returns it."""
        delay = 0.1
        for attempt in range(_RECORD_TRIES):
            try:
                return await self.store.finish(key, owner=owner, result=result, note="", now=self.clock())
            except StoreUnavailable:
                if attempt == _RECORD_TRIES - 1:
                    raise
            except ApprovalError as err:
                if attempt == 0 or err.reason != "lost_ownership":
                    raise
                entry = await self.store.ledger_entry(key)
                if entry is not None and entry.status is LedgerStatus.DONE and entry.result == result:
                    return entry
                raise
            await anyio.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    async def _reconcile(
        self,
        entry: LedgerEntry,
        owner: str,
        timeout_s: float,
        proposal_id: str | None,
        emit: Callable[..., Any],
    ) -> EffectOutcome | None:
        """Ask the tool what became of ``entry``; ``None`` means it never happened (run it)."""
        reconciler = self.reconcilers.get(entry.tool)
        answer: dict[str, Any] | None
        why = ""
        if reconciler is None:
            why = f"{entry.tool} cannot be asked whether {entry.key} happened"
        else:
            try:
                got = reconciler(entry.key)
                answer = await got if isinstance(got, Awaitable) else got
            except Exception as err:  # the tool cannot tell: a person decides
                why = f"reconciliation failed: {type(err).__name__}: {err}"
            else:
                now = self.clock()
                if answer is not None:
                    with anyio.CancelScope(shield=True):
                        done = await self.store.finish(
                            entry.key,
                            owner=owner,
                            result=result_json(answer),
                            note="reconciled: happened",
                            now=now,
                        )
                        await self._event(proposal_id, "reconciled", f"{entry.key}: happened")
                    emit("effect_reconciled", key=entry.key, tool=entry.tool, happened=True)
                    return EffectOutcome(
                        entry.key, answer, replayed=True, reconciled=True, attempts=done.attempts
                    )
                with anyio.CancelScope(shield=True):
                    await self.store.set_ledger_status(
                        entry.key,
                        LedgerStatus.INTENT,
                        owner=owner,
                        note="reconciled: never happened; retried",
                        now=now,
                        lease_until=now + timedelta(seconds=timeout_s + self.lease_margin_s),
                    )
                    await self._event(proposal_id, "reconciled", f"{entry.key}: never happened")
                emit("effect_reconciled", key=entry.key, tool=entry.tool, happened=False)
                return None
        now = self.clock()
        with anyio.CancelScope(shield=True):
            await self.store.set_ledger_status(
                entry.key, LedgerStatus.ESCALATED, owner=owner, note=why, now=now, lease_until=now
            )
            await self._event(proposal_id, "escalated", f"{entry.key}: {why}")
        emit("effect_escalated", key=entry.key, tool=entry.tool, why=why)
        raise ApprovalError("outcome_unknown", f"{entry.tool} {entry.key}: {why}; a person must resolve it")

    async def resolve(self, reviewer: Reviewer, key: str, *, happened: bool, note: str = "") -> LedgerEntry:
        """A person records what became of an escalated call. Either way the call is final: if it
        did not happen, a new proposal (and approval) is needed to try again."""
        if not isinstance(reviewer, Reviewer):
            raise ApprovalError("not_a_reviewer", "resolution needs a Reviewer built by the host")
        entry = await self.store.ledger_entry(key)
        if entry is None:
            raise ApprovalError("unknown_key", f"no ledger entry {key}")
        if entry.proposal_id:
            p = await self.get(entry.proposal_id)
            if not reviewer.may_review(p.tenant):
                raise ApprovalError("reviewer_not_allowed", f"{reviewer.name} may not act for {p.tenant}")
        if happened:
            result = {
                "text": f"resolved by {reviewer.name}: the effect happened. {note}".strip(),
                "is_error": False,
            }
        else:
            result = {
                "text": f"resolved by {reviewer.name}: the effect did not happen; propose it again. {note}",
                "is_error": True,
                "error_kind": "not_executed",
            }
        done = await self.store.finish(
            key, owner=None, result=result_json(result), note=f"resolved by {reviewer.name}", now=self.clock()
        )
        await self._event(entry.proposal_id, "resolved", f"{key}: happened={happened} by {reviewer.name}")
        return done

    async def _event(self, proposal_id: str | None, op: str, detail: str) -> None:
        if proposal_id is not None:
            await self.store.add_event(
                proposal_id, op, actor=f"host:{_owner()}", detail=detail, now=self.clock()
            )


def _own(p: StoredProposal, proposal_id: str, tenant: str) -> StoredProposal:
    if p.tenant != tenant:
        # Same answer as an unknown id: another tenant's proposals are not confirmed to exist.
        raise ApprovalError("unknown_proposal", f"no proposal {proposal_id!r} for this tenant")
    return p


def _executable(p: StoredProposal) -> StoredProposal:
    if p.status is ProposalStatus.PENDING:
        raise ApprovalError("not_approved", f"proposal {p.id} has no approval")
    if p.status is not ProposalStatus.APPROVED:
        raise ApprovalError(str(p.status), f"proposal {p.id} is {p.status}")
    return p


def _verify(p: StoredProposal) -> None:
    """The stored arguments must still hash to the stored content hash (integrity of the row)."""
    if content_hash(p.tool, json.loads(p.arguments)) != p.content_hash:
        raise ApprovalError("tampered", f"proposal {p.id} does not match its content hash")


def _load(text: str | None) -> dict[str, Any]:
    value = json.loads(text) if text else {}
    return value if isinstance(value, dict) else {"value": value}
