"""One URL selects the backend; the MCP pin and pause stores and the trace index behave the same
on SQLite and PostgreSQL; the Postgres plumbing survives a cut connection."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.errors import ApprovalError, ConfigError
from tether.mcp._pauses import Pauses
from tether.mcp._pinning import Pins, canonical_definition, check_listing
from tether.memory import MemoryPolicy, MemoryStore
from tether.policy import ApprovalStore
from tether.sql._database import blocking
from tether.stores._url import Stores, open_stores, parse_url

TOOL = {
    "name": "lookup",
    "description": "Look up a record.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}},
}
POLICY = MemoryPolicy(approved_sources=frozenset({"erp"}))


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite:///{tmp_path}/state"  # an absolute path: sqlite:////tmp/…


@pytest.fixture
def stores(url: str) -> Iterator[Stores]:
    s = open_stores(url, memory_policy=POLICY)
    yield s
    s.close()


def test_one_url_selects_the_backend_and_every_store_meets_its_protocol(stores: Stores, url: str) -> None:
    assert stores.location.backend == ("postgresql" if url.startswith("postgresql") else "sqlite")
    assert isinstance(stores.approvals, ApprovalStore)
    assert isinstance(stores.pins, Pins) and isinstance(stores.pauses, Pauses)
    assert isinstance(stores.memory, MemoryStore)
    assert (stores.traces is not None) == (stores.location.backend == "postgresql")


def test_an_unsupported_or_malformed_url_is_refused_with_what_is_accepted() -> None:
    with pytest.raises(ConfigError, match="sqlite:///dir"):
        parse_url("mysql://x/y")
    with pytest.raises(ConfigError, match="schema"):
        parse_url("postgresql://u@h/db?schema=Bad-Name")
    with pytest.raises(ConfigError):
        parse_url("sqlite:///")
    assert parse_url("sqlite:///out/state").path == Path("out/state")
    assert parse_url("postgresql://u@h/db?schema=t1").schema == "t1"


def test_an_unreachable_server_is_a_typed_error_naming_the_server() -> None:
    from tether.sql._postgres import StoreUnavailable

    with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1:1"):
        open_stores("postgresql://postgres@127.0.0.1:1/test?schema=nowhere&connect_timeout=1")


def test_pins_are_approved_and_read_back_by_another_process(stores: Stores, url: str) -> None:
    definition = canonical_definition(TOOL)
    [new] = check_listing([definition], blocking(stores.pins.pins, "s"), "ep")
    assert new.status == "new"
    assert blocking(stores.pins.approve, "s", [new], endpoint="ep", actor="ops") == ["lookup"]
    [same] = check_listing([definition], blocking(stores.pins.pins, "s"), "ep")
    assert same.status == "pinned"
    again = open_stores(url)  # another process or machine sees the pin
    try:
        assert blocking(again.pins.pins, "s")["lookup"].approved_by == "ops"
        assert blocking(again.pins.pins, "other") == {}
    finally:
        again.close()


def test_a_pause_is_one_per_question_answered_once_and_its_answer_handed_over_once(
    stores: Stores, url: str
) -> None:
    ask = {"server": "erp", "tool": "close", "arguments": {"id": 1}, "message": "Sure?", "schema": {"a": 1}}
    p = blocking(stores.pauses.create, run_id="r1", **ask)
    assert blocking(stores.pauses.create, run_id="r1", **ask).id == p.id  # asked again: the same pause
    assert [x.id for x in blocking(stores.pauses.pending)] == [p.id]
    answered = blocking(stores.pauses.answer, p.id, "accept", {"ok": True}, actor="ana")
    assert (answered.status, answered.answer, answered.answered_by) == ("answered", {"ok": True}, "ana")
    with pytest.raises(ApprovalError) as info:
        blocking(stores.pauses.answer, p.id, "decline", None, actor="bo")
    assert info.value.reason == "not_pending"
    assert blocking(stores.pauses.take_answer, p.question_key, "r2") is None  # another run asked it
    winners: list[Any] = []

    def take() -> None:  # four processes (each its own connection) race for the answer
        mine = open_stores(url)
        try:
            winners.append(blocking(mine.pauses.take_answer, p.question_key, "r1"))
        finally:
            mine.close()

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [w.id for w in winners if w is not None] == [p.id]
    blocking(stores.pauses.complete, p.id, "done")
    assert blocking(stores.pauses.get, p.id).status == "completed"
    with pytest.raises(ApprovalError):
        blocking(stores.pauses.get, "elic-missing")


def test_the_trace_index_stores_each_event_once_and_reads_back_in_order(pg_url: str) -> None:
    from tether.trace._events import EventKind, TraceEvent

    s = open_stores(pg_url)
    try:
        index = s.traces
        for seq in (1, 2, 2, 3):  # seq 2 twice: a recovered run re-emitting its last step
            index.write(TraceEvent("run-a", seq, "2026-01-01T00:00:00", EventKind.TOOL_PROPOSED, {"n": seq}))
        index.write(TraceEvent("run-b", 1, "2026-01-01T00:00:00", EventKind.STOP, {"reason": "accepted"}))
        index.close()  # the tracer's close flushes (the index serves every run)
        got = index.events("run-a")
        assert [e["seq"] for e in got] == [1, 2, 3] and got[0]["n"] == 1
        assert index.events("run-b", "stop")[0]["reason"] == "accepted"
        assert index.errors == []
    finally:
        s.close()


def test_a_cut_connection_is_replaced_and_nothing_is_lost(pg_url: str, pg_dsn: str) -> None:
    import psycopg

    from tether.policy._pg_store import PgApprovalStore
    from tether.policy._store import NewProposal

    store = PgApprovalStore(pg_url)
    try:
        from datetime import UTC, datetime

        now = datetime.now(UTC)
        first = blocking(store.add_proposal, NewProposal("t", "x", "{}", "h", "write", "m"), now=now)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
                (store.db.application_name,),
            ).fetchone()
        assert row is not None and row[0] >= 1  # the store's pooled connection is gone
        second = blocking(store.add_proposal, NewProposal("t", "x", "{}", "h", "write", "m"), now=now)
        assert {p.id for p in blocking(store.list_proposals)} == {first.id, second.id}
    finally:
        store.close()


def test_concurrent_claimers_and_deciders_on_postgres_see_each_transition_once(pg_url: str) -> None:
    from datetime import UTC, datetime, timedelta

    from tether.policy._pg_store import PgApprovalStore
    from tether.policy._store import NewProposal, ProposalStatus

    now = datetime.now(UTC)
    setup = PgApprovalStore(pg_url)
    proposal = blocking(setup.add_proposal, NewProposal("t", "x", "{}", "h", "write", "m"), now=now)
    barrier = threading.Barrier(6)
    claims: list[str] = []
    decisions: list[str] = []

    def contender(i: int) -> None:  # one process each: its own pool and connections
        store = PgApprovalStore(pg_url)
        try:
            barrier.wait()
            claim = blocking(
                store.claim, "k-race", tool="x", arguments_hash="h", owner=f"p{i}",
                lease_until=now + timedelta(minutes=1), now=now, owner_dead=lambda e, t: False,
            )  # fmt: skip
            claims.append(claim.action)
            try:
                blocking(
                    store.decide, proposal.id, ProposalStatus.APPROVED,
                    allowed_from=frozenset({ProposalStatus.PENDING}), actor=f"r{i}",
                    audited_as=f"r{i}", reason="", now=now,
                )  # fmt: skip
                decisions.append("approved")
            except ApprovalError as err:
                decisions.append(err.reason)
        finally:
            store.close()

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert sorted(claims) == ["busy"] * 5 + ["run"]
        assert sorted(decisions) == ["already_approved"] * 5 + ["approved"]
        assert [e.op for e in blocking(setup.events, proposal.id)] == ["proposed", "approved"]
    finally:
        setup.close()


def test_processes_opening_a_new_schema_at_the_same_instant_all_start(pg_url: str) -> None:
    """Workers started together race to create the deployment's schema and tables: each one
    opens its stores (``CREATE SCHEMA IF NOT EXISTS`` alone is not safe against that race)."""
    start = threading.Barrier(6)
    errors: list[BaseException] = []
    opened: list[Stores] = []

    def open_one() -> None:
        try:
            start.wait()
            opened.append(open_stores(pg_url))
        except BaseException as err:  # collected: the assertion names it
            errors.append(err)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == [] and len(opened) == 6
        blocking(opened[0].pins.approve, "s", [], endpoint="e", actor="a")  # every store usable afterwards
        assert all(blocking(s.pins.pins, "s") == {} for s in opened)
    finally:
        for s in opened:
            s.close()
