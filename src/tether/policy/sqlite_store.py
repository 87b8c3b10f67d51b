"""``SqliteApprovalStore``: the shipped ``ApprovalStore`` on one stdlib SQLite file.

Every operation is one transaction through the file's ``SqliteDatabase`` (tether.storage):
writes take the write lock (``BEGIN IMMEDIATE``) before the checks read, so two processes
racing to claim the same idempotency key, or to decide the same proposal, are serialised and
exactly one wins. Each operation has a sync face (``claim``) for scripts and the CLI and an
async face (``aclaim``) that runs the same transaction in a worker thread, for code on the
event loop. The proposal's content columns are protected by a trigger (immutable once
stored); the event table is append-only.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
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
from tether.storage import SqliteDatabase, Synchronous

__all__ = ["MIGRATIONS", "SqliteApprovalStore"]

MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "a001_proposals",
        (
            """CREATE TABLE proposals (
                id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL,
                tool TEXT NOT NULL,
                arguments TEXT NOT NULL,
                content_hash TEXT NOT NULL,
                effect TEXT NOT NULL,
                proposed_by TEXT NOT NULL,
                run_id TEXT,
                step INTEGER,
                call_id TEXT,
                created_at TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'invalidated')),
                decided_by TEXT,
                decided_at TEXT,
                decision_reason TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX proposals_status ON proposals (status)",
            # A call id is model-chosen: a proposal belongs to one turn (step) of one run, never to a
            # later turn that reuses the id.
            "CREATE UNIQUE INDEX proposals_call ON proposals (run_id, step, call_id)"
            " WHERE run_id IS NOT NULL",
            """CREATE TRIGGER proposals_immutable
               BEFORE UPDATE OF id, tenant, tool, arguments, content_hash, effect, proposed_by, run_id, step,
                                call_id, created_at ON proposals
               BEGIN SELECT RAISE(ABORT, 'a stored proposal is immutable'); END""",
            """CREATE TRIGGER proposals_no_delete BEFORE DELETE ON proposals
               BEGIN SELECT RAISE(ABORT, 'proposals are kept as history'); END""",
        ),
    ),
    (
        "a002_events",
        (
            """CREATE TABLE approval_events (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                proposal_id TEXT NOT NULL,
                op TEXT NOT NULL,
                actor TEXT NOT NULL,
                detail TEXT NOT NULL,
                at TEXT NOT NULL
            )""",
            "CREATE INDEX approval_events_proposal ON approval_events (proposal_id)",
            """CREATE TRIGGER approval_events_no_update BEFORE UPDATE ON approval_events
               BEGIN SELECT RAISE(ABORT, 'approval_events is append-only'); END""",
            """CREATE TRIGGER approval_events_no_delete BEFORE DELETE ON approval_events
               BEGIN SELECT RAISE(ABORT, 'approval_events is append-only'); END""",
        ),
    ),
    (
        "a003_ledger",
        (
            """CREATE TABLE effect_ledger (
                key TEXT PRIMARY KEY,
                tool TEXT NOT NULL,
                arguments_hash TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('intent', 'done', 'reconciling', 'escalated')),
                owner TEXT NOT NULL,
                attempts INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                lease_until TEXT NOT NULL,
                proposal_id TEXT,
                run_id TEXT,
                result TEXT,
                note TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX effect_ledger_proposal ON effect_ledger (proposal_id)",
            # A recorded outcome is final: it can never be overwritten or go back to 'intent'.
            """CREATE TRIGGER effect_ledger_done_final BEFORE UPDATE ON effect_ledger
               WHEN OLD.status = 'done'
               BEGIN SELECT RAISE(ABORT, 'a recorded outcome is final'); END""",
        ),
    ),
    (
        "a004_checkpoints",
        (
            """CREATE TABLE run_checkpoints (
                run_id TEXT PRIMARY KEY,
                app TEXT,
                state TEXT NOT NULL,
                status TEXT NOT NULL,
                stop_reason TEXT NOT NULL DEFAULT '',
                updated_at TEXT NOT NULL
            )""",
        ),
    ),
)

_P_COLS = (
    "id, tenant, tool, arguments, content_hash, effect, proposed_by, created_at, status, run_id, step,"
    " call_id, decided_by, decided_at, decision_reason"
)
_L_COLS = (
    "key, tool, arguments_hash, status, owner, attempts, created_at, updated_at, lease_until, proposal_id,"
    " run_id, result, note"
)

_C_COLS = "run_id, app, state, status, updated_at, stop_reason"


def _ts(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _dt(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _proposal(row: tuple[Any, ...]) -> StoredProposal:
    (pid, tenant, tool, args, chash, effect, by, created, status, run_id, step, call_id, dby, dat, why) = row
    created_at = _dt(created)
    assert created_at is not None
    return StoredProposal(
        id=pid,
        tenant=tenant,
        tool=tool,
        arguments=args,
        content_hash=chash,
        effect=effect,
        proposed_by=by,
        created_at=created_at,
        status=ProposalStatus(status),
        run_id=run_id,
        step=step,
        call_id=call_id,
        decided_by=dby,
        decided_at=_dt(dat),
        decision_reason=why,
    )


def _entry(row: tuple[Any, ...]) -> LedgerEntry:
    key, tool, ahash, status, owner, attempts, created, updated, lease, pid, run_id, result, note = row
    c, u, lu = _dt(created), _dt(updated), _dt(lease)
    assert c is not None and u is not None and lu is not None
    return LedgerEntry(
        key=key,
        tool=tool,
        arguments_hash=ahash,
        status=LedgerStatus(status),
        owner=owner,
        attempts=attempts,
        created_at=c,
        updated_at=u,
        lease_until=lu,
        proposal_id=pid,
        run_id=run_id,
        result=result,
        note=note,
    )


def _checkpoint(r: tuple[Any, ...]) -> Checkpoint:
    return Checkpoint(r[0], r[1], r[2], r[3], datetime.fromisoformat(r[4]), r[5])


# -- operations: each runs inside one transaction opened by SqliteDatabase -----------------------


def _get_proposal(conn: sqlite3.Connection, proposal_id: str) -> StoredProposal | None:
    row = conn.execute(f"SELECT {_P_COLS} FROM proposals WHERE id = ?", (proposal_id,)).fetchone()
    return _proposal(row) if row is not None else None


def _add_event(conn: sqlite3.Connection, pid: str, op: str, actor: str, detail: str, now: datetime) -> None:
    conn.execute(
        "INSERT INTO approval_events (proposal_id, op, actor, detail, at) VALUES (?, ?, ?, ?, ?)",
        (pid, op, actor, detail, _ts(now)),
    )


def _add_proposal(conn: sqlite3.Connection, proposal: NewProposal, now: datetime) -> StoredProposal:
    pid = "prop_" + uuid.uuid4().hex  # random, never derived from content: same content, new id
    conn.execute(
        f"INSERT INTO proposals ({_P_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL,NULL,'')",
        (
            pid,
            proposal.tenant,
            proposal.tool,
            proposal.arguments,
            proposal.content_hash,
            proposal.effect,
            proposal.proposed_by,
            _ts(now),
            ProposalStatus.PENDING.value,
            proposal.run_id,
            proposal.step,
            proposal.call_id,
        ),
    )
    _add_event(conn, pid, "proposed", proposal.proposed_by, proposal.content_hash, now)
    stored = _get_proposal(conn, pid)
    assert stored is not None
    return stored


def _find_for_call(conn: sqlite3.Connection, run_id: str, step: int, call_id: str) -> StoredProposal | None:
    row = conn.execute(
        f"SELECT {_P_COLS} FROM proposals WHERE run_id = ? AND step = ? AND call_id = ?",
        (run_id, step, call_id),
    ).fetchone()
    return _proposal(row) if row is not None else None


def _list_proposals(
    conn: sqlite3.Connection, status: ProposalStatus | None, run_id: str | None
) -> list[StoredProposal]:
    sql, params = f"SELECT {_P_COLS} FROM proposals WHERE 1=1", []
    if status is not None:
        sql += " AND status = ?"
        params.append(str(status))
    if run_id is not None:
        sql += " AND run_id = ?"
        params.append(run_id)
    return [_proposal(r) for r in conn.execute(sql + " ORDER BY created_at, id", params)]


def _decide(
    conn: sqlite3.Connection,
    proposal_id: str,
    to: ProposalStatus,
    allowed_from: frozenset[ProposalStatus],
    actor: str,
    reason: str,
    now: datetime,
) -> StoredProposal:
    current = _get_proposal(conn, proposal_id)
    if current is None:
        raise ApprovalError("unknown_proposal", f"no proposal {proposal_id!r}")
    if current.status not in allowed_from:
        raise ApprovalError(
            f"already_{current.status}", f"proposal {proposal_id} is {current.status}; cannot {to}"
        )
    conn.execute(
        "UPDATE proposals SET status = ?, decided_by = ?, decided_at = ?, decision_reason = ? WHERE id = ?",
        (str(to), actor, _ts(now), reason, proposal_id),
    )
    _add_event(conn, proposal_id, str(to), actor, reason, now)
    decided = _get_proposal(conn, proposal_id)
    assert decided is not None
    return decided


def _events(conn: sqlite3.Connection, proposal_id: str) -> list[ApprovalEvent]:
    rows = conn.execute(
        "SELECT proposal_id, op, actor, at, detail FROM approval_events WHERE proposal_id = ? ORDER BY seq",
        (proposal_id,),
    )
    return [
        ApprovalEvent(p, op, actor, datetime.fromisoformat(at), detail) for p, op, actor, at, detail in rows
    ]


def _ledger_entry(conn: sqlite3.Connection, key: str) -> LedgerEntry | None:
    row = conn.execute(f"SELECT {_L_COLS} FROM effect_ledger WHERE key = ?", (key,)).fetchone()
    return _entry(row) if row is not None else None


def _entry_in(conn: sqlite3.Connection, key: str) -> LedgerEntry:
    entry = _ledger_entry(conn, key)
    assert entry is not None
    return entry


def _owned(conn: sqlite3.Connection, key: str, owner: str) -> LedgerEntry:
    entry = _ledger_entry(conn, key)
    if entry is None:
        raise ApprovalError("unknown_key", f"no ledger entry {key}")
    if entry.owner != owner or entry.status is LedgerStatus.DONE:
        raise ApprovalError("lost_ownership", f"ledger entry {key} is no longer owned by this caller")
    return entry


def _claim(
    conn: sqlite3.Connection,
    key: str,
    tool: str,
    arguments_hash: str,
    owner: str,
    lease_until: datetime,
    now: datetime,
    owner_dead: Callable[[LedgerEntry, datetime], bool],
    proposal_id: str | None,
    run_id: str | None,
) -> Claim:
    entry = _ledger_entry(conn, key)
    if entry is None:
        conn.execute(
            f"INSERT INTO effect_ledger ({_L_COLS}) VALUES (?,?,?,?,?,1,?,?,?,?,?,NULL,'')",
            (
                key,
                tool,
                arguments_hash,
                LedgerStatus.INTENT.value,
                owner,
                _ts(now),
                _ts(now),
                _ts(lease_until),
                proposal_id,
                run_id,
            ),
        )
        return Claim("run", _entry_in(conn, key))
    if entry.arguments_hash != arguments_hash or entry.tool != tool:
        # Same key, other content: a bug or a forged key; never run, never replay.
        raise ApprovalError("key_conflict", f"idempotency key {key} was used for other content")
    if entry.status is LedgerStatus.DONE:
        return Claim("done", entry)
    if entry.status is LedgerStatus.ESCALATED:
        return Claim("escalated", entry)
    if not owner_dead(entry, now):
        return Claim("busy", entry)
    # The owner died between intent and outcome: whether the effect happened is unknown.
    conn.execute(
        "UPDATE effect_ledger SET status = ?, owner = ?, updated_at = ?, lease_until = ?, note = ?"
        " WHERE key = ?",
        (
            LedgerStatus.RECONCILING.value,
            owner,
            _ts(now),
            _ts(lease_until),
            f"outcome unknown: owner {entry.owner} gone during {entry.status}",
            key,
        ),
    )
    return Claim("reconcile", _entry_in(conn, key))


def _finish(
    conn: sqlite3.Connection, key: str, owner: str | None, result: str, note: str, now: datetime
) -> LedgerEntry:
    if owner is None:  # a person resolving an escalated entry
        entry = _ledger_entry(conn, key)
        if entry is None or entry.status is not LedgerStatus.ESCALATED:
            raise ApprovalError("not_escalated", f"ledger entry {key} is not waiting for a person")
    else:
        entry = _owned(conn, key, owner)
    conn.execute(
        "UPDATE effect_ledger SET status = 'done', result = ?, note = ?, updated_at = ? WHERE key = ?",
        (result, note or entry.note, _ts(now), key),
    )
    return _entry_in(conn, key)


def _set_ledger_status(
    conn: sqlite3.Connection,
    key: str,
    status: LedgerStatus,
    owner: str,
    note: str,
    now: datetime,
    lease_until: datetime,
) -> LedgerEntry:
    _owned(conn, key, owner)
    bump = 1 if status is LedgerStatus.INTENT else 0
    conn.execute(
        "UPDATE effect_ledger SET status = ?, note = ?, updated_at = ?, lease_until = ?,"
        " attempts = attempts + ? WHERE key = ?",
        (str(status), note, _ts(now), _ts(lease_until), bump, key),
    )
    return _entry_in(conn, key)


def _ledger_for(conn: sqlite3.Connection, proposal_id: str) -> list[LedgerEntry]:
    rows = conn.execute(
        f"SELECT {_L_COLS} FROM effect_ledger WHERE proposal_id = ? ORDER BY created_at", (proposal_id,)
    )
    return [_entry(r) for r in rows]


def _save_checkpoint(
    conn: sqlite3.Connection,
    run_id: str,
    app: str | None,
    state: str,
    status: str,
    stop_reason: str,
    now: datetime,
) -> None:
    conn.execute(
        "INSERT INTO run_checkpoints (run_id, app, state, status, stop_reason, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET app = excluded.app,"
        " state = excluded.state, status = excluded.status, stop_reason = excluded.stop_reason,"
        " updated_at = excluded.updated_at",
        (run_id, app, state, status, stop_reason, _ts(now)),
    )


def _load_checkpoint(conn: sqlite3.Connection, run_id: str) -> Checkpoint | None:
    row = conn.execute(f"SELECT {_C_COLS} FROM run_checkpoints WHERE run_id = ?", (run_id,)).fetchone()
    return _checkpoint(row) if row is not None else None


def _list_checkpoints(conn: sqlite3.Connection) -> list[Checkpoint]:
    return [
        _checkpoint(r) for r in conn.execute(f"SELECT {_C_COLS} FROM run_checkpoints ORDER BY updated_at")
    ]


class SqliteApprovalStore:
    """An ``ApprovalStore`` in the SQLite file at ``path`` (created and migrated when built).

    Each method is one transaction of ``self.db``; the ``a``-prefixed twin runs the same
    transaction in a worker thread. Any number of store objects and processes may share a file.
    """

    def __init__(
        self, path: str | Path, *, busy_timeout_s: float = 30.0, synchronous: Synchronous = "NORMAL"
    ) -> None:
        self.db = SqliteDatabase(path, MIGRATIONS, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
        self.path = self.db.path

    def close(self) -> None:
        self.db.close()

    # -- proposals (sync face) ---------------------------------------------------------------

    def add_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal:
        return self.db.run(_add_proposal, proposal, now)

    def get_proposal(self, proposal_id: str) -> StoredProposal | None:
        return self.db.read(_get_proposal, proposal_id)

    def find_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None:
        return self.db.read(_find_for_call, run_id, step, call_id)

    def list_proposals(
        self, *, status: ProposalStatus | None = None, run_id: str | None = None
    ) -> list[StoredProposal]:
        return self.db.read(_list_proposals, status, run_id)

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
        return self.db.run(_decide, proposal_id, to, allowed_from, actor, reason, now)

    def add_event(self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime) -> None:
        self.db.run(_add_event, proposal_id, op, actor, detail, now)

    def events(self, proposal_id: str) -> list[ApprovalEvent]:
        return self.db.read(_events, proposal_id)

    # -- proposals (async face) --------------------------------------------------------------

    async def aadd_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal:
        return await self.db.arun(_add_proposal, proposal, now)

    async def aget_proposal(self, proposal_id: str) -> StoredProposal | None:
        return await self.db.aread(_get_proposal, proposal_id)

    async def afind_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None:
        return await self.db.aread(_find_for_call, run_id, step, call_id)

    async def alist_proposals(
        self, *, status: ProposalStatus | None = None, run_id: str | None = None
    ) -> list[StoredProposal]:
        return await self.db.aread(_list_proposals, status, run_id)

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
        return await self.db.arun(_decide, proposal_id, to, allowed_from, actor, reason, now)

    async def aadd_event(self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime) -> None:
        await self.db.arun(_add_event, proposal_id, op, actor, detail, now)

    async def aevents(self, proposal_id: str) -> list[ApprovalEvent]:
        return await self.db.aread(_events, proposal_id)

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
        return self.db.run(
            _claim, key, tool, arguments_hash, owner, lease_until, now, owner_dead, proposal_id, run_id
        )

    def finish(self, key: str, *, owner: str | None, result: str, note: str, now: datetime) -> LedgerEntry:
        return self.db.run(_finish, key, owner, result, note, now)

    def set_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry:
        if status is LedgerStatus.DONE:
            raise ValueError("use finish() to record an outcome")
        return self.db.run(_set_ledger_status, key, status, owner, note, now, lease_until)

    def ledger_entry(self, key: str) -> LedgerEntry | None:
        return self.db.read(_ledger_entry, key)

    def ledger_for(self, proposal_id: str) -> list[LedgerEntry]:
        return self.db.read(_ledger_for, proposal_id)

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
        return await self.db.arun(
            _claim, key, tool, arguments_hash, owner, lease_until, now, owner_dead, proposal_id, run_id
        )

    async def afinish(
        self, key: str, *, owner: str | None, result: str, note: str, now: datetime
    ) -> LedgerEntry:
        return await self.db.arun(_finish, key, owner, result, note, now)

    async def aset_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry:
        if status is LedgerStatus.DONE:
            raise ValueError("use afinish() to record an outcome")
        return await self.db.arun(_set_ledger_status, key, status, owner, note, now, lease_until)

    async def aledger_entry(self, key: str) -> LedgerEntry | None:
        return await self.db.aread(_ledger_entry, key)

    async def aledger_for(self, proposal_id: str) -> list[LedgerEntry]:
        return await self.db.aread(_ledger_for, proposal_id)

    # -- checkpoints -------------------------------------------------------------------------

    def save_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None:
        self.db.run(_save_checkpoint, run_id, app, state, status, stop_reason, now)

    def load_checkpoint(self, run_id: str) -> Checkpoint | None:
        return self.db.read(_load_checkpoint, run_id)

    def list_checkpoints(self) -> list[Checkpoint]:
        return self.db.read(_list_checkpoints)

    async def asave_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None:
        await self.db.arun(_save_checkpoint, run_id, app, state, status, stop_reason, now)

    async def aload_checkpoint(self, run_id: str) -> Checkpoint | None:
        return await self.db.aread(_load_checkpoint, run_id)

    async def alist_checkpoints(self) -> list[Checkpoint]:
        return await self.db.aread(_list_checkpoints)
