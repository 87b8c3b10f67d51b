"""``SqliteMemory``: the shipped ``MemoryStore`` on a stdlib SQLite file (WAL mode), with the
rules of ``SqlMemory`` (tether.memory._sqlstore). A write takes the file's write lock
(``BEGIN IMMEDIATE``) before its checks read."""

from __future__ import annotations

from tether.memory._sqlstore import SqlMemory

__all__ = ["SqliteMemory"]


class SqliteMemory(SqlMemory):
    """A ``MemoryStore`` in the SQLite file at ``path`` (created and migrated when built)."""
