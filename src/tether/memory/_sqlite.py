"""``SqliteMemory``: the shipped ``MemoryStore`` on a stdlib SQLite file (WAL mode).

The rules are ``SqlMemory``'s (tether.memory._sqlstore), the tables ``tether.sql._tables``'s; each
operation is one transaction of the file's ``Database`` (tether.sql._database), run in an anyio
worker thread. A write takes the write lock (``BEGIN IMMEDIATE``) before its checks read, so
checks and writes cannot interleave and a refused write changes nothing.
"""

from __future__ import annotations

from tether.memory._sqlstore import SqlMemory

__all__ = ["SqliteMemory"]


class SqliteMemory(SqlMemory):
    """A ``MemoryStore`` in the SQLite file at ``path`` (created and migrated when built).

    ``clock`` gives the write time used for expiry checks and history rows; inject a fixed
    one in tests. Reads take ``now`` explicitly.
    """
