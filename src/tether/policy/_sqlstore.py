"""``SqlApprovalStore``: the ``ApprovalStore`` on a ``tether.sql._database.Database``, written once
for SQLite (``SqliteApprovalStore``) and PostgreSQL (``PgApprovalStore``), whose tables are
declared once in ``tether.sql._tables``.

Every method is one transaction. Rows a transition reads are locked first (``FOR UPDATE`` on
PostgreSQL; SQLite's writers hold the file from their first statement), and a ledger claim
inserts with ``ON CONFLICT DO NOTHING`` before it reads, so two claimers of one key, or two
deciders of one proposal, are serialised and exactly one wins.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Collection
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, bindparam, delete, select, text, update

from tether.errors import ApprovalError
from tether.policy._ledger import Held, on_this_host, released, untokened
from tether.policy._store import (
    ApprovalEvent,
    Checkpoint,
    Claim,
    LedgerEntry,
    LedgerStatus,
    NewProposal,
    ProposalStatus,
    ResumeHold,
    StoredProposal,
)
from tether.sql._database import SqlStore
from tether.sql._journal import refuse_later
from tether.sql._tables import approval_events as E
from tether.sql._tables import effect_ledger as L
from tether.sql._tables import lock, upsert_for, utc
from tether.sql._tables import proposals as P
from tether.sql._tables import run_checkpoints as C
from tether.sql._tables import run_resumes as R

__all__ = ["SqlApprovalStore"]

WorkerGone = Callable[[Connection, str], bool | None]


# The tables' columns are named as the values' fields (tether.sql._tables): a row maps onto its value.


def _proposal(row: Row[Any]) -> StoredProposal:
    return StoredProposal(**{**row._mapping, "status": ProposalStatus(row.status)})


def _entry(row: Row[Any]) -> LedgerEntry:
    return LedgerEntry(**{**row._mapping, "status": LedgerStatus(row.status)})


def _checkpoint(row: Row[Any]) -> Checkpoint:
    return Checkpoint(**row._mapping)


# -- operations (one transaction each) ----------------------------------------------------------
#
# The statements of the hot path are built once, here, with bound parameters: SQLAlchemy then
# compiles each once and reuses it (building one per call costs more than the SQLite write;
# bench/storage.py). Writes read back what they wrote with RETURNING, not a second SELECT.

_GET_P = select(P).where(P.c.id == bindparam("b_id"))
_GET_P_LOCKED = _GET_P.with_for_update()
_INSERT_P = P.insert()
_INSERT_E = E.insert()
_DECIDE = (
    update(P)
    .where(P.c.id == bindparam("b_id"))
    .values(
        status=bindparam("b_status"),
        decided_by=bindparam("b_by"),
        decided_at=bindparam("b_at"),
        decision_reason=bindparam("b_reason"),
    )
    .returning(*P.c)
)
# Decided only if the row is still, inside this transaction, the one the caller verified: the
# same status, tenant, tool, arguments, content hash and effect (``unchanged``), never one rewritten
# between the caller's read and this update.
_DECIDE_UNCHANGED = _DECIDE.where(
    P.c.status == bindparam("b_from"),
    P.c.tenant == bindparam("b_tenant"),
    P.c.tool == bindparam("b_tool"),
    P.c.arguments == bindparam("b_arguments"),
    P.c.content_hash == bindparam("b_hash"),
    P.c.effect == bindparam("b_effect"),
)
_GET_L = select(L).where(L.c.key == bindparam("b_key"))
_GET_L_LOCKED = _GET_L.with_for_update()
_CLAIM = {
    name: upsert_for(name, L).on_conflict_do_nothing(index_elements=["key"]).returning(*L.c)
    for name in ("sqlite", "postgresql")
}
_FINISH = (
    update(L)
    .where(L.c.key == bindparam("b_key"))
    .values(
        status=LedgerStatus.DONE.value,
        result=bindparam("b_result"),
        note=bindparam("b_note"),
        updated_at=bindparam("b_at"),
    )
    .returning(*L.c)
)


def _save_checkpoint_statement(name: str) -> Any:
    insert = upsert_for(name, C)
    keep = ("app", "state", "status", "stop_reason", "updated_at")
    return insert.on_conflict_do_update(index_elements=["run_id"], set_={k: insert.excluded[k] for k in keep})


_SAVE_CHECKPOINT = {name: _save_checkpoint_statement(name) for name in ("sqlite", "postgresql")}


def _get_proposal(conn: Connection, proposal_id: str, lock: bool = False) -> StoredProposal | None:
    row = conn.execute(_GET_P_LOCKED if lock else _GET_P, {"b_id": proposal_id}).first()
    return _proposal(row) if row is not None else None


def _as_verified(current: StoredProposal, unchanged: StoredProposal) -> dict[str, Any]:
    """The bound values of ``_DECIDE_UNCHANGED``: the row as the caller verified it, and its
    status as read under this transaction's lock."""
    return {
        "b_from": str(current.status),
        "b_tenant": unchanged.tenant,
        "b_tool": unchanged.tool,
        "b_arguments": unchanged.arguments,
        "b_hash": unchanged.content_hash,
        "b_effect": unchanged.effect,
    }


