"""``MemoryApprovalStore``: the ``ApprovalStore`` in this process's memory.

For scripts, notebooks and tests: the SQL store itself (the same transitions, errors and values,
the same tables and triggers) on a private SQLite database in memory, so nothing is on disk.
Everything is lost when the store is closed or dropped, so it cannot carry a run across a crash
or a second process: use the SQLite store (or PostgreSQL) for that. Tasks and threads sharing
the object see each transition exactly once (its transactions run one at a time).
"""

from __future__ import annotations

from tether.policy._sqlstore import SqlApprovalStore

__all__ = ["MemoryApprovalStore"]


class MemoryApprovalStore(SqlApprovalStore):
    """An ``ApprovalStore`` held in memory (``close`` discards it)."""

    def __init__(self) -> None:
        super().__init__(None)
