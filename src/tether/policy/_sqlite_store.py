"""``SqliteApprovalStore``: the shipped ``ApprovalStore`` on one SQLite file.

The rules are ``SqlApprovalStore``'s (tether.policy._sqlstore), the tables ``tether.sql._tables``'s;
every operation is one transaction of the file's ``Database`` (tether.sql._database): writes take the
write lock (``BEGIN IMMEDIATE``) before the checks read, so two processes racing to claim the
same idempotency key, or to decide the same proposal, are serialised and exactly one wins. A
stored proposal's content is immutable (a trigger); the event table is append-only.
"""

from __future__ import annotations

from pathlib import Path

from tether.policy._sqlstore import SqlApprovalStore
from tether.sql._database import Database, Synchronous

__all__ = ["SqliteApprovalStore"]


class SqliteApprovalStore(SqlApprovalStore):
    """An ``ApprovalStore`` in the SQLite file at ``path`` (created and migrated when built).
    Any number of store objects and processes may share a file."""

    def __init__(
        self, path: str | Path, *, busy_timeout_s: float = 30.0, synchronous: Synchronous = "NORMAL"
    ) -> None:
        super().__init__(Database.sqlite(path, busy_timeout_s=busy_timeout_s, synchronous=synchronous))
        self.path = Path(path)
