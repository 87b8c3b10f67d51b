"""An operator's rolling upgrade, eighteenth round: PostgreSQL deployments as operators set them up
(a role's or database's own settings), and fleets of two releases on one queue.

What did not hold, each fixed here and pinned below:

- a database (or role) whose operator set a ``statement_timeout`` for queries (``ALTER DATABASE …
  SET statement_timeout = '1s'``, common on shared servers): a migrator's wait for the migration
  lock (another release's ``tether db init`` or worker start, migrating beside it) or for a
  table's lock (a worker of the old release inside a transaction) was cut at the timeout, not
  bounded by the migration's own waits (``MigrationBusy``, ``store_busy``), and read as a lost
  connection: after three tries ``db init`` and every worker's start ended ``StoreUnavailable``
  ("unreachable") while the database was up. A migration statement longer than the timeout (an
  index built on a large table) was cut at every try, so that release could never start there.
  A migration's transaction now runs without the timeout; its waits stay bounded as before.
- a database (or role) whose default isolation is ``repeatable read`` (``default_transaction_
  isolation``, set for an application's reports): every store's transaction ran under it, and a
  store that looks for a duplicate under a lock read the snapshot of its transaction's first
  statement, not what committed while it waited: eight identical memory records proposed at once
  were stored as several (invariant M4). Each store's connection now runs ``read committed``,
  what every store is written for, whatever the database's default.
- a URL's own ``options`` (libpq's: ``?options=-c%20idle_in_transaction_session_timeout%3D60000``,
  an operator's guard against a frozen worker holding a table's lock through an upgrade): tether
  wrote the URL back with its spaces as ``+``, which libpq does not read as a space, so ``tether
  db init`` and every client failed ("unrecognized configuration parameter"); and every store's
  connection and the clients' probes (on a ``schema``) set ``options`` of their own, dropping the
  operator's. They are now kept as written and passed everywhere, tether's own settings (time
  zone, the URL's schema) after them.
- a statement the server cut at the operator's bound (``statement_timeout``; ``lock_timeout``)
  while it waited on a lock a frozen worker's transaction held was taken for a lost connection:
  after three tries ``tether approvals approve`` ended "unexpected error: StoreUnavailable … report
  it" (exit 7). It is a busy store now (``StoreHeld``: exit 6, ``store_busy``, nothing written,
  run it again), as a SQLite file held past its busy timeout is. And a connection lost mid-command
  (a failover, ``pg_terminate_backend`` during the upgrade's maintenance) is exit 6
  (``store_unavailable``), saying a write whose commit outcome is unknown must be looked at before
  the command is run again, not exit 7 and "report it".

Not fixed, decided: a run paused inside a subagent on this release and rolled back to a release
before subagent-named child ids (0fa6ae9a) starts its subagent afresh. Those releases look for the
child only under the id without the subagent's name and start it when none is stored there; the
only thing this release could write that they honour is a checkpoint under that id, which they
would resume as the child (two checkpoints of one child, diverging) or, with another parent,
refuse as ``run_id_taken`` (the parent's call failing for good). Neither is better than the
documented limit; every release since 0fa6ae9a (the previous one included) finds the child.

Played and held (``UPGRADE_FROM``, default ``793a39a3``): workers of the earlier release and of
this one on one PostgreSQL queue whose database sets both of the above, runs submitted from either
release's CLI, paused, decided on the other release's CLI, an old worker killed (-9) inside a
call: each run once, each effect once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
from test_rolling_upgrade_round6 import old_tree

# A database of its own: ``ALTER DATABASE`` settings apply to the sessions that connect to it.


def _database(pg_dsn: str, settings: dict[str, str]) -> Iterator[str]:
    import psycopg

    name = f"u18_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
        for key, value in settings.items():
            conn.execute(f"ALTER DATABASE {name} SET {key} = '{value}'")
    try:
        yield urlunsplit(urlsplit(pg_dsn)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def timed_out_db(pg_dsn: str) -> Iterator[str]:
    """A database whose operator bounds every statement to one second."""
    yield from _database(pg_dsn, {"statement_timeout": "1s"})


@pytest.fixture(params=["repeatable read"])
def isolated_db(pg_dsn: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database whose default transaction isolation is not PostgreSQL's default."""
    yield from _database(pg_dsn, {"default_transaction_isolation": str(request.param)})