def _not_contracted(conn: Connection, where: str) -> None:
    """Refuse (``SchemaTooNew``, nothing written) a decision on a store a later release contracted
    since this process opened it: a console of this release serves for days, and a migration is
    checked only at open. Read in the decision's own transaction, so none is written past it."""
    names = conn.exec_driver_sql("SELECT name FROM _migrations").scalars()
    refuse_later(where, names, ["approvals"])


def _add_event(conn: Connection, proposal_id: str, op: str, actor: str, detail: str, now: datetime) -> None:
    conn.execute(
        _INSERT_E, {"proposal_id": proposal_id, "op": op, "actor": actor, "detail": detail, "at": now}
    )


def _add_proposal(conn: Connection, proposal: NewProposal, now: datetime) -> StoredProposal:
    stored = StoredProposal(
        **{f.name: getattr(proposal, f.name) for f in fields(NewProposal)},
        id="prop_" + uuid.uuid4().hex,  # random, never derived from content: same content, new id
        created_at=utc(now),
        status=ProposalStatus.PENDING,
    )
    values = {f: getattr(stored, f) for f in _PROPOSAL_FIELDS}
    conn.execute(_INSERT_P, {**values, "status": stored.status.value})
    _add_event(conn, stored.id, "proposed", proposal.proposed_by, proposal.content_hash, now)
    return stored


_PROPOSAL_FIELDS = tuple(c.name for c in P.c)


def _find_for_call(conn: Connection, run_id: str, step: int, call_id: str) -> StoredProposal | None:
    row = conn.execute(
        select(P).where(P.c.run_id == run_id, P.c.step == step, P.c.call_id == call_id)
    ).first()
    return _proposal(row) if row is not None else None


def _list_proposals(
    conn: Connection,
    status: ProposalStatus | None,
    run_id: str | None,
    tenants: Collection[str] | None = None,
    newest: int | None = None,
) -> list[StoredProposal]:
    query = select(P).order_by(P.c.created_at.desc(), P.c.id.desc())
    if status is not None:
        query = query.where(P.c.status == str(status))
    if run_id is not None:
        query = query.where(P.c.run_id == run_id)
    if tenants is not None:
        query = query.where(P.c.tenant.in_(sorted(tenants)))
    if newest is not None:
        query = query.limit(max(newest, 0))
    return [_proposal(r) for r in conn.execute(query)][::-1]


def _events(conn: Connection, proposal_id: str) -> list[ApprovalEvent]:
    rows = conn.execute(select(E).where(E.c.proposal_id == proposal_id).order_by(E.c.seq))
    return [ApprovalEvent(r.proposal_id, r.op, r.actor, r.at, r.detail) for r in rows]


def _ledger_entry(conn: Connection, key: str, lock: bool = False) -> LedgerEntry | None:
    row = conn.execute(_GET_L_LOCKED if lock else _GET_L, {"b_key": key}).first()
    return _entry(row) if row is not None else None


