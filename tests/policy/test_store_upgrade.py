"""Stores written by main@077ce60 (before the tables were declared once) open, are upgraded in
place by the one migration mechanism (tether.sql._database), and carry on: a paused run resumes, a
pin still counts, a pause is answered, a memory is recalled, a console user logs in.

The fixture is the SQL text of those stores (fixtures/main-077ce60/make.py wrote it with that
tree's code): loaded into real SQLite files, and into a fresh PostgreSQL schema.
"""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from _outbox_app import REVIEWER, build, build_loop
from sqlalchemy import inspect

from tether.console._users import UserStore
from tether.core.stop import StopReason
from tether.mcp._pinning import check_listing
from tether.memory import MemoryPolicy
from tether.sql._database import Database
from tether.sql._tables import CONCERNS, PG_ONLY
from tether.stores._url import open_stores

pytestmark = pytest.mark.anyio

FIXTURE = Path(__file__).parent / "fixtures" / "main-077ce60"
NOW = datetime(2026, 12, 1, 18, 5, tzinfo=UTC)
POLICY = MemoryPolicy(approved_sources=frozenset({"erp"}))
TOOL = {"name": "lookup", "description": "Look up an order.", "inputSchema": {"type": "object"}}
FILES = {
    "approvals": "approvals",
    "pins": "mcp-pins",
    "pauses": "mcp-state",
    "memory": "memory",
    "users": "users",
}


def _load_sqlite(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE / "run", run)
    for stem in FILES.values():
        with sqlite3.connect(run / f"{stem}.db") as db:
            db.executescript((FIXTURE / f"{stem}.sql").read_text(encoding="utf-8"))
        db.close()
    return run


def _declared_shape(db: Database, concern: str) -> None:
    """The database has every declared column of the concern's tables, and every index."""
    with db.transaction(write=False) as conn:
        seen = inspect(conn)
        for table in CONCERNS[concern]:
            columns = {c["name"] for c in seen.get_columns(table.name)}
            declared = {c.name for c in table.c if db.dialect == "postgresql" or not c.info.get(PG_ONLY)}
            assert columns == declared, (table.name, columns ^ declared)
            indexes = {i["name"] for i in seen.get_indexes(table.name)}
            assert {i.name for i in table.indexes} <= indexes, (table.name, indexes)


def _migrations(db: Database) -> list[str]:
    with db.transaction(write=False) as conn:
        return sorted(r[0] for r in conn.exec_driver_sql("SELECT name FROM _migrations"))


async def _carry_on(stores: object) -> None:
    """What every store of the fixture still does after the upgrade, whatever the backend."""
    pins = await stores.pins.pins("erp")  # type: ignore[attr-defined]
    assert [c.status for c in check_listing([TOOL], pins, "sha256:cmd")] == ["pinned"]
    [pause] = await stores.pauses.pending()  # type: ignore[attr-defined]
    assert pause.run_id == "run-77" and pause.arguments == {"order": "742"}
    await stores.pauses.answer(pause.id, "accept", {"w": "Lyon"}, actor="ops")  # type: ignore[attr-defined]
    taken = await stores.pauses.take_answer(pause.question_key, "run-77")  # type: ignore[attr-defined]
    assert taken.answer == {"w": "Lyon"}
    recalled = await stores.memory.read("order:742", scope="tenant:alpha", roles={"support"}, now=NOW)  # type: ignore[attr-defined]
    assert [r.record.claim for r in recalled.records] == ["Ships to the Lyon depot."]
    assert [e.op for e in await stores.memory.history(recalled.records[0].record.id)] == ["write"]  # type: ignore[attr-defined]


