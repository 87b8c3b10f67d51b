"""The governance of a SQL memory store, written once for SQLite and PostgreSQL.

``SqlMemory`` holds the rules (duplicates, staleness, supersession, conflicts, deletion), each
operation one transaction of its ``Database``. A write serialises with the other writers of its
(scope, subject) before its checks read (``tether.sql._tables.lock``), so a refused write changes
nothing and concurrent identical proposals leave one row. Ids are ``mem_`` + a random uuid4: a
content-derived id would let a tenant confirm a guessed claim from a foreign-scope rejection.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Set
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import Connection, func, or_, select, update

from tether.errors import MemoryPolicyError
from tether.memory._records import (
    MemoryEvent,
    MemoryRecord,
    ReadResult,
    Recalled,
    Rejection,
    Source,
    WriteResult,
    WriteStatus,
)
from tether.memory._store import MemoryPolicy, check_proposal, normalize_claim
from tether.sql._database import Database, SqlStore
from tether.sql._tables import insertion_order, lock, upsert
from tether.sql._tables import memory_conflicts as Cf
from tether.sql._tables import memory_events as Ev
from tether.sql._tables import memory_records as R


def utc_now() -> datetime:
    return datetime.now(UTC)


def _fingerprint(record: MemoryRecord) -> str:
    """What makes two proposals the same memory: subject, scope, claim and source record."""
    assert record.source is not None
    key = [
        record.subject,
        record.scope,
        normalize_claim(record.claim),
        record.source.system,
        record.source.record,
    ]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class _Row:
    id: str
    subject: str
    scope: str
    status: str
    record: MemoryRecord | None  # None once deleted (the content is erased), or unreadable
    unreadable: str = ""  # why this release cannot read the stored body ("": it can)

    def live(self, now: datetime) -> bool:
        return self.status == "active" and self.record is not None and self.record.valid_until > now


def _row(raw: Any) -> _Row:
    """A stored row. A body this release cannot read (a later release's field or value, after a
    rollback; or damaged) is kept unread, with why: never half-read, never a failed store."""
    body = raw.body
    try:
        record = MemoryRecord.model_validate_json(body) if body else None
    except ValidationError as err:
        first = err.errors()[0] if err.errors() else {"loc": (), "msg": str(err)}
        where = ".".join(str(part) for part in first["loc"]) or "body"
        return _Row(raw.id, raw.subject, raw.scope, raw.status, None, f"{where}: {first['msg']}")
    return _Row(raw.id, raw.subject, raw.scope, raw.status, record)


def _refuse_unreadable(row: _Row) -> None:
    """A write is judged against the active records beside it (supersession, duplicates,
    conflicts): one this release cannot read leaves it unjudgeable, so it is refused, named."""
    if row.unreadable:
        raise MemoryPolicyError(
            "unreadable",
            f"memory record {row.id} cannot be read by this release ({row.unreadable}): it was"
            " written by a later release (or damaged); write beside it with a worker of that release",
        )


_COLS = (R.c.id, R.c.subject, R.c.scope, R.c.status, R.c.body)


def _event(conn: Connection, record_id: str, op: str, actor: str, reason: str, now: datetime) -> None:
    conn.execute(Ev.insert().values(record_id=record_id, op=op, actor=actor, reason=reason, at=now))


def _get(conn: Connection, record_id: str, lock_row: bool = False) -> _Row | None:
    query = select(*_COLS).where(R.c.id == record_id)
    raw = conn.execute(query.with_for_update() if lock_row else query).first()
    return _row(raw) if raw is not None else None


def _supersede_target(
    conn: Connection, record: MemoryRecord, rows: list[_Row], correcting: str | None
) -> _Row | None:
    """The active record the new one replaces: the named one for a correction, else the active
    one of the same source system (same subject and scope)."""
    assert record.source is not None
    if correcting is not None:
        old = _get(conn, correcting)
        if old is None:
            raise MemoryPolicyError("not_found", f"no memory record {correcting!r}")
        if old.status != "active":
            raise MemoryPolicyError("inactive", f"record {correcting!r} is {old.status}")
        if old.scope != record.scope:
            raise MemoryPolicyError("scope", "a correction must keep the scope of the record it replaces")
        if old.subject != record.subject:
            raise MemoryPolicyError("subject", "a correction must keep the subject of the record it replaces")
        _refuse_unreadable(old)
        return old
    same = [
        r
        for r in rows
        if r.record is not None
        and r.record.source is not None
        and r.record.source.system == record.source.system
    ]
    target = same[0] if same else None
    if record.supersedes is not None and (target is None or record.supersedes != target.id):
        raise MemoryPolicyError(
            "supersedes", "a proposal may only supersede the active record of its own source; use correct()"
        )
    if target is not None:
        assert target.record is not None and target.record.source is not None
        if record.source.observed_at < target.record.source.observed_at:
            raise MemoryPolicyError("stale", f"{target.id} holds a newer observation from the same source")
    return target


def _conflicts(
    record: MemoryRecord, src: Source, rows: list[_Row], target: _Row | None, now: datetime
) -> list[str]:
    """The live authoritative records of other sources that say something else."""
    return [
        row.id
        for row in rows
        if row.live(now)
        and row.record is not None
        and (target is None or row.id != target.id)
        and record.confidence == row.record.confidence == "authoritative"
        and row.record.source is not None
        and row.record.source.system != src.system
        and normalize_claim(row.record.claim) != normalize_claim(record.claim)
    ]


def _write(
    conn: Connection,
    record: MemoryRecord,
    src: Source,
    now: datetime,
    actor: str,
    reason: str,
    correcting: str | None,
) -> WriteResult:
    lock(conn, f"memory|{record.scope}|{record.subject}")
    if record.id is not None:
        lock(conn, f"memory-id|{record.id}")
        if _get(conn, record.id) is not None:
            raise MemoryPolicyError("duplicate", f"a record with id {record.id!r} already exists")
    raw = conn.execute(
        select(*_COLS)
        .where(R.c.subject == record.subject, R.c.scope == record.scope, R.c.status == "active")
        .order_by(insertion_order(conn, R))
    )
    rows = [_row(r) for r in raw]
    for row in rows:
        _refuse_unreadable(row)
    target = _supersede_target(conn, record, rows, correcting)
    fingerprint = _fingerprint(record)
    for row in rows:
        if row.live(now) and row.record is not None and _fingerprint(row.record) == fingerprint:
            raise MemoryPolicyError(
                "duplicate", f"same claim from the same source is already stored as {row.id}"
            )
    conflicts = _conflicts(record, src, rows, target, now)
    stored = record.model_copy(
        update={"id": record.id or f"mem_{uuid.uuid4().hex}", "supersedes": target.id if target else None}
    )
    assert stored.id is not None
    conn.execute(
        R.insert().values(
            id=stored.id,
            subject=stored.subject,
            scope=stored.scope,
            source_system=src.system,
            status="active",
            fingerprint=fingerprint,
            body=stored.model_dump_json(),
            created_at=now,
        )
    )
    _event(conn, stored.id, "write", actor, reason, now)
    status: WriteStatus = "stored"
    if target is not None:
        conn.execute(
            update(R).where(R.c.id == target.id).values(status="superseded", superseded_by=stored.id)
        )
        op = "corrected" if correcting else "superseded"
        _event(conn, target.id, op, actor, f"{reason} (replaced by {stored.id})", now)
        status = "superseded"
    note = "authoritative sources disagree; confirm with the system of record or a person"
    for other in conflicts:
        for a, b in ((stored.id, other), (other, stored.id)):
            conn.execute(upsert(conn, Cf).values(record_id=a, other_id=b, at=now).on_conflict_do_nothing())
        _event(conn, stored.id, "conflict", actor, f"conflicts with {other}: {note}", now)
        _event(conn, other, "conflict", actor, f"conflicts with {stored.id}: {note}", now)
        status = "conflicted"
    return WriteResult(stored, status, tuple(conflicts))


def _read(conn: Connection, subject: str, scope: str, roles: frozenset[str], now: datetime) -> ReadResult:
    raw = conn.execute(
        select(*_COLS)
        .where(or_(R.c.subject == subject, func.substr(R.c.subject, 1, len(subject) + 1) == subject + ":"))
        .order_by(insertion_order(conn, R))
    )
    rows = [_row(r) for r in raw]
    pairs = conn.execute(
        select(Cf.c.record_id, Cf.c.other_id)
        .join(R, R.c.id == Cf.c.record_id)
        .where(R.c.scope == scope, R.c.status == "active")
    )
    # A record this release cannot read may be live: its conflicts are still named (never dropped).
    live = {
        row.id
        for row in rows
        if row.scope == scope and (row.live(now) or (row.unreadable and row.status == "active"))
    }
    partners: dict[str, list[str]] = {}
    for rid, other in pairs:
        if other in live:
            partners.setdefault(rid, []).append(other)
    records: list[Recalled] = []
    rejected: list[Rejection] = []
    for row in rows:
        if row.scope != scope:
            rejected.append(Rejection(row.id, None, "scope"))  # nothing of another tenant's content
        elif row.status == "deleted":
            rejected.append(Rejection(row.id, row.subject, "deleted"))
        elif row.status == "superseded":
            rejected.append(Rejection(row.id, row.subject, "superseded"))
        elif row.record is None:
            rejected.append(Rejection(row.id, row.subject, "unreadable" if row.unreadable else "deleted"))
        elif row.record.valid_until <= now:
            rejected.append(Rejection(row.id, row.subject, "expired"))
        elif not (row.record.acl & roles):
            rejected.append(Rejection(row.id, row.subject, "acl"))
        else:
            records.append(Recalled(row.record, tuple(partners.get(row.id, ()))))
    return ReadResult(tuple(records), tuple(rejected))


def _delete(conn: Connection, record_id: str, actor: str, reason: str, now: datetime) -> None:
    row = _get(conn, record_id, lock_row=True)
    if row is None:
        raise MemoryPolicyError("not_found", f"no memory record {record_id!r}")
    if row.status == "deleted":
        raise MemoryPolicyError("deleted", f"record {record_id!r} is already deleted")
    conn.execute(update(R).where(R.c.id == record_id).values(status="deleted", body=None, fingerprint=None))
    _event(conn, record_id, "delete", actor, reason, now)


def _history(conn: Connection, record_id: str) -> tuple[MemoryEvent, ...]:
    rows = conn.execute(select(Ev).where(Ev.c.record_id == record_id).order_by(Ev.c.id))
    return tuple(
        MemoryEvent(
            id=r.id, record_id=r.record_id, op=cast(Any, r.op), actor=r.actor, reason=r.reason, at=r.at
        )
        for r in rows
    )


class SqlMemory(SqlStore):
    """A ``MemoryStore`` (see its methods' contract) on a ``Database`` (see ``SqlStore``).
    ``clock`` gives the write time (expiry checks, history rows); reads take ``now``."""

    concern = "memory"

    def __init__(
        self,
        db: Database | str | Path | None = None,
        *,
        policy: MemoryPolicy,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        super().__init__(db)
        self.policy = policy
        self._clock = clock

    async def propose(self, record: MemoryRecord, *, actor: str = "model") -> WriteResult:
        return await self._write(record, actor, f"proposed: {record.purpose}", None)

    async def correct(self, old_id: str, new_record: MemoryRecord, *, actor: str, reason: str) -> WriteResult:
        return await self._write(new_record, actor, reason, old_id)

    async def read(self, subject: str, *, scope: str, roles: Set[str], now: datetime) -> ReadResult:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        return await self.db.read(_read, subject, scope, frozenset(roles), now)

    async def delete(self, record_id: str, *, actor: str, reason: str) -> None:
        await self.db.write(_delete, record_id, actor, reason, self._now())

    async def history(self, record_id: str) -> tuple[MemoryEvent, ...]:
        return await self.db.read(_history, record_id)

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError("the memory clock must return timezone-aware datetimes")
        return now

    async def _write(
        self, record: MemoryRecord, actor: str, reason: str, correcting: str | None
    ) -> WriteResult:
        now = self._now()
        src = check_proposal(record, self.policy, now=now)  # pure: refused before the database is touched
        return await self.db.write(_write, record, src, now, actor, reason, correcting)


class SqliteMemory(SqlMemory):
    """A ``MemoryStore`` in the SQLite file at ``path`` (created and migrated when built)."""


class PgMemory(SqlMemory):
    """A ``MemoryStore`` on PostgreSQL: a URL, or a ``Database`` shared with the deployment's
    other stores (then ``close`` leaves it open)."""