def _entry_in(conn: Connection, key: str, lock: bool = False) -> LedgerEntry:
    entry = _ledger_entry(conn, key, lock)
    assert entry is not None
    return entry


def _owned(conn: Connection, key: str, owner: str) -> LedgerEntry:
    entry = _ledger_entry(conn, key, lock=True)
    if entry is None:
        raise ApprovalError("unknown_key", f"no ledger entry {key}")
    if entry.owner != owner or entry.status is LedgerStatus.DONE:
        raise ApprovalError("lost_ownership", f"ledger entry {key} is no longer owned by this caller")
    return entry


def _change(
    conn: Connection, key: str, status: LedgerStatus, owner: str, note: str, now: datetime, lease: datetime
) -> LedgerEntry:
    """Move an entry to ``status`` under ``owner`` (an attempt more when it goes back to intent)."""
    bump = 1 if status is LedgerStatus.INTENT else 0
    values = {"status": str(status), "owner": owner, "note": note, "updated_at": now, "lease_until": lease}
    conn.execute(update(L).where(L.c.key == key).values(**values, attempts=L.c.attempts + bump))
    return _entry_in(conn, key)


def _db_clock(conn: Connection, now: datetime) -> timedelta:
    """How far the database's clock is ahead of the caller's ``now``. A lease one worker writes
    is read by workers on other machines, whose clocks may disagree: on PostgreSQL a lease is
    stored, and compared, on the one clock they share (a SQLite file has one machine's). The
    times an entry records (``created_at``, ``updated_at``) stay the caller's."""
    if conn.dialect.name != "postgresql":
        return timedelta(0)
    return utc(conn.execute(text("SELECT now()")).scalar_one()) - utc(now)


def _db_now(conn: Connection, now: datetime) -> datetime:
    """The instant a pause or a decision is recorded at: on PostgreSQL the database's clock (its
    time now, not its transaction's start), shared by every machine; on SQLite the caller's (a
    file has one machine's). A resume compares a decision with the pause it ends
    (``due_for_resume``): on two machines' clocks a reviewer's running behind held the run
    paused for good, and one running ahead resumed it on a decision older than the pause."""
    if conn.dialect.name != "postgresql":
        return now
    utc(now)  # a naive instant is refused on every store
    return utc(conn.execute(text("SELECT clock_timestamp()")).scalar_one())


def _gone(
    conn: Connection,
    entry: Held,
    owner_dead: Callable[[Any, datetime], bool],
    now: datetime,
    worker_gone: WorkerGone | None,
) -> bool:
    """Whether the entry's owner is gone. A durable worker's heartbeat says it for a worker on
    another machine, whatever its lease says (an older release's worker writes its lease on its
    own clock: one running behind the database's looked gone while it ran its call); on this
    machine its process does too, and a worker declared dead is gone wherever it runs."""
    said = worker_gone(conn, entry.owner) if worker_gone is not None and not released(entry) else None
    if said is None or on_this_host(entry.owner):
        return owner_dead(entry, now) or bool(said)
    return said


def _waits_for_person(conn: Connection, entry: LedgerEntry, now: datetime) -> bool:
    """Whether a person may say what became of the entry's call (``finish`` with no owner):
    escalated; or its call raised and no one reconciles it (its lease ran out); or an earlier
    release's process (``host:pid``, no token) holds it past its lease: that pid may be another
    process now (a reused pid, alive for good), which only a person can tell."""
    if entry.status is LedgerStatus.ESCALATED:
        return True
    if not (released(entry) or entry.lease_until <= now + _db_clock(conn, now)):
        return False
    return entry.status is LedgerStatus.RECONCILING or (
        entry.status is LedgerStatus.INTENT and untokened(entry.owner)
    )


def _ledger_where(conn: Connection, *where: Any) -> list[LedgerEntry]:
    return [_entry(r) for r in conn.execute(select(L).where(*where).order_by(L.c.created_at, L.c.key))]


def _load_checkpoint(conn: Connection, run_id: str) -> Checkpoint | None:
    row = conn.execute(select(C).where(C.c.run_id == run_id)).first()
    return _checkpoint(row) if row is not None else None