async def test_sqlite_stores_written_by_main_077ce60_upgrade_in_place_and_resume(tmp_path: Path) -> None:
    run = _load_sqlite(tmp_path)
    stores = open_stores(f"sqlite:///{run}", memory_policy=POLICY, memory_clock=lambda: NOW)
    try:
        await _carry_on(stores)
        for concern, store in (("approvals", stores.approvals), ("pins", stores.pins)):
            _declared_shape(store.db, concern)
        _declared_shape(stores.pauses.db, "pauses")
        _declared_shape(stores.memory.db, "memory")
        assert _migrations(stores.approvals.db) == [
            "a001_proposals", "a002_events", "a003_ledger", "a004_checkpoints", "approvals.001_tables",
            "approvals.002_resume_claims", "approvals.003_ledger_tenant", "approvals.004_earlier_names",
        ]  # fmt: skip
        assert _migrations(stores.memory.db) == [
            "m001_records", "m002_events", "m003_conflicts", "memory.001_tables", "memory.002_earlier_names"
        ]  # fmt: skip
    finally:
        stores.close()
    users = UserStore(run / "users.db", scrypt_n=2**10)
    assert users.grants("ada") == {"org-alpha": "reviewer"}
    assert users.authenticate("ada", "correct horse battery")
    users.close()

    # The run main@077ce60 paused for approval resumes with today's code, its effect once.
    host, agent = build_loop(run / "approvals.db")
    assert host.approvals is not None
    [p] = await host.approvals.store.list_proposals()
    await host.approvals.approve(REVIEWER, p.id, reason="ok")
    done = await host.resume(agent, p.run_id or "")
    assert done.stop_reason is StopReason.ACCEPTED, done.kinds()
    box = build(run / "approvals.db", run / "outbox.db")[1]
    assert [(r[1], r[2]) for r in box.rows()] == [("order-1", "Customer asked for a call back.")]
    await host.aclose()

    # A second opening finds nothing to do.
    again = Database.sqlite(run / "approvals.db")
    assert again.migrate("approvals") == []
    again.close()


def test_a_fresh_sqlite_file_and_an_upgraded_one_have_the_same_tables_and_indexes(tmp_path: Path) -> None:
    run = _load_sqlite(tmp_path)

    def shape(path: Path) -> list[tuple[str, str]]:
        with sqlite3.connect(path) as conn:
            rows = conn.execute(
                "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
            ).fetchall()
        conn.close()
        return rows

    for concern, stem in FILES.items():
        old, new = Database.sqlite(run / f"{stem}.db"), Database.sqlite(tmp_path / "fresh" / f"{stem}.db")
        old.migrate(concern), new.migrate(concern)
        old.close(), new.close()
        assert shape(run / f"{stem}.db") == shape(tmp_path / "fresh" / f"{stem}.db"), concern


@pytest.fixture
def legacy_pg(pg_dsn: str) -> Iterator[str]:
    """The PostgreSQL stores main@077ce60 wrote, in a schema of this test's own."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    dump = (FIXTURE / "postgres.sql").read_text(encoding="utf-8").replace("legacy_077ce60", schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(dump)  # type: ignore[call-overload]
    sep = "&" if "?" in pg_dsn else "?"
    try:
        yield f"{pg_dsn}{sep}schema={schema}"
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # type: ignore[arg-type]


async def test_postgres_stores_written_by_main_077ce60_upgrade_in_place_and_carry_on(legacy_pg: str) -> None:
    from tether.policy._store import ProposalStatus

    stores = open_stores(legacy_pg, memory_policy=POLICY, memory_clock=lambda: NOW)
    try:
        await _carry_on(stores)
        for concern in ("approvals", "pins", "pauses", "memory", "traces"):
            _declared_shape(stores.db, concern)
        names = _migrations(stores.db)
        assert {"pg_a004_checkpoints", "approvals.001_tables", "memory.001_tables"} <= set(names)
        [p] = await stores.approvals.list_proposals(run_id="run-pg")
        decided = await stores.approvals.decide(
            p.id, ProposalStatus.APPROVED, allowed_from=frozenset({ProposalStatus.PENDING}), actor="r",
            audited_as="r", reason="", now=NOW,
        )  # fmt: skip
        assert decided.status is ProposalStatus.APPROVED and decided.created_at < NOW
        checkpoint = await stores.approvals.load_checkpoint("run-pg")
        assert checkpoint is not None and checkpoint.stop_reason == "approval_required"
        assert [e.op for e in await stores.approvals.events(p.id)] == ["proposed", "approved"]
    finally:
        stores.close()
