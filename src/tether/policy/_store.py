"""Values and the store seams: proposals and decisions (``ProposalStore``), the effect ledger
(``EffectLedger``), run checkpoints (``CheckpointStore``), and ``ApprovalStore``, all three.

A store persists; it does not decide. ``Approvals`` (policy/_approvals.py) holds the rules and
calls the store, whose every method is one atomic transaction, so several processes sharing
one database see each transition exactly once. Every method is ``async``: code on the event
loop must never wait on the database's locks or disk there; synchronous code (the CLI, a
durable worker's own threads) calls them through ``tether.sql._database.blocking``.
``SqliteApprovalStore`` is the shipped backend (each transaction in a worker thread); a
PostgreSQL one implements the same protocol and passes the same tests; ``MemoryApprovalStore``
never blocks, so it answers inline.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tether.policy._intake import Proposal

__all__ = [
    "AUTOMATIC_APPROVAL",
    "ApprovalEvent",
    "ApprovalStore",
    "Checkpoint",
    "CheckpointStore",
    "Claim",
    "EffectLedger",
    "LedgerEntry",
    "LedgerStatus",
    "NewProposal",
    "ProposalStatus",
    "ProposalStore",
    "ResumeHold",
    "StoredProposal",
    "lacking_async",
]


# Who approved a proposal no person had to review (``ProposalDesk.propose``: the policy allowed
# it for the proposer's context as it then was): never a person's approval.
AUTOMATIC_APPROVAL = "policy:automatic"


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

    @staticmethod
    def of(
        proposal: Proposal, proposed_by: str, run_id: str | None, step: int | None, call_id: str | None
    ) -> NewProposal:
        """``proposal`` (past intake and policy) as the host asks a store to keep it."""
        return NewProposal(
            tenant=proposal.tenant,
            tool=proposal.tool,
            arguments=proposal.canonical_arguments,
            content_hash=proposal.content_hash,
            effect=proposal.effect,
            proposed_by=proposed_by,
            run_id=run_id,
            step=step,
            call_id=call_id,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredProposal(NewProposal):
    """A kept proposal: what was asked, and what the store assigned and decided since."""

    id: str
    created_at: datetime
    status: ProposalStatus
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
    tenant: str | None = None  # whose effect (None: written by a release before it was kept)


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


@dataclass(frozen=True, slots=True)
class ResumeHold:
    """Who is resuming a run: a process (``owner``, as the effect ledger names one) whose lease
    runs until ``lease_until`` (renewed while it runs)."""

    run_id: str
    owner: str
    updated_at: datetime
    lease_until: datetime


@runtime_checkable
class ProposalStore(Protocol):
    """Proposals, their decisions and their append-only history. Every method is one atomic
    transaction; transitions are checked inside it (a decision on a proposal that is no longer
    pending changes nothing)."""

    async def add_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal: ...

    async def get_proposal(self, proposal_id: str) -> StoredProposal | None: ...

    async def find_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None:
        """The proposal made for call ``call_id`` in turn ``step`` of ``run_id``, if any."""
        ...

    async def list_proposals(
        self,
        *,
        status: ProposalStatus | None = None,
        run_id: str | None = None,
        tenants: Collection[str] | None = None,
        newest: int | None = None,
    ) -> list[StoredProposal]:
        """Proposals, oldest first: of ``tenants`` only if given (never one with no tenant), the
        newest ``newest`` of them if given (chosen by the query: a reader never loads them all)."""
        ...

    async def proposal_tenants(self) -> list[str]:
        """The tenants that have proposals, sorted (no proposal is loaded to name them)."""
        ...

    async def decide(
        self,
        proposal_id: str,
        to: ProposalStatus,
        *,
        allowed_from: frozenset[ProposalStatus],
        actor: str,
        audited_as: str,
        reason: str,
        now: datetime,
        unchanged: StoredProposal | None = None,
    ) -> StoredProposal:
        """Move a proposal to ``to`` if its status is in ``allowed_from`` and, given ``unchanged``
        (the row as the caller read and verified it), its tenant, tool, arguments and content hash
        are still those, checked in the same atomic update; raises ``ApprovalError``
        (``unknown_proposal``, ``already_<status>``, ``content_changed``) otherwise. ``actor`` is
        the authority (``decided_by``); the decision's history entry, written in the same
        transaction, names who acted as the audit log does (``audited_as``: ``cli:ana``,
        ``token:ana/<id>``): the record every audit entry of the decision is derived from."""
        ...

    async def add_event(
        self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime
    ) -> None: ...

    async def events(self, proposal_id: str) -> list[ApprovalEvent]: ...


@runtime_checkable
class EffectLedger(Protocol):
    """The effect ledger: intent before a side-effecting call, its outcome after, one entry per
    idempotency key. Every method is one atomic transaction."""

    async def claim(
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
        tenant: str | None = None,
    ) -> Claim: ...

    async def finish(
        self, key: str, *, owner: str | None, result: str, note: str, now: datetime
    ) -> LedgerEntry:
        """Record the outcome (status ``done``) if ``owner`` still owns the entry; ``owner=None``
        records a person's resolution of an ``escalated`` entry."""
        ...

    async def set_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry:
        """Move an entry this ``owner`` holds to ``status`` (never ``done``: that is ``finish``);
        raises ``ValueError`` for ``done``, ``ApprovalError`` (``lost_ownership``) otherwise."""
        ...

    async def ledger_entry(self, key: str) -> LedgerEntry | None: ...

    async def ledger_for(self, proposal_id: str) -> list[LedgerEntry]:
        """The entries made under one proposal, oldest first."""
        ...

    async def ledger_for_run(self, run_id: str) -> list[LedgerEntry]:
        """Every entry of one run, oldest first."""
        ...

    async def ledger_in(self, *statuses: LedgerStatus) -> list[LedgerEntry]:
        """Every entry in one of ``statuses``, oldest first (e.g. those a person must resolve:
        ``tether runs escalations``)."""
        ...


