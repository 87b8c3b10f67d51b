"""``PgApprovalStore``: the ``ApprovalStore`` protocol on PostgreSQL (psycopg 3 and psycopg_pool).

The same rules as the SQLite store, enforced by the database so that any number of processes
on any number of machines can share it: every method is one transaction; rows a transition
reads are locked first (``SELECT … FOR UPDATE``), and a ledger claim inserts with ``ON CONFLICT
DO NOTHING`` before it reads, so two claimers of one key are serialised and exactly one runs the
effect. A stored proposal's content is immutable and the event table append-only (triggers); a
recorded outcome is final. Each method has an ``a``-prefixed twin for code on the event loop
(the same transaction in a worker thread, see ``tether.pg``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tether.errors import ApprovalError
from tether.pg import Op, PgDatabase, PgMigration, Sql, ts
from tether.policy.store import (
    ApprovalEvent,
    Checkpoint,
    Claim,
    LedgerEntry,
    LedgerStatus,
    NewProposal,
    ProposalStatus,
    StoredProposal,
)

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

_P = (
    "id, tenant, tool, arguments, content_hash, effect, proposed_by, created_at, status, run_id, step,"
    " call_id, decided_by, decided_at, decision_reason"
)
_L = (
    "key, tool, arguments_hash, status, owner, attempts, created_at, updated_at, lease_until, proposal_id,"
    " run_id, result, note"
)
_C = "run_id, app, state, status, updated_at, stop_reason"


def _proposal(row: tuple[Any, ...]) -> StoredProposal:
    (pid, tenant, tool, args, chash, effect, by, created, status, run_id, step, call_id, dby, dat, why) = row
    return StoredProposal(
        id=pid,
        tenant=tenant,
        tool=tool,
        arguments=args,
        content_hash=chash,
        effect=effect,
        proposed_by=by,
        created_at=created,
        status=ProposalStatus(status),
        run_id=run_id,
        step=step,
        call_id=call_id,
        decided_by=dby,
        decided_at=dat,
        decision_reason=why,
    )


def _entry(row: tuple[Any, ...]) -> LedgerEntry:
    key, tool, ahash, status, owner, attempts, created, updated, lease, pid, run_id, result, note = row
    return LedgerEntry(
        key=key,
        tool=tool,
        arguments_hash=ahash,
        status=LedgerStatus(status),
        owner=owner,
        attempts=attempts,
        created_at=created,
        updated_at=updated,
        lease_until=lease,
        proposal_id=pid,
        run_id=run_id,
        result=result,
        note=note,
    )


def _checkpoint(r: tuple[Any, ...]) -> Checkpoint:
    return Checkpoint(r[0], r[1], r[2], r[3], r[4], r[5])


def _event(pid: str, op: str, actor: str, detail: str, now: datetime) -> Sql:
    return Sql(
        "INSERT INTO approval_events (proposal_id, op, actor, detail, at) VALUES (%s, %s, %s, %s, %s)",
        (pid, op, actor, detail, ts(now)),
        fetch="none",
    )


# -- operations (one transaction each; driven by PgDatabase.run / arun) ------------------------


def _add_proposal(proposal: NewProposal, now: datetime) -> Op[StoredProposal]:
    pid = "prop_" + uuid.uuid4().hex  # random, never derived from content: same content, new id
    at = ts(now)
    row = yield Sql(
        f"INSERT INTO proposals ({_P}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,NULL,NULL,'')"
        f" RETURNING {_P}",
        (
            pid,
            proposal.tenant,
            proposal.tool,
            proposal.arguments,
            proposal.content_hash,
            proposal.effect,
            proposal.proposed_by,
            at,
            ProposalStatus.PENDING.value,
            proposal.run_id,
            proposal.step,
            proposal.call_id,
        ),
        fetch="one",
    )
    yield _event(pid, "proposed", proposal.proposed_by, proposal.content_hash, at)
    return _proposal(row)


def _get_proposal(proposal_id: str) -> Op[StoredProposal | None]:
    row = yield Sql(f"SELECT {_P} FROM proposals WHERE id = %s", (proposal_id,), fetch="one")
    return _proposal(row) if row else None


def _find_for_call(run_id: str, step: int, call_id: str) -> Op[StoredProposal | None]:
    row = yield Sql(
        f"SELECT {_P} FROM proposals WHERE run_id = %s AND step = %s AND call_id = %s",
        (run_id, step, call_id),
        fetch="one",
    )
    return _proposal(row) if row else None


def _list_proposals(status: ProposalStatus | None, run_id: str | None) -> Op[list[StoredProposal]]:
    sql, params = f"SELECT {_P} FROM proposals WHERE TRUE", []
    if status is not None:
        sql += " AND status = %s"
        params.append(str(status))
    if run_id is not None:
        sql += " AND run_id = %s"
        params.append(run_id)
    rows = yield Sql(sql + " ORDER BY created_at, id", tuple(params))
    return [_proposal(r) for r in rows]


def _decide(
    proposal_id: str,
    to: ProposalStatus,
    allowed_from: frozenset[ProposalStatus],
    actor: str,
    reason: str,
    now: datetime,
) -> Op[StoredProposal]:
    at = ts(now)
    row = yield Sql(f"SELECT {_P} FROM proposals WHERE id = %s FOR UPDATE", (proposal_id,), fetch="one")
    if row is None:
        raise ApprovalError("unknown_proposal", f"no proposal {proposal_id!r}")
    current = _proposal(row)
    if current.status not in allowed_from:
        raise ApprovalError(
            f"already_{current.status}", f"proposal {proposal_id} is {current.status}; cannot {to}"
        )
    row = yield Sql(
        "UPDATE proposals SET status = %s, decided_by = %s, decided_at = %s, decision_reason = %s"
        f" WHERE id = %s RETURNING {_P}",
        (str(to), actor, at, reason, proposal_id),
        fetch="one",
    )
    yield _event(proposal_id, str(to), actor, reason, at)
    return _proposal(row)


def _add_event(proposal_id: str, op: str, actor: str, detail: str, now: datetime) -> Op[None]:
    yield _event(proposal_id, op, actor, detail, now)


def _events(proposal_id: str) -> Op[list[ApprovalEvent]]:
    rows = yield Sql(
        "SELECT proposal_id, op, actor, at, detail FROM approval_events WHERE proposal_id = %s ORDER BY seq",
        (proposal_id,),
    )
    return [ApprovalEvent(p, op, actor, at, detail) for p, op, actor, at, detail in rows]


def _claim(
    key: str,
    tool: str,
    arguments_hash: str,
    owner: str,
    lease_until: datetime,
    now: datetime,
    owner_dead: Callable[[LedgerEntry, datetime], bool],
    proposal_id: str | None,
    run_id: str | None,
    worker_dead_after_s: float | None = None,
) -> Op[Claim]:
    at, lease = ts(now), ts(lease_until)
    inserted = yield Sql(
        f"INSERT INTO effect_ledger ({_L}) VALUES (%s,%s,%s,%s,%s,1,%s,%s,%s,%s,%s,NULL,'')"
        f" ON CONFLICT (key) DO NOTHING RETURNING {_L}",
        (key, tool, arguments_hash, LedgerStatus.INTENT.value, owner, at, at, lease, proposal_id, run_id),
        fetch="one",
    )
    if inserted is not None:
        return Claim("run", _entry(inserted))
    row = yield Sql(f"SELECT {_L} FROM effect_ledger WHERE key = %s FOR UPDATE", (key,), fetch="one")
    entry = _entry(row)
    if entry.arguments_hash != arguments_hash or entry.tool != tool:
        # Same key, other content: a bug or a forged key; never run, never replay.
        raise ApprovalError("key_conflict", f"idempotency key {key} was used for other content")
    if entry.status is LedgerStatus.DONE:
        return Claim("done", entry)
    if entry.status is LedgerStatus.ESCALATED:
        return Claim("escalated", entry)
    if not owner_dead(entry, now) and not (yield from _worker_gone(entry.owner, worker_dead_after_s)):
        return Claim("busy", entry)
    # The owner died between intent and outcome: whether the effect happened is unknown.
    row = yield Sql(
        "UPDATE effect_ledger SET status = %s, owner = %s, updated_at = %s, lease_until = %s, note = %s"
        f" WHERE key = %s RETURNING {_L}",
        (
            LedgerStatus.RECONCILING.value,
            owner,
            at,
            lease,
            f"outcome unknown: owner {entry.owner} gone during {entry.status}",
            key,
        ),
        fetch="one",
    )
    return Claim("reconcile", _entry(row))


def _worker_gone(owner: str, dead_after_s: float | None) -> Op[bool]:
    """Whether the owner ("host:pid:token") is a durable worker whose heartbeat stopped: on
    another machine its pid cannot be checked, and its lease may run for minutes."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if dead_after_s is None or not pid.isdigit():
        return False
    row = yield Sql(
        "SELECT 1 FROM tether_workers WHERE host = %s AND pid = %s"
        " AND (heartbeat_at < now() - make_interval(secs => %s) OR recovered_at IS NOT NULL)",
        (host, int(pid), dead_after_s),
        fetch="one",
    )
    return row is not None


