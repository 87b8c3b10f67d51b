"""An operator's rolling upgrade, tenth round.

What did not hold, each fixed here and pinned below:

- memory a later release wrote, read after a rollback (or by a worker of this release still
  serving beside it): a record whose body holds a field or a value this release's strict record
  contract does not know (``extra="forbid"``, literal kinds) made every read of its subject and
  every write beside it fail with pydantic's ``ValidationError`` — untyped, the run's recall or
  its closing ``remember`` failing whole for one record. Such a record is now kept unread: a read
  lists it rejected (``unreadable``), its conflicts with readable records are still named, a
  write beside it is refused typed (``MemoryPolicyError("unreadable")``, naming the record and
  what this release could not read), and it can still be deleted (erasure never depends on
  reading it).
- a workflow request naming an op this release does not run (a later release's, beside this
  one on one DBOS version or after a rollback) was run as a start: anything but ``resume`` fell
  through to a fresh agent loop on the request's objective, under the run's id. It now stops
  before anything is built or run (``UnreadableStep``: the workflow stays pending for a worker
  that reads it, ``run_not_replayed`` names the op).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_rolling_upgrade import _write_version, deployed

from tether.errors import MemoryPolicyError
from tether.memory import MemoryPolicy, MemoryRecord
from tether.memory._sqlstore import SqlMemory

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)
SCOPE = "tenant:acme"
POLICY = MemoryPolicy(approved_sources=frozenset({"erp", "cmms"}))


def _record(claim: str, *, subject: str = "asset:991", system: str = "erp", **extra: Any) -> MemoryRecord:
    return MemoryRecord.model_validate(
        {
            "kind": "semantic",
            "subject": subject,
            "claim": claim,
            "source": {"system": system, "record": f"{system}-{claim}", "observed_at": T0.isoformat()},
            "scope": SCOPE,
            "confidence": "authoritative",
            "valid_until": (T0 + timedelta(days=30)).isoformat(),
            "acl": ["viewer"],
            "retention": "P30D",
            "purpose": "maintenance",
            "sensitivity": "internal",
            **extra,
        },
        strict=False,
    )


class Where:
    """A memory store's place (a SQLite file or a PostgreSQL schema) and raw SQL on it."""

    def __init__(self, kind: str, tmp_path: Path, pg_url: str | None) -> None:
        self.kind, self.tmp, self.pg_url = kind, tmp_path, pg_url

    def open(self) -> SqlMemory:
        place = str(self.tmp / "memory.db") if self.kind == "sqlite" else self.pg_url
        return SqlMemory(place, policy=POLICY, clock=lambda: NOW)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            with sqlite3.connect(self.tmp / "memory.db") as db:
                return list(db.execute(statement, params))
        import psycopg

        from tether.sql._postgres import PgUrl

        url = PgUrl.parse(self.pg_url or "")
        with psycopg.connect(url.conninfo, options=f"-c search_path={url.schema}") as db:
            cur = db.execute(statement.replace("?", "%s"), params or None)
            return list(cur) if cur.description else []


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Where]:
    pg_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    yield Where(request.param, tmp_path, pg_url)


def _as_a_later_release_wrote_it(where: Where, record_id: str, **fields: Any) -> None:
    """The stored body as a later release's record contract writes it: a field more."""
    [(body,)] = where.sql("SELECT body FROM memory_records WHERE id = ?", (record_id,))
    where.sql(
        "UPDATE memory_records SET body = ? WHERE id = ?",
        (json.dumps({**json.loads(body), **fields}), record_id),
    )


def test_memory_a_later_release_wrote_is_rejected_named_and_never_fails_the_store(where: Where) -> None:
    async def play() -> None:
        store = where.open()
        try:
            kept = await store.propose(_record("pump bearing replaced"))  # the legitimate flow
            later = await store.propose(_record("pump runs at 40 Hz", system="cmms"))
            assert later.status == "conflicted" and later.conflicts_with == (kept.record.id,)
            other = await store.propose(_record("valve closed", subject="asset:992"))
            assert later.record.id is not None and other.record.id is not None
            _as_a_later_release_wrote_it(where, later.record.id, evidence_level="measured")

            found = await store.read("asset:991", scope=SCOPE, roles={"viewer"}, now=NOW)
            assert [r.record.id for r in found.records] == [kept.record.id]
            assert [(r.record_id, r.reason) for r in found.rejected] == [(later.record.id, "unreadable")]
            # Its disagreement with the readable record is still said, never dropped unread.
            assert found.records[0].conflicts_with == (later.record.id,)

            with pytest.raises(MemoryPolicyError) as refused:  # a write beside it cannot be judged
                await store.propose(_record("pump bearing worn"))
            assert refused.value.reason == "unreadable"
            assert later.record.id in str(refused.value) and "evidence_level" in str(refused.value)
            with pytest.raises(MemoryPolicyError) as refused:
                await store.correct(
                    later.record.id, _record("pump runs at 50 Hz", system="cmms"), actor="ops", reason="r"
                )
            assert refused.value.reason == "unreadable"
            count = "SELECT count(*) FROM memory_records WHERE subject = 'asset:991'"
            assert where.sql(count) == [(2,)]  # nothing half-written

            # Other subjects are untouched; the unreadable record can still be erased, then writes go on.
            assert [
                r.record.id
                for r in (await store.read("asset:992", scope=SCOPE, roles={"viewer"}, now=NOW)).records
            ] == [other.record.id]
            await store.delete(later.record.id, actor="ops", reason="erasure request")
            again = await store.propose(_record("pump bearing worn"))
            assert again.status == "superseded" and again.record.supersedes == kept.record.id
        finally:
            store.close()

    anyio.run(play)


# -- a workflow request a later release wrote ------------------------------------------------------


def _logged(folder: Path, name: str) -> list[dict[str, Any]]:
    path = folder / f"{name}.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_a_request_op_this_release_does_not_run_is_never_run_as_a_start(tmp_path: Path, capsys: Any) -> None:
    op = deployed(tmp_path, capsys, lambda folder: _write_version(folder, "A"))
    later = op.submit()  # no worker yet: it waits in the intake, where a later release's op is put
    with sqlite3.connect(tmp_path / "deployment" / "intake.db") as intake:
        [(raw,)] = intake.execute("SELECT request FROM tether_intake WHERE run_id = ?", (later,))
        request = {**json.loads(raw), "op": "replay_from_step"}
        intake.execute("UPDATE tether_intake SET request = ? WHERE run_id = ?", (json.dumps(request), later))
    try:
        op.start("s1")
        legit = op.submit()  # the legitimate flow goes on beside it
        op.until("today's run to pause", lambda: op.status(legit) == ["paused"])

        def told() -> list[dict[str, Any]]:
            logged = _logged(tmp_path, "s1")
            return [e for e in logged if e.get("run_id") == later and e["event"] != "run_claimed"]

        op.until("the later op to be refused", told)
        [event] = told()
        assert event["event"] == "run_not_replayed" and "replay_from_step" in event["cause"], event
        assert [r[0] for r in op.lines("reads.log")] == [legit] and op.lines("effects.log") == []
        with sqlite3.connect(tmp_path / "deployment" / "dbos.sqlite") as dbos:
            [(status,)] = dbos.execute("SELECT status FROM workflow_status WHERE workflow_uuid = ?", (later,))
        assert status == "PENDING"  # not run, not failed: a worker that reads the op runs it
        op.approve(legit)
        op.until("today's run to finish", lambda: op.status(legit) == ["finished"])
        assert [r[0] for r in op.lines("effects.log")] == [legit]
    finally:
        op.stop()
