"""``PgMemory``: the ``MemoryStore`` protocol on PostgreSQL, with the same governance as
``SqliteMemory`` (both are ``SqlMemory``, tether.memory._sqlstore: the stateless checks of
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

from tether.memory._sqlstore import SqlMemory, utc_now
from tether.memory._store import MemoryPolicy
from tether.sql._database import Database

__all__ = ["PgMemory"]


class PgMemory(SqlMemory):
    """A ``MemoryStore`` on PostgreSQL. ``db``: a URL or a shared ``Database``. ``clock`` gives
    the write time (expiry checks, history rows); reads take ``now`` explicitly."""

    def __init__(
        self, db: str | Database, *, policy: MemoryPolicy, clock: Callable[[], datetime] = utc_now
    ) -> None:
        self._owns = not isinstance(db, Database)
        super().__init__(
            db if isinstance(db, Database) else Database.postgresql(db), policy=policy, clock=clock
        )

    def close(self) -> None:
        if self._owns:
            self.db.close()
