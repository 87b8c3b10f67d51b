"""An operator's rolling upgrade, twelfth round.

What did not hold, each fixed here and pinned below:

- the trace event a worker killed (-9) inside its write had cut short (the sink of the worker
  that continued the run removes the cut line) was missing from the run's JSON-lines file for
  good, though the PostgreSQL trace index kept it (as were events a killed worker had indexed but
  not yet written to its file). The resumed run now writes the events its file lacks back from
  the index, in order, before its own: the file holds every event, numbered once.
- two processes writing one run's trace at once (a stalled worker declared dead while a survivor
  recovers its run): the survivor's sink, opened while the other was inside its write, took that
  line for one a killed writer cut short and removed it (the event lost, the rest of the line
  left as a broken line in the middle of the file, which made the trace unreadable). Every write
  and the cut-line check now hold the file's lock (``flock``; a killed writer's goes with it).
- downgrade: a store a later release migrated in a way older releases cannot read or write (a
  column renamed, a meaning changed) was opened by a worker or command of this release as if
  nothing had changed (reads and writes on a schema it does not know). A later release marks
  such a migration (its name ends ``!``); a release that does not know it now refuses the store
  (``schema_too_new``, exit 1, the migration named) before it reads or writes a row, and a
  worker of this release already running on PostgreSQL sees it at its next heartbeat, drains and
  exits 1. An unmarked migration it does not know (a column added: expand-only) is still worked
  beside.
- a durable resume refused because another live process held the run's resume claim
  (``run_busy``: a console or ``tether resume`` resuming it, a stalled worker) ran nothing and
  waited for an operator's ``tether runs move``. It now waits for the holder (``resume_waiting``
  logged once) and runs once the holder let go or is gone (killed, its lease run out), from the
  checkpoint the holder left: once, no second workflow, no duplicate effect.
"""

from __future__ import annotations

import fcntl
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_rolling_upgrade import ROOT, Operator, _write_version, operator  # noqa: F401 - the fixture

from tether.cli import main
from tether.trace._events import EventKind, TraceEvent
from tether.trace._tracer import JsonlSink, read_trace

# -- the event a killed writer cut short, written back from the index -----------------------------