def _show(url: str, setting: str) -> str:
    from tether.sql._database import Database

    db = Database.postgresql(url)
    try:
        return str(db.snapshot(lambda conn: conn.exec_driver_sql(f"SHOW {setting}").scalar()))
    finally:
        db.close()


# -- a statement timeout set by the operator -------------------------------------------------------


def _hold_migration_lock(url: str, seconds: float) -> threading.Thread:
    """Another migrator (an earlier release's ``db init``) holding the migration lock a while."""
    import psycopg

    taken = threading.Event()

    def hold() -> None:
        with psycopg.connect(url, application_name="tether:init (older release)") as conn:
            conn.execute("SET statement_timeout = 0")
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('tether_migrations'))")
            taken.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(30)
    return thread


def test_db_init_waits_for_another_migrator_past_the_operators_statement_timeout(
    timed_out_db: str, capsys: Any
) -> None:
    """Another release's migrator holds the migration lock for 4.5 s on a database bounding
    statements to 1 s: this release's ``db init`` waits for it (its own bound is 5 s a try) and
    applies; it ended ``StoreUnavailable`` after its connection "retries"."""
    import json

    from tether.cli import main

    assert main(["db", "init", "--db", timed_out_db, "--json"]) == 0  # the deployment, set up
    capsys.readouterr()
    holder = _hold_migration_lock(timed_out_db, 4.5)
    try:
        code = main(["db", "init", "--db", timed_out_db, "--json"])  # the upgrade's, meanwhile
    finally:
        holder.join()
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0, out
    assert _show(timed_out_db, "statement_timeout") == "1s"  # the operator's bound stands for queries


def test_a_migration_longer_than_the_operators_statement_timeout_applies(timed_out_db: str) -> None:
    """A migration statement that takes longer than the database's statement timeout (an index
    on a large table, played by a sleep) is applied once, not cut at every try."""
    from sqlalchemy import Connection, text

    from tether.sql._database import Database

    def slow(conn: Connection) -> None:
        conn.execute(text("SELECT pg_sleep(1.5)"))
        conn.execute(text("CREATE TABLE later_index_built (x integer)"))

    db = Database.postgresql(timed_out_db)
    try:
        assert db.migrate("round18", [("round18.001_slow_index", slow)]) == ["round18.001_slow_index"]
        tables = db.snapshot(
            lambda conn: list(
                conn.exec_driver_sql("SELECT tablename FROM pg_tables WHERE tablename = 'later_index_built'")
            )
        )
        assert len(tables) == 1
    finally:
        db.close()


def _proposal(url: str) -> str:
    """A pending proposal in the deployment's approval store at ``url``; its id."""
    from datetime import UTC, datetime

    from tether.policy import content_hash
    from tether.policy._pg_store import PgApprovalStore
    from tether.policy._store import NewProposal
    from tether.sql._database import blocking

    store = PgApprovalStore(url)
    try:
        new = NewProposal("acme", "note", "{}", content_hash("note", {}), "write", "model", "r1", 1, "c1")
        return str(blocking(store.add_proposal, new, now=datetime.now(UTC)).id)
    finally:
        store.close()


def _holding_row(url: str, proposal_id: str, seconds: float) -> threading.Thread:
    """A worker of the old release inside a transaction that locked the proposal's row (stopped
    mid-decision: a frozen container), for ``seconds``."""
    import psycopg

    from tether.sql._postgres import PgUrl

    pg, taken = PgUrl.parse(url), threading.Event()

    def hold() -> None:
        with psycopg.connect(pg.conninfo, application_name="worker (older release, frozen)") as conn:
            conn.execute("SET statement_timeout = 0")
            conn.execute(f"SET search_path = {pg.schema or 'public'}")
            conn.execute("SELECT id FROM proposals WHERE id = %s FOR UPDATE", (proposal_id,))
            taken.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(30)
    return thread


