"""An operator's rolling upgrade, eighth round.

What did not hold, each fixed here and pinned below:

- a SQLite deployment keeps one DBOS application version across tether's releases (round
  seven), so a run in flight when a worker of a later release was killed is recovered by this
  one after a rollback, replaying the steps that release recorded. A recorded turn this release
  cannot read (an observation with a field it does not know) escaped as a ``TypeError``: DBOS
  ended the workflow ``ERROR``, the run listed ``failed`` with a traceback and was never
  recovered again, not even by the release that wrote it once rolled forward. The replay now
  stops on a typed ``UnreadableStep`` (nothing run, nothing written), the workflow stays pending
  for a worker that reads it, and the operator is told so (``run_not_replayed``);
- round six's refused resume (a checkpoint this release cannot read, ``unreadable_checkpoint``)
  is sent again by ``runs move --to latest``, which refused on a SQLite deployment (one
  version): rolled forward to the release that reads the checkpoint, the approved run stood
  paused for good. ``runs move`` now enqueues such a refused resume again there too;
- a checkpoint status this release does not write (a later release's): asked for, the run was
  resumed as if paused and its approved effect run. Every resume path refuses it now as it
  refuses a later format (``bad_checkpoint``; a worker's resume ends ``unreadable_checkpoint``);
- a worker killed (-9) inside an effect and restarted on the same host under the same pid (a
  container's, on the new release): its heartbeat was read as the dead incarnation's on every
  other machine, so the dead one's call stood ``in_progress`` for good and the run recovered
  elsewhere never finished. A worker's heartbeat now speaks only for the owner token it
  registered at its latest start (``tether_workers.owner``, migration ``workers.003_owner``);
- a worker killed (-9) with a run in flight and restarted on a new version under its executor
  id leaves the run to a worker of the old version (DBOS recovers a run only on its own), and
  ``runs show`` lists it running on a live worker: nothing said so. It says now (``runs_left``).

Played and held: a run in flight on an older release (``UPGRADE_FROM``) killed (-9) with a turn
recorded, replayed by this release's worker on a SQLite deployment; and the rollback (this
release records, the older one replays); four of this release's ``db init`` at once on a fresh
SQLite deployment and on one ca71041 set up (each migration once, every command exit 0).
"""

from __future__ import annotations

import base64
import json
import pickle
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_rolling_upgrade import Operator, _write_version, deployed, operator  # noqa: F401 - the fixture
from test_rolling_upgrade_round6 import NEW_SRC, Mixed, old_src  # noqa: F401 - the fixture

from tether.cli import main

# -- a recorded step a later release wrote, replayed on this one ----------------------------------

# A tool that holds its call while the test keeps a gate file, for the item "hold" only: the run
# records a model step, a turn and a model step, then waits inside its second turn.
HOLDING_TOOLS = '''
import os
from typing import Annotated

import anyio
from pydantic import Field

from tether.tools import Effect, ToolContext, tool

FOLDER = os.path.dirname(os.path.abspath(__file__))


def _log(name, line):
    with open(os.path.join(FOLDER, name), "a") as f:
        f.write(line + "\\n")


@tool(effect=Effect.READ)
async def look(item: Annotated[str, Field(description="Item id.")], ctx: ToolContext) -> dict:
    """Look an item up."""
    _log("reads.log", f"{ctx.run_id}\\t{item}")
    while item == "hold" and os.path.exists(os.path.join(FOLDER, "gate")):
        await anyio.sleep(0.05)
    return {"item": item}


@tool(effect=Effect.WRITE)
async def note(text: Annotated[str, Field(description="The note.")], ctx: ToolContext) -> dict:
    """Write a note (a side effect a person approves)."""
    _log("effects.log", f"{ctx.run_id}\\tA\\t{ctx.idempotency_key}")
    return {"noted": text}
'''


