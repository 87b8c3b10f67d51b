"""An operator's rolling upgrade, fifteenth round: migrators of two releases at once, and the
paths that read or write a store without migrating it.

What did not hold, each fixed here and pinned below:

- on PostgreSQL, a migrator (``tether db init``, or a worker's start, of any release) stopped while
  it held the migrators' own lock (suspended with Ctrl-Z, a frozen container, a debugger) held up
  every later migrator for good, without a word: each worker started for the upgrade hung in its
  start, on every schema of the database (the lock is the database's). Round nine bounded the wait
  of a migration's DDL for its table's lock; the wait for the migration lock is now bounded the
  same way (``MIGRATION_LOCK_WAIT_S`` a try, ``MIGRATION_TRIES`` tries) and then says so
  (``store_busy``, exit 6, naming the session that holds it: its pid, name and state). A migrator
  that is only slow is still waited for, and one killed (-9) half-way left nothing of its
  migration: the next one applies it whole.
- ``tether submit`` writes the intake on its own driver connection, and every ``tether runs``
  command reads it (and, on PostgreSQL, the workers' tables) without migrating: a deployment a
  later release had contracted (a marked migration, round twelve) was written and read in the
  old format as if nothing had changed — ``submit`` queued a run in a row format the deployment
  no longer had, ``runs list`` listed it. Both now refuse first (``schema_too_new``, exit 1, the
  migration named), nothing read or written; an unmarked (expand-only) migration is worked
  beside as before.
- a durable step a later release recorded with a key this release does not know (a model
  response, a tool turn or one of its call outcomes; a SQLite deployment keeps one DBOS version
  across releases, so a rollback replays what a later release recorded) was replayed without it,
  silently: the run went on from another state than the one recorded. Round eight refused a
  record that failed to decode; one that decoded with a key left unread is refused the same way
  now (``UnreadableStep``: ``run_not_replayed`` naming the key, the workflow left pending for a
  worker that reads it, nothing run), as a run checkpoint holding a field this release lacks is.
  The one key an earlier release wrote that this one no longer reads (``timed_out``) still replays.
  A resume's recorded checkpoint step holding such a key failed the run outright (``TypeError``:
  the workflow ``ERROR``, the run listed failed with its approved effect done): it is refused
  the same way. A run's request (the workflow's input) holding a key this release does not know
  (a later release's ``tether submit``: a bound or restriction on the run) was run without it;
  it is left pending, as round ten left a request naming an op this release does not run.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_rolling_upgrade import _write_version, deployed
from test_rolling_upgrade_round8 import _holding_agent, _logged, _record, _rewrite

from tether.cli import main

PG_LOCK = "hashtext('tether_migrations')"


def _cli(capsys: Any, *argv: str) -> tuple[int, dict[str, Any]]:
    """A command as a person types it: its exit code and JSON line."""
    capsys.readouterr()
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _pg(url: str) -> tuple[str, str]:
    dsn, _, schema = url.partition("?schema=")
    return dsn, schema


def _until(what: str, probe: Any) -> Any:
    """``probe()`` once it is true (polled; a safety net of 60 s for the test itself)."""
    for _ in range(1200):
        got = probe()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# -- a migrator stopped while it holds the migration lock ------------------------------------------

# A migrator of another release (its ``db init``, its worker's start) half-way through a migration
# of its own on the deployment's schema: the migration lock taken, a table created and its name
# journalled, uncommitted, when it was stopped. It waits on its stdin for good (as stopped).
HALF_WAY = """
import sys, psycopg
dsn, schema = sys.argv[1], sys.argv[2]
conn = psycopg.connect(dsn, application_name="tether:init-of-another-release")
conn.execute(f"SET search_path = {schema}")
conn.execute("SELECT pg_advisory_xact_lock(hashtext('tether_migrations'))")
conn.execute("CREATE TABLE later_half (x integer)")
conn.execute("INSERT INTO _migrations (name, applied_at) VALUES ('approvals.950_half_way', now())")
print("holding", flush=True)
sys.stdin.read()
"""


def _lock_free(dsn: str) -> bool:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(f"SELECT pg_try_advisory_lock({PG_LOCK})").fetchone()
        assert row is not None
        if row[0]:
            db.execute(f"SELECT pg_advisory_unlock({PG_LOCK})")
        return bool(row[0])


@pytest.fixture
def half_way(pg_url: str, capsys: Any) -> Iterator[subprocess.Popen[bytes]]:
    """The deployment set up, then another release's migrator stopped half-way on it."""
    assert _cli(capsys, "db", "init", "--db", pg_url)[0] == 0
    proc = subprocess.Popen(
        [sys.executable, "-c", HALF_WAY, *_pg(pg_url)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"holding\n"
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_migrator_stopped_holding_the_migration_lock_is_named_and_a_kill_leaves_nothing_half_done(
    pg_url: str, half_way: subprocess.Popen[bytes], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    import tether.sql._database as database

    monkeypatch.setattr(database, "MIGRATION_LOCK_WAIT_S", 0.5, raising=False)
    monkeypatch.setattr(database, "MIGRATION_TRIES", 2, raising=False)
    half_way.send_signal(signal.SIGSTOP)  # Ctrl-Z, a frozen container
    result: list[tuple[int, dict[str, Any]]] = []
    upgrade = threading.Thread(target=lambda: result.append(_cli(capsys, "db", "init", "--db", pg_url)))
    upgrade.start()
    upgrade.join(timeout=60)  # a safety net for the test itself: it waited for good
    try:
        assert result, "tether db init waited for good behind the stopped migrator"
        [(code, out)] = result
        assert (code, out["error"]) == (6, "store_busy"), out
        said = out["message"]
        assert "migration lock" in said and "run the command again" in said, out
        assert f"pid {_holder_pid(pg_url)}" in said and "tether:init-of-another-release" in said, out
    finally:
        half_way.send_signal(signal.SIGKILL)  # the operator kills it (-9)
        half_way.wait()
        upgrade.join()
    dsn, schema = _pg(pg_url)
    _until("the killed migrator's session to end", lambda: _lock_free(dsn))
    assert _cli(capsys, "db", "init", "--db", pg_url)[0] == 0  # run again: it applies
    assert _cli(capsys, "db", "check", "--db", pg_url)[0] == 0
    with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as db:
        names = [r[0] for r in db.execute("SELECT name FROM _migrations")]
        half = db.execute("SELECT to_regclass('later_half')").fetchone()
    assert len(names) == len(set(names)) and "approvals.003_ledger_tenant" in names
    assert "approvals.950_half_way" not in names and half == (None,)  # nothing of it was kept


def _holder_pid(url: str) -> int:
    import psycopg

    dsn, _ = _pg(url)
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'tether:init-of-another-release'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _waiting_for_the_lock(url: str) -> bool:
    """Whether this deployment's migrator (its sessions are named ``tether:<schema>``) waits for
    an advisory lock."""
    import psycopg

    dsn, schema = _pg(url)
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
            " AND application_name = %s",
            (f"tether:{schema}",),
        ).fetchone()
    return bool(row and row[0])


def test_a_migrator_that_is_only_slow_is_waited_for(
    pg_url: str, half_way: subprocess.Popen[bytes], capsys: Any
) -> None:
    """The legitimate side: another migrator at work (not stopped) that finishes is waited for,
    and the migration goes on after it (here its half-way work is rolled back by its kill)."""
    result: list[tuple[int, dict[str, Any]]] = []
    upgrade = threading.Thread(target=lambda: result.append(_cli(capsys, "db", "init", "--db", pg_url)))
    upgrade.start()
    _until("the second migrator to wait for the lock", lambda: _waiting_for_the_lock(pg_url))
    half_way.kill()  # the first one ends (its transaction rolled back)
    half_way.wait()
    upgrade.join(timeout=60)
    assert result and result[0][0] == 0, result


# -- a deployment a later release contracted, read and written unmigrated --------------------------

EXPANDING = "intake.951_add_column"  # a later release's expand-only migration: worked beside
BREAKING = {"intake": "intake.950_split_request!", "workers": "workers.950_rename_apps!"}


class Journal:
    """The deployment's journal of applied migrations, as a later release writes it."""

    def __init__(self, url: str, folder: Path | None) -> None:
        self.url, self.folder = url, folder

    def _do(self, sql: str, name: str) -> None:
        if self.folder is not None:
            with sqlite3.connect(self.folder / "intake.db") as db:
                db.execute(sql.replace("%s", "?").replace("now()", "'2026-12-04'"), (name,))
            return
        import psycopg

        dsn, schema = _pg(self.url)
        with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as db:
            db.execute(sql, (name,))

    def add(self, name: str) -> None:
        self._do("INSERT INTO _migrations (name, applied_at) VALUES (%s, now())", name)

    def remove(self, name: str) -> None:  # the store restored from before it (or rolled forward)
        self._do("DELETE FROM _migrations WHERE name = %s", name)

    def waiting(self) -> int:
        if self.folder is not None:
            with sqlite3.connect(self.folder / "intake.db") as db:
                return int(db.execute("SELECT count(*) FROM tether_intake").fetchone()[0])
        import psycopg

        dsn, schema = _pg(self.url)
        with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as db:
            row = db.execute("SELECT count(*) FROM tether_intake").fetchone()
        return int(row[0]) if row else 0


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_submit_and_runs_refuse_an_intake_a_later_release_contracted(
    kind: str, tmp_path: Path, capsys: Any, request: pytest.FixtureRequest
) -> None:
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    agent = str(tmp_path / "agent" / "agent.yaml")
    folder = tmp_path / "deployment" if kind == "sqlite" else None
    url = f"sqlite:///{folder}" if folder is not None else request.getfixturevalue("pg_url")
    journal = Journal(url, folder)
    assert _cli(capsys, "db", "init", "--db", url)[0] == 0
    journal.add(EXPANDING)  # expand-only: submitted and listed as before
    code, out = _cli(capsys, "submit", "--db", url, "--agent", agent, "note it")
    assert code == 0, out
    queued = out["run_id"]
    assert _cli(capsys, "runs", "list", "--db", url)[1]["runs"][0]["run_id"] == queued

    concerns = ["intake", "workers"] if folder is None else ["intake"]  # a run is bound by the workers
    for concern in concerns:
        journal.add(BREAKING[concern])
        for argv in (["submit", "--db", url, "--agent", agent, "note it"], ["runs", "list", "--db", url]):
            code, out = _cli(capsys, *argv)
            assert (code, out["error"]) == (1, "schema_too_new"), (argv, out)
            assert BREAKING[concern] in out["message"] and "nothing was read or written" in out["message"]
        assert journal.waiting() == 1  # no row written in the old format
        journal.remove(BREAKING[concern])

    # The store as this release reads it again: what was queued is still there, and new runs go in.
    code, out = _cli(capsys, "submit", "--db", url, "--agent", agent, "note it")
    assert code == 0 and journal.waiting() == 2, out
    listed = {r["run_id"]: r["status"] for r in _cli(capsys, "runs", "list", "--db", url)[1]["runs"]}
    assert listed == {queued: "queued", out["run_id"]: "queued"}


# -- a step a later release recorded with a key this release does not know --------------------------


@pytest.mark.parametrize(
    ("step", "key", "value"),
    [
        (1, "refusal", "the model declined: its text is here, not in content"),  # a model response
        (2, "withheld", ["the call whose result the model must not read"]),  # a tool turn
    ],
)
def test_a_step_recorded_with_a_key_this_release_does_not_know_is_not_replayed_without_it(
    step: int, key: str, value: Any, tmp_path: Path, capsys: Any
) -> None:
    op = deployed(tmp_path, capsys, _holding_agent)
    gate = tmp_path / "agent" / "gate"
    gate.write_text("")
    try:
        op.start("s1")
        run_id = op.submit()
        op.until("the run inside its second turn", lambda: len(op.lines("reads.log")) == 2)
        assert op.signal("s1", signal.SIGKILL) == -signal.SIGKILL  # mid-call: two steps recorded
        gate.unlink()
        db = sqlite3.connect(tmp_path / "deployment" / "dbos.sqlite")
        written = _record(db, run_id, step)
        _rewrite(db, run_id, step, {**written, key: value})  # as a later release recorded it

        op.start("s1")  # this release (a rollback): it recovers the run and replays its steps
        ended = ("run_not_replayed", "run_failed", "run_paused", "run_finished")
        op.until("the replay to end", lambda: [e for e in _logged(tmp_path, "s1") if e["event"] in ended])
        [told] = [e for e in _logged(tmp_path, "s1") if e["event"] in ended]
        assert told["event"] == "run_not_replayed", told  # it went on without the key
        assert told["run_id"] == run_id and key in told["cause"] and "another release" in told["cause"], told
        [(status,)] = db.execute("SELECT status FROM workflow_status WHERE workflow_uuid = ?", (run_id,))
        assert status == "PENDING" and op.status(run_id) == ["running"]
        assert len(op.lines("reads.log")) == 2 and op.lines("effects.log") == []  # nothing ran

        # A worker that reads the record (the later release rolled forward again; played by
        # putting back what this one reads) recovers the run and finishes it, its effect once.
        assert op.signal("s1", signal.SIGTERM) == 0
        _rewrite(db, run_id, step, written)
        db.close()
        op.start("s1")
        op.until("the recovered run to pause", lambda: op.status(run_id) == ["paused"])
        op.approve(run_id)
        op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
        assert op.runs("show", run_id)["stop_reason"] == "accepted"
        assert [r[0] for r in op.lines("effects.log")] == [run_id]
    finally:
        op.stop()


def test_a_turn_an_earlier_release_recorded_with_its_retired_key_still_replays() -> None:
    """What refusing a later release's key must not break: f71ff92 recorded ``timed_out`` in each
    turn, which no release reads since; such a turn decodes as before. A key of a later release
    in a call outcome is refused like one in the turn."""
    from tether.core.messages import ToolCall
    from tether.durable._codec import decode_turn

    outcome = {
        "call": ["c1", "look", '{"item": "i1"}'], "status": "deny", "spec": None, "arguments": None,
        "decision": ["deny", "rule", "no", {}], "error": None, "proposal_id": None, "error_reason": None,
    }  # fmt: skip
    earlier = {
        "outcomes": [outcome], "observations": {}, "denied": [0], "waiting": [], "refused": [],
        "unsettled": [], "unsettled_errors": [], "crashes": [], "timed_out": [], "halted": False,
        "appended": "{}", "pending": [],
    }  # fmt: skip
    calls = [ToolCall("c1", "look", json.dumps({"item": "i1"}))]
    turn = decode_turn(earlier, lambda name: None, calls)
    assert [o.status for o in turn.denied] == ["deny"] and not turn.questions
    later = {**earlier, "outcomes": [{**outcome, "overridden_by": "a later release's reviewer"}]}
    with pytest.raises(ValueError, match="overridden_by"):
        decode_turn(later, lambda name: None, calls)


def _resume_agent(folder: Path) -> None:
    """Look, note (a person approves it), then look at "hold" (held while the gate exists)."""
    _holding_agent(folder, note_first=True)


def _checkpoint_step(db: sqlite3.Connection) -> tuple[str, int]:
    [(workflow, step)] = db.execute(
        "SELECT workflow_uuid, function_id FROM operation_outputs WHERE function_name = 'tether.checkpoint'"
    )
    return str(workflow), int(step)


def test_a_resumes_checkpoint_step_recorded_with_a_key_this_release_does_not_know_is_not_replayed(
    tmp_path: Path, capsys: Any
) -> None:
    """A run approved and resumed on a worker of a later release, killed (-9) after its approved
    effect, inside its next call; this release recovers the resume, whose recorded checkpoint
    step holds a key it does not know: nothing is run, the run is left as it stood (its effect
    once), and a worker that reads the step finishes it."""
    op = deployed(tmp_path, capsys, _resume_agent)
    gate = tmp_path / "agent" / "gate"
    gate.write_text("")
    try:
        op.start("s1")
        run_id = op.submit()
        op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
        op.approve(run_id)
        op.until("the resumed run inside its next call", lambda: len(op.lines("reads.log")) == 2)
        assert op.signal("s1", signal.SIGKILL) == -signal.SIGKILL
        gate.unlink()
        assert [r[0] for r in op.lines("effects.log")] == [run_id]
        db = sqlite3.connect(tmp_path / "deployment" / "dbos.sqlite")
        workflow, step = _checkpoint_step(db)
        written = _record(db, workflow, step)
        _rewrite(db, workflow, step, {**written, "claim_epoch": 7})  # as a later release recorded it

        before = len(_logged(tmp_path, "s1"))  # what the killed worker logged (the first pause)
        op.start("s1")
        ended = ("run_not_replayed", "run_failed", "run_paused", "run_finished")

        def told_now() -> list[dict[str, Any]]:
            return [e for e in _logged(tmp_path, "s1")[before:] if e["event"] in ended]

        [told] = op.until("the replay to end", told_now)
        assert told["event"] == "run_not_replayed" and "claim_epoch" in told["cause"], told
        [(status,)] = db.execute("SELECT status FROM workflow_status WHERE workflow_uuid = ?", (workflow,))
        assert status == "PENDING"  # not ERROR: a worker that reads the step recovers it
        assert len(op.lines("reads.log")) == 2 and len(op.lines("effects.log")) == 1  # nothing ran

        assert op.signal("s1", signal.SIGTERM) == 0
        _rewrite(db, workflow, step, written)
        db.close()
        op.start("s1")
        op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
        assert op.runs("show", run_id)["stop_reason"] == "accepted"
        assert [r[0] for r in op.lines("effects.log")] == [run_id]  # its effect once
        assert [r[1] for r in op.lines("reads.log")] == ["i1", "hold", "hold"]  # the cut call again
    finally:
        op.stop()


def test_a_request_holding_a_key_this_release_does_not_know_is_never_run_without_it(
    tmp_path: Path, capsys: Any
) -> None:
    """A later release's ``tether submit`` queued a run whose request says more than this
    release reads (a bound on the run's spending); after a rollback this release's worker takes
    it from the intake: it is not run, and the legitimate run beside it goes on."""
    op = deployed(tmp_path, capsys, _holding_agent)
    later = op.submit()  # no worker yet: it waits in the intake, where the later key is put
    with sqlite3.connect(tmp_path / "deployment" / "intake.db") as intake:
        [(raw,)] = intake.execute("SELECT request FROM tether_intake WHERE run_id = ?", (later,))
        request = {**json.loads(raw), "max_cost_usd": 0.0}
        intake.execute("UPDATE tether_intake SET request = ? WHERE run_id = ?", (json.dumps(request), later))
    try:
        op.start("s1")
        legit = op.submit()

        def told() -> list[dict[str, Any]]:
            logged = _logged(tmp_path, "s1")
            return [e for e in logged if e.get("run_id") == later and e["event"] != "run_claimed"]

        [event] = op.until("the later request to be refused", told)
        assert event["event"] == "run_not_replayed" and "max_cost_usd" in event["cause"], event
        assert later not in [r[0] for r in op.lines("reads.log")]  # nothing of it ran
        with sqlite3.connect(tmp_path / "deployment" / "dbos.sqlite") as dbos:
            [(status,)] = dbos.execute("SELECT status FROM workflow_status WHERE workflow_uuid = ?", (later,))
        assert status == "PENDING"  # a worker that reads the request runs it
        op.until("the legitimate run to pause", lambda: op.status(legit) == ["paused"])
        op.approve(legit)
        op.until("the legitimate run to finish", lambda: op.status(legit) == ["finished"])
        assert [r[0] for r in op.lines("effects.log")] == [legit]
    finally:
        op.stop()
