"""``PgApprovalStore``: the ``ApprovalStore`` on PostgreSQL (psycopg 3 through SQLAlchemy).

The same rules and tables as the SQLite store (both are ``SqlApprovalStore``), enforced by the
database so that any number of processes on any number of machines can share it: rows a
transition reads are locked first (``SELECT … FOR UPDATE``), and a ledger claim inserts with
``ON CONFLICT DO NOTHING`` before it reads, so two claimers of one key are serialised and
exactly one runs the effect. A ledger owner that is a durable worker whose heartbeat stopped
counts as dead (``worker_dead_after_s``).
"""

from __future__ import annotations

from tether.policy._sqlstore import SqlApprovalStore

__all__ = ["PgApprovalStore"]


class PgApprovalStore(SqlApprovalStore):
    """An ``ApprovalStore`` on PostgreSQL: built on a URL (``postgresql://…[?schema=s]``) or a
    ``Database`` shared with the deployment's other stores (then ``close`` leaves it open)."""