def _owned(key: str, owner: str) -> Op[LedgerEntry]:
    row = yield Sql(f"SELECT {_L} FROM effect_ledger WHERE key = %s FOR UPDATE", (key,), fetch="one")
    if row is None:
        raise ApprovalError("unknown_key", f"no ledger entry {key}")
    entry = _entry(row)
    if entry.owner != owner or entry.status is LedgerStatus.DONE:
        raise ApprovalError("lost_ownership", f"ledger entry {key} is no longer owned by this caller")
    return entry


def _finish(key: str, owner: str | None, result: str, note: str, now: datetime) -> Op[LedgerEntry]:
    at = ts(now)
    if owner is None:  # a person resolving an escalated entry
        row = yield Sql(f"SELECT {_L} FROM effect_ledger WHERE key = %s FOR UPDATE", (key,), fetch="one")
        if row is None or _entry(row).status is not LedgerStatus.ESCALATED:
            raise ApprovalError("not_escalated", f"ledger entry {key} is not waiting for a person")
        entry = _entry(row)
    else:
        entry = yield from _owned(key, owner)
    row = yield Sql(
        f"UPDATE effect_ledger SET status = 'done', result = %s, note = %s, updated_at = %s WHERE key = %s"
        f" RETURNING {_L}",
        (result, note or entry.note, at, key),
        fetch="one",
    )
    return _entry(row)