def _holding_agent(folder: Path, *, note_first: bool = False) -> None:
    """Look, look at "hold" (held while the gate exists), then note; or note before the hold."""
    _write_version(folder, "A")
    (folder / "tools.py").write_text(HOLDING_TOOLS)
    look, hold = (
        {"call": "look", "arguments": {"item": "i1"}},
        {"call": "look", "arguments": {"item": "hold"}},
    )
    note = {"call": "note", "arguments": {"text": "noted"}}
    steps = [look, note, hold] if note_first else [look, hold, note]
    (folder / "steps.json").write_text(json.dumps(steps))


def _record(db: sqlite3.Connection, run_id: str, step: int) -> dict[str, Any]:
    [(raw,)] = db.execute(
        "SELECT output FROM operation_outputs WHERE workflow_uuid = ? AND function_id = ?", (run_id, step)
    )
    value: dict[str, Any] = pickle.loads(base64.b64decode(raw))  # DBOS's own encoding of a step
    return value


def _rewrite(db: sqlite3.Connection, run_id: str, step: int, value: dict[str, Any]) -> None:
    db.execute(
        "UPDATE operation_outputs SET output = ? WHERE workflow_uuid = ? AND function_id = ?",
        (base64.b64encode(pickle.dumps(value)).decode(), run_id, step),
    )
    db.commit()


def _logged(folder: Path, name: str) -> list[dict[str, Any]]:
    out = []
    for line in (folder / f"{name}.log").read_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def test_a_step_a_later_release_recorded_leaves_the_run_pending_for_one_that_reads_it(
    tmp_path: Path, capsys: Any
) -> None:
    op = deployed(tmp_path, capsys, _holding_agent)
    gate = tmp_path / "agent" / "gate"
    gate.write_text("")
    try:
        op.start("s1")
        run_id = op.submit()
        op.until("the run inside its second turn", lambda: len(op.lines("reads.log")) == 2)
        assert op.signal("s1", signal.SIGKILL) == -signal.SIGKILL  # mid-call, its first turn recorded
        gate.unlink()
        # What a later release recorded for that turn: an observation field this one lacks.
        db = sqlite3.connect(tmp_path / "deployment" / "dbos.sqlite")
        written = _record(db, run_id, 2)
        later = json.loads(json.dumps(written))
        for observation in later["observations"].values():
            observation["labels"] = [{"class": "third_party"}]
        _rewrite(db, run_id, 2, later)

        op.start("s1")  # this release (a rollback): it recovers the run and replays its steps
        ended = ("run_not_replayed", "run_failed", "run_paused", "run_finished")
        op.until("the replay to end", lambda: [e for e in _logged(tmp_path, "s1") if e["event"] in ended])
        [told] = [e for e in _logged(tmp_path, "s1") if e["event"] in ended]
        assert told["event"] == "run_not_replayed", told  # it was run_failed: TypeError, a traceback
        assert told["run_id"] == run_id and "labels" in told["cause"], told
        assert "another release" in told["cause"], told
        [(status,)] = db.execute("SELECT status FROM workflow_status WHERE workflow_uuid = ?", (run_id,))
        assert status == "PENDING"  # not ERROR: a worker that reads the step recovers it
        assert op.status(run_id) == ["running"]
        assert len(op.lines("reads.log")) == 2 and op.lines("effects.log") == []  # nothing ran

        # A worker that reads the record (the release that wrote it, rolled forward again;
        # played here by putting back what this one reads) recovers the run and finishes it.
        assert op.signal("s1", signal.SIGTERM) == 0
        _rewrite(db, run_id, 2, written)
        db.close()
        op.start("s1")
        op.until("the recovered run to pause", lambda: op.status(run_id) == ["paused"])
        op.approve(run_id)
        op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
        shown = op.runs("show", run_id)
        assert (shown["stop_reason"], shown["problems"]) == ("accepted", []), shown
        assert [r[0] for r in op.lines("effects.log")] == [run_id]  # its effect once
        assert [r[1] for r in op.lines("reads.log")] == ["i1", "hold", "hold"]  # the cut call again
    finally:
        op.stop()


