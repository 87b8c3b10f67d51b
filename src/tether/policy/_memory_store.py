"""``MemoryApprovalStore``: the ``ApprovalStore`` protocol in this process's memory.

For scripts, notebooks and tests: the same transitions, the same errors and the same values as
``SqliteApprovalStore`` (the shared contract tests run against both), with nothing on disk.
Everything is lost when the object goes away, so it cannot carry a run across a crash or a
second process: use the SQLite store (or PostgreSQL) for that. Its methods are ``async`` like
every store's but never wait: each holds one lock for its whole transition and never awaits,
so tasks and threads (each its own loop) sharing the object see each transition exactly once.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from tether.errors import ApprovalError
from tether.policy._store import (
    ApprovalEvent,
    Checkpoint,
    Claim,
    LedgerEntry,
    LedgerStatus,
    NewProposal,
    ProposalStatus,
    StoredProposal,
)

__all__ = ["MemoryApprovalStore"]


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return value.astimezone(UTC)


class MemoryApprovalStore:
    """An ``ApprovalStore`` held in memory. ``close()`` is accepted and changes nothing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proposals: dict[str, StoredProposal] = {}
        self._calls: dict[tuple[str, int | None, str | None], str] = {}
        self._events: list[ApprovalEvent] = []
        self._ledger: dict[str, LedgerEntry] = {}
        self._checkpoints: dict[str, Checkpoint] = {}

    def close(self) -> None:
        return None

    # -- proposals -----------------------------------------------------------------------

    async def add_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal:
        at = _utc(now)
        pid = "prop_" + uuid.uuid4().hex  # random, never derived from content: same content, new id
        stored = StoredProposal(
            id=pid,
            tenant=proposal.tenant,
            tool=proposal.tool,
            arguments=proposal.arguments,
            content_hash=proposal.content_hash,
            effect=proposal.effect,
            proposed_by=proposal.proposed_by,
            created_at=at,
            status=ProposalStatus.PENDING,
            run_id=proposal.run_id,
            step=proposal.step,
            call_id=proposal.call_id,
        )
        with self._lock:
            if proposal.run_id is not None:
                call = (proposal.run_id, proposal.step, proposal.call_id)
                if call in self._calls:
                    # A call id is model-chosen: one proposal per turn of a run, never a second.
                    raise ApprovalError(
                        "duplicate_call",
                        f"a proposal already exists for call {proposal.call_id!r} of this turn",
                    )
                self._calls[call] = pid
            self._proposals[pid] = stored
            self._events.append(
                ApprovalEvent(pid, "proposed", proposal.proposed_by, at, proposal.content_hash)
            )
        return stored

    async def get_proposal(self, proposal_id: str) -> StoredProposal | None:
        with self._lock:
            return self._proposals.get(proposal_id)

    async def find_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None:
        with self._lock:
            pid = self._calls.get((run_id, step, call_id))
            return self._proposals.get(pid) if pid is not None else None

    async def list_proposals(
        self, *, status: ProposalStatus | None = None, run_id: str | None = None
    ) -> list[StoredProposal]:
        with self._lock:
            found = [
                p
                for p in self._proposals.values()
                if (status is None or p.status is ProposalStatus(status))
                and (run_id is None or p.run_id == run_id)
            ]
        return sorted(found, key=lambda p: (p.created_at, p.id))

    async def decide(
        self,
        proposal_id: str,
        to: ProposalStatus,
        *,
        allowed_from: frozenset[ProposalStatus],
        actor: str,
        reason: str,
        now: datetime,
    ) -> StoredProposal:
        at = _utc(now)
        with self._lock:
            current = self._proposals.get(proposal_id)
            if current is None:
                raise ApprovalError("unknown_proposal", f"no proposal {proposal_id!r}")
            if current.status not in allowed_from:
                raise ApprovalError(
                    f"already_{current.status}", f"proposal {proposal_id} is {current.status}; cannot {to}"
                )
            decided = dataclasses.replace(
                current, status=ProposalStatus(to), decided_by=actor, decided_at=at, decision_reason=reason
            )
            self._proposals[proposal_id] = decided
            self._events.append(ApprovalEvent(proposal_id, str(to), actor, at, reason))
        return decided

    async def add_event(self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime) -> None:
        at = _utc(now)
        with self._lock:
            self._events.append(ApprovalEvent(proposal_id, op, actor, at, detail))

    async def events(self, proposal_id: str) -> list[ApprovalEvent]:
        with self._lock:
            return [e for e in self._events if e.proposal_id == proposal_id]

    # -- the effect ledger ------------------------------------------------------------------

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
    ) -> Claim:
        at, lease = _utc(now), _utc(lease_until)
        with self._lock:
            entry = self._ledger.get(key)
            if entry is None:
                entry = LedgerEntry(
                    key=key,
                    tool=tool,
                    arguments_hash=arguments_hash,
                    status=LedgerStatus.INTENT,
                    owner=owner,
                    attempts=1,
                    created_at=at,
                    updated_at=at,
                    lease_until=lease,
                    proposal_id=proposal_id,
                    run_id=run_id,
                )
                self._ledger[key] = entry
                return Claim("run", entry)
            if entry.arguments_hash != arguments_hash or entry.tool != tool:
                # Same key, other content: a bug or a forged key; never run, never replay.
                raise ApprovalError("key_conflict", f"idempotency key {key} was used for other content")
            if entry.status is LedgerStatus.DONE:
                return Claim("done", entry)
            if entry.status is LedgerStatus.ESCALATED:
                return Claim("escalated", entry)
            if not owner_dead(entry, at):
                return Claim("busy", entry)
            # The owner died between intent and outcome: whether the effect happened is unknown.
            entry = dataclasses.replace(
                entry,
                status=LedgerStatus.RECONCILING,
                owner=owner,
                updated_at=at,
                lease_until=lease,
                note=f"outcome unknown: owner {entry.owner} gone during {entry.status}",
            )
            self._ledger[key] = entry
            return Claim("reconcile", entry)

    async def finish(
        self, key: str, *, owner: str | None, result: str, note: str, now: datetime
    ) -> LedgerEntry:
        at = _utc(now)
        with self._lock:
            if owner is None:  # a person resolving an escalated entry
                entry = self._ledger.get(key)
                if entry is None or entry.status is not LedgerStatus.ESCALATED:
                    raise ApprovalError("not_escalated", f"ledger entry {key} is not waiting for a person")
            else:
                entry = self._owned(key, owner)
            done = dataclasses.replace(
                entry, status=LedgerStatus.DONE, result=result, note=note or entry.note, updated_at=at
            )
            self._ledger[key] = done
            return done

    async def set_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry:
        if status is LedgerStatus.DONE:
            raise ValueError("use finish() to record an outcome")
        at, lease = _utc(now), _utc(lease_until)
        with self._lock:
            entry = self._owned(key, owner)
            changed = dataclasses.replace(
                entry,
                status=LedgerStatus(status),
                note=note,
                updated_at=at,
                lease_until=lease,
                attempts=entry.attempts + (1 if status is LedgerStatus.INTENT else 0),
            )
            self._ledger[key] = changed
            return changed

    async def ledger_entry(self, key: str) -> LedgerEntry | None:
        with self._lock:
            return self._ledger.get(key)

    async def ledger_for(self, proposal_id: str) -> list[LedgerEntry]:
        with self._lock:
            found = [e for e in self._ledger.values() if e.proposal_id == proposal_id]
        return sorted(found, key=lambda e: (e.created_at, e.key))

    async def ledger_for_run(self, run_id: str) -> list[LedgerEntry]:
        with self._lock:
            found = [e for e in self._ledger.values() if e.run_id == run_id]
        return sorted(found, key=lambda e: (e.created_at, e.key))

    async def ledger_in(self, *statuses: LedgerStatus) -> list[LedgerEntry]:
        wanted = {LedgerStatus(s) for s in statuses}
        with self._lock:
            found = [e for e in self._ledger.values() if e.status in wanted]
        return sorted(found, key=lambda e: (e.created_at, e.key))

    def _owned(self, key: str, owner: str) -> LedgerEntry:
        entry = self._ledger.get(key)
        if entry is None:
            raise ApprovalError("unknown_key", f"no ledger entry {key}")
        if entry.owner != owner or entry.status is LedgerStatus.DONE:
            raise ApprovalError("lost_ownership", f"ledger entry {key} is no longer owned by this caller")
        return entry

    # -- checkpoints -----------------------------------------------------------------------

    async def save_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None:
        at = _utc(now)
        with self._lock:
            self._checkpoints[run_id] = Checkpoint(run_id, app, state, status, at, stop_reason)

    async def load_checkpoint(self, run_id: str) -> Checkpoint | None:
        with self._lock:
            return self._checkpoints.get(run_id)

    async def list_checkpoints(self, status: str | None = None) -> list[Checkpoint]:
        with self._lock:
            found = [c for c in self._checkpoints.values() if status is None or c.status == status]
            return sorted(found, key=lambda c: c.updated_at)
