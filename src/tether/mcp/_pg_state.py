"""The MCP host's state on PostgreSQL: capability pins (``PgPinStore``) and elicitation pauses
(``PgPauseStore``), the operations of ``PinStore`` and ``PauseStore`` (``SqlPinStore`` and
``SqlPauseStore``) on a PostgreSQL ``Database``. Shared by every machine of a deployment: a tool
approved, or a question answered, on one machine is seen by all.
"""

from __future__ import annotations

from tether.mcp._pauses import SqlPauseStore
from tether.mcp._pinning import SqlPinStore
from tether.sql._database import Database

__all__ = ["PgPauseStore", "PgPinStore"]


class PgPinStore(SqlPinStore):
    """Approved tool definitions per server id, on PostgreSQL (see ``tether.mcp._pinning``)."""

    def __init__(self, db: str | Database) -> None:
        self._owns = not isinstance(db, Database)
        super().__init__(db if isinstance(db, Database) else Database.postgresql(db))

    def close(self) -> None:
        if self._owns:
            self.db.close()


class PgPauseStore(SqlPauseStore):
    """Elicitation pauses on PostgreSQL (see ``tether.mcp._pauses``): an answer given on any
    machine is handed over once (``take_answer`` is atomic across processes)."""

    def __init__(self, db: str | Database) -> None:
        self._owns = not isinstance(db, Database)
        super().__init__(db if isinstance(db, Database) else Database.postgresql(db))

    def close(self) -> None:
        if self._owns:
            self.db.close()
