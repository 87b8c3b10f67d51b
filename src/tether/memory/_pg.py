"""``PgMemory``: the ``MemoryStore`` on PostgreSQL, with the rules of ``SqlMemory``
(tether.memory._sqlstore). Writers of one (scope, subject) take a transaction-scoped advisory
lock before the checks read; the history table is append-only (a trigger)."""

from __future__ import annotations

from tether.memory._sqlstore import SqlMemory

__all__ = ["PgMemory"]


class PgMemory(SqlMemory):
    """A ``MemoryStore`` on PostgreSQL. ``db``: a URL, or a ``Database`` shared with the
    deployment's other stores (then ``close`` leaves it open)."""