def test_the_event_a_killed_worker_cut_short_is_written_back_from_the_index_on_resume(
    operator: Operator,  # noqa: F811
) -> None:
    """w1 pauses a run for approval and is killed (-9) inside a trace write: the file's last line
    is cut short (the PostgreSQL index holds the event). Approved, w2 resumes the run: it finishes,
    its effect once, and its file holds every event, 1 to the last, each once, the cut one as the
    index has it (``tether trace stats`` reads it; round 11 played the same kill before the
    write-back)."""
    from tether.trace._pg_index import PgTraceIndex

    op = operator
    op.start("w1")
    run_id = op.submit()
    op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
    assert op.signal("w1", signal.SIGKILL) == -signal.SIGKILL
    trace = op.agent.parent / "traces" / f"{run_id}.jsonl"
    written = trace.read_bytes()
    last = written.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    trace.write_bytes(written[: len(written) - len(last) // 2 - 1])  # half its last line, no newline
    op.start("w2")
    op.approve(run_id)
    op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
    shown = op.runs("show", run_id)
    assert (shown["stop_reason"], shown["problems"]) == ("accepted", []), shown
    assert Counter(r[0] for r in op.lines("effects.log")) == {run_id: 1}
    events = read_trace(trace)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), [e["seq"] for e in events]
    kinds = [e["kind"] for e in events]
    assert kinds[-1] == "stop" and kinds.count("run_resumed") == 1, kinds
    cut = json.loads(last)
    assert events[cut["seq"] - 1] == cut  # as it was written, restored from the index
    stats = op.cli("trace", "stats", str(trace))
    assert stats["stop_reason"] == "accepted" and stats["run_id"] == run_id, stats
    index = PgTraceIndex(op.url)
    try:
        assert [e["seq"] for e in index.events(run_id)] == [e["seq"] for e in events]
    finally:
        index.shutdown()


# -- two writers of one trace ---------------------------------------------------------------------


def _line(seq: int, kind: str, **data: object) -> bytes:
    return json.dumps({"run_id": "r1", "seq": seq, "ts": "t", "kind": kind, **data}).encode() + b"\n"


def _waiting_for_a_lock(inode: int) -> bool:
    """Whether some process waits for a lock on the file (``/proc/locks``: a ``->`` line)."""
    return any("->" in line and f":{inode} " in line for line in Path("/proc/locks").read_text().splitlines())


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs /proc/locks (Linux)")
def test_a_sink_opened_while_another_writer_is_inside_its_write_keeps_that_line(tmp_path: Path) -> None:
    """A stalled writer is inside its write of a line (half of it written) when the survivor's
    sink opens the file: the sink waits for that write to end, keeps the line, and appends after
    it. The trace reads whole, every event once."""
    trace = tmp_path / "r1.jsonl"
    trace.write_bytes(_line(1, "run_started"))
    line = _line(2, "tool_observation", tool="look", text="x" * 200)
    opened: list[JsonlSink] = []
    with trace.open("ab", buffering=0) as stalled:
        fcntl.flock(stalled.fileno(), fcntl.LOCK_EX)  # the stalled writer, inside its write
        stalled.write(line[:50])
        survivor = threading.Thread(target=lambda: opened.append(JsonlSink(trace, flush="each_event")))
        survivor.start()
        inode = trace.stat().st_ino
        deadline = time.monotonic() + 30
        while survivor.is_alive() and not _waiting_for_a_lock(inode) and time.monotonic() < deadline:
            time.sleep(0.01)
        stalled.write(line[50:])  # the write ends, the lock is let go
        fcntl.flock(stalled.fileno(), fcntl.LOCK_UN)
    survivor.join(30)
    [sink] = opened
    sink.write(TraceEvent("r1", 3, "t", EventKind.STOP, {"reason": "accepted"}))
    sink.close()
    assert [e["seq"] for e in read_trace(trace)] == [1, 2, 3]


# -- a resume refused while another process holds the run ----------------------------------------

HOLDER = """
import sys
from datetime import UTC, datetime, timedelta

import anyio

from tether.policy._ledger import _owner, owner_dead
from tether.policy._sqlstore import SqlApprovalStore

store, now = SqlApprovalStore(sys.argv[1]), datetime.now(UTC)
until = now + timedelta(minutes=5)
claim = store.claim_resume(sys.argv[2], owner=_owner(), lease_until=until, now=now, owner_dead=owner_dead)
assert anyio.run(lambda: claim) is not None
print("held", flush=True)
sys.stdin.read()
"""


def _logged(op: Operator, name: str, event: str, run_id: str) -> list[dict[str, Any]]:
    lines = (op.folder / f"{name}.log").read_text().splitlines()
    found = (json.loads(x) for x in lines if x.startswith("{"))
    return [e for e in found if e["event"] == event and e.get("run_id", "") == run_id]


def test_a_resume_refused_while_another_process_holds_the_run_runs_once_that_one_is_gone(
    operator: Operator,  # noqa: F811
) -> None:
    """A run paused on w1 is approved while another process holds its resume claim (a ``tether
    resume`` or console of any release, resuming it now). w1's resume was refused (``run_busy``)
    and ran nothing: the approval waited for an operator's ``runs move``. It now waits, says so
    (``resume_waiting``), and once the holder is gone (killed, -9, before it ran anything) runs
    by itself, once: the run finishes, its effect once, no second resume workflow."""
    op = operator
    op.start("w1")
    run_id = op.submit()
    op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, op.url, run_id], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        op.approve(run_id)
        op.until("the resume to wait", lambda: _logged(op, "w1", "resume_waiting", run_id))
        assert op.lines("effects.log") == []
    finally:
        holder.kill()
        holder.wait(30)
    op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
    shown = op.runs("show", run_id)
    assert (shown["stop_reason"], shown["problems"]) == ("accepted", []), shown
    assert [w["op"] for w in shown["workflows"]] == ["start", "resume"], shown["workflows"]
    assert Counter(r[0] for r in op.lines("effects.log")) == {run_id: 1}
    assert _logged(op, "w1", "run_not_resumed", run_id) == []


