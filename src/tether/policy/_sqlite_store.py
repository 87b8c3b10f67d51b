"""``SqliteApprovalStore``: the shipped ``ApprovalStore`` on one SQLite file.

The rules are ``SqlApprovalStore``'s (tether.policy._sqlstore), the tables ``tether.sql._tables``'s;
every operation is one transaction of the file's ``Database`` (tether.sql._database): writes take the
write lock (``BEGIN IMMEDIATE``) before the checks read, so two processes racing to claim the
same idempotency key, or to decide the same proposal, are serialised and exactly one wins. A
stored proposal's content is immutable (a trigger); the event table is append-only.
"""

from __future__ import annotations

from tether.policy._sqlstore import SqlApprovalStore

__all__ = ["SqliteApprovalStore"]


class SqliteApprovalStore(SqlApprovalStore):
    """An ``ApprovalStore`` in the SQLite file at ``path`` (created and migrated when built;
    ``busy_timeout_s`` and ``synchronous`` as ``Database.sqlite``'s). Any number of store
    objects and processes may share a file."""