def _claim_resume(
    conn: Connection,
    run_id: str,
    owner: str,
    lease_until: datetime,
    now: datetime,
    gone: Callable[[Connection, ResumeHold, datetime], bool],
) -> Checkpoint | None:
    """Take ``run_id``'s resume claim for ``owner`` (see ``claim_resume``); its checkpoint."""
    lock(conn, f"tether_resume:{run_id}")  # two first claimers of a run: one waits for the other
    ahead = _db_clock(conn, now)
    held = conn.execute(select(R).where(R.c.run_id == run_id)).first()
    if held is not None:
        hold = ResumeHold(**held._mapping)
        # Its own claim again: a release that failed (one resume at a time in a process).
        if hold.owner != owner and not gone(conn, hold, now + ahead):
            raise ApprovalError("run_busy", f"run {run_id} is being resumed now, by another process")
        conn.execute(delete(R).where(R.c.run_id == run_id))
    values = {"run_id": run_id, "owner": owner, "updated_at": now, "lease_until": lease_until + ahead}
    conn.execute(R.insert(), values)
    return _load_checkpoint(conn, run_id)


def _list_checkpoints(conn: Connection, status: str | None) -> list[Checkpoint]:
    query = select(C).order_by(C.c.updated_at, C.c.run_id)
    if status is not None:
        query = query.where(C.c.status == status)
    return [_checkpoint(r) for r in conn.execute(query)]


