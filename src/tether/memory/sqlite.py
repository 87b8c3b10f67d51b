"""``SqliteMemory``: the shipped ``MemoryStore`` on a stdlib SQLite file (WAL mode).

Each operation is one transaction of the file's ``SqliteDatabase`` (tether.storage), run in
an anyio worker thread; a write takes the write lock (``BEGIN IMMEDIATE``) before its checks
read, so checks and writes cannot interleave and a refused write changes nothing. Schema
changes are ordered, named migrations recorded in ``_migrations``. Ids are ``mem_`` + a random
uuid4: a content-derived id would let a tenant confirm a guessed claim from an id reported in
a foreign-scope rejection.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from collections.abc import Callable, Set
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from ..errors import MemoryPolicyError
from ..storage import Migration, SqliteDatabase, Synchronous
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

__all__ = ["MIGRATIONS", "SqliteMemory"]

MIGRATIONS: tuple[Migration, ...] = (
    (
        "m001_records",
        (
            """CREATE TABLE memory_records (
                id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                scope TEXT NOT NULL,
                source_system TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('active', 'superseded', 'deleted')),
                fingerprint TEXT,
                superseded_by TEXT REFERENCES memory_records(id),
                body TEXT,
                created_at TEXT NOT NULL
            )""",
            "CREATE INDEX memory_records_scope_subject ON memory_records (scope, subject)",
            "CREATE INDEX memory_records_subject ON memory_records (subject)",
        ),
    ),
    (
        "m002_events",
        (
            """CREATE TABLE memory_events (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                record_id TEXT NOT NULL REFERENCES memory_records(id),
                op TEXT NOT NULL,
                actor TEXT NOT NULL,
                reason TEXT NOT NULL,
                at TEXT NOT NULL
            )""",
            "CREATE INDEX memory_events_record ON memory_events (record_id)",
            """CREATE TRIGGER memory_events_no_update BEFORE UPDATE ON memory_events
               BEGIN SELECT RAISE(ABORT, 'memory_events is append-only'); END""",
            """CREATE TRIGGER memory_events_no_delete BEFORE DELETE ON memory_events
               BEGIN SELECT RAISE(ABORT, 'memory_events is append-only'); END""",
        ),
    ),
    (
        "m003_conflicts",
        (
            """CREATE TABLE memory_conflicts (
                record_id TEXT NOT NULL REFERENCES memory_records(id),
                other_id TEXT NOT NULL REFERENCES memory_records(id),
                at TEXT NOT NULL,
                PRIMARY KEY (record_id, other_id)
            )""",
        ),
    ),
)


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
    record = MemoryRecord.model_validate_json(body) if body is not None else None
    return _Row(rid, subject, scope, status, record)


_ROW_COLUMNS = "id, subject, scope, status, body"


class SqliteMemory:
    """A ``MemoryStore`` in the SQLite file at ``path`` (created and migrated when built).

    ``clock`` gives the write time used for expiry checks and history rows; inject a fixed
    one in tests. Reads take ``now`` explicitly.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        policy: MemoryPolicy,
        clock: Callable[[], datetime] = _utc_now,
        busy_timeout_s: float = 30.0,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        self.db = SqliteDatabase(path, MIGRATIONS, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
        self.path = self.db.path
        self.policy = policy
        self._clock = clock

    # -- MemoryStore -------------------------------------------------------------------

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
        return await self.db.aread(_read, subject, scope, frozenset(roles), now)

    async def delete(self, record_id: str, *, actor: str, reason: str) -> None:
        """Delete a record: its content is erased, its id and history stay.

        Raises ``MemoryPolicyError`` (``not_found``, or ``deleted`` if already deleted).
        """
        await self.db.arun(self._delete, record_id, actor, reason)

    async def history(self, record_id: str) -> tuple[MemoryEvent, ...]:
        """The operations on ``record_id``, oldest first (empty for an unknown id)."""
        return await self.db.aread(_history, record_id)

    # -- plumbing ------------------------------------------------------------------------

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError("the memory clock must return timezone-aware datetimes")
        return now

    def _event(self, conn: sqlite3.Connection, record_id: str, op: str, actor: str, reason: str) -> None:
        conn.execute(
            "INSERT INTO memory_events (record_id, op, actor, reason, at) VALUES (?, ?, ?, ?, ?)",
            (record_id, op, actor, reason, self._now().isoformat()),
        )

    async def _write(
        self, record: MemoryRecord, actor: str, reason: str, correcting: str | None
    ) -> WriteResult:
        now = self._now()
        src = check_proposal(record, self.policy, now=now)  # pure: refused before the database is touched
        return await self.db.arun(self._write_tx, record, src, actor, reason, correcting, now)

    # -- operations (one transaction each, in a worker thread) ---------------------------

    def _write_tx(
        self,
        conn: sqlite3.Connection,
        record: MemoryRecord,
        src: Source,
        actor: str,
        reason: str,
        correcting: str | None,
        now: datetime,
    ) -> WriteResult:
        if record.id is not None and _get(conn, record.id) is not None:
            raise MemoryPolicyError("duplicate", f"a record with id {record.id!r} already exists")
        rows = [
            _row(r)
            for r in conn.execute(
                f"SELECT {_ROW_COLUMNS} FROM memory_records"
                " WHERE subject = ? AND scope = ? AND status = 'active'",
                (record.subject, record.scope),
            )
        ]
        target = self._supersede_target(conn, record, rows, correcting)
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
            update={
                "id": record.id or f"mem_{uuid.uuid4().hex}",
                "supersedes": target.id if target else None,
            }
        )
        assert stored.id is not None
        conn.execute(
            "INSERT INTO memory_records"
            " (id, subject, scope, source_system, status, fingerprint, body, created_at)"
            " VALUES (?, ?, ?, ?, 'active', ?, ?, ?)",
            (
                stored.id,
                stored.subject,
                stored.scope,
                src.system,
                fingerprint,
                stored.model_dump_json(),
                now.isoformat(),
            ),
        )
        self._event(conn, stored.id, "write", actor, reason)
        status: WriteStatus = "stored"
        if target is not None:
            conn.execute(
                "UPDATE memory_records SET status = 'superseded', superseded_by = ? WHERE id = ?",
                (stored.id, target.id),
            )
            op = "corrected" if correcting else "superseded"
            self._event(conn, target.id, op, actor, f"{reason} (replaced by {stored.id})")
            status = "superseded"
        for other in conflicts:
            conn.executemany(
                "INSERT OR IGNORE INTO memory_conflicts VALUES (?, ?, ?)",
                [(stored.id, other, now.isoformat()), (other, stored.id, now.isoformat())],
            )
            note = "authoritative sources disagree; confirm with the system of record or a person"
            self._event(conn, stored.id, "conflict", actor, f"conflicts with {other}: {note}")
            self._event(conn, other, "conflict", actor, f"conflicts with {stored.id}: {note}")
            status = "conflicted"
        return WriteResult(stored, status, tuple(conflicts))

    def _supersede_target(
        self, conn: sqlite3.Connection, record: MemoryRecord, rows: list[_Row], correcting: str | None
    ) -> _Row | None:
        """The active record the new one replaces: the named one for a correction, otherwise
        the active record of the same source system for the same subject and scope."""
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
                raise MemoryPolicyError(
                    "subject", "a correction must keep the subject of the record it replaces"
                )
            return old
        same_source = [
            row
            for row in rows
            if row.record is not None
            and row.record.source is not None
            and row.record.source.system == record.source.system
        ]
        target = same_source[0] if same_source else None
        if record.supersedes is not None and (target is None or record.supersedes != target.id):
            raise MemoryPolicyError(
                "supersedes",
                "a proposal may only supersede the active record of its own source; use correct()",
            )
        if target is not None:
            assert target.record is not None and target.record.source is not None
            if record.source.observed_at < target.record.source.observed_at:
                raise MemoryPolicyError(
                    "stale", f"{target.id} holds a newer observation from the same source"
                )
        return target

    def _delete(self, conn: sqlite3.Connection, record_id: str, actor: str, reason: str) -> None:
        row = _get(conn, record_id)
        if row is None:
            raise MemoryPolicyError("not_found", f"no memory record {record_id!r}")
        if row.status == "deleted":
            raise MemoryPolicyError("deleted", f"record {record_id!r} is already deleted")
        conn.execute(
            "UPDATE memory_records SET status = 'deleted', body = NULL, fingerprint = NULL WHERE id = ?",
            (record_id,),
        )
        self._event(conn, record_id, "delete", actor, reason)


