"""``PgMemory``: the ``MemoryStore`` protocol on PostgreSQL, with the same governance as
``SqliteMemory`` (the stateless checks of ``check_proposal``; duplicates, staleness,
supersession and conflicts decided inside the write's transaction).

Writers of one (scope, subject) are serialised by a transaction-scoped advisory lock taken
before the checks read, so concurrent identical proposals from any number of processes leave
exactly one row; a refused write rolls back and changes nothing. The history table is
append-only (a trigger). Ids are ``mem_`` + a random uuid4, as in SQLite.
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
from ..pg import Op, PgDatabase, PgMigration, Sql, ts
from .records import MemoryEvent, MemoryRecord, ReadResult, Recalled, Rejection, WriteResult, WriteStatus
from .store import MemoryPolicy, check_proposal, normalize_claim

__all__ = ["MIGRATIONS", "PgMemory"]

MIGRATIONS: tuple[PgMigration, ...] = (
    (
        "pg_m001_records",
        (
            """CREATE TABLE memory_records (
                seq BIGSERIAL UNIQUE,
                id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                scope TEXT NOT NULL,
                source_system TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('active', 'superseded', 'deleted')),
                fingerprint TEXT,
                superseded_by TEXT REFERENCES memory_records(id),
                body TEXT,
                created_at TIMESTAMPTZ NOT NULL
            )""",
            "CREATE INDEX memory_records_scope_subject ON memory_records (scope, subject)",
            "CREATE INDEX memory_records_subject ON memory_records (subject text_pattern_ops)",
        ),
    ),
    (
        "pg_m002_events",
        (
            """CREATE TABLE memory_events (
                id BIGSERIAL PRIMARY KEY,
                record_id TEXT NOT NULL REFERENCES memory_records(id),
                op TEXT NOT NULL,
                actor TEXT NOT NULL,
                reason TEXT NOT NULL,
                at TIMESTAMPTZ NOT NULL
            )""",
            "CREATE INDEX memory_events_record ON memory_events (record_id)",
            """CREATE FUNCTION tether_memory_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN RAISE EXCEPTION 'memory_events is append-only'; END $$""",
            """CREATE TRIGGER memory_events_append_only BEFORE UPDATE OR DELETE ON memory_events
               FOR EACH ROW EXECUTE FUNCTION tether_memory_refuse()""",
        ),
    ),
    (
        "pg_m003_conflicts",
        (
            """CREATE TABLE memory_conflicts (
                record_id TEXT NOT NULL REFERENCES memory_records(id),
                other_id TEXT NOT NULL REFERENCES memory_records(id),
                at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (record_id, other_id)
            )""",
        ),
    ),
)

_COLS = "id, subject, scope, status, body"


def _utc_now() -> datetime:
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


def _event(record_id: str, op: str, actor: str, reason: str, now: datetime) -> Sql:
    return Sql(
        "INSERT INTO memory_events (record_id, op, actor, reason, at) VALUES (%s, %s, %s, %s, %s)",
        (record_id, op, actor, reason, now),
        fetch="none",
    )


def _get(record_id: str) -> Op[_Row | None]:
    raw = yield Sql(f"SELECT {_COLS} FROM memory_records WHERE id = %s", (record_id,), fetch="one")
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
    record: MemoryRecord, policy: MemoryPolicy, now: datetime, actor: str, reason: str, correcting: str | None
) -> Op[WriteResult]:
    src = check_proposal(record, policy, now=now)
    yield Sql(
        "SELECT pg_advisory_xact_lock(hashtext(%s))",
        (f"memory|{record.scope}|{record.subject}",),
        fetch="none",
    )
    if record.id is not None:
        yield Sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"memory-id|{record.id}",), fetch="none")
        if (yield from _get(record.id)) is not None:
            raise MemoryPolicyError("duplicate", f"a record with id {record.id!r} already exists")
    raw = yield Sql(
        f"SELECT {_COLS} FROM memory_records WHERE subject = %s AND scope = %s AND status = 'active'"
        " ORDER BY seq",
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
    yield Sql(
        "INSERT INTO memory_records (id, subject, scope, source_system, status, fingerprint, body,"
        " created_at) VALUES (%s, %s, %s, %s, 'active', %s, %s, %s)",
        (stored.id, stored.subject, stored.scope, src.system, fingerprint, stored.model_dump_json(), now),
        fetch="none",
    )
    yield _event(stored.id, "write", actor, reason, now)
    status: WriteStatus = "stored"
    if target is not None:
        yield Sql(
            "UPDATE memory_records SET status = 'superseded', superseded_by = %s WHERE id = %s",
            (stored.id, target.id),
            fetch="none",
        )
        op = "corrected" if correcting else "superseded"
        yield _event(target.id, op, actor, f"{reason} (replaced by {stored.id})", now)
        status = "superseded"
    note = "authoritative sources disagree; confirm with the system of record or a person"
    for other in conflicts:
        for a, b in ((stored.id, other), (other, stored.id)):
            yield Sql(
                "INSERT INTO memory_conflicts VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (a, b, now),
                fetch="none",
            )
        yield _event(stored.id, "conflict", actor, f"conflicts with {other}: {note}", now)
        yield _event(other, "conflict", actor, f"conflicts with {stored.id}: {note}", now)
        status = "conflicted"
    return WriteResult(stored, status, tuple(conflicts))


def _read(subject: str, scope: str, roles: frozenset[str], now: datetime) -> Op[ReadResult]:
    raw = yield Sql(
        f"SELECT {_COLS} FROM memory_records WHERE subject = %s OR left(subject, %s) = %s ORDER BY seq",
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


def _delete(record_id: str, actor: str, reason: str, now: datetime) -> Op[None]:
    raw = yield Sql(f"SELECT {_COLS} FROM memory_records WHERE id = %s FOR UPDATE", (record_id,), fetch="one")
    if raw is None:
        raise MemoryPolicyError("not_found", f"no memory record {record_id!r}")
    if _row(raw).status == "deleted":
        raise MemoryPolicyError("deleted", f"record {record_id!r} is already deleted")
    yield Sql(
        "UPDATE memory_records SET status = 'deleted', body = NULL, fingerprint = NULL WHERE id = %s",
        (record_id,),
        fetch="none",
    )
    yield _event(record_id, "delete", actor, reason, now)


def _history(record_id: str) -> Op[tuple[MemoryEvent, ...]]:
    rows = yield Sql(
        "SELECT id, record_id, op, actor, reason, at FROM memory_events WHERE record_id = %s ORDER BY id",
        (record_id,),
    )
    return tuple(
        MemoryEvent(id=i, record_id=r, op=cast(Any, op), actor=a, reason=why, at=at)
        for i, r, op, a, why, at in rows
    )


class PgMemory:
    """A ``MemoryStore`` on PostgreSQL. ``db``: a URL or a shared ``PgDatabase``. ``clock`` gives
    the write time (expiry checks, history rows); reads take ``now`` explicitly."""

    def __init__(
        self, db: str | PgDatabase, *, policy: MemoryPolicy, clock: Callable[[], datetime] = _utc_now
    ) -> None:
        self._owns = not isinstance(db, PgDatabase)
        self.db = db if isinstance(db, PgDatabase) else PgDatabase(db)
        self.policy = policy
        self._clock = clock
        self.db.migrate("memory", MIGRATIONS)

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError("the memory clock must return timezone-aware datetimes")
        return ts(now)

    async def propose(self, record: MemoryRecord, *, actor: str = "model") -> WriteResult:
        """Validate and store a proposed record. Raises ``MemoryPolicyError`` (nothing written)."""
        now = self._now()
        return await self.db.arun(
            _write, record, self.policy, now, actor, f"proposed: {record.purpose}", None
        )

    async def correct(self, old_id: str, new_record: MemoryRecord, *, actor: str, reason: str) -> WriteResult:
        """Replace the active record ``old_id`` by ``new_record``. Raises ``MemoryPolicyError``."""
        return await self.db.arun(_write, new_record, self.policy, self._now(), actor, reason, old_id)

    async def read(self, subject: str, *, scope: str, roles: Set[str], now: datetime) -> ReadResult:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        return await self.db.arun(_read, subject, scope, frozenset(roles), now)

    async def delete(self, record_id: str, *, actor: str, reason: str) -> None:
        """Raises ``MemoryPolicyError`` (``not_found``, ``deleted``)."""
        await self.db.arun(_delete, record_id, actor, reason, self._now())

    async def history(self, record_id: str) -> tuple[MemoryEvent, ...]:
        return await self.db.arun(_history, record_id)

    def close(self) -> None:
        if self._owns:
            self.db.close()