def heartbeat_stopped(dead_after_s: float, conn: Connection, owner: str) -> bool | None:
    """Whether the owner ("host:pid:token") is a durable worker whose heartbeat stopped (or that
    a survivor declared dead): True; a worker beating (on the database's clock): False; None
    where no worker of that host and pid is registered. On another machine a pid cannot be
    checked and a lease is only as good as its writer's clock (PostgreSQL).

    A worker that registered its owner token at its latest start speaks only for that token: a
    worker killed (-9) and restarted on the same host under the same pid (a container's) beats
    for itself, not for the dead one's calls (they were held as in progress for good)."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if not pid.isdigit():
        return None
    rows = conn.execute(
        text(
            "SELECT heartbeat_at >= now() - make_interval(secs => :secs) AND recovered_at IS NULL,"
            " CASE WHEN owner_since = started_at THEN owner END"  # stale after another release's start
            " FROM tether_workers WHERE host = :host AND pid = :pid"
        ),
        {"host": host, "pid": int(pid), "secs": dead_after_s},
    ).all()
    rows = [r for r in rows if r[1] is None or r[1] == owner]  # another incarnation says nothing
    return None if not rows else not any(bool(r[0]) for r in rows)


class SqlApprovalStore(SqlStore):
    """An ``ApprovalStore`` on a ``Database`` (see ``SqlStore`` for what it is built on): each
    method one transaction, in a worker thread off the event loop. Any number of store objects
    and processes may share the database."""

    concern = "approvals"
    # Set by a durable worker (tether.durable): a ledger owner that is a worker whose heartbeat
    # is this many seconds old counts as dead, wherever it ran (PostgreSQL).
    worker_dead_after_s: float | None = None

    def _worker_gone(self) -> WorkerGone | None:
        if self.worker_dead_after_s is None or self.db.dialect != "postgresql":
            return None
        return functools.partial(heartbeat_stopped, self.worker_dead_after_s)

    # -- proposals --------------------------------------------------------------------

    async def add_proposal(self, proposal: NewProposal, *, now: datetime) -> StoredProposal:
        return await self.db.write(_add_proposal, proposal, now)

    async def get_proposal(self, proposal_id: str) -> StoredProposal | None:
        return await self.db.read(_get_proposal, proposal_id)

    async def find_for_call(self, run_id: str, step: int, call_id: str) -> StoredProposal | None:
        return await self.db.read(_find_for_call, run_id, step, call_id)

    async def list_proposals(
        self,
        *,
        status: ProposalStatus | None = None,
        run_id: str | None = None,
        tenants: Collection[str] | None = None,
        newest: int | None = None,
    ) -> list[StoredProposal]:
        return await self.db.read(_list_proposals, status, run_id, tenants, newest)

    async def proposal_tenants(self) -> list[str]:
        def tenants(conn: Connection) -> list[str]:
            query = select(P.c.tenant).distinct().order_by(P.c.tenant)
            return [str(t) for (t,) in conn.execute(query)]

        return await self.db.read(tenants)

    async def decide(
        self,
        proposal_id: str,
        to: ProposalStatus,
        *,
        allowed_from: frozenset[ProposalStatus],
        actor: str,
        audited_as: str,
        reason: str,
        now: datetime,
        unchanged: StoredProposal | None = None,
    ) -> StoredProposal:
        if not isinstance(audited_as, str) or not audited_as.strip():  # never a decision of no one's
            raise ApprovalError("bad_request", "a decision names who made it, as audited (audited_as)")

        def decide(conn: Connection) -> StoredProposal:
            _not_contracted(conn, str(self.path or self.db))
            current = _get_proposal(conn, proposal_id, lock=True)
            if current is None:
                raise ApprovalError("unknown_proposal", f"no proposal {proposal_id!r}")
            if current.status not in allowed_from:
                why = f"proposal {proposal_id} is {current.status}; it cannot become {to}"
                raise ApprovalError(f"already_{current.status}", why)
            at = _db_now(conn, now)
            values = {"b_id": proposal_id, "b_status": str(to), "b_by": actor, "b_at": at, "b_reason": reason}
            if unchanged is not None:
                values.update(_as_verified(current, unchanged))
            row = conn.execute(_DECIDE if unchanged is None else _DECIDE_UNCHANGED, values).first()
            if row is None:  # only the conditional update can match no row: the row was changed
                why = f"proposal {proposal_id} changed after it was read; it was not {to}"
                raise ApprovalError("content_changed", why)
            _add_event(conn, proposal_id, str(to), audited_as, reason, at)
            return _proposal(row)

        return await self.db.write(decide)

    async def add_event(self, proposal_id: str, op: str, *, actor: str, detail: str, now: datetime) -> None:
        await self.db.write(_add_event, proposal_id, op, actor, detail, now)

    async def events(self, proposal_id: str) -> list[ApprovalEvent]:
        return await self.db.read(_events, proposal_id)

    # -- the effect ledger ------------------------------------------------------------

    async def claim(
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
        tenant: str | None = None,
    ) -> Claim:
        fresh = dict(
            key=key,
            tool=tool,
            arguments_hash=arguments_hash,
            status=LedgerStatus.INTENT.value,
            owner=owner,
            attempts=1,
            created_at=now,
            updated_at=now,
            lease_until=lease_until,
            proposal_id=proposal_id,
            run_id=run_id,
            result=None,
            note="",
            tenant=tenant,
        )
        worker_gone = self._worker_gone()

        def claim(conn: Connection) -> Claim:
            ahead = _db_clock(conn, now)
            lease = lease_until + ahead
            inserted = conn.execute(_CLAIM[conn.dialect.name], {**fresh, "lease_until": lease}).first()
            if inserted is not None:
                return Claim("run", _entry(inserted))
            entry = _entry_in(conn, key, lock=True)
            if entry.arguments_hash != arguments_hash or entry.tool != tool:
                # Same key, other content: a bug or a forged key; never run, never replay.
                raise ApprovalError("key_conflict", f"idempotency key {key} was used for other content")
            if tenant is not None and entry.tenant is not None and entry.tenant != tenant:
                # Another tenant's effect under a run id chosen again: never run, never replayed.
                raise ApprovalError("run_id_taken", f"idempotency key {key} is another tenant's effect")
            if entry.status is LedgerStatus.DONE:
                return Claim("done", entry)
            if entry.status is LedgerStatus.ESCALATED:
                return Claim("escalated", entry)
            if not _gone(conn, entry, owner_dead, now + ahead, worker_gone):
                return Claim("busy", entry)
            # The owner died between intent and outcome: whether the effect happened is unknown.
            note = f"outcome unknown: owner {entry.owner} gone during {entry.status}"
            return Claim("reconcile", _change(conn, key, LedgerStatus.RECONCILING, owner, note, now, lease))

        return await self.db.write(claim)

    async def finish(
        self, key: str, *, owner: str | None, result: str, note: str, now: datetime
    ) -> LedgerEntry:
        def finish(conn: Connection) -> LedgerEntry:
            if owner is None:  # a person resolving an escalated entry
                entry = _ledger_entry(conn, key, lock=True)
                if entry is None or not _waits_for_person(conn, entry, now):
                    raise ApprovalError("not_escalated", f"ledger entry {key} is not waiting for a person")
            else:
                entry = _owned(conn, key, owner)
            done = {"b_key": key, "b_result": result, "b_note": note or entry.note, "b_at": now}
            return _entry(conn.execute(_FINISH, done).one())

        return await self.db.write(finish)

    async def set_ledger_status(
        self, key: str, status: LedgerStatus, *, owner: str, note: str, now: datetime, lease_until: datetime
    ) -> LedgerEntry:
        if status is LedgerStatus.DONE:
            raise ValueError("use finish() to record an outcome")

        def change(conn: Connection) -> LedgerEntry:
            _owned(conn, key, owner)
            # A lease let go of (run out already: a failed call, an escalation) is kept as it is,
            # no later than the entry's update, so every reader sees it let go (``released``).
            lease = lease_until if lease_until <= now else lease_until + _db_clock(conn, now)
            return _change(conn, key, status, owner, note, now, lease)

        return await self.db.write(change)

    async def ledger_entry(self, key: str) -> LedgerEntry | None:
        return await self.db.read(_ledger_entry, key)

    async def ledger_for(self, proposal_id: str) -> list[LedgerEntry]:
        return await self.db.read(_ledger_where, L.c.proposal_id == proposal_id)

    async def ledger_for_run(self, run_id: str) -> list[LedgerEntry]:
        return await self.db.read(_ledger_where, L.c.run_id == run_id)

    async def ledger_in(self, *statuses: LedgerStatus) -> list[LedgerEntry]:
        return await self.db.read(_ledger_where, L.c.status.in_([str(s) for s in statuses]))

    # -- checkpoints -------------------------------------------------------------------

    async def save_checkpoint(
        self, run_id: str, *, app: str | None, state: str, status: str, stop_reason: str, now: datetime
    ) -> None:
        values = {"run_id": run_id, "app": app, "state": state, "status": status, "stop_reason": stop_reason}

        def save(conn: Connection) -> None:
            conn.execute(_SAVE_CHECKPOINT[conn.dialect.name], {**values, "updated_at": _db_now(conn, now)})

        await self.db.write(save)

    async def load_checkpoint(self, run_id: str) -> Checkpoint | None:
        return await self.db.read(_load_checkpoint, run_id)

    async def claim_resume(
        self,
        run_id: str,
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
        owner_dead: Callable[[ResumeHold, datetime], bool],
    ) -> Checkpoint | None:
        worker_gone = self._worker_gone()

        def gone(conn: Connection, hold: ResumeHold, at: datetime) -> bool:
            return _gone(conn, hold, owner_dead, at, worker_gone)

        return await self.db.write(_claim_resume, run_id, owner, lease_until, now, gone)

    async def renew_resume(self, run_id: str, *, owner: str, lease_until: datetime, now: datetime) -> bool:
        def renew(conn: Connection) -> bool:
            until = lease_until + _db_clock(conn, now)
            mine = (R.c.run_id == run_id) & (R.c.owner == owner)
            return bool(
                conn.execute(update(R).where(mine).values(updated_at=now, lease_until=until)).rowcount
            )

        return await self.db.write(renew)

    async def release_resume(self, run_id: str, *, owner: str) -> None:
        def release(conn: Connection) -> None:
            conn.execute(delete(R).where(R.c.run_id == run_id, R.c.owner == owner))

        await self.db.write(release)

    async def list_checkpoints(self, status: str | None = None) -> list[Checkpoint]:
        return await self.db.read(_list_checkpoints, status)