@pytest.mark.slow
def test_a_run_in_flight_on_an_older_release_is_replayed_by_this_one_on_sqlite(
    tmp_path: Path,
    capsys: Any,
    old_src: Path,  # noqa: F811
) -> None:
    """The legitimate direction of the test above, with a real older release: its worker
    records a run's first turn and is killed (-9) inside the second; this release's worker,
    restarted under the same executor id, replays what the older one recorded and finishes the
    run, its effect once."""
    (tmp_path / "agent").mkdir()
    _holding_agent(tmp_path / "agent")
    url = f"sqlite:///{tmp_path / 'deployment'}"
    op = Mixed(url, tmp_path, capsys, old_src)
    op.old_cli("db", "init", "--db", url)
    gate = tmp_path / "agent" / "gate"
    gate.write_text("")
    try:
        op.start_on("s1", op.old)
        run_id = op.old_submit()
        op.until("the run inside its second turn", lambda: len(op.lines("reads.log")) == 2)
        assert op.signal("s1", signal.SIGKILL) == -signal.SIGKILL
        gate.unlink()
        op.cli("db", "init", "--db", url)
        op.start_on("s1", NEW_SRC)
        op.until("the recovered run to pause", lambda: op.status(run_id) == ["paused"])
        op.approve(run_id)
        op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
        shown = op.runs("show", run_id)
        assert (shown["stop_reason"], shown["problems"]) == ("accepted", []), shown
        assert [r[0] for r in op.lines("effects.log")] == [run_id]
        assert [r[1] for r in op.lines("reads.log")] == ["i1", "hold", "hold"]  # the first turn replayed
        assert not [e for e in _logged(tmp_path, "s1") if e["event"] in ("run_failed", "run_not_replayed")]
    finally:
        op.stop()


# -- a checkpoint a later release wrote, on a SQLite deployment ------------------------------------


@pytest.mark.parametrize("later", ["field", "status"])
def test_a_sqlite_run_whose_checkpoint_this_release_refused_is_resumed_once_a_release_reads_it(
    tmp_path: Path, capsys: Any, later: str
) -> None:
    """Round six: a resume this release cannot read the checkpoint of ends at once, typed
    (``unreadable_checkpoint``), the run paused, and ``runs move --to latest`` sends the resume
    to a worker that reads it. On a SQLite deployment (one version) ``runs move`` refused
    (``no_such_version``) and nothing else enqueues a resume again (its id is fixed by the
    paused state, its workflow done): rolled forward to the release that reads it, the approved
    run stood paused for good. ``runs move`` now enqueues that resume again there too.

    ``status``: the checkpoint's status is one this release does not know (a later release's;
    this one writes ``paused``, ``stopped`` and ``finished``). Asked for (``tether resume``), it
    was resumed as if paused, its approved effect run on a state this release cannot know; it
    is now refused as a checkpoint in a later format is."""
    op = deployed(tmp_path, capsys, lambda folder: _write_version(folder, "A"))
    url = op.url
    try:
        op.start("s1")
        run_id = op.submit()
        op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
        db = sqlite3.connect(tmp_path / "deployment" / "approvals.db")
        read = "SELECT state, status FROM run_checkpoints WHERE run_id = ?"
        [(state, status)] = db.execute(read, (run_id,))
        assert status == "paused"
        if later == "field":
            written = (json.dumps({**json.loads(state), "field_of_a_later_release": [1]}), status)
        else:
            written = (state, "delegated")
        change = "UPDATE run_checkpoints SET state = ?, status = ? WHERE run_id = ?"
        db.execute(change, (*written, run_id))
        db.commit()
        op.approve(run_id)
        if later == "status":  # no worker resumes a run not paused: the operator asks for it
            op.capsys.readouterr()
            code = main(["resume", run_id, "--db", url, "--json"])
            said = json.loads(op.capsys.readouterr().out.strip().splitlines()[-1])
            assert code == 5 and "a status this release does not know" in said["detail"], said
        ended = ("run_not_resumed", "run_finished", "run_paused", "run_failed")
        op.until("the resume to end", lambda: [
            e for e in _logged(tmp_path, "s1") if e["event"] in ended and e["op"] == "resume"
        ])  # fmt: skip
        [told] = [e for e in _logged(tmp_path, "s1") if e["event"] in ended and e["op"] == "resume"]
        assert (told["event"], told.get("error")) == ("run_not_resumed", "unreadable_checkpoint"), told
        assert op.status(run_id) == ["paused"] and op.lines("effects.log") == []
        assert list(db.execute(read, (run_id,))) == [written]  # left as that release wrote it
        # A worker that reads it (the release that wrote it, rolled forward; played here by
        # putting back what this one reads), then the operator's move.
        db.execute(change, (state, status, run_id))
        db.commit()
        db.close()
        moved = op.runs("move", run_id, "--to", "latest")
        assert moved["resume_moved"] is True, moved
        op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
        shown = op.runs("show", run_id)
        assert (shown["stop_reason"], shown["problems"]) == ("accepted", []), shown
        assert [r[0] for r in op.lines("effects.log")] == [run_id]  # the approved effect, once
        # A paused run (nothing refused) still does not move on SQLite: one version.
        other = op.submit()
        op.until("another run to pause", lambda: op.status(other) == ["paused"])
        op.capsys.readouterr()
        assert main(["runs", "--db", url, "move", other, "--to", "latest", "--json"]) != 0
        refused = json.loads(op.capsys.readouterr().out.strip().splitlines()[-1])
        assert refused["error"] == "no_such_version", refused
    finally:
        op.stop()


