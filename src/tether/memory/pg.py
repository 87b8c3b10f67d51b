"""``PgMemory``: the ``MemoryStore`` protocol on PostgreSQL, with the same governance as
``SqliteMemory`` (both are ``SqlMemory``, tether.memory.sqlstore: the stateless checks of
``check_proposal``; duplicates, staleness, supersession and conflicts decided inside the
write's transaction).

Writers of one (scope, subject) are serialised by a transaction-scoped advisory lock taken
before the checks read, so concurrent identical proposals from any number of processes leave
exactly one row; a refused write rolls back and changes nothing. The history table is
append-only (a trigger).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ..pg import PgDatabase, PgMigration
from .sqlstore import SqlMemory, utc_now
from .store import MemoryPolicy

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


class PgMemory(SqlMemory):
    """A ``MemoryStore`` on PostgreSQL. ``db``: a URL or a shared ``PgDatabase``. ``clock`` gives
    the write time (expiry checks, history rows); reads take ``now`` explicitly."""

    def __init__(
        self, db: str | PgDatabase, *, policy: MemoryPolicy, clock: Callable[[], datetime] = utc_now
    ) -> None:
        self._owns = not isinstance(db, PgDatabase)
        self.db = db if isinstance(db, PgDatabase) else PgDatabase(db)
        self.db.migrate("memory", MIGRATIONS)
        super().__init__(self.db, policy=policy, clock=clock)

    def close(self) -> None:
        if self._owns:
            self.db.close()
