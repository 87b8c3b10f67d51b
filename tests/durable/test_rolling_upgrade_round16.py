"""An operator's rolling upgrade, sixteenth round: the machines' clocks, a journal a partial restore
lost, and the first breaking migration a release ships.

What did not hold, each fixed here and pinned below:

- a pause that names no proposals (an effect a person must resolve; a checkpoint of an earlier
  release, written before ``pending``) is resumed once every proposal of the run is decided and
  one was decided after the pause. "After" compared the reviewer's clock (``decided_at``) with the
  worker's (the checkpoint's ``updated_at``): on PostgreSQL, with the reviewer's machine behind
  the worker's, a decision made after the pause read as older than it and the run stayed paused
  for good; with it ahead, a decision made before the pause resumed it. Both instants are now the
  database's clock on PostgreSQL (a SQLite file has one machine's).
- a PostgreSQL worker's heartbeat read the migrations journal (``_migrations``, to stop when a
  later release contracted the schema) in the beat's own transaction: with the table gone (a
  partial restore) every beat failed, and the live worker was declared dead and its runs
  recovered under it. The beat is its own transaction; the journal read after it fails alone,
  with a clear cause (``JournalMissing``: ``journal_missing``), said once while it lasts.
- the check that a release lists its own breaking migrations (``KNOWN_BREAKING``) was an
  ``assert`` at import (gone under ``python -O``), blind to a registry extended after import: a
  release that shipped a first marked migration without listing it applied it and then refused
  its own store, as another release's. It is checked before anything is applied (``ConfigError``,
  nothing applied) and at import without ``assert``. The whole path of a first marked migration
  is played below: the release that ships it works on the store, one that does not know it
  refuses it (its commands and a worker's start), nothing written by the refused.
- an effect's intent written by a release before incarnation tokens (owner ``host:pid``) whose
  process died and whose pid another process took stayed busy until that process exited, and no
  person could resolve it (only escalated or unreconciled entries were). Nothing tells the two
  processes apart without a wall clock a step fools, so it is still never taken over (the effect
  could run twice); past its lease it is listed by ``tether runs escalations``, ``tether runs
  resolve`` accepts it, and the waiting call's ``in_progress`` says so.

What held, pinned below: workers started together on one SQLite deployment take each queued run
once (the intake and DBOS's queue, under WAL and busy timeouts), and one killed (-9) mid-call loses
none and repeats only its cut call; an approval given under an agent file's older policy is judged
again by the policy the resuming worker serves (the call denied, the approval kept as given, the
change of version logged: ``run_version_changed``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_rolling_upgrade import ROOT, Operator, _write_version, deployed
from test_rolling_upgrade_round8 import _logged
from test_rolling_upgrade_round15 import _cli, _pg, _until

from tether.durable._worker import due_for_resume
from tether.policy import ProposalStatus
from tether.policy._store import NewProposal
from tether.sql._database import blocking

PENDING = frozenset({ProposalStatus.PENDING})
SKEW = timedelta(hours=1)


# -- a pause and its decision, on two machines' clocks ----------------------------------------------


def _propose(store: Any, now: datetime) -> str:
    new = NewProposal("acme", "send_payment", '{"amount":"30"}', "sha256:x", "write", "model", "r1", 1, "c1")
    return str(blocking(store.add_proposal, new, now=now).id)


def _pause(store: Any, now: datetime) -> None:
    """A pause waiting for no proposal (an effect a person must resolve), at the worker's ``now``."""
    state = json.dumps({"version": 2, "pending": []})
    blocking(
        store.save_checkpoint, "r1", app="m:f", state=state, status="paused",
        stop_reason="approval_required", now=now,
    )  # fmt: skip


def _decide(store: Any, pid: str, now: datetime) -> None:
    blocking(
        store.decide,
        pid,
        ProposalStatus.APPROVED,
        allowed_from=PENDING,
        actor="rita",
        audited_as="rita",
        reason="",
        now=now,
    )


def _due(store: Any) -> bool:
    [cp] = blocking(store.list_checkpoints, status="paused")
    return due_for_resume(cp, blocking(store.list_proposals, run_id="r1"))