def _get(conn: sqlite3.Connection, record_id: str) -> _Row | None:
    raw = conn.execute(f"SELECT {_ROW_COLUMNS} FROM memory_records WHERE id = ?", (record_id,)).fetchone()
    return _row(raw) if raw is not None else None


def _read(
    conn: sqlite3.Connection, subject: str, scope: str, roles: frozenset[str], now: datetime
) -> ReadResult:
    rows = [
        _row(r)
        for r in conn.execute(
            f"SELECT {_ROW_COLUMNS} FROM memory_records"
            " WHERE subject = ? OR substr(subject, 1, ?) = ? ORDER BY rowid",
            (subject, len(subject) + 1, subject + ":"),
        )
    ]
    pairs = conn.execute(
        "SELECT c.record_id, c.other_id FROM memory_conflicts c"
        " JOIN memory_records r ON r.id = c.record_id"
        " WHERE r.scope = ? AND r.status = 'active'",
        (scope,),
    ).fetchall()
    live = {row.id for row in rows if row.scope == scope and row.live(now)}
    partners: dict[str, list[str]] = {}
    for rid, other in pairs:
        if other in live:
            partners.setdefault(rid, []).append(other)
    records: list[Recalled] = []
    rejected: list[Rejection] = []
    for row in rows:
        if row.scope != scope:
            # id + reason only: nothing of another tenant's content leaves the store
            rejected.append(Rejection(row.id, None, "scope"))
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


def _history(conn: sqlite3.Connection, record_id: str) -> tuple[MemoryEvent, ...]:
    rows = conn.execute(
        "SELECT id, record_id, op, actor, reason, at FROM memory_events WHERE record_id = ? ORDER BY id",
        (record_id,),
    ).fetchall()
    return tuple(
        MemoryEvent(id=i, record_id=r, op=cast(Any, op), actor=a, reason=why, at=datetime.fromisoformat(at))
        for i, r, op, a, why, at in rows
    )