@runtime_checkable
class CheckpointStore(Protocol):
    """Run checkpoints: the working state of a run that paused (or ended), by run id, written at
    every pause and read to resume it."""

    async def save_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None:
        """Write (or replace) the checkpoint of ``run_id``."""
        ...

    async def load_checkpoint(self, run_id: str) -> Checkpoint | None: ...

    async def claim_resume(
        self,
        run_id: str,
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
        owner_dead: Callable[[ResumeHold, datetime], bool],
    ) -> Checkpoint | None:
        """Take the claim to resume ``run_id`` for ``owner`` and read its checkpoint, in one
        transaction: one resumer at a time across every process sharing the store. A holder that
        ``owner_dead`` says is gone is taken over. Raises ``ApprovalError("run_busy")`` while
        another live one holds it."""
        ...

    async def renew_resume(self, run_id: str, *, owner: str, lease_until: datetime, now: datetime) -> bool:
        """Extend ``owner``'s claim on ``run_id``; ``False`` if it no longer holds it."""
        ...

    async def release_resume(self, run_id: str, *, owner: str) -> None:
        """Let go of ``owner``'s claim on ``run_id`` (nothing if another holds it)."""
        ...

    async def list_checkpoints(self, status: str | None = None) -> list[Checkpoint]:
        """The checkpoints (with ``status`` only, if given), least recently updated first."""
        ...


@runtime_checkable
class ApprovalStore(ProposalStore, EffectLedger, CheckpointStore, Protocol):
    """The durable state of approvals, one store for all three concerns: proposals and their
    decisions, the effect ledger, run checkpoints. What ``Approvals`` needs."""


def result_json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def lacking_async(store: object) -> list[str]:
    """The ``ApprovalStore`` methods ``store`` lacks, has only as plain (blocking) functions, or
    has without a keyword the protocol passes (``list_proposals(newest=, tenants=)``: a store
    written to an earlier release's protocol, whose first console queue page would fail)."""
    out = []
    for name, keywords in sorted(_STORE_METHODS.items()):
        method = getattr(store, name, None)
        if not inspect.iscoroutinefunction(method):
            out.append(name)
        elif lacking := _keywords_lacking(method, keywords):
            out.append(f"{name}({', '.join(k + '=' for k in lacking)})")
    return out


def _keywords_lacking(method: Any, keywords: frozenset[str]) -> list[str]:
    params = inspect.signature(method).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    named = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sorted(k for k in keywords if k not in params or params[k].kind not in named)


# Each store method, with the keyword-only parameters the protocol gives it.
_STORE_METHODS: Final = {
    name: frozenset(
        p.name
        for p in inspect.signature(value).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    )
    for seam in (ProposalStore, EffectLedger, CheckpointStore)
    for name, value in vars(seam).items()
    if inspect.iscoroutinefunction(value)
}