def _cli(capsys: Any, *argv: str) -> tuple[int, dict[str, Any]]:
    import json

    from tether.cli import main

    capsys.readouterr()
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_a_decision_cut_at_the_operators_statement_timeout_is_busy_not_a_bug(
    timed_out_db: str, capsys: Any
) -> None:
    """``tether approvals approve`` waits on a proposal row a frozen worker's transaction holds,
    past the database's statement timeout: it says the store is busy (exit 6, ``store_busy``,
    run it again), nothing written, not "unexpected error … report it" (exit 7); run again once
    the session is gone, it approves."""
    assert _cli(capsys, "db", "init", "--db", timed_out_db)[0] == 0
    pid = _proposal(timed_out_db)
    holder = _holding_row(timed_out_db, pid, 6.0)
    try:
        code, out = _cli(capsys, "approvals", "approve", pid, "--db", timed_out_db, "--reviewer", "rita")
    finally:
        holder.join()
    assert (code, out["error"]) == (6, "store_busy"), out
    [listed] = _cli(capsys, "approvals", "list", "--db", timed_out_db)[1]["proposals"]
    assert listed["status"] == "pending"  # nothing written
    code, out = _cli(capsys, "approvals", "approve", pid, "--db", timed_out_db, "--reviewer", "rita")
    assert (code, out["status"]) == (0, "approved"), out


def test_a_command_whose_database_connection_is_cut_says_so_not_report_it(pg_url: str, capsys: Any) -> None:
    """The connection of ``tether approvals approve`` is cut at every try (a failover, an
    operator's ``pg_terminate_backend`` during the upgrade's maintenance): exit 6
    (``store_unavailable``, look before running it again), not exit 7 and "report it"."""
    import psycopg

    from tether.sql._postgres import PgUrl

    assert _cli(capsys, "db", "init", "--db", pg_url)[0] == 0
    pid = _proposal(pg_url)
    done = threading.Event()
    base = PgUrl.parse(pg_url).conninfo

    def cut() -> None:  # every tether session waiting on the held row, terminated
        with psycopg.connect(base, autocommit=True) as conn:
            while not done.is_set():
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND application_name LIKE 'tether:%%' AND datname = current_database()"
                )
                time.sleep(0.1)

    holder = _holding_row(pg_url, pid, 8.0)
    cutter = threading.Thread(target=cut)
    cutter.start()
    try:
        code, out = _cli(capsys, "approvals", "approve", pid, "--db", pg_url, "--reviewer", "rita")
    finally:
        done.set()
        cutter.join()
        holder.join()
    assert (code, out["error"]) == (6, "store_unavailable"), out
    assert "look" in out["message"] and "report it" not in out["message"], out


# -- a default isolation other than read committed -----------------------------------------------


def test_identical_memory_records_proposed_at_once_are_stored_once_whatever_the_default_isolation(
    isolated_db: str,
) -> None:
    import anyio

    from tether.errors import MemoryPolicyError
    from tether.memory._sqlstore import PgMemory

    store = PgMemory(isolated_db, policy=_memory_policy())
    outcomes: list[str] = []
    record = _record()  # one record, proposed eight times at once

    async def attempt() -> None:
        try:
            outcomes.append((await store.propose(record)).status)
        except MemoryPolicyError as exc:
            outcomes.append(exc.reason)

    async def play() -> None:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(8):
                    tg.start_soon(attempt)

    try:
        anyio.run(play)
        rows = store.db.snapshot(
            lambda conn: conn.exec_driver_sql("SELECT count(*) FROM memory_records").scalar()
        )
    finally:
        store.close()
    assert sorted(outcomes) == ["duplicate"] * 7 + ["stored"], outcomes
    assert rows == 1
    assert _show(isolated_db, "transaction_isolation") == "read committed"


def _memory_policy() -> Any:
    from tether.memory import MemoryPolicy

    return MemoryPolicy(approved_sources=frozenset({"erp-assets"}))


def _record() -> Any:
    from datetime import UTC, datetime, timedelta

    from tether.memory import MemoryRecord, Source

    at = datetime.now(UTC) - timedelta(minutes=5)
    return MemoryRecord(
        kind="semantic", subject="equipment:eq-19", claim="nominal voltage is 380 V",
        source=Source(system="erp-assets", record="asset-991", observed_at=at), scope="tenant:a",
        confidence="authoritative", valid_until=at + timedelta(days=365), acl=frozenset({"maintenance-read"}),
        retention="while-asset-active", purpose="answer maintenance questions", sensitivity="internal",
    )  # fmt: skip