def test_a_checkpoint_status_this_release_does_not_write_is_never_resumed_as_paused() -> None:
    """The one rule every resume path shares (``tether resume``, the console, a worker)."""
    from types import SimpleNamespace

    from tether.errors import ApprovalError
    from tether.runners._scope import resume_point
    from tether.runs._checkpoint import CheckpointError

    def checkpoint(status: str) -> Any:
        return SimpleNamespace(state="{}", status=status, app=None, stop_reason="approval_required")

    assert [resume_point(checkpoint(s), "r1").status for s in ("paused", "stopped")] == ["paused", "stopped"]
    with pytest.raises(ApprovalError) as ended:
        resume_point(checkpoint("finished"), "r1")
    assert ended.value.reason == "run_finished"
    for status in ("delegated", "", "Paused"):
        with pytest.raises(CheckpointError) as refused:
            resume_point(checkpoint(status), "r1")
        assert refused.value.reason == "bad_checkpoint" and "does not know" in str(refused.value)


# -- a worker restarted under its dead incarnation's host and pid ----------------------------------


def test_a_worker_restarted_under_the_same_host_and_pid_does_not_hold_its_dead_incarnations_effect(
    pg_url: str,
) -> None:
    """Worker w1 on host-a (a container: its pid the same at every start) is killed (-9) inside
    an effect, then restarted there on the new release. A worker on another machine recovering
    w1's run read the restarted worker's heartbeat (host and pid alike) as the dead owner's: the
    call stood ``in_progress`` for good, long after its lease ran out, the run never finished.
    A worker now speaks only for the owner token it registered; the dead one's call is its
    lease's, and once that runs out it is reconciled and run once. A live worker's call (its
    token, or a row a release before this one wrote) still holds, whatever its lease says."""
    import time
    from datetime import UTC, datetime, timedelta

    import anyio
    import psycopg

    from tether.durable._deploy import init_deployment
    from tether.durable._worker import _beat
    from tether.errors import ApprovalError
    from tether.policy import Approvals, content_hash
    from tether.policy._ledger import owner_dead
    from tether.policy._pg_store import PgApprovalStore
    from tether.sql._postgres import PgUrl

    init_deployment(pg_url)
    pg = PgUrl.parse(pg_url)

    def sql(fn: Any, *args: Any) -> None:
        with psycopg.connect(pg.conninfo, autocommit=True) as conn:
            conn.execute(f"SET search_path = {pg.schema}")
            fn(_Raw(conn), *args)

    store = PgApprovalStore(pg_url)
    store.worker_dead_after_s = 15.0  # as a durable worker of this release sets it
    ran: list[str] = []

    async def call() -> dict[str, Any]:
        ran.append("b")
        return {"ok": True}

    def perform(key: str) -> Any:
        b = Approvals(store, {"pay": lambda k: None}, wait_s=0.3)  # the tool: "never happened"
        return anyio.run(lambda: b.perform(key, tool="pay", arguments={"n": 1}, call=call))

    def held_by(key: str, owner: str) -> None:
        async def claim() -> None:
            now = datetime.now(UTC)
            held = await store.claim(
                key, tool="pay", arguments_hash=content_hash("pay", {"n": 1}), owner=owner,
                lease_until=now + timedelta(seconds=0.5), now=now, owner_dead=owner_dead,
            )  # fmt: skip
            assert held.action == "run"

        anyio.run(claim)

    try:
        old, new = "host-a:4242:0ld1ncarnat10n.100", "host-a:4242:n3w1ncarnat10n.200"
        sql(_beat, "w1", "host-a", 4242, True, "A", "{}", old)
        held_by("k1", old)  # w1 inside the effect of k1 ...
        held_by("k2", old)
        sql(_beat, "w1", "host-a", 4242, True, "B", "{}", new)  # ... killed, restarted as B
        held_by("k3", new)  # the restarted worker's own call
        time.sleep(1.0)  # every lease above has run out on every clock
        out = perform("k1")  # the dead incarnation's call: reconciled (never happened), run once
        assert not out.replayed and out.attempts == 2 and ran == ["b"]
        with pytest.raises(ApprovalError) as live:  # the live incarnation's: it beats, it holds
            perform("k3")
        assert live.value.reason == "in_progress" and ran == ["b"]
        # A start by a release before this one (no token): its heartbeat still holds every call
        # under its host and pid, as before.
        sql(_older_start, "w1")
        with pytest.raises(ApprovalError) as older:
            perform("k2")
        assert older.value.reason == "in_progress" and ran == ["b"]
    finally:
        store.close()