@pytest.mark.parametrize("reviewer", ["behind", "ahead"])
def test_a_decision_after_a_pause_is_ordered_on_the_databases_clock(reviewer: str, pg_url: str) -> None:
    """The worker's machine keeps time; the reviewer's runs an hour behind (or ahead). A
    decision made after the pause resumes the run; one made before it does not."""
    from tether.policy._pg_store import PgApprovalStore

    store = PgApprovalStore(pg_url)
    try:

        def worker() -> datetime:  # the worker's machine keeps time
            return datetime.now(UTC)

        def at_reviewer() -> datetime:
            return worker() - SKEW if reviewer == "behind" else worker() + SKEW

        pid = _propose(store, worker())
        if reviewer == "behind":  # the run pauses, then the person decides
            _pause(store, worker())
            assert not _due(store)
            _decide(store, pid, at_reviewer())
            assert _due(store), "a decision made after the pause was read as older than it"
        else:  # the person decides, then the run pauses for something else: an old decision
            _decide(store, pid, at_reviewer())
            _pause(store, worker())
            assert not _due(store), "a decision made before the pause resumed it"
        [p] = blocking(store.list_proposals, run_id="r1")
        assert p.decided_at is not None and abs(p.decided_at - worker()) < SKEW / 2  # the database's
    finally:
        store.close()


def test_a_pause_and_its_decision_on_sqlite_keep_the_callers_clock(tmp_path: Path) -> None:
    """The legitimate side: a SQLite file is one machine's, its times stay the caller's (tests
    and hosts pass their clock), and the rule reads them as before."""
    from tether.policy import SqliteApprovalStore

    store = SqliteApprovalStore(tmp_path / "approvals.db")
    t0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    try:
        pid = _propose(store, t0)
        _pause(store, t0 + timedelta(seconds=1))
        assert not _due(store)
        _decide(store, pid, t0 + timedelta(seconds=2))
        assert _due(store)
        [p] = blocking(store.list_proposals, run_id="r1")
        assert p.decided_at == t0 + timedelta(seconds=2)
    finally:
        store.close()


# -- a heartbeat with the migrations journal gone -------------------------------------------------


def _beat_at(url: str, executor: str) -> datetime | None:
    import psycopg

    dsn, schema = _pg(url)
    with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as db:
        row = db.execute(
            "SELECT heartbeat_at FROM tether_workers WHERE executor_id = %s", (executor,)
        ).fetchone()
    return row[0] if row else None


def _beat_after(url: str, executor: str, since: datetime) -> datetime | None:
    at = _beat_at(url, executor)
    return at if at is not None and at > since else None


def test_a_worker_beats_on_when_the_migrations_journal_is_gone_and_says_why(
    pg_url: str, tmp_path: Path, capsys: Any
) -> None:
    import psycopg

    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Operator(pg_url, tmp_path, capsys)
    op.cli("db", "init", "--db", pg_url)
    try:
        op.start("s1")
        executor = f"s1-{op.suffix}"
        dsn, schema = _pg(pg_url)
        with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as db:
            db.execute("DROP TABLE _migrations")  # a partial restore: the journal lost
            row = db.execute("SELECT now()").fetchone()
        assert row is not None
        dropped = row[0]
        beat = dropped
        for _ in range(3):  # three beats since: the journal was read after two of them at least
            beat = _until("a beat", lambda b=beat: _beat_after(pg_url, executor, b))

        said = [e for e in _logged(tmp_path, "s1") if "JournalMissing" in str(e.get("cause", ""))]
        assert len(said) == 1, said  # once, not on every beat
        assert said[0]["duty"] == "heartbeat" and "_migrations" in said[0]["cause"], said
        assert "still beats" in said[0]["cause"], said
        workers = op.runs("workers")["workers"]
        assert [w["state"] for w in workers if w["executor_id"] == executor] == ["alive"], workers
    finally:
        op.stop()


# -- the first breaking migration a release ships ---------------------------------------------------

MARK = "approvals.900_split_decisions!"

# A later release, as its registry says it: this release's migrations and one marked breaking,
# listed as its own (``KNOWN_BREAKING``). Its CLI then runs the arguments it is given.
LATER = """
import sys
import tether.sql._database as database
import tether.sql._journal as journal
from sqlalchemy import text
from tether.cli import main

MARK = {mark!r}
journal.KNOWN_BREAKING = frozenset({{MARK}})
split = lambda conn: conn.execute(text("CREATE TABLE decisions_split (x integer)"))
database.MIGRATIONS["approvals"] += ((MARK, split),)
sys.exit(main(sys.argv[1:] + ["--json"]))
"""


def _later(*argv: str) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", LATER.format(mark=MARK), *argv], env=env, capture_output=True, timeout=120
    )
    return done.returncode, json.loads(done.stdout.decode().strip().splitlines()[-1])


