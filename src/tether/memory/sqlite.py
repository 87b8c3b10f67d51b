"""``SqliteMemory``: the shipped ``MemoryStore`` on a stdlib SQLite file (WAL mode).

The rules are ``SqlMemory``'s (tether.memory.sqlstore); each operation is one transaction of
the file's ``SqliteDatabase`` (tether.storage), run in an anyio worker thread. A write takes
the write lock (``BEGIN IMMEDIATE``) before its checks read, so checks and writes cannot
interleave and a refused write changes nothing. Schema changes are ordered, named migrations
recorded in ``_migrations``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from ..storage import Migration, SqliteDatabase, SqliteOps, Synchronous
from .sqlstore import SqlMemory, utc_now
from .store import MemoryPolicy

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


class SqliteMemory(SqlMemory):
    """A ``MemoryStore`` in the SQLite file at ``path`` (created and migrated when built).

    ``clock`` gives the write time used for expiry checks and history rows; inject a fixed
    one in tests. Reads take ``now`` explicitly.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        policy: MemoryPolicy,
        clock: Callable[[], datetime] = utc_now,
        busy_timeout_s: float = 30.0,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        self.db = SqliteDatabase(path, MIGRATIONS, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
        self.path = self.db.path
        super().__init__(SqliteOps(self.db), policy=policy, clock=clock)