def _set_ledger_status(
    key: str, status: LedgerStatus, owner: str, note: str, now: datetime, lease_until: datetime
) -> Op[LedgerEntry]:
    if status is LedgerStatus.DONE:
        raise ValueError("use finish() to record an outcome")
    at, lease = ts(now), ts(lease_until)
    yield from _owned(key, owner)
    bump = 1 if status is LedgerStatus.INTENT else 0
    row = yield Sql(
        "UPDATE effect_ledger SET status = %s, note = %s, updated_at = %s, lease_until = %s,"
        f" attempts = attempts + %s WHERE key = %s RETURNING {_L}",
        (str(status), note, at, lease, bump, key),
        fetch="one",
    )
    return _entry(row)


def _ledger_entry(key: str) -> Op[LedgerEntry | None]:
    row = yield Sql(f"SELECT {_L} FROM effect_ledger WHERE key = %s", (key,), fetch="one")
    return _entry(row) if row else None


def _ledger_for(proposal_id: str) -> Op[list[LedgerEntry]]:
    rows = yield Sql(
        f"SELECT {_L} FROM effect_ledger WHERE proposal_id = %s ORDER BY created_at, key", (proposal_id,)
    )
    return [_entry(r) for r in rows]


def _ledger_for_run(run_id: str) -> Op[list[LedgerEntry]]:
    rows = yield Sql(f"SELECT {_L} FROM effect_ledger WHERE run_id = %s ORDER BY created_at, key", (run_id,))
    return [_entry(r) for r in rows]


