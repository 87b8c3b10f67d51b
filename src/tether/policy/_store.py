"""Values and the ``ApprovalStore`` seam: proposals, decisions, the effect ledger, run checkpoints.

A store persists; it does not decide. ``Approvals`` (policy/approvals.py) holds the rules and
calls the store, whose every method is one atomic transaction, so several processes sharing
one database see each transition exactly once. Every method has two faces: ``claim`` for
scripts and the CLI, ``aclaim`` for code on the event loop, which must never wait on the
database's locks or disk there. ``SqliteApprovalStore`` is the shipped backend (its async face
is the same transaction in a worker thread); a PostgreSQL one implements the same protocol
(its async face on psycopg's async pool) and passes the same tests. A store that never blocks
(in memory) gets its async face from ``InlineAsyncFace``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "ApprovalEvent",
    "ApprovalStore",
    "Checkpoint",
    "CheckpointStore",
    "Claim",
    "InlineAsyncFace",
    "LedgerEntry",
    "LedgerStatus",
    "NewProposal",
    "ProposalStatus",
    "StoredProposal",
    "SyncApprovalStore",
]


class ProposalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    INVALIDATED = "invalidated"


class LedgerStatus(StrEnum):
    INTENT = "intent"  # recorded before the call; an owner is (or was) running it
    DONE = "done"  # outcome recorded: never run again
    RECONCILING = "reconciling"  # outcome unknown after a crash; an owner is asking the tool
    ESCALATED = "escalated"  # outcome unknown and not reconcilable: a person must decide


@dataclass(frozen=True, slots=True)
class NewProposal:
    """What the host asks a store to keep. The store assigns the id."""

    tenant: str
    tool: str
    arguments: str  # canonical JSON
    content_hash: str
    effect: str
    proposed_by: str
    run_id: str | None = None
    step: int | None = None
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class StoredProposal:
    id: str
    tenant: str
    tool: str
    arguments: str  # canonical JSON, exactly as stored
    content_hash: str
    effect: str
    proposed_by: str
    created_at: datetime
    status: ProposalStatus
    run_id: str | None = None
    step: int | None = None
    call_id: str | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    decision_reason: str = ""


@dataclass(frozen=True, slots=True)
class ApprovalEvent:
    """One line of a proposal's append-only history."""

    proposal_id: str
    op: str  # proposed | approved | denied | invalidated | executed | replayed | reconciled | escalated
    actor: str
    at: datetime
    detail: str = ""


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    key: str
    tool: str
    arguments_hash: str
    status: LedgerStatus
    owner: str
    attempts: int
    created_at: datetime
    updated_at: datetime
    lease_until: datetime
    proposal_id: str | None = None
    run_id: str | None = None
    result: str | None = None  # JSON of the recorded outcome
    note: str = ""


@dataclass(frozen=True, slots=True)
class Claim:
    """What a store answered to ``claim``: run it now, replay a recorded outcome, wait for a live
    owner, reconcile an unknown outcome (this caller now owns the reconciliation), or escalate."""

    action: Literal["run", "done", "busy", "reconcile", "escalated"]
    entry: LedgerEntry


@dataclass(frozen=True, slots=True)
class Checkpoint:
    run_id: str
    app: str | None
    state: str  # JSON written by tether.runs._checkpoint
    status: str  # paused | resumed | finished
    updated_at: datetime
    stop_reason: str = ""


@runtime_checkable
class SyncApprovalStore(Protocol):
    """The sync face of an approval store. Every method is atomic; transitions are checked inside
    the transaction (a decision on a proposal that is no longer pending changes nothing)."""

    # proposals and decisions
    def add_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal: ...

    def get_proposal(self, proposal_id: str) -> StoredProposal | None: ...

    def find_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None:
        """The proposal made for call ``call_id`` in turn ``step`` of ``run_id``, if any."""
        ...

    def list_proposals(
        self, *, status: ProposalStatus | None = None, run_id: str | None = None
    ) -> list[StoredProposal]: ...

    def decide(
        self,
        proposal_id: str,
        to: ProposalStatus,
        *,
        allowed_from: frozenset[ProposalStatus],
        actor: str,
        reason: str,
        now: datetime,
    ) -> StoredProposal:
        """Move a proposal to ``to`` if its status is in ``allowed_from``; raises ``ApprovalError``
        (``unknown_proposal``, or ``not_<status>``-style reasons) otherwise."""
        ...

    def add_event(self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime) -> None: ...

    def events(self, proposal_id: str) -> list[ApprovalEvent]: ...

    # the effect ledger
    def claim(
        self,
        key: str,
        *,
        tool: str,
        arguments_hash: str,
        owner: str,
        lease_until: datetime,
        now: datetime,
        owner_dead: Callable[[LedgerEntry, datetime], bool],
        proposal_id: str | None = None,
        run_id: str | None = None,
    ) -> Claim: ...

    def finish(self, key: str, *, owner: str | None, result: str, note: str, now: datetime) -> LedgerEntry:
        """Record the outcome (status ``done``) if ``owner`` still owns the entry; ``owner=None``
        records a person's resolution of an ``escalated`` entry."""
        ...

    def set_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry: ...

    def ledger_entry(self, key: str) -> LedgerEntry | None: ...

    def ledger_for(self, proposal_id: str) -> list[LedgerEntry]: ...


