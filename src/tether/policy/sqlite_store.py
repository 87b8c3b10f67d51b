"""``SqliteApprovalStore``: the shipped ``ApprovalStore`` on one stdlib SQLite file.

The rules are ``SqlApprovalStore``'s (tether.policy.sqlstore); every operation is one
transaction through the file's ``SqliteDatabase`` (tether.storage): writes take the write lock
(``BEGIN IMMEDIATE``) before the checks read, so two processes racing to claim the same
idempotency key, or to decide the same proposal, are serialised and exactly one wins. Each
operation has a sync face (``claim``) for scripts and the CLI and an async face (``aclaim``)
that runs the same transaction in a worker thread, for code on the event loop. The proposal's
content columns are protected by a trigger (immutable once stored); the event table is
append-only.
"""

from __future__ import annotations

from pathlib import Path

from tether.policy.sqlstore import SqlApprovalStore
from tether.storage import SqliteDatabase, SqliteOps, Synchronous

__all__ = ["MIGRATIONS", "SqliteApprovalStore"]

MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "a001_proposals",
        (
            """CREATE TABLE proposals (
                id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL,
                tool TEXT NOT NULL,
                arguments TEXT NOT NULL,
                content_hash TEXT NOT NULL,
                effect TEXT NOT NULL,
                proposed_by TEXT NOT NULL,
                run_id TEXT,
                step INTEGER,
                call_id TEXT,
                created_at TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'invalidated')),
                decided_by TEXT,
                decided_at TEXT,
                decision_reason TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX proposals_status ON proposals (status)",
            # A call id is model-chosen: a proposal belongs to one turn (step) of one run, never to a
            # later turn that reuses the id.
            "CREATE UNIQUE INDEX proposals_call ON proposals (run_id, step, call_id)"
            " WHERE run_id IS NOT NULL",
            """CREATE TRIGGER proposals_immutable
               BEFORE UPDATE OF id, tenant, tool, arguments, content_hash, effect, proposed_by, run_id, step,
                                call_id, created_at ON proposals
               BEGIN SELECT RAISE(ABORT, 'a stored proposal is immutable'); END""",
            """CREATE TRIGGER proposals_no_delete BEFORE DELETE ON proposals
               BEGIN SELECT RAISE(ABORT, 'proposals are kept as history'); END""",
        ),
    ),
    (
        "a002_events",
        (
            """CREATE TABLE approval_events (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                proposal_id TEXT NOT NULL,
                op TEXT NOT NULL,
                actor TEXT NOT NULL,
                detail TEXT NOT NULL,
                at TEXT NOT NULL
            )""",
            "CREATE INDEX approval_events_proposal ON approval_events (proposal_id)",
            """CREATE TRIGGER approval_events_no_update BEFORE UPDATE ON approval_events
               BEGIN SELECT RAISE(ABORT, 'approval_events is append-only'); END""",
            """CREATE TRIGGER approval_events_no_delete BEFORE DELETE ON approval_events
               BEGIN SELECT RAISE(ABORT, 'approval_events is append-only'); END""",
        ),
    ),
    (
        "a003_ledger",
        (
            """CREATE TABLE effect_ledger (
                key TEXT PRIMARY KEY,
                tool TEXT NOT NULL,
                arguments_hash TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('intent', 'done', 'reconciling', 'escalated')),
                owner TEXT NOT NULL,
                attempts INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                lease_until TEXT NOT NULL,
                proposal_id TEXT,
                run_id TEXT,
                result TEXT,
                note TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX effect_ledger_proposal ON effect_ledger (proposal_id)",
            # A recorded outcome is final: it can never be overwritten or go back to 'intent'.
            """CREATE TRIGGER effect_ledger_done_final BEFORE UPDATE ON effect_ledger
               WHEN OLD.status = 'done'
               BEGIN SELECT RAISE(ABORT, 'a recorded outcome is final'); END""",
        ),
    ),
    (
        "a004_checkpoints",
        (
            """CREATE TABLE run_checkpoints (
                run_id TEXT PRIMARY KEY,
                app TEXT,
                state TEXT NOT NULL,
                status TEXT NOT NULL,
                stop_reason TEXT NOT NULL DEFAULT '',
                updated_at TEXT NOT NULL
            )""",
        ),
    ),
)


class SqliteApprovalStore(SqlApprovalStore):
    """An ``ApprovalStore`` in the SQLite file at ``path`` (created and migrated when built).

    Each method is one transaction of ``self.db``; the ``a``-prefixed twin runs the same
    transaction in a worker thread. Any number of store objects and processes may share a file.
    """

    def __init__(
        self, path: str | Path, *, busy_timeout_s: float = 30.0, synchronous: Synchronous = "NORMAL"
    ) -> None:
        self.db = SqliteDatabase(path, MIGRATIONS, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
        self.path = self.db.path
        super().__init__(SqliteOps(self.db))

    def close(self) -> None:
        self.db.close()
