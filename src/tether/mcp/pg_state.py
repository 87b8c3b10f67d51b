"""The MCP host's state on PostgreSQL: capability pins (``PgPinStore``) and elicitation pauses
(``PgPauseStore``), the operations of ``PinStore`` and ``PauseStore`` (``SqlPinStore`` and
``SqlPauseStore``) on a ``PgDatabase``. Shared by every machine of a deployment: a tool
approved, or a question answered, on one machine is seen by all.
"""

from __future__ import annotations

from tether.mcp.pauses import SqlPauseStore
from tether.mcp.pinning import SqlPinStore
from tether.pg import PgDatabase, PgMigration

__all__ = ["PAUSE_MIGRATIONS", "PIN_MIGRATIONS", "PgPauseStore", "PgPinStore"]

PIN_MIGRATIONS: tuple[PgMigration, ...] = (
    (
        "pg_p001_pins",
        (
            """CREATE TABLE pins (
                server TEXT NOT NULL,
                tool TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                definition TEXT NOT NULL,
                endpoint TEXT NOT NULL,
                approved_by TEXT NOT NULL,
                approved_at TEXT NOT NULL,
                PRIMARY KEY (server, tool)
            )""",
            """CREATE TABLE pin_history (
                id BIGSERIAL PRIMARY KEY,
                server TEXT NOT NULL,
                tool TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                action TEXT NOT NULL,
                actor TEXT NOT NULL,
                at TEXT NOT NULL
            )""",
        ),
    ),
)

PAUSE_MIGRATIONS: tuple[PgMigration, ...] = (
    (
        "pg_e001_elicitation_pauses",
        (
            """CREATE TABLE elicitation_pauses (
                seq BIGSERIAL UNIQUE,
                id TEXT PRIMARY KEY,
                created_at TEXT NOT NULL,
                run_id TEXT NOT NULL,
                server TEXT NOT NULL,
                tool TEXT NOT NULL,
                arguments TEXT NOT NULL,
                message TEXT NOT NULL,
                schema TEXT NOT NULL,
                question_key TEXT NOT NULL,
                status TEXT NOT NULL,
                action TEXT,
                answer TEXT,
                answered_by TEXT,
                answered_at TEXT,
                outcome TEXT
            )""",
            "CREATE INDEX elicitation_pauses_key ON elicitation_pauses (question_key, status)",
            "CREATE INDEX elicitation_pauses_run ON elicitation_pauses (run_id)",
        ),
    ),
)


class PgPinStore(SqlPinStore):
    """Approved tool definitions per server id, on PostgreSQL (see ``tether.mcp.pinning``)."""

    def __init__(self, db: str | PgDatabase) -> None:
        self._owns = not isinstance(db, PgDatabase)
        self.db = db if isinstance(db, PgDatabase) else PgDatabase(db)
        self.db.migrate("pins", PIN_MIGRATIONS)
        super().__init__(self.db)

    def close(self) -> None:
        if self._owns:
            self.db.close()


class PgPauseStore(SqlPauseStore):
    """Elicitation pauses on PostgreSQL (see ``tether.mcp.pauses``): an answer given on any
    machine is handed over once (``take_answer`` is atomic across processes)."""

    def __init__(self, db: str | PgDatabase) -> None:
        self._owns = not isinstance(db, PgDatabase)
        self.db = db if isinstance(db, PgDatabase) else PgDatabase(db)
        self.db.migrate("pauses", PAUSE_MIGRATIONS)
        super().__init__(self.db)

    def close(self) -> None:
        if self._owns:
            self.db.close()
