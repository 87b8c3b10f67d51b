"""The governance of a SQL memory store, written once for SQLite and PostgreSQL.

``SqlMemory`` holds the rules (duplicates, staleness, supersession, conflicts, deletion) as
operations of ``tether.sqlops``, each one transaction of its database; a write serialises with
the other writers of its (scope, subject) before its checks read (``Dialect.lock``: an advisory
lock on PostgreSQL, the file's write lock on SQLite), so a refused write changes nothing and
concurrent identical proposals leave exactly one row. ``SqliteMemory`` and ``PgMemory`` add
only their migrations and how they are opened. Ids are ``mem_`` + a random uuid4: a
content-derived id would let a tenant confirm a guessed claim from an id reported in a
foreign-scope rejection.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Set
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from ..errors import MemoryPolicyError
from ..sqlops import Dialect, Op, OpDatabase, Sql
from .records import (
    MemoryEvent,
    MemoryRecord,
    ReadResult,
    Recalled,
    Rejection,
    Source,
    WriteResult,
    WriteStatus,
)
from .store import MemoryPolicy, check_proposal, normalize_claim

__all__ = ["SqlMemory", "utc_now"]

_COLS = "id, subject, scope, status, body"


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
    record: MemoryRecord | None  # None once deleted: the content is erased

    def live(self, now: datetime) -> bool:
        return self.status == "active" and self.record is not None and self.record.valid_until > now


def _row(raw: tuple[Any, ...]) -> _Row:
    rid, subject, scope, status, body = raw
    return _Row(rid, subject, scope, status, MemoryRecord.model_validate_json(body) if body else None)


def _event(d: Dialect, record_id: str, op: str, actor: str, reason: str, now: datetime) -> Sql:
    return Sql(
        "INSERT INTO memory_events (record_id, op, actor, reason, at) VALUES (%s, %s, %s, %s, %s)",
        (record_id, op, actor, reason, d.stamp(now)),
        fetch="none",
    )


def _get(record_id: str, lock: str = "") -> Op[_Row | None]:
    raw = yield Sql(f"SELECT {_COLS} FROM memory_records WHERE id = %s{lock}", (record_id,), fetch="one")
    return _row(raw) if raw is not None else None


def _supersede_target(record: MemoryRecord, rows: list[_Row], correcting: str | None) -> Op[_Row | None]:
    """The active record the new one replaces: the named one for a correction, otherwise the
    active record of the same source system for the same subject and scope."""
    assert record.source is not None
    if correcting is not None:
        old = yield from _get(correcting)
        if old is None:
            raise MemoryPolicyError("not_found", f"no memory record {correcting!r}")
        if old.status != "active":
            raise MemoryPolicyError("inactive", f"record {correcting!r} is {old.status}")
        if old.scope != record.scope:
            raise MemoryPolicyError("scope", "a correction must keep the scope of the record it replaces")
        if old.subject != record.subject:
            raise MemoryPolicyError("subject", "a correction must keep the subject of the record it replaces")
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


def _write(
    d: Dialect,
    record: MemoryRecord,
    src: Source,
    now: datetime,
    actor: str,
    reason: str,
    correcting: str | None,
) -> Op[WriteResult]:
    yield from d.lock(f"memory|{record.scope}|{record.subject}")
    if record.id is not None:
        yield from d.lock(f"memory-id|{record.id}")
        if (yield from _get(record.id)) is not None:
            raise MemoryPolicyError("duplicate", f"a record with id {record.id!r} already exists")
    raw = yield Sql(
        f"SELECT {_COLS} FROM memory_records WHERE subject = %s AND scope = %s AND status = 'active'"
        f" ORDER BY {d.order}",
        (record.subject, record.scope),
    )
    rows = [_row(r) for r in raw]
    target = yield from _supersede_target(record, rows, correcting)
    fingerprint = _fingerprint(record)
    for row in rows:
        if row.live(now) and row.record is not None and _fingerprint(row.record) == fingerprint:
            raise MemoryPolicyError(
                "duplicate", f"same claim from the same source is already stored as {row.id}"
            )
    conflicts = [
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
    stored = record.model_copy(
        update={"id": record.id or f"mem_{uuid.uuid4().hex}", "supersedes": target.id if target else None}
    )
    assert stored.id is not None
    at = d.stamp(now)
    yield Sql(
        "INSERT INTO memory_records (id, subject, scope, source_system, status, fingerprint, body,"
        " created_at) VALUES (%s, %s, %s, %s, 'active', %s, %s, %s)",
        (stored.id, stored.subject, stored.scope, src.system, fingerprint, stored.model_dump_json(), at),
        fetch="none",
    )
    yield _event(d, stored.id, "write", actor, reason, now)
    status: WriteStatus = "stored"
    if target is not None:
        yield Sql(
            "UPDATE memory_records SET status = 'superseded', superseded_by = %s WHERE id = %s",
            (stored.id, target.id),
            fetch="none",
        )
        op = "corrected" if correcting else "superseded"
        yield _event(d, target.id, op, actor, f"{reason} (replaced by {stored.id})", now)
        status = "superseded"
    note = "authoritative sources disagree; confirm with the system of record or a person"
    for other in conflicts:
        for a, b in ((stored.id, other), (other, stored.id)):
            yield Sql(
                "INSERT INTO memory_conflicts VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (a, b, at),
                fetch="none",
            )
        yield _event(d, stored.id, "conflict", actor, f"conflicts with {other}: {note}", now)
        yield _event(d, other, "conflict", actor, f"conflicts with {stored.id}: {note}", now)
        status = "conflicted"
    return WriteResult(stored, status, tuple(conflicts))


def _read(d: Dialect, subject: str, scope: str, roles: frozenset[str], now: datetime) -> Op[ReadResult]:
    raw = yield Sql(
        f"SELECT {_COLS} FROM memory_records WHERE subject = %s OR substr(subject, 1, %s) = %s"
        f" ORDER BY {d.order}",
        (subject, len(subject) + 1, subject + ":"),
    )
    rows = [_row(r) for r in raw]
    pairs = yield Sql(
        "SELECT c.record_id, c.other_id FROM memory_conflicts c JOIN memory_records r ON r.id = c.record_id"
        " WHERE r.scope = %s AND r.status = 'active'",
        (scope,),
    )
    live = {row.id for row in rows if row.scope == scope and row.live(now)}
    partners: dict[str, list[str]] = {}
    for rid, other in pairs:
        if other in live:
            partners.setdefault(rid, []).append(other)
    records: list[Recalled] = []
    rejected: list[Rejection] = []
    for row in rows:
        if row.scope != scope:
            rejected.append(Rejection(row.id, None, "scope"))  # nothing of another tenant's content
        elif row.status == "deleted" or row.record is None:
            rejected.append(Rejection(row.id, row.subject, "deleted"))
        elif row.status == "superseded":
            rejected.append(Rejection(row.id, row.subject, "superseded"))
        elif row.record.valid_until <= now:
            rejected.append(Rejection(row.id, row.subject, "expired"))
        elif not (row.record.acl & roles):
            rejected.append(Rejection(row.id, row.subject, "acl"))
        else:
            records.append(Recalled(row.record, tuple(partners.get(row.id, ()))))
    return ReadResult(tuple(records), tuple(rejected))


def _delete(d: Dialect, record_id: str, actor: str, reason: str, now: datetime) -> Op[None]:
    row = yield from _get(record_id, d.for_update)
    if row is None:
        raise MemoryPolicyError("not_found", f"no memory record {record_id!r}")
    if row.status == "deleted":
        raise MemoryPolicyError("deleted", f"record {record_id!r} is already deleted")
    yield Sql(
        "UPDATE memory_records SET status = 'deleted', body = NULL, fingerprint = NULL WHERE id = %s",
        (record_id,),
        fetch="none",
    )
    yield _event(d, record_id, "delete", actor, reason, now)


def _history(d: Dialect, record_id: str) -> Op[tuple[MemoryEvent, ...]]:
    rows = yield Sql(
        "SELECT id, record_id, op, actor, reason, at FROM memory_events WHERE record_id = %s ORDER BY id",
        (record_id,),
    )
    return tuple(
        MemoryEvent(id=i, record_id=r, op=cast(Any, op), actor=a, reason=why, at=d.instant(at))
        for i, r, op, a, why, at in rows
    )


class SqlMemory:
    """A ``MemoryStore`` on an ``OpDatabase``. ``clock`` gives the write time (expiry checks,
    history rows); inject a fixed one in tests. Reads take ``now`` explicitly."""

    def __init__(
        self, ops: OpDatabase, *, policy: MemoryPolicy, clock: Callable[[], datetime] = utc_now
    ) -> None:
        self._ops = ops
        self.policy = policy
        self._clock = clock

    async def propose(self, record: MemoryRecord, *, actor: str = "model") -> WriteResult:
        """Validate and store a proposed record; supersede or flag conflicts as needed.

        Raises ``MemoryPolicyError`` (see ``check_proposal``, plus ``duplicate``, ``stale``,
        ``supersedes``); a refused write leaves the database unchanged.
        """
        return await self._write(record, actor, f"proposed: {record.purpose}", None)

    async def correct(self, old_id: str, new_record: MemoryRecord, *, actor: str, reason: str) -> WriteResult:
        """Replace the active record ``old_id`` by ``new_record`` (same subject and scope).

        ``new_record`` passes the same checks as a proposal. Raises ``MemoryPolicyError``
        (``not_found``, ``inactive``, ``scope``, ``subject`` or a proposal reason).
        """
        return await self._write(new_record, actor, reason, old_id)

    async def read(self, subject: str, *, scope: str, roles: Set[str], now: datetime) -> ReadResult:
        """Records for ``subject`` or its sub-subjects, filtered by scope, status, expiry and ACL."""
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        return await self._ops.aread(_read, self._ops.dialect, subject, scope, frozenset(roles), now)

    async def delete(self, record_id: str, *, actor: str, reason: str) -> None:
        """Delete a record: its content is erased, its id and history stay.

        Raises ``MemoryPolicyError`` (``not_found``, or ``deleted`` if already deleted).
        """
        await self._ops.arun(_delete, self._ops.dialect, record_id, actor, reason, self._now())

    async def history(self, record_id: str) -> tuple[MemoryEvent, ...]:
        """The operations on ``record_id``, oldest first (empty for an unknown id)."""
        return await self._ops.aread(_history, self._ops.dialect, record_id)

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
        return await self._ops.arun(_write, self._ops.dialect, record, src, now, actor, reason, correcting)