def _save_checkpoint(
    run_id: str, app: str | None, state: str, status: str, stop_reason: str, now: datetime
) -> Op[None]:
    yield Sql(
        f"INSERT INTO run_checkpoints ({_C}) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (run_id) DO UPDATE SET app = excluded.app, state = excluded.state,"
        " status = excluded.status, stop_reason = excluded.stop_reason, updated_at = excluded.updated_at",
        (run_id, app, state, status, ts(now), stop_reason),
        fetch="none",
    )


def _load_checkpoint(run_id: str) -> Op[Checkpoint | None]:
    row = yield Sql(f"SELECT {_C} FROM run_checkpoints WHERE run_id = %s", (run_id,), fetch="one")
    return _checkpoint(row) if row else None


def _list_checkpoints(status: str | None = None) -> Op[list[Checkpoint]]:
    if status is None:
        rows = yield Sql(f"SELECT {_C} FROM run_checkpoints ORDER BY updated_at, run_id")
    else:
        rows = yield Sql(
            f"SELECT {_C} FROM run_checkpoints WHERE status = %s ORDER BY updated_at, run_id", (status,)
        )
    return [_checkpoint(r) for r in rows]


class PgApprovalStore:
    """An ``ApprovalStore`` on PostgreSQL. ``db`` is a URL (``postgresql://…[?schema=s]``) or a
    ``PgDatabase`` shared with the deployment's other stores. Migrates on open."""

    def __init__(self, db: str | PgDatabase) -> None:
        self._owns = not isinstance(db, PgDatabase)
        self.db = db if isinstance(db, PgDatabase) else PgDatabase(db)
        self.db.migrate("approvals", MIGRATIONS)
        # Set by a durable worker (tether.durable): a ledger owner that is a worker whose
        # heartbeat is this many seconds old counts as dead, wherever it ran.
        self.worker_dead_after_s: float | None = None

    def close(self) -> None:
        if self._owns:
            self.db.close()

    # -- sync face ---------------------------------------------------------------------------

    def add_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal:
        return self.db.run(_add_proposal, proposal, now)

    def get_proposal(self, proposal_id: str) -> StoredProposal | None:
        return self.db.run(_get_proposal, proposal_id)

    def find_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None:
        return self.db.run(_find_for_call, run_id, step, call_id)

    def list_proposals(
        self, *, status: ProposalStatus | None = None, run_id: str | None = None
    ) -> list[StoredProposal]:
        return self.db.run(_list_proposals, status, run_id)

    def decide(
        self,
        proposal_id: str,
        to: ProposalStatus,
        *,
        allowed_from: frozenset[ProposalStatus],
        actor: str,
        reason: str,
        now: datetime,
    ) -> StoredProposal:
        return self.db.run(_decide, proposal_id, to, allowed_from, actor, reason, now)

    def add_event(self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime) -> None:
        self.db.run(_add_event, proposal_id, op, actor, detail, now)

    def events(self, proposal_id: str) -> list[ApprovalEvent]:
        return self.db.run(_events, proposal_id)

    def claim(
        self,
        key: str,
        *,
        tool: str,
        arguments_hash: str,
        owner: str,
        lease_until: datetime,
        now: datetime,
        owner_dead: Callable[[LedgerEntry, datetime], bool],
        proposal_id: str | None = None,
        run_id: str | None = None,
    ) -> Claim:
        return self.db.run(
            _claim,
            key,
            tool,
            arguments_hash,
            owner,
            lease_until,
            now,
            owner_dead,
            proposal_id,
            run_id,
            self.worker_dead_after_s,
        )

    def finish(self, key: str, *, owner: str | None, result: str, note: str, now: datetime) -> LedgerEntry:
        return self.db.run(_finish, key, owner, result, note, now)

    def set_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry:
        return self.db.run(_set_ledger_status, key, status, owner, note, now, lease_until)

    def ledger_entry(self, key: str) -> LedgerEntry | None:
        return self.db.run(_ledger_entry, key)

    def ledger_for(self, proposal_id: str) -> list[LedgerEntry]:
        return self.db.run(_ledger_for, proposal_id)

    def ledger_for_run(self, run_id: str) -> list[LedgerEntry]:
        """Every ledger entry of one run (an extension the durable runner reads)."""
        return self.db.run(_ledger_for_run, run_id)

    def save_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None:
        self.db.run(_save_checkpoint, run_id, app, state, status, stop_reason, now)

    def load_checkpoint(self, run_id: str) -> Checkpoint | None:
        return self.db.run(_load_checkpoint, run_id)

    def list_checkpoints(self, status: str | None = None) -> list[Checkpoint]:
        return self.db.run(_list_checkpoints, status)

    # -- async face --------------------------------------------------------------------------

    async def aadd_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal:
        return await self.db.arun(_add_proposal, proposal, now)

    async def aget_proposal(self, proposal_id: str) -> StoredProposal | None:
        return await self.db.arun(_get_proposal, proposal_id)

    async def afind_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None:
        return await self.db.arun(_find_for_call, run_id, step, call_id)

    async def alist_proposals(
        self, *, status: ProposalStatus | None = None, run_id: str | None = None
    ) -> list[StoredProposal]:
        return await self.db.arun(_list_proposals, status, run_id)

    async def adecide(
        self,
        proposal_id: str,
        to: ProposalStatus,
        *,
        allowed_from: frozenset[ProposalStatus],
        actor: str,
        reason: str,
        now: datetime,
    ) -> StoredProposal:
        return await self.db.arun(_decide, proposal_id, to, allowed_from, actor, reason, now)

    async def aadd_event(self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime) -> None:
        await self.db.arun(_add_event, proposal_id, op, actor, detail, now)

    async def aevents(self, proposal_id: str) -> list[ApprovalEvent]:
        return await self.db.arun(_events, proposal_id)

    async def aclaim(
        self,
        key: str,
        *,
        tool: str,
        arguments_hash: str,
        owner: str,
        lease_until: datetime,
        now: datetime,
        owner_dead: Callable[[LedgerEntry, datetime], bool],
        proposal_id: str | None = None,
        run_id: str | None = None,
    ) -> Claim:
        return await self.db.arun(
            _claim,
            key,
            tool,
            arguments_hash,
            owner,
            lease_until,
            now,
            owner_dead,
            proposal_id,
            run_id,
            self.worker_dead_after_s,
        )

    async def afinish(
        self, key: str, *, owner: str | None, result: str, note: str, now: datetime
    ) -> LedgerEntry:
        return await self.db.arun(_finish, key, owner, result, note, now)

    async def aset_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry:
        return await self.db.arun(_set_ledger_status, key, status, owner, note, now, lease_until)

    async def aledger_entry(self, key: str) -> LedgerEntry | None:
        return await self.db.arun(_ledger_entry, key)

    async def aledger_for(self, proposal_id: str) -> list[LedgerEntry]:
        return await self.db.arun(_ledger_for, proposal_id)

    async def asave_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None:
        await self.db.arun(_save_checkpoint, run_id, app, state, status, stop_reason, now)

    async def aload_checkpoint(self, run_id: str) -> Checkpoint | None:
        return await self.db.arun(_load_checkpoint, run_id)

    async def alist_checkpoints(self) -> list[Checkpoint]:
        return await self.db.arun(_list_checkpoints, None)