# -- the URL's own options -------------------------------------------------------------------------


def test_a_urls_own_options_reach_every_store_connection(pg_url: str, capsys: Any) -> None:
    """``?options=`` (libpq's) as an operator writes it, with tether's ``schema``: the deployment
    is set up through it (DBOS's engine, the probes and the stores read it alike; its spaces were
    written back as ``+``, which libpq does not read as a space), and both hold on a store's
    connection."""
    from tether.cli import main

    guard = quote("-c idle_in_transaction_session_timeout=60000 -c lock_timeout=1234", safe="")
    url = f"{pg_url}&options={guard}"
    code = main(["db", "init", "--db", url, "--json"])
    assert code == 0, capsys.readouterr().out
    assert _show(url, "idle_in_transaction_session_timeout") == "1min"
    assert _show(url, "lock_timeout") == "1234ms"
    assert _show(url, "TimeZone") == "UTC"
    assert _show(url, "search_path") == pg_url.rpartition("schema=")[2]  # the schema still holds
    from tether.durable._deploy import open_deployment

    _, probe = open_deployment(url)  # ``tether submit``'s and ``tether runs``' own connection
    try:
        assert probe.execute("SHOW lock_timeout").fetchone()[0] == "1234ms"
        assert probe.execute("SHOW search_path").fetchone()[0] == pg_url.rpartition("schema=")[2]
    finally:
        probe.close()


# -- a fleet of two releases on one queue, on such a database --------------------------------------

# The release this round started from (``UPGRADE_FROM``: commits of this repository, comma-separated).
OLD_COMMITS = [c for c in os.environ.get("UPGRADE_FROM", "793a39a3").split(",") if c.strip()]


@pytest.fixture(scope="module", params=OLD_COMMITS)
def old_src(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``src`` tree of an older commit of this repository (skipped where it is not at hand)."""
    return old_tree(str(request.param), tmp_path_factory)


@pytest.fixture
def operators_db(pg_dsn: str) -> Iterator[str]:
    """A database as an operator of a shared server sets it: queries bounded, reports isolated."""
    yield from _database(
        pg_dsn, {"statement_timeout": "2s", "default_transaction_isolation": "repeatable read"}
    )


@pytest.mark.slow
def test_two_releases_on_one_queue_each_run_and_effect_once(
    operators_db: str, tmp_path: Path, capsys: Any, old_src: Path
) -> None:
    """Workers of the earlier release and of this one take runs from one queue; runs submitted on
    either CLI are inside their call when the old worker is killed (-9); this release's ``db init``
    runs meanwhile; each run pauses, is approved on the other release's CLI, and finishes: each
    call cut once at most, each effect once."""
    from test_rolling_upgrade import _write_version
    from test_rolling_upgrade_round6 import NEW_SRC, Mixed, _every_run_once

    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Mixed(operators_db, tmp_path, capsys, old_src)
    op.old_cli("db", "init", "--db", op.url)
    gate = tmp_path / "agent" / "gate-A"
    gate.write_text("")
    try:
        op.start_on("o1", old_src)
        op.start_on("n1", NEW_SRC)
        runs = [op.old_submit(), op.submit(), op.old_submit(), op.submit()]
        op.until("every run inside its call", lambda: {r[0] for r in op.lines("reads.log")} == set(runs), 90)
        op.cli("db", "init", "--db", op.url)  # the upgrade's, with runs in flight on both releases
        assert op.signal("o1", signal.SIGKILL) == -signal.SIGKILL
        gate.unlink()
        op.until("every run to pause", lambda: op.status(*runs) == ["paused"] * 4, 120)
        reads = Counter(r[0] for r in op.lines("reads.log"))
        assert set(reads) == set(runs) and set(reads.values()) <= {1, 2}, reads  # o1's cut call once more
        for n, run_id in enumerate(runs):
            (op.approve if n % 2 == 0 else op.old_approve)(run_id)  # the other release's CLI
        op.until("every run to finish", lambda: op.status(*runs) == ["finished"] * 4, 120)
        _every_run_once(op, runs)
    finally:
        op.stop()
