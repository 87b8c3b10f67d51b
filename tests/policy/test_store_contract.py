"""The ``ApprovalStore`` contract, run against every backend: SQLite, in-memory and PostgreSQL
(the Postgres half needs a server, see ``pg_url`` in tests/conftest.py). Every method is async
(the only face a store has)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from tether.errors import ApprovalError
from tether.policy import (
    Approvals,
    ApprovalStore,
    LedgerStatus,
    MemoryApprovalStore,
    ProposalStatus,
    SqliteApprovalStore,
)
from tether.policy._store import CheckpointStore, EffectLedger, LedgerEntry, NewProposal, ProposalStore

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=5)


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ApprovalStore]:
    s: ApprovalStore
    if request.param == "postgres":
        from tether.policy._pg_store import PgApprovalStore

        s = PgApprovalStore(request.getfixturevalue("pg_url"))
    elif request.param == "memory":
        s = MemoryApprovalStore()
    else:
        s = SqliteApprovalStore(tmp_path / "approvals.db")
    yield s
    s.close()  # type: ignore[attr-defined]


def _db_clock(store: ApprovalStore) -> datetime | None:
    """The database's clock now, for a store on PostgreSQL (``None`` for the others)."""
    from sqlalchemy import text

    db = getattr(store, "db", None)
    if db is None or db.dialect != "postgresql":
        return None
    value: datetime = db.snapshot(lambda conn: conn.execute(text("SELECT clock_timestamp()")).scalar_one())
    return value.astimezone(UTC)


def _stamped(store: ApprovalStore, got: datetime | None, given: datetime, before: datetime | None) -> bool:
    """A decision's and a pause's instant: the caller's ``given`` one; on PostgreSQL (shared by
    machines whose clocks may disagree) the database's clock when it was written."""
    if before is None:
        return got == given
    after = _db_clock(store)
    return got is not None and after is not None and before <= got <= after


def new(run_id: str | None = None, step: int | None = None, call_id: str | None = None) -> NewProposal:
    return NewProposal(
        "org-alpha", "add_note", '{"note":"n"}', "sha256:x", "write", "model", run_id, step, call_id
    )


def alive(entry: LedgerEntry, now: datetime) -> bool:
    return False


def dead(entry: LedgerEntry, now: datetime) -> bool:
    return True


async def test_store_satisfies_the_protocol_and_every_method_is_async(store: ApprovalStore) -> None:
    assert isinstance(store, (ApprovalStore, ProposalStore, EffectLedger, CheckpointStore))
    Approvals(store)  # accepted at wiring: nothing missing, nothing blocking
    seams = (ProposalStore, EffectLedger, CheckpointStore)
    names = {n for seam in seams for n, v in vars(seam).items() if inspect.iscoroutinefunction(v)}
    assert len(names) == 21  # with the resume claim: claim_resume, renew_resume, release_resume
    assert all(inspect.iscoroutinefunction(getattr(store, n)) for n in names)


async def test_same_content_gets_a_fresh_id_every_time(store: ApprovalStore) -> None:
    a, b = await store.add_proposal(new(), now=T0), await store.add_proposal(new(), now=T0)
    assert a.id != b.id and a.content_hash == b.content_hash
    assert await store.get_proposal(a.id) == a and a.status is ProposalStatus.PENDING
    assert await store.get_proposal("prop_missing") is None
    assert {p.id for p in await store.list_proposals()} == {a.id, b.id}


async def test_a_listing_is_chosen_by_tenant_and_cut_to_the_newest_by_the_query(store: ApprovalStore) -> None:
    made = []
    for i, tenant in enumerate(["org-alpha", "org-beta", "org-alpha", "org-gamma", "org-alpha"]):
        p = NewProposal(tenant, "add_note", f'{{"i":{i}}}', f"sha256:{i}", "write", "model")
        made.append(await store.add_proposal(p, now=T0 + timedelta(seconds=i)))
    alpha = [made[0].id, made[2].id, made[4].id]
    assert [p.id for p in await store.list_proposals(tenants={"org-alpha"})] == alpha  # oldest first
    assert [p.id for p in await store.list_proposals(tenants={"org-alpha"}, newest=2)] == alpha[1:]
    both = await store.list_proposals(tenants=["org-alpha", "org-gamma"], newest=2)
    assert [p.id for p in both] == [made[3].id, made[4].id]
    assert await store.list_proposals(tenants=()) == [] and await store.list_proposals(newest=0) == []
    assert [p.id for p in await store.list_proposals(newest=10)] == [p.id for p in made]
    await store.decide(
        made[4].id, ProposalStatus.DENIED, allowed_from=frozenset({ProposalStatus.PENDING}),
        actor="r", audited_as="r", reason="no", now=LATER,
    )  # fmt: skip
    pending = await store.list_proposals(status=ProposalStatus.PENDING, tenants={"org-alpha"}, newest=1)
    assert [p.id for p in pending] == [made[2].id]
    assert await store.proposal_tenants() == ["org-alpha", "org-beta", "org-gamma"]


