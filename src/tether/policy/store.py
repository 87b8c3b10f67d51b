"""Values and the ``ApprovalStore`` seam: proposals, decisions, the effect ledger, run checkpoints.

A store persists; it does not decide. ``Approvals`` (policy/approvals.py) holds the rules and
calls the store, whose every method is one atomic transaction, so several processes sharing
one database see each transition exactly once. ``SqliteApprovalStore`` is the shipped backend;
a PostgreSQL one implements the same protocol and passes the same tests.
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
    "Claim",
    "LedgerEntry",
    "LedgerStatus",
    "NewProposal",
    "ProposalStatus",
    "StoredProposal",
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
    state: str  # JSON written by tether.checkpoint
    status: str  # paused | resumed | finished
    updated_at: datetime
    stop_reason: str = ""


@runtime_checkable
class ApprovalStore(Protocol):
    """Durable state of approvals. Every method is atomic; transitions are checked inside the
    transaction (a decision on a proposal that is no longer pending changes nothing)."""

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

    # run checkpoints
    def save_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None: ...

    def load_checkpoint(self, run_id: str) -> Checkpoint | None: ...

    def list_checkpoints(self) -> list[Checkpoint]: ...


def result_json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
