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

from tether.memory._sqlstore import SqlMemory

__all__ = ["PgMemory"]


class PgMemory(SqlMemory):
    """A ``MemoryStore`` on PostgreSQL. ``db``: a URL, or a ``Database`` shared with the
    deployment's other stores (then ``close`` leaves it open). ``clock`` gives the write time
    (expiry checks, history rows); reads take ``now`` explicitly."""