@runtime_checkable
class CheckpointStore(Protocol):
    """Run checkpoints, async only: the working state of a run that paused (or ended), by run id,
    written at every pause and read to resume it."""

    async def save_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None:
        """Write (or replace) the checkpoint of ``run_id``."""
        ...

    async def load_checkpoint(self, run_id: str) -> Checkpoint | None: ...

    async def list_checkpoints(self, status: str | None = None) -> list[Checkpoint]:
        """The checkpoints (with ``status`` only, if given), least recently updated first."""
        ...


@runtime_checkable
class ApprovalStore(SyncApprovalStore, CheckpointStore, Protocol):
    """Durable state of approvals: proposals and the effect ledger with a sync face and an async
    face (``a``-prefixed, awaitable without ever blocking the event loop), and run checkpoints
    (async only)."""

    async def aadd_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal: ...

    async def aget_proposal(self, proposal_id: str) -> StoredProposal | None: ...

    async def afind_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None: ...

    async def alist_proposals(
        self, *, status: ProposalStatus | None = None, run_id: str | None = None
    ) -> list[StoredProposal]: ...

    async def adecide(
        self,
        proposal_id: str,
        to: ProposalStatus,
        *,
        allowed_from: frozenset[ProposalStatus],
        actor: str,
        reason: str,
        now: datetime,
    ) -> StoredProposal: ...

    async def aadd_event(
        self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime
    ) -> None: ...

    async def aevents(self, proposal_id: str) -> list[ApprovalEvent]: ...

    async def aclaim(
        self,
        key: str,
        *,
        tool: str,
        arguments_hash: str,
        owner: str,
        lease_until: datetime,
        now: datetime,
        owner_dead: Callable[[LedgerEntry, datetime], bool],
        proposal_id: str | None = None,
        run_id: str | None = None,
    ) -> Claim: ...

    async def afinish(
        self, key: str, *, owner: str | None, result: str, note: str, now: datetime
    ) -> LedgerEntry: ...

    async def aset_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry: ...

    async def aledger_entry(self, key: str) -> LedgerEntry | None: ...

    async def aledger_for(self, proposal_id: str) -> list[LedgerEntry]: ...


class InlineAsyncFace:
    """The async face of a store whose sync methods never block (in memory): each ``a``-method
    calls its sync twin directly. A store on disk or a network must not use this."""

    async def aadd_proposal(
        self: SyncApprovalStore, proposal: NewProposal, *, now: datetime
    ) -> StoredProposal:
        return self.add_proposal(proposal, now=now)

    async def aget_proposal(self: SyncApprovalStore, proposal_id: str) -> StoredProposal | None:
        return self.get_proposal(proposal_id)

    async def afind_for_call(
        self: SyncApprovalStore, run_id: str, step: int, call_id: str
    ) -> StoredProposal | None:
        return self.find_for_call(run_id, step, call_id)

    async def alist_proposals(
        self: SyncApprovalStore, *, status: ProposalStatus | None = None, run_id: str | None = None
    ) -> list[StoredProposal]:
        return self.list_proposals(status=status, run_id=run_id)

    async def adecide(
        self: SyncApprovalStore,
        proposal_id: str,
        to: ProposalStatus,
        *,
        allowed_from: frozenset[ProposalStatus],
        actor: str,
        reason: str,
        now: datetime,
    ) -> StoredProposal:
        return self.decide(proposal_id, to, allowed_from=allowed_from, actor=actor, reason=reason, now=now)

    async def aadd_event(
        self: SyncApprovalStore, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime
    ) -> None:
        self.add_event(proposal_id, op, actor=actor, detail=detail, now=now)

    async def aevents(self: SyncApprovalStore, proposal_id: str) -> list[ApprovalEvent]:
        return self.events(proposal_id)

    async def aclaim(
        self: SyncApprovalStore,
        key: str,
        *,
        tool: str,
        arguments_hash: str,
        owner: str,
        lease_until: datetime,
        now: datetime,
        owner_dead: Callable[[LedgerEntry, datetime], bool],
        proposal_id: str | None = None,
        run_id: str | None = None,
    ) -> Claim:
        return self.claim(
            key,
            tool=tool,
            arguments_hash=arguments_hash,
            owner=owner,
            lease_until=lease_until,
            now=now,
            owner_dead=owner_dead,
            proposal_id=proposal_id,
            run_id=run_id,
        )

    async def afinish(
        self: SyncApprovalStore, key: str, *, owner: str | None, result: str, note: str, now: datetime
    ) -> LedgerEntry:
        return self.finish(key, owner=owner, result=result, note=note, now=now)

    async def aset_ledger_status(
        self: SyncApprovalStore,
        key: str,
        status: LedgerStatus,
        *,
        owner: str,
        note: str,
        now: datetime,
        lease_until: datetime,
    ) -> LedgerEntry:
        return self.set_ledger_status(key, status, owner=owner, note=note, now=now, lease_until=lease_until)

    async def aledger_entry(self: SyncApprovalStore, key: str) -> LedgerEntry | None:
        return self.ledger_entry(key)

    async def aledger_for(self: SyncApprovalStore, proposal_id: str) -> list[LedgerEntry]:
        return self.ledger_for(proposal_id)


def result_json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
