"""``PgApprovalStore``: the ``ApprovalStore`` protocol on PostgreSQL (psycopg 3 and psycopg_pool).

The same rules as the SQLite store (both are ``SqlApprovalStore``, tether.policy.sqlstore),
enforced by the database so that any number of processes on any number of machines can share
it: every method is one transaction; rows a transition reads are locked first (``SELECT … FOR
UPDATE``), and a ledger claim inserts with ``ON CONFLICT DO NOTHING`` before it reads, so two
claimers of one key are serialised and exactly one runs the effect. A stored proposal's content
is immutable and the event table append-only (triggers); a recorded outcome is final. Each
method has an ``a``-prefixed twin for code on the event loop (the same transaction in a worker
thread, see ``tether.pg``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from tether.pg import Op, PgDatabase, PgMigration, Sql
from tether.policy.sqlstore import SqlApprovalStore, ledger_for_run
from tether.policy.store import LedgerEntry

__all__ = ["MIGRATIONS", "PgApprovalStore"]

MIGRATIONS: tuple[PgMigration, ...] = (
    (
        "pg_a001_proposals",
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
                created_at TIMESTAMPTZ NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'invalidated')),
                decided_by TEXT,
                decided_at TIMESTAMPTZ,
                decision_reason TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX proposals_status ON proposals (status)",
            "CREATE INDEX proposals_run ON proposals (run_id)",
            # A call id is model-chosen: a proposal belongs to one turn of one run.
            "CREATE UNIQUE INDEX proposals_call ON proposals (run_id, step, call_id)"
            " WHERE run_id IS NOT NULL",
            """CREATE FUNCTION tether_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN RAISE EXCEPTION '%', TG_ARGV[0]; END $$""",
            """CREATE TRIGGER proposals_immutable BEFORE UPDATE OF id, tenant, tool, arguments,
               content_hash, effect, proposed_by, run_id, step, call_id, created_at ON proposals
               FOR EACH ROW EXECUTE FUNCTION tether_refuse('a stored proposal is immutable')""",
            """CREATE TRIGGER proposals_no_delete BEFORE DELETE ON proposals
               FOR EACH ROW EXECUTE FUNCTION tether_refuse('proposals are kept as history')""",
        ),
    ),
    (
        "pg_a002_events",
        (
            """CREATE TABLE approval_events (
                seq BIGSERIAL PRIMARY KEY,
                proposal_id TEXT NOT NULL,
                op TEXT NOT NULL,
                actor TEXT NOT NULL,
                detail TEXT NOT NULL,
                at TIMESTAMPTZ NOT NULL
            )""",
            "CREATE INDEX approval_events_proposal ON approval_events (proposal_id)",
            """CREATE TRIGGER approval_events_append_only BEFORE UPDATE OR DELETE ON approval_events
               FOR EACH ROW EXECUTE FUNCTION tether_refuse('approval_events is append-only')""",
        ),
    ),
    (
        "pg_a003_ledger",
        (
            """CREATE TABLE effect_ledger (
                key TEXT PRIMARY KEY,
                tool TEXT NOT NULL,
                arguments_hash TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('intent', 'done', 'reconciling', 'escalated')),
                owner TEXT NOT NULL,
                attempts INTEGER NOT NULL,
                created_at TIMESTAMPTZ NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL,
                lease_until TIMESTAMPTZ NOT NULL,
                proposal_id TEXT,
                run_id TEXT,
                result TEXT,
                note TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX effect_ledger_proposal ON effect_ledger (proposal_id)",
            "CREATE INDEX effect_ledger_run ON effect_ledger (run_id)",
            # A recorded outcome is final: never overwritten, never back to 'intent'.
            """CREATE TRIGGER effect_ledger_done_final BEFORE UPDATE ON effect_ledger
               FOR EACH ROW WHEN (OLD.status = 'done')
               EXECUTE FUNCTION tether_refuse('a recorded outcome is final')""",
        ),
    ),
    (
        "pg_a004_checkpoints",
        (
            """CREATE TABLE run_checkpoints (
                run_id TEXT PRIMARY KEY,
                app TEXT,
                state TEXT NOT NULL,
                status TEXT NOT NULL,
                stop_reason TEXT NOT NULL DEFAULT '',
                updated_at TIMESTAMPTZ NOT NULL
            )""",
            "CREATE INDEX run_checkpoints_status ON run_checkpoints (status)",
        ),
    ),
)


def _heartbeat_stopped(dead_after_s: float, owner: str) -> Op[bool]:
    """Whether the owner ("host:pid:token") is a durable worker whose heartbeat stopped: on
    another machine its pid cannot be checked, and its lease may run for minutes."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if not pid.isdigit():
        return False
    row = yield Sql(
        "SELECT 1 FROM tether_workers WHERE host = %s AND pid = %s"
        " AND (heartbeat_at < now() - make_interval(secs => %s) OR recovered_at IS NOT NULL)",
        (host, int(pid), dead_after_s),
        fetch="one",
    )
    return row is not None


class PgApprovalStore(SqlApprovalStore):
    """An ``ApprovalStore`` on PostgreSQL. ``db`` is a URL (``postgresql://…[?schema=s]``) or a
    ``PgDatabase`` shared with the deployment's other stores. Migrates on open."""

    def __init__(self, db: str | PgDatabase) -> None:
        self._owns = not isinstance(db, PgDatabase)
        self.db = db if isinstance(db, PgDatabase) else PgDatabase(db)
        self.db.migrate("approvals", MIGRATIONS)
        super().__init__(self.db)
        # Set by a durable worker (tether.durable): a ledger owner that is a worker whose
        # heartbeat is this many seconds old counts as dead, wherever it ran.
        self.worker_dead_after_s: float | None = None

    def close(self) -> None:
        if self._owns:
            self.db.close()

    def _worker_gone(self) -> Callable[[str], Op[bool]] | None:
        if self.worker_dead_after_s is None:
            return None
        return functools.partial(_heartbeat_stopped, self.worker_dead_after_s)

    def ledger_for_run(self, run_id: str) -> list[LedgerEntry]:
        """Every ledger entry of one run (an extension the durable runner reads)."""
        return self.db.run(ledger_for_run, self.db.dialect, run_id)