# -- a store a later release migrated past this one -----------------------------------------------

BREAKING = "approvals.900_rename_status!"  # a later release's contracting migration, marked
EXPANDING = "approvals.901_add_column"  # a later release's expand-only one, unmarked


def _mark(op: Operator, sqlite_folder: Path | None, name: str) -> list[str]:
    """Record ``name`` as applied in the deployment's approvals store; the names recorded."""
    if sqlite_folder is not None:
        with sqlite3.connect(sqlite_folder / "approvals.db") as db:
            db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, '2026-12-04')", (name,))
            return [r[0] for r in db.execute("SELECT name FROM _migrations ORDER BY name")]
    import psycopg

    from tether.sql._postgres import PgUrl

    pg = PgUrl.parse(op.url)
    with psycopg.connect(pg.conninfo, autocommit=True, options=f"-c search_path={pg.schema}") as db:
        db.execute("INSERT INTO _migrations (name, applied_at) VALUES (%s, now())", (name,))
        return [r[0] for r in db.execute("SELECT name FROM _migrations ORDER BY name")]


def _start_refused(op: Operator) -> dict[str, Any]:
    """A worker of this release started on the deployment: what it said (its first line)."""
    cmd = [sys.executable, "-m", "tether.cli", "worker", "--db", op.url, "--app", str(op.agent), "--json"]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(cmd, env=env, cwd=op.folder, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    said = json.loads(proc.stdout.readline())
    if said.get("ready"):  # it started: what this test says must not happen
        proc.kill()
    assert proc.wait(120) == 1, said
    return dict(said)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_store_a_later_release_migrated_past_this_one_is_refused_before_a_row_is_touched(
    kind: str, tmp_path: Path, capsys: Any, request: pytest.FixtureRequest
) -> None:
    """A later release's expand-only migration is worked beside (``db init``, a worker, a run
    paused); once one marked breaking is applied, a running worker of this release stops at its
    next heartbeat (PostgreSQL: ``schema_too_new`` logged, drained, exit 1), one started does not
    start (``schema_too_new``, the migration named), and ``db init`` and ``approvals list`` refuse
    the same way: nothing is read or written, the journal stays as the later release left it."""
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    sqlite_folder = tmp_path / "deployment" if kind == "sqlite" else None
    url = f"sqlite:///{sqlite_folder}" if sqlite_folder else request.getfixturevalue("pg_url")
    op = Operator(url, tmp_path, capsys)
    op.cli("db", "init", "--db", url)
    try:
        _mark(op, sqlite_folder, EXPANDING)
        op.cli("db", "init", "--db", url)  # expand-only: worked beside
        op.start("w1")
        run_id = op.submit()
        op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
        journal = _mark(op, sqlite_folder, BREAKING)
        if sqlite_folder is None:  # the running worker sees it at its next heartbeat and stops
            proc = op.procs.pop("w1")
            assert proc.wait(120) == 1
            assert _logged(op, "w1", "schema_too_new", "")[0]["migrations"] == [BREAKING]
        else:  # no heartbeat on SQLite: the operator stops it
            assert op.signal("w1", signal.SIGTERM) == 0
        refused = _start_refused(op)
        assert (refused["error"], refused["exit"]) == ("schema_too_new", 1), refused
        assert BREAKING in refused["message"], refused
        for argv in (["db", "init", "--db", url], ["approvals", "list", "--db", url]):
            capsys.readouterr()
            assert main([*argv, "--json"]) == 1, argv
            out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
            assert out["error"] == "schema_too_new" and BREAKING in out["message"], out
        assert _mark(op, sqlite_folder, "approvals.902_probe") == sorted([*journal, "approvals.902_probe"])
    finally:
        op.stop()