async def test_decisions_are_transitions_from_allowed_states_only(store: ApprovalStore) -> None:
    p = await store.add_proposal(new(), now=T0)
    pending = frozenset({ProposalStatus.PENDING})
    before = _db_clock(store)
    approved = await store.decide(
        p.id, ProposalStatus.APPROVED, allowed_from=pending, actor="r", audited_as="r", reason="ok", now=LATER
    )
    assert (approved.status, approved.decided_by) == (ProposalStatus.APPROVED, "r")
    assert _stamped(store, approved.decided_at, LATER, before), approved.decided_at
    with pytest.raises(ApprovalError) as info:
        await store.decide(
            p.id, ProposalStatus.DENIED, allowed_from=pending, actor="r", audited_as="r", reason="", now=LATER
        )
    assert info.value.reason == "already_approved"
    with pytest.raises(ApprovalError) as info:
        await store.decide(
            "prop_missing",
            ProposalStatus.DENIED,
            allowed_from=pending,
            actor="r",
            audited_as="r",
            reason="",
            now=LATER,
        )
    assert info.value.reason == "unknown_proposal"
    assert [e.op for e in await store.events(p.id)] == ["proposed", "approved"]
    assert await store.list_proposals(status=ProposalStatus.PENDING) == []


async def test_a_call_maps_to_one_proposal_per_run_step_and_call(store: ApprovalStore) -> None:
    p = await store.add_proposal(new("run-1", 0, "c1"), now=T0)
    assert await store.find_for_call("run-1", 0, "c1") == p
    assert await store.find_for_call("run-1", 1, "c1") is None
    with pytest.raises(Exception):  # noqa: B017 - the backend's own integrity error
        await store.add_proposal(new("run-1", 0, "c1"), now=T0)
    assert await store.list_proposals(run_id="run-1") == [p]


async def test_the_first_claim_runs_a_live_owner_makes_others_wait_and_an_outcome_is_final(
    store: ApprovalStore,
) -> None:
    kw = {"tool": "add_note", "arguments_hash": "sha256:a", "lease_until": LATER, "now": T0}
    first = await store.claim("k1", owner="p1", owner_dead=alive, **kw)  # type: ignore[arg-type]
    assert first.action == "run" and first.entry.status is LedgerStatus.INTENT and first.entry.attempts == 1
    assert (await store.claim("k1", owner="p2", owner_dead=alive, **kw)).action == "busy"  # type: ignore[arg-type]
    with pytest.raises(ApprovalError) as info:
        await store.finish("k1", owner="p2", result="{}", note="", now=T0)
    assert info.value.reason == "lost_ownership"
    await store.finish("k1", owner="p1", result='{"text": "ok"}', note="", now=T0)
    done = await store.claim("k1", owner="p2", owner_dead=dead, **kw)  # type: ignore[arg-type]
    assert done.action == "done" and done.entry.result == '{"text": "ok"}'
    with pytest.raises(ApprovalError):  # recorded outcomes are never overwritten
        await store.finish("k1", owner="p1", result="{}", note="", now=T0)
    with pytest.raises(ApprovalError) as info:
        await store.claim("k1", owner="p2", owner_dead=dead, **{**kw, "arguments_hash": "sha256:other"})  # type: ignore[arg-type]
    assert info.value.reason == "key_conflict"


async def test_a_dead_owner_hands_the_entry_over_for_reconciliation_once(store: ApprovalStore) -> None:
    kw = {"tool": "add_note", "arguments_hash": "sha256:a", "lease_until": LATER, "now": T0}
    await store.claim("k2", owner="crashed", owner_dead=alive, **kw)  # type: ignore[arg-type]
    claim = await store.claim("k2", owner="p2", owner_dead=dead, **kw)  # type: ignore[arg-type]
    assert claim.action == "reconcile" and claim.entry.status is LedgerStatus.RECONCILING
    assert claim.entry.owner == "p2"
    assert (await store.claim("k2", owner="p3", owner_dead=alive, **kw)).action == "busy"  # type: ignore[arg-type]
    retried = await store.set_ledger_status(
        "k2", LedgerStatus.INTENT, owner="p2", note="never happened", now=T0, lease_until=LATER
    )
    assert retried.attempts == 2
    await store.set_ledger_status("k2", LedgerStatus.ESCALATED, owner="p2", note="?", now=T0, lease_until=T0)
    assert (await store.claim("k2", owner="p3", owner_dead=dead, **kw)).action == "escalated"  # type: ignore[arg-type]
    resolved = await store.finish("k2", owner=None, result='{"text": "resolved"}', note="by a person", now=T0)
    assert resolved.status is LedgerStatus.DONE