def test_a_first_breaking_migration_works_for_its_release_and_is_refused_by_one_that_does_not_know_it(
    tmp_path: Path, capsys: Any
) -> None:
    import sqlite3

    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    url = f"sqlite:///{tmp_path / 'deployment'}"
    assert _cli(capsys, "db", "init", "--db", url)[0] == 0  # this release's store
    code, out = _later("db", "init", "--db", url)  # the later release migrates it
    assert code == 0, out
    for argv in (["db", "check", "--db", url], ["approvals", "list", "--db", url]):
        code, out = _later(*argv)
        assert code == 0, (argv, out)  # its own mark refuses nothing of its own
    with sqlite3.connect(tmp_path / "deployment" / "approvals.db") as db:
        assert (MARK,) in db.execute("SELECT name FROM _migrations").fetchall()

    # This release (a rollback to it, or a worker of it still running) refuses the store.
    for argv in (["db", "init", "--db", url], ["approvals", "list", "--db", url]):
        code, out = _cli(capsys, *argv)
        assert (code, out["error"]) == (1, "schema_too_new"), (argv, out)
        assert MARK in out["message"] and "nothing was read or written" in out["message"], out
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    agent = str(tmp_path / "agent" / "agent.yaml")
    worker = subprocess.run(
        [sys.executable, "-m", "tether.cli", "worker", "--db", url, "--app", agent, "--executor-id", "old"],
        env=env, capture_output=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert worker.returncode != 0 and MARK in worker.stderr.decode() + worker.stdout.decode(), worker
    with sqlite3.connect(tmp_path / "deployment" / "approvals.db") as db:
        names = [r[0] for r in db.execute("SELECT name FROM _migrations")]
    assert len(names) == len(set(names))  # nothing applied twice by the refused


def test_a_marked_migration_a_release_does_not_list_as_its_own_is_never_applied(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release that ships a marked migration and forgets ``KNOWN_BREAKING`` is told so before
    anything is applied (it would refuse its own store); listed, it applies."""
    import sqlite3

    from sqlalchemy import Connection, text

    import tether.sql._database as database
    import tether.sql._journal as journal

    def step(conn: Connection) -> None:
        conn.execute(text("CREATE TABLE decisions_split (x integer)"))

    url = f"sqlite:///{tmp_path / 'deployment'}"
    monkeypatch.setitem(database.MIGRATIONS, "approvals", (*database.MIGRATIONS["approvals"], (MARK, step)))
    code, out = _cli(capsys, "db", "init", "--db", url)
    assert code != 0 and MARK in out["message"] and "KNOWN_BREAKING" in out["message"], out
    approvals = tmp_path / "deployment" / "approvals.db"
    if approvals.exists():
        with sqlite3.connect(approvals) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert "decisions_split" not in tables, tables  # nothing of it applied
    monkeypatch.setattr(journal, "KNOWN_BREAKING", frozenset({MARK}))
    code, out = _cli(capsys, "db", "init", "--db", url)
    assert code == 0, out
    with sqlite3.connect(approvals) as db:
        assert (MARK,) in db.execute("SELECT name FROM _migrations").fetchall()


# -- two workers claiming the same queued runs at once, on one SQLite deployment -----------------


def test_workers_starting_together_on_sqlite_claim_each_queued_run_once_and_a_kill_loses_none(
    tmp_path: Path, capsys: Any
) -> None:
    """Runs queued before any worker; two workers start and take them at once from the intake and
    DBOS's queue (one SQLite file each, WAL, busy timeouts); one is killed (-9) with runs inside a
    call, and started again. Every run is run once (its call cut by the kill again, no other),
    pauses, and its approved effect happens once."""
    import signal
    from collections import Counter

    op = deployed(tmp_path, capsys, lambda folder: _write_version(folder, "A"))
    gate = tmp_path / "agent" / "gate-A"
    gate.write_text("")
    try:
        runs = [op.submit() for _ in range(6)]
        op.start("s1")
        op.start("s2")
        op.until("runs inside their calls", lambda: len({r[0] for r in op.lines("reads.log")}) >= 4)
        assert op.signal("s1", signal.SIGKILL) == -signal.SIGKILL
        gate.unlink()
        op.start("s1")  # its runs recovered by it (a SQLite deployment's executors restart)
        op.until("every run to pause", lambda: op.status(*runs) == ["paused"] * len(runs))
        reads = Counter(r[0] for r in op.lines("reads.log"))
        assert set(reads) == set(runs) and max(reads.values()) <= 2, reads  # at most the cut call again
        events = [e for name in ("s1", "s2") for e in _logged(tmp_path, name) if e["event"] == "run_paused"]
        assert sorted({e["run_id"] for e in events}) == sorted(runs)
        for run_id in runs:
            op.approve(run_id)
        op.until("every run to finish", lambda: op.status(*runs) == ["finished"] * len(runs))
        assert sorted(r[0] for r in op.lines("effects.log")) == sorted(runs)  # each effect once
    finally:
        op.stop()


# -- an approval decided under one policy, resumed under a newer one ------------------------------


def test_an_approval_given_under_an_older_policy_is_judged_again_by_the_newer_one(
    tmp_path: Path, capsys: Any
) -> None:
    """A run paused for its note on the agent file as it was; the operator tightens the file's
    policy (the note's tool denied) and restarts the worker; the reviewer then approves the
    old proposal. The resume judges the call by the policy now: the effect never happens."""
    import signal

    op = deployed(tmp_path, capsys, lambda folder: _write_version(folder, "A"))
    try:
        op.start("s1")
        run_id = op.submit()
        op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
        assert op.signal("s1", signal.SIGTERM) == 0
        agent = tmp_path / "agent" / "agent.yaml"
        agent.write_text(agent.read_text().replace("policy: {", "policy: {deny: [note], "))
        op.start("s1")
        op.approve(run_id)
        op.until("the run to end", lambda: op.status(run_id)[0] not in ("paused", "running", "queued"))
        shown = op.runs("show", run_id)
        assert (shown["status"], shown["stop_reason"]) == ("finished", "policy_denied"), shown
        assert [p["reason"] for p in shown["problems"]] == ["tool_not_allowed"], shown
        assert [p["status"] for p in shown["proposals"]] == ["approved"]  # the approval, as given
        changed = [e for e in _logged(tmp_path, "s1") if e["event"] == "run_version_changed"]
        assert [e["run_id"] for e in changed] == [run_id] and changed[0]["bound"] != changed[0]["served"]
        assert op.lines("effects.log") == []  # the note never ran
    finally:
        op.stop()


# -- an earlier release's ledger entry under a pid another process took ---------------------------


def test_an_earlier_releases_entry_under_a_reused_pid_is_held_and_a_person_may_resolve_it(
    tmp_path: Path, capsys: Any
) -> None:
    """An effect's intent written by a release before incarnation tokens (owner ``host:pid``);
    that process died and its pid is another process's now (a live one, no tether). Nothing tells
    the two apart without a wall clock a step fools: the entry is never taken over (its effect
    could run twice), but past its lease it is listed for a person, who resolves it; the run's
    call then replays the person's word. A token-bearing owner that is alive is still not
    resolvable (its call may be running)."""
    import socket
    import subprocess

    from tether.policy import SqliteApprovalStore
    from tether.policy._ledger import _owner, owner_dead

    url = f"sqlite:///{tmp_path / 'deployment'}"
    assert _cli(capsys, "db", "init", "--db", url)[0] == 0
    store = SqliteApprovalStore(tmp_path / "deployment" / "approvals.db")
    other = subprocess.Popen(["sleep", "600"])  # the reused pid: alive, and no tether
    host = socket.gethostname()

    def claim(key: str, owner: str, at: datetime) -> str:
        lease = at + timedelta(minutes=1)
        done = blocking(
            store.claim, key, tool="note", arguments_hash="h", owner=owner, lease_until=lease, now=at,
            owner_dead=owner_dead, run_id="r-old",
        )  # fmt: skip
        return str(done.action)

    try:
        then = datetime.now(UTC) - timedelta(minutes=10)
        assert claim("idem_old", f"{host}:{other.pid}", then) == "run"  # the earlier release's
        assert claim("idem_tok", f"{host}:{other.pid}:a1b2c3", then) == "run"  # one with a token
        now = datetime.now(UTC)
        assert claim("idem_old", _owner(), now) == "busy"  # never taken over
        code, out = _cli(capsys, "runs", "escalations", "--db", url)
        assert code == 0 and [e["key"] for e in out["escalations"]] == ["idem_old"], out

        code, out = _cli(capsys, "runs", "resolve", "idem_tok", "--happened", "no", "--db", url)
        assert (code, out["error"]) == (1, "not_escalated"), out  # alive with its token: its call may run
        code, out = _cli(capsys, "runs", "resolve", "idem_old", "--happened", "no", "--db", url)
        assert code == 0 and out["status"] == "done", out
        assert claim("idem_old", _owner(), now) == "done"  # the call replays the person's word
    finally:
        other.kill()
        other.wait()
        store.close()