class _Raw:
    """A psycopg connection as ``_beat`` is handed one (``exec_driver_sql``)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def exec_driver_sql(self, statement: str, args: Any = ()) -> Any:
        return self.conn.execute(statement, args)


def _older_start(conn: Any, executor_id: str) -> None:
    """What a release before this one writes when its worker starts under ``executor_id``."""
    conn.exec_driver_sql(
        "UPDATE tether_workers SET heartbeat_at = now(), started_at = now() + interval '1 second'"
        " WHERE executor_id = %s",
        (executor_id,),
    )


# -- a worker restarted on a new version with runs of the old one in flight -------------------------


@pytest.mark.slow
def test_a_worker_restarted_on_a_new_version_names_the_runs_it_left_to_the_old_one(
    operator: Operator,  # noqa: F811
) -> None:
    """w1 (version A) is killed (-9) with a run in flight and restarted on version B under its
    executor id, as an operator upgrading in place does. DBOS recovers a run only on its own
    version: the run waits for a worker of A, and ``runs show`` lists it running on w1, a live
    worker. Nothing said so; the restarted worker now names the runs and the version they wait
    for (``runs_left``). Then a worker of A (the files rolled back) takes them over and the run
    finishes, its effect once."""
    op = operator
    folder = op.agent.parent
    (folder / "gate-A").write_text("")
    op.start("w1")
    run_id = op.submit()
    op.until("the run in flight", lambda: run_id in {r[0] for r in op.lines("reads.log")})
    version_a = op.runs("show", run_id)["version"]
    assert op.signal("w1", signal.SIGKILL) == -signal.SIGKILL
    (folder / "gate-A").unlink()
    _write_version(folder, "B")
    op.start("w1")
    told = op.until("the operator to be told", lambda: [
        e for e in _logged(op.folder, "w1") if e["event"] == "runs_left"
    ])  # fmt: skip
    assert (told[0]["version"], told[0]["runs"]) == (version_a, [run_id]), told
    assert version_a in told[0]["hint"]
    assert op.status(run_id) == ["running"]  # on A: B's worker does not take it
    # A worker of A (its files back) takes the runs w1 left and finishes them.
    _write_version(folder, "A")
    op.start("a2")
    op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
    op.approve(run_id)
    op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
    assert [r[0] for r in op.lines("effects.log")] == [run_id]
    assert {r[1] for r in op.lines("reads.log")} == {"A"}