async def test_checkpoints_are_saved_replaced_and_listed(store: ApprovalStore) -> None:
    await store.save_checkpoint(
        "run-1", app="m:f", state='{"a": 1}', status="paused", stop_reason="x", now=T0
    )
    before = _db_clock(store)
    await store.save_checkpoint(
        "run-1", app="m:f", state='{"a": 2}', status="finished", stop_reason="y", now=LATER
    )
    cp = await store.load_checkpoint("run-1")
    assert cp is not None and (cp.state, cp.status, cp.stop_reason) == ('{"a": 2}', "finished", "y")
    assert _stamped(store, cp.updated_at, LATER, before), cp.updated_at
    assert await store.load_checkpoint("run-2") is None
    assert [c.run_id for c in await store.list_checkpoints()] == ["run-1"]
    await store.save_checkpoint("run-3", app="m:f", state="{}", status="paused", stop_reason="x", now=LATER)
    assert [c.run_id for c in await store.list_checkpoints(status="paused")] == ["run-3"]  # by status
    assert [c.run_id for c in await store.list_checkpoints(status="finished")] == ["run-1"]


async def test_timestamps_must_be_aware_and_come_back_in_utc(store: ApprovalStore) -> None:
    with pytest.raises(ValueError):
        await store.add_proposal(new(), now=datetime(2026, 11, 29, 12, 0))
    assert await store.list_proposals() == []  # the refused write left nothing behind
    local = datetime(2026, 11, 29, 13, 0, tzinfo=timezone(timedelta(hours=1)))
    p = await store.add_proposal(new(), now=local)
    assert p.created_at == T0 and p.created_at.utcoffset() == timedelta(0)
    assert await store.get_proposal(p.id) == p


async def test_stored_values_are_immutable_and_reads_are_consistent(store: ApprovalStore) -> None:
    p = await store.add_proposal(new("run-2", 1, "c9"), now=T0)
    with pytest.raises(AttributeError):
        p.arguments = "{}"  # type: ignore[misc]
    assert await store.get_proposal(p.id) == p
    await store.add_event(p.id, "executed", actor="host", detail="ok", now=LATER)
    assert [(e.op, e.actor, e.detail, e.at) for e in await store.events(p.id)] == [
        ("proposed", "model", "sha256:x", T0),
        ("executed", "host", "ok", LATER),
    ]
    with pytest.raises(ValueError):
        await store.set_ledger_status("k", LedgerStatus.DONE, owner="o", note="", now=T0, lease_until=T0)
    with pytest.raises(ApprovalError) as info:
        await store.set_ledger_status("k", LedgerStatus.INTENT, owner="o", note="", now=T0, lease_until=T0)
    assert info.value.reason == "unknown_key"
    assert await store.ledger_entry("k") is None and await store.ledger_for(p.id) == []


async def test_ledger_entries_are_listed_by_proposal_run_and_status_oldest_first(
    store: ApprovalStore,
) -> None:
    p = await store.add_proposal(new("run-9", 0, "c1"), now=T0)
    kw = {"tool": "add_note", "arguments_hash": "sha256:a", "owner_dead": alive}
    await store.claim("k-b", owner="o", lease_until=LATER, now=LATER, proposal_id=p.id, run_id="run-9", **kw)  # type: ignore[arg-type]
    await store.claim("k-a", owner="o", lease_until=LATER, now=T0, proposal_id=p.id, run_id="run-9", **kw)  # type: ignore[arg-type]
    await store.claim("k-c", owner="o", lease_until=LATER, now=T0, run_id="run-other", **kw)  # type: ignore[arg-type]
    await store.finish("k-a", owner="o", result="{}", note="", now=LATER)
    assert [e.key for e in await store.ledger_for(p.id)] == ["k-a", "k-b"]
    assert [e.key for e in await store.ledger_for_run("run-9")] == ["k-a", "k-b"]
    assert await store.ledger_for_run("run-none") == []
    assert [e.key for e in await store.ledger_in(LedgerStatus.INTENT)] == ["k-c", "k-b"]
    assert [e.key for e in await store.ledger_in(LedgerStatus.DONE, LedgerStatus.ESCALATED)] == ["k-a"]
    assert await store.ledger_in(LedgerStatus.RECONCILING) == []
