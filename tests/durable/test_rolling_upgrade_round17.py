"""An operator's rolling upgrade, seventeenth round.

What did not hold, each fixed here and pinned below:

- a SQLite deployment contracted by a later release's ``tether db init`` (a migration marked
  breaking, round twelve) while a worker of this release served it: on PostgreSQL the worker
  reads the journal at each heartbeat and stops (drains, exits 1, ``schema_too_new``); on SQLite
  it read the journal only when it opened its stores, so it went on reading and writing a schema
  it no longer knew (approvals, checkpoints, the intake) for as long as it ran. It now reads each
  store file's journal at the same duty and stops the same way; a later release's unmarked
  (expand-only) migration is still worked beside.
- a console of this release (or any process holding the approval store open) went on writing
  decisions into an approval store a later release contracted after it opened it: a migration
  was checked only when a store was opened, and a console serves for days. A decision now reads
  the journal in its own transaction and is refused (``schema_too_new``, nothing written) past
  such a migration, on SQLite and PostgreSQL alike; an unmarked one is decided beside as before.
- on a SQLite deployment, a worker killed (-9) with runs in flight and replaced by a worker under
  another executor id (``tether worker`` names itself ``host-pid`` unless told, and an upgrade's
  new worker is often named anew) never got those runs: DBOS recovers a workflow only on the
  executor that ran it, and only PostgreSQL had a heartbeat to tell a survivor the other was
  dead. They stood ``running`` for good. Each SQLite worker now holds a lock file of its own
  (``workers/<executor>.lock``) while it runs; a live worker that can take another's lock hands
  that executor's pending runs back to the queue: each run continues once, its cut call run again
  (as any recovery), and a live worker's runs are never taken. A worker of an earlier release
  holds no such file: its runs are handed back once no other process of the machine holds the
  deployment's ``dbos.sqlite`` open (played below with the release this branch started from).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_rolling_upgrade import ROOT, _write_version, deployed
from test_rolling_upgrade_round6 import old_tree
from test_rolling_upgrade_round8 import _logged

pytestmark = pytest.mark.slow

# A later release, as its registry says it: this release's migrations and one more of the approval
# store (``name``), listed as its own where marked breaking. Its CLI then runs the arguments given.
LATER = """
import sys
import tether.sql._database as database
import tether.sql._journal as journal
from sqlalchemy import text
from tether.cli import main

name, argv = sys.argv[1], sys.argv[2:]
if name.endswith(journal.BREAKING_MARK):
    journal.KNOWN_BREAKING = frozenset({name})
step = lambda conn: conn.execute(text("CREATE TABLE IF NOT EXISTS later_release (x integer)"))
database.MIGRATIONS["approvals"] += ((name, step),)
sys.exit(main(argv + ["--json"]))
"""


def _later(name: str, *argv: str) -> tuple[int, dict[str, Any]]:
    """The later release's CLI (its one more migration ``name``): exit code and JSON line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", LATER, name, *argv], env=env, capture_output=True, timeout=120
    )
    return done.returncode, json.loads(done.stdout.decode().strip().splitlines()[-1])


# -- a SQLite deployment contracted under a running worker ------------------------------------------


def test_a_sqlite_worker_stops_when_a_later_release_contracts_the_deployment_under_it(
    tmp_path: Path, capsys: Any
) -> None:
    """A worker of this release serves a SQLite deployment. A later release's ``db init``
    first adds an expand-only migration (the worker serves on: a run pauses and finishes), then
    a breaking one: the worker stops taking runs, drains and exits 1 naming the migration."""
    op = deployed(tmp_path, capsys, lambda folder: _write_version(folder, "A"))
    try:
        op.start("s1")
        code, out = _later("approvals.900_later_column", "db", "init", "--db", op.url)
        assert code == 0, out
        run_id = op.submit()
        op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
        op.approve(run_id)
        op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
        assert op.procs["s1"].poll() is None  # an unmarked migration is worked beside

        mark = "approvals.901_split_decisions!"
        code, out = _later(mark, "db", "init", "--db", op.url)
        assert code == 0, out
        proc = op.procs.pop("s1")
        try:
            exited: int | None = proc.wait(120)
        except subprocess.TimeoutExpired:
            exited = None
        finally:
            proc.kill()
        assert exited == 1, "the worker went on serving a schema it does not know"
        said = [e for e in _logged(tmp_path, "s1") if e["event"] == "schema_too_new"]
        assert said and said[0]["migrations"] == [mark], said
        assert [r[0] for r in op.lines("effects.log")] == [run_id]  # the effect once
    finally:
        op.stop()


