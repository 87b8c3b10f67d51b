"""``SqlApprovalStore``: the rules of a SQL ``ApprovalStore``, written once for SQLite
(``SqliteApprovalStore``) and PostgreSQL (``PgApprovalStore``), which add only their migrations
and how they are opened.

Every method is one transaction of an ``OpDatabase`` (tether.sqlops); the ``a``-prefixed twin
runs the same transaction without blocking the event loop. Rows a transition reads are locked
first (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite's writers hold the file from their first
statement), and a ledger claim inserts with ``ON CONFLICT DO NOTHING`` before it reads, so two
claimers of one key, or two deciders of one proposal, are serialised and exactly one wins.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tether.errors import ApprovalError
from tether.policy.store import (
    ApprovalEvent,
    Checkpoint,
    Claim,
    LedgerEntry,
    LedgerStatus,
    NewProposal,
    ProposalStatus,
    StoredProposal,
)
from tether.sqlops import Dialect, Op, OpDatabase, Sql

__all__ = ["SqlApprovalStore", "ledger_for_run"]

_P = (
    "id, tenant, tool, arguments, content_hash, effect, proposed_by, created_at, status, run_id, step,"
    " call_id, decided_by, decided_at, decision_reason"
)
_L = (
    "key, tool, arguments_hash, status, owner, attempts, created_at, updated_at, lease_until, proposal_id,"
    " run_id, result, note"
)
_C = "run_id, app, state, status, updated_at, stop_reason"


def _proposal(d: Dialect, row: tuple[Any, ...]) -> StoredProposal:
    (pid, tenant, tool, args, chash, effect, by, created, status, run_id, step, call_id, dby, dat, why) = row
    return StoredProposal(
        id=pid,
        tenant=tenant,
        tool=tool,
        arguments=args,
        content_hash=chash,
        effect=effect,
        proposed_by=by,
        created_at=d.instant(created),
        status=ProposalStatus(status),
        run_id=run_id,
        step=step,
        call_id=call_id,
        decided_by=dby,
        decided_at=d.instant(dat) if dat is not None else None,
        decision_reason=why,
    )


def _entry(d: Dialect, row: tuple[Any, ...]) -> LedgerEntry:
    key, tool, ahash, status, owner, attempts, created, updated, lease, pid, run_id, result, note = row
    return LedgerEntry(
        key=key,
        tool=tool,
        arguments_hash=ahash,
        status=LedgerStatus(status),
        owner=owner,
        attempts=attempts,
        created_at=d.instant(created),
        updated_at=d.instant(updated),
        lease_until=d.instant(lease),
        proposal_id=pid,
        run_id=run_id,
        result=result,
        note=note,
    )


def _checkpoint(d: Dialect, r: tuple[Any, ...]) -> Checkpoint:
    return Checkpoint(r[0], r[1], r[2], r[3], d.instant(r[4]), r[5])


# -- operations (one transaction each) ----------------------------------------------------------


def _get_proposal(d: Dialect, proposal_id: str, lock: str = "") -> Op[StoredProposal | None]:
    row = yield Sql(f"SELECT {_P} FROM proposals WHERE id = %s{lock}", (proposal_id,), fetch="one")
    return _proposal(d, row) if row is not None else None


def _add_event(d: Dialect, proposal_id: str, op: str, actor: str, detail: str, now: datetime) -> Op[None]:
    yield Sql(
        "INSERT INTO approval_events (proposal_id, op, actor, detail, at) VALUES (%s, %s, %s, %s, %s)",
        (proposal_id, op, actor, detail, d.stamp(now)),
        fetch="none",
    )


def _add_proposal(d: Dialect, proposal: NewProposal, now: datetime) -> Op[StoredProposal]:
    pid = "prop_" + uuid.uuid4().hex  # random, never derived from content: same content, new id
    yield Sql(
        f"INSERT INTO proposals ({_P}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,NULL,NULL,'')",
        (
            pid,
            proposal.tenant,
            proposal.tool,
            proposal.arguments,
            proposal.content_hash,
            proposal.effect,
            proposal.proposed_by,
            d.stamp(now),
            ProposalStatus.PENDING.value,
            proposal.run_id,
            proposal.step,
            proposal.call_id,
        ),
        fetch="none",
    )
    yield from _add_event(d, pid, "proposed", proposal.proposed_by, proposal.content_hash, now)
    stored = yield from _get_proposal(d, pid)
    assert stored is not None
    return stored


def _find_for_call(d: Dialect, run_id: str, step: int, call_id: str) -> Op[StoredProposal | None]:
    row = yield Sql(
        f"SELECT {_P} FROM proposals WHERE run_id = %s AND step = %s AND call_id = %s",
        (run_id, step, call_id),
        fetch="one",
    )
    return _proposal(d, row) if row is not None else None


def _list_proposals(
    d: Dialect, status: ProposalStatus | None, run_id: str | None
) -> Op[list[StoredProposal]]:
    sql, params = f"SELECT {_P} FROM proposals WHERE 1=1", []
    if status is not None:
        sql += " AND status = %s"
        params.append(str(status))
    if run_id is not None:
        sql += " AND run_id = %s"
        params.append(run_id)
    rows = yield Sql(sql + " ORDER BY created_at, id", tuple(params))
    return [_proposal(d, r) for r in rows]


def _decide(
    d: Dialect,
    proposal_id: str,
    to: ProposalStatus,
    allowed_from: frozenset[ProposalStatus],
    actor: str,
    reason: str,
    now: datetime,
) -> Op[StoredProposal]:
    current = yield from _get_proposal(d, proposal_id, d.for_update)
    if current is None:
        raise ApprovalError("unknown_proposal", f"no proposal {proposal_id!r}")
    if current.status not in allowed_from:
        raise ApprovalError(
            f"already_{current.status}", f"proposal {proposal_id} is {current.status}; cannot {to}"
        )
    yield Sql(
        "UPDATE proposals SET status = %s, decided_by = %s, decided_at = %s, decision_reason = %s"
        " WHERE id = %s",
        (str(to), actor, d.stamp(now), reason, proposal_id),
        fetch="none",
    )
    yield from _add_event(d, proposal_id, str(to), actor, reason, now)
    decided = yield from _get_proposal(d, proposal_id)
    assert decided is not None
    return decided


def _events(d: Dialect, proposal_id: str) -> Op[list[ApprovalEvent]]:
    rows = yield Sql(
        "SELECT proposal_id, op, actor, at, detail FROM approval_events WHERE proposal_id = %s ORDER BY seq",
        (proposal_id,),
    )
    return [ApprovalEvent(p, op, actor, d.instant(at), detail) for p, op, actor, at, detail in rows]


def _ledger_entry(d: Dialect, key: str, lock: str = "") -> Op[LedgerEntry | None]:
    row = yield Sql(f"SELECT {_L} FROM effect_ledger WHERE key = %s{lock}", (key,), fetch="one")
    return _entry(d, row) if row is not None else None


def _entry_in(d: Dialect, key: str) -> Op[LedgerEntry]:
    entry = yield from _ledger_entry(d, key)
    assert entry is not None
    return entry


def _owned(d: Dialect, key: str, owner: str) -> Op[LedgerEntry]:
    entry = yield from _ledger_entry(d, key, d.for_update)
    if entry is None:
        raise ApprovalError("unknown_key", f"no ledger entry {key}")
    if entry.owner != owner or entry.status is LedgerStatus.DONE:
        raise ApprovalError("lost_ownership", f"ledger entry {key} is no longer owned by this caller")
    return entry


def _claim(
    d: Dialect,
    key: str,
    tool: str,
    arguments_hash: str,
    owner: str,
    lease_until: datetime,
    now: datetime,
    owner_dead: Callable[[LedgerEntry, datetime], bool],
    proposal_id: str | None,
    run_id: str | None,
    worker_gone: Callable[[str], Op[bool]] | None,
) -> Op[Claim]:
    at, lease = d.stamp(now), d.stamp(lease_until)
    inserted = yield Sql(
        f"INSERT INTO effect_ledger ({_L}) VALUES (%s,%s,%s,%s,%s,1,%s,%s,%s,%s,%s,NULL,'')"
        " ON CONFLICT (key) DO NOTHING",
        (key, tool, arguments_hash, LedgerStatus.INTENT.value, owner, at, at, lease, proposal_id, run_id),
        fetch="rowcount",
    )
    if inserted:
        return Claim("run", (yield from _entry_in(d, key)))
    entry = yield from _ledger_entry(d, key, d.for_update)
    assert entry is not None
    if entry.arguments_hash != arguments_hash or entry.tool != tool:
        # Same key, other content: a bug or a forged key; never run, never replay.
        raise ApprovalError("key_conflict", f"idempotency key {key} was used for other content")
    if entry.status is LedgerStatus.DONE:
        return Claim("done", entry)
    if entry.status is LedgerStatus.ESCALATED:
        return Claim("escalated", entry)
    if not owner_dead(entry, now) and not (worker_gone is not None and (yield from worker_gone(entry.owner))):
        return Claim("busy", entry)
    # The owner died between intent and outcome: whether the effect happened is unknown.
    yield Sql(
        "UPDATE effect_ledger SET status = %s, owner = %s, updated_at = %s, lease_until = %s, note = %s"
        " WHERE key = %s",
        (
            LedgerStatus.RECONCILING.value,
            owner,
            at,
            lease,
            f"outcome unknown: owner {entry.owner} gone during {entry.status}",
            key,
        ),
        fetch="none",
    )
    return Claim("reconcile", (yield from _entry_in(d, key)))


def _finish(
    d: Dialect, key: str, owner: str | None, result: str, note: str, now: datetime
) -> Op[LedgerEntry]:
    if owner is None:  # a person resolving an escalated entry
        entry = yield from _ledger_entry(d, key, d.for_update)
        # Also one whose call raised and that no one is reconciling (its lease ran out): its
        # outcome is as unknown as an escalated one's, and a person may say what happened.
        unowned = entry is not None and entry.status is LedgerStatus.RECONCILING and entry.lease_until <= now
        if entry is None or not (entry.status is LedgerStatus.ESCALATED or unowned):
            raise ApprovalError("not_escalated", f"ledger entry {key} is not waiting for a person")
    else:
        entry = yield from _owned(d, key, owner)
    yield Sql(
        "UPDATE effect_ledger SET status = 'done', result = %s, note = %s, updated_at = %s WHERE key = %s",
        (result, note or entry.note, d.stamp(now), key),
        fetch="none",
    )
    return (yield from _entry_in(d, key))


def _set_ledger_status(
    d: Dialect, key: str, status: LedgerStatus, owner: str, note: str, now: datetime, lease_until: datetime
) -> Op[LedgerEntry]:
    yield from _owned(d, key, owner)
    bump = 1 if status is LedgerStatus.INTENT else 0
    yield Sql(
        "UPDATE effect_ledger SET status = %s, note = %s, updated_at = %s, lease_until = %s,"
        " attempts = attempts + %s WHERE key = %s",
        (str(status), note, d.stamp(now), d.stamp(lease_until), bump, key),
        fetch="none",
    )
    return (yield from _entry_in(d, key))


def _ledger_for(d: Dialect, proposal_id: str) -> Op[list[LedgerEntry]]:
    rows = yield Sql(
        f"SELECT {_L} FROM effect_ledger WHERE proposal_id = %s ORDER BY created_at, key", (proposal_id,)
    )
    return [_entry(d, r) for r in rows]


def _ledger_in(d: Dialect, statuses: tuple[str, ...]) -> Op[list[LedgerEntry]]:
    if not statuses:
        return []
    marks = ", ".join(["%s"] * len(statuses))
    rows = yield Sql(
        f"SELECT {_L} FROM effect_ledger WHERE status IN ({marks}) ORDER BY created_at, key", statuses
    )
    return [_entry(d, r) for r in rows]


def ledger_for_run(d: Dialect, run_id: str) -> Op[list[LedgerEntry]]:
    """The operation listing every ledger entry of one run (``PgApprovalStore.ledger_for_run``)."""
    rows = yield Sql(f"SELECT {_L} FROM effect_ledger WHERE run_id = %s ORDER BY created_at, key", (run_id,))
    return [_entry(d, r) for r in rows]


def _save_checkpoint(
    d: Dialect, run_id: str, app: str | None, state: str, status: str, stop_reason: str, now: datetime
) -> Op[None]:
    yield Sql(
        f"INSERT INTO run_checkpoints ({_C}) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (run_id) DO UPDATE SET app = excluded.app, state = excluded.state,"
        " status = excluded.status, stop_reason = excluded.stop_reason, updated_at = excluded.updated_at",
        (run_id, app, state, status, d.stamp(now), stop_reason),
        fetch="none",
    )


def _load_checkpoint(d: Dialect, run_id: str) -> Op[Checkpoint | None]:
    row = yield Sql(f"SELECT {_C} FROM run_checkpoints WHERE run_id = %s", (run_id,), fetch="one")
    return _checkpoint(d, row) if row is not None else None


def _list_checkpoints(d: Dialect, status: str | None) -> Op[list[Checkpoint]]:
    if status is None:
        rows = yield Sql(f"SELECT {_C} FROM run_checkpoints ORDER BY updated_at, run_id")
    else:
        rows = yield Sql(
            f"SELECT {_C} FROM run_checkpoints WHERE status = %s ORDER BY updated_at, run_id", (status,)
        )
    return [_checkpoint(d, r) for r in rows]


class SqlApprovalStore:
    """An ``ApprovalStore`` on an ``OpDatabase``: each method one transaction, its ``a``-prefixed
    twin the same transaction off the event loop. Any number of store objects and processes may
    share the database."""

    def __init__(self, ops: OpDatabase) -> None:
        self._ops = ops
        self._d = ops.dialect

    def _worker_gone(self) -> Callable[[str], Op[bool]] | None:
        """An operation telling whether a ledger owner is a worker known to be gone, for
        ``claim`` (a backend that knows its workers says; by default none is known)."""
        return None

    # -- proposals (sync face) ---------------------------------------------------------------

    def add_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal:
        return self._ops.run(_add_proposal, self._d, proposal, now)

    def get_proposal(self, proposal_id: str) -> StoredProposal | None:
        return self._ops.read(_get_proposal, self._d, proposal_id)

    def find_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None:
        return self._ops.read(_find_for_call, self._d, run_id, step, call_id)

    def list_proposals(
        self, *, status: ProposalStatus | None = None, run_id: str | None = None
    ) -> list[StoredProposal]:
        return self._ops.read(_list_proposals, self._d, status, run_id)

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
        return self._ops.run(_decide, self._d, proposal_id, to, allowed_from, actor, reason, now)

    def add_event(self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime) -> None:
        self._ops.run(_add_event, self._d, proposal_id, op, actor, detail, now)

    def events(self, proposal_id: str) -> list[ApprovalEvent]:
        return self._ops.read(_events, self._d, proposal_id)

    # -- proposals (async face) --------------------------------------------------------------

    async def aadd_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal:
        return await self._ops.arun(_add_proposal, self._d, proposal, now)

    async def aget_proposal(self, proposal_id: str) -> StoredProposal | None:
        return await self._ops.aread(_get_proposal, self._d, proposal_id)

    async def afind_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None:
        return await self._ops.aread(_find_for_call, self._d, run_id, step, call_id)

    async def alist_proposals(
        self, *, status: ProposalStatus | None = None, run_id: str | None = None
    ) -> list[StoredProposal]:
        return await self._ops.aread(_list_proposals, self._d, status, run_id)

    async def adecide(
        self,
        proposal_id: str,
        to: ProposalStatus,
        *,
        allowed_from: frozenset[ProposalStatus],
        actor: str,
        reason: str,
        now: datetime,
    ) -> StoredProposal:
        return await self._ops.arun(_decide, self._d, proposal_id, to, allowed_from, actor, reason, now)

    async def aadd_event(self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime) -> None:
        await self._ops.arun(_add_event, self._d, proposal_id, op, actor, detail, now)

    async def aevents(self, proposal_id: str) -> list[ApprovalEvent]:
        return await self._ops.aread(_events, self._d, proposal_id)

    # -- the effect ledger (sync face) -------------------------------------------------------

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
    ) -> Claim:
        return self._ops.run(
            _claim,
            self._d,
            key,
            tool,
            arguments_hash,
            owner,
            lease_until,
            now,
            owner_dead,
            proposal_id,
            run_id,
            self._worker_gone(),
        )

    def finish(self, key: str, *, owner: str | None, result: str, note: str, now: datetime) -> LedgerEntry:
        return self._ops.run(_finish, self._d, key, owner, result, note, now)

    def set_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry:
        if status is LedgerStatus.DONE:
            raise ValueError("use finish() to record an outcome")
        return self._ops.run(_set_ledger_status, self._d, key, status, owner, note, now, lease_until)

    def ledger_entry(self, key: str) -> LedgerEntry | None:
        return self._ops.read(_ledger_entry, self._d, key)

    def ledger_for(self, proposal_id: str) -> list[LedgerEntry]:
        return self._ops.read(_ledger_for, self._d, proposal_id)

    def ledger_in(self, *statuses: LedgerStatus) -> list[LedgerEntry]:
        """Every ledger entry in one of ``statuses``, oldest first (e.g. those a person must
        resolve: ``tether runs escalations``)."""
        return self._ops.read(_ledger_in, self._d, tuple(str(s) for s in statuses))

    # -- the effect ledger (async face) ------------------------------------------------------

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
    ) -> Claim:
        return await self._ops.arun(
            _claim,
            self._d,
            key,
            tool,
            arguments_hash,
            owner,
            lease_until,
            now,
            owner_dead,
            proposal_id,
            run_id,
            self._worker_gone(),
        )

    async def afinish(
        self, key: str, *, owner: str | None, result: str, note: str, now: datetime
    ) -> LedgerEntry:
        return await self._ops.arun(_finish, self._d, key, owner, result, note, now)

    async def aset_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry:
        if status is LedgerStatus.DONE:
            raise ValueError("use afinish() to record an outcome")
        return await self._ops.arun(_set_ledger_status, self._d, key, status, owner, note, now, lease_until)

    async def aledger_entry(self, key: str) -> LedgerEntry | None:
        return await self._ops.aread(_ledger_entry, self._d, key)

    async def aledger_for(self, proposal_id: str) -> list[LedgerEntry]:
        return await self._ops.aread(_ledger_for, self._d, proposal_id)

    async def aledger_in(self, *statuses: LedgerStatus) -> list[LedgerEntry]:
        return await self._ops.aread(_ledger_in, self._d, tuple(str(s) for s in statuses))

    # -- checkpoints -------------------------------------------------------------------------

    def save_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None:
        self._ops.run(_save_checkpoint, self._d, run_id, app, state, status, stop_reason, now)

    def load_checkpoint(self, run_id: str) -> Checkpoint | None:
        return self._ops.read(_load_checkpoint, self._d, run_id)

    def list_checkpoints(self, status: str | None = None) -> list[Checkpoint]:
        """The checkpoints (with ``status`` only, if given), least recently updated first."""
        return self._ops.read(_list_checkpoints, self._d, status)

    async def asave_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None:
        await self._ops.arun(_save_checkpoint, self._d, run_id, app, state, status, stop_reason, now)

    async def aload_checkpoint(self, run_id: str) -> Checkpoint | None:
        return await self._ops.aread(_load_checkpoint, self._d, run_id)

    async def alist_checkpoints(self, status: str | None = None) -> list[Checkpoint]:
        return await self._ops.aread(_list_checkpoints, self._d, status)