def test_a_sqlite_worker_says_once_that_a_store_files_journal_is_gone(tmp_path: Path, capsys: Any) -> None:
    """The legitimate side of reading every store file's journal: one whose ``_migrations`` table
    is gone (a partial restore) is said once, and the worker keeps serving."""
    import sqlite3

    op = deployed(tmp_path, capsys, lambda folder: _write_version(folder, "A"))
    try:
        op.start("s1")
        with sqlite3.connect(tmp_path / "deployment" / "mcp-pins.db") as db:
            db.execute("DROP TABLE _migrations")

        def said() -> list[dict[str, Any]]:
            return [e for e in _logged(tmp_path, "s1") if "JournalMissing" in str(e.get("cause", ""))]

        op.until("the worker to say so", said)
        run_id = op.submit()  # the CLI migrates the stores it opens: the journal is back
        op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
        assert op.procs["s1"].poll() is None and len(said()) == 1, said()
        assert op.signal("s1", signal.SIGTERM) == 0
    finally:
        op.stop()


# -- a decision on an approval store a later release contracted after it was opened ----------------


def _open_store(backend: str, tmp_path: Path, pg_url: str | None) -> tuple[Any, str]:
    """An approval store held open as a console holds it, and its deployment's URL."""
    from tether.cli import main

    url = pg_url if backend == "postgresql" else f"sqlite:///{tmp_path / 'deployment'}"
    assert url is not None and main(["db", "init", "--db", url, "--json"]) == 0
    if backend == "postgresql":
        from tether.policy._pg_store import PgApprovalStore

        return PgApprovalStore(url), url
    from tether.policy import SqliteApprovalStore

    return SqliteApprovalStore(tmp_path / "deployment" / "approvals.db"), url


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_decision_on_a_store_a_later_release_contracted_since_it_was_opened_is_refused(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from datetime import UTC, datetime

    from tether.policy import ProposalStatus
    from tether.policy._store import NewProposal
    from tether.sql._database import blocking
    from tether.sql._journal import SchemaTooNew

    pg_url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    store, url = _open_store(backend, tmp_path, pg_url)
    pending = frozenset({ProposalStatus.PENDING})

    def propose(n: int) -> str:
        new = NewProposal("acme", "note", "{}", "sha256:x", "write", "model", f"r{n}", 1, "c1")
        return str(blocking(store.add_proposal, new, now=datetime.now(UTC)).id)

    def decide(pid: str) -> Any:
        return blocking(
            store.decide, pid, ProposalStatus.APPROVED, allowed_from=pending, actor="rita", reason="",
            audited_as="rita", now=datetime.now(UTC),
        )  # fmt: skip

    try:
        first, second = propose(1), propose(2)
        assert _later("approvals.900_later_column", "db", "init", "--db", url)[0] == 0
        assert str(decide(first).status) == "approved"  # expand-only: decided beside it
        mark = "approvals.901_split_decisions!"
        assert _later(mark, "db", "init", "--db", url)[0] == 0
        with pytest.raises(SchemaTooNew) as refused:
            decide(second)
        assert refused.value.reason == "schema_too_new" and mark in str(refused.value)
        [kept] = blocking(store.list_proposals, run_id="r2")
        assert str(kept.status) == "pending" and kept.decided_by is None  # nothing written
    finally:
        store.close()


# -- a SQLite worker killed and replaced under another executor id --------------------------------


def test_a_sqlite_workers_runs_are_taken_over_by_a_worker_under_another_executor_id(
    tmp_path: Path, capsys: Any
) -> None:
    """Two runs inside their first call on s1; s2 starts beside it (s1's runs stay s1's while it
    lives); s1 is killed (-9): s2 takes them, each pauses and its approved effect happens once."""
    from collections import Counter

    op = deployed(tmp_path, capsys, lambda folder: _write_version(folder, "A"))
    gate = tmp_path / "agent" / "gate-A"
    gate.write_text("")
    try:
        op.start("s1")
        runs = [op.submit(), op.submit()]
        op.until("both runs inside their call", lambda: {r[0] for r in op.lines("reads.log")} == set(runs))
        op.start("s2")
        assert op.signal("s1", signal.SIGKILL) == -signal.SIGKILL
        gate.unlink()
        op.until("both runs to pause on s2", lambda: op.status(*runs) == ["paused", "paused"], 90)
        reads = Counter(r[0] for r in op.lines("reads.log"))
        assert reads == {runs[0]: 2, runs[1]: 2}, reads  # the cut call again, once; never while s1 lived
        taken = [e for e in _logged(tmp_path, "s2") if e["event"] == "executors_recovered"]
        assert [e["dead"] for e in taken] == [[f"s1-{op.suffix}"]], taken
        assert sorted(taken[0]["requeued"]) == sorted(runs), taken
        for run_id in runs:
            op.approve(run_id)
        op.until("both runs to finish", lambda: op.status(*runs) == ["finished", "finished"])
        assert sorted(r[0] for r in op.lines("effects.log")) == sorted(runs)  # each effect once
    finally:
        op.stop()


# The release this round started from (``UPGRADE_FROM``: commits of this repository, comma-separated).
OLD_COMMITS = [c for c in os.environ.get("UPGRADE_FROM", "793a39a3").split(",") if c.strip()]


@pytest.fixture(scope="module", params=OLD_COMMITS)
def old_src(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``src`` tree of an older commit of this repository (skipped where it is not at hand)."""
    return old_tree(str(request.param), tmp_path_factory)


def test_an_earlier_releases_sqlite_worker_killed_mid_call_is_taken_over_by_this_releases(
    tmp_path: Path, capsys: Any, old_src: Path
) -> None:
    """The upgrade on a SQLite deployment: a worker of the earlier release (no lock file) is
    killed (-9) inside a run's call; this release's worker, under another executor id, takes the
    run once nothing else holds the deployment open: it pauses, and its effect happens once."""
    from test_rolling_upgrade_round6 import NEW_SRC, Mixed

    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Mixed(f"sqlite:///{tmp_path / 'deployment'}", tmp_path, capsys, old_src)
    op.old_cli("db", "init", "--db", op.url)
    gate = tmp_path / "agent" / "gate-A"
    gate.write_text("")
    try:
        op.start_on("o1", old_src)
        run_id = op.old_submit()
        op.until("the run inside its call", lambda: [r for r in op.lines("reads.log") if r[0] == run_id])
        assert op.signal("o1", signal.SIGKILL) == -signal.SIGKILL
        gate.unlink()
        op.start_on("n1", NEW_SRC)
        op.until("the run to pause on n1", lambda: op.status(run_id) == ["paused"], 90)
        taken = [e for e in _logged(tmp_path, "n1") if e["event"] == "executors_recovered"]
        assert [e["dead"] for e in taken] == [[f"o1-{op.suffix}"]], taken
        op.approve(run_id)
        op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
        assert [r[0] for r in op.lines("effects.log")] == [run_id]  # once
        assert len(op.lines("reads.log")) == 2  # the cut call again, once
    finally:
        op.stop()
