"""An operator's rolling upgrade, sixth round: mixed versions on one deployment, from the landed
releases ca71041 and 483dcef to this branch. The tests taking ``old_src`` run each old commit
named in ``UPGRADE_FROM`` (default ``ca71041,483dcef``) side by side with this tree: workers and
CLIs of both on one PostgreSQL deployment (kill -9, approvals on either CLI, a drain, a
rollback), migrations racing on the old schema and a rollback ``db init``, and a SQLite
deployment killed mid write-ahead log. Re-run them after a merge to upgrade from today's main.

What did not hold, each fixed here and pinned below:

- clock skew: a ledger lease was written and compared on each worker's own clock, so a worker
  whose clock ran ahead took a live worker's call over and ran its effect again;
- a trace a later release extended (an event kind this release does not know) was continued
  with repeated seqs, and a durable resume loading such an indexed event failed;
- a run recovered from a worker of a release before 5601c3d (killed with its first events in
  its batch; played with 483dcef) lost ``run_started`` and ``context_composed`` for good;
- a checkpoint in a format this release cannot read (a later release's) failed its resume with
  a traceback, the run listed failed and its approval lost for good.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_rolling_upgrade import ROOT, Operator, _write_version, operator  # noqa: F401 - the fixture, shared

from tether.errors import ApprovalError
from tether.policy import Approvals, content_hash
from tether.policy._pg_store import PgApprovalStore
from tether.runs._checkpoint import restore_trace

# -- clock skew between workers ------------------------------------------------------------------


def _skewed(by: timedelta) -> Any:
    return lambda: datetime.now(UTC) + by


def test_a_worker_whose_clock_runs_ahead_does_not_take_a_live_workers_effect(pg_url: str) -> None:
    """A ledger lease is written by one worker and read by another. A worker on another machine
    (the pid cannot be checked) whose clock runs five minutes ahead read a live worker's lease as
    run out, asked the tool's reconciler (which cannot see an effect still under way: "never
    happened") and ran the effect a second time while the first still ran it.
    Leases are now on the database's clock, whatever the workers' clocks say."""
    store = PgApprovalStore(pg_url)
    ran: list[str] = []

    async def call() -> dict[str, Any]:
        ran.append("b")
        return {"ok": True}

    async def play() -> None:
        behind = Approvals(store, clock=_skewed(timedelta(minutes=-2)), wait_s=0.3)
        ahead = Approvals(store, {"pay": _not_seen}, clock=_skewed(timedelta(minutes=5)), wait_s=0.3)
        # Worker A (its clock two minutes slow), on another host, holds the call: 30 s + margin.
        now = behind.clock()
        held = await store.claim(
            "k1", tool="pay", arguments_hash=_hash("pay", {"n": 1}), owner="host-a:4242:tok",
            lease_until=now + timedelta(seconds=90), now=now, owner_dead=_never,
        )  # fmt: skip
        assert held.action == "run"
        with pytest.raises(ApprovalError) as caught:  # B waits for A's outcome; it never runs it
            await ahead.perform("k1", tool="pay", arguments={"n": 1}, call=call)
        assert caught.value.reason == "in_progress"
        assert ran == []
        # A's lease truly runs out (A is gone): the next worker reconciles and runs it, as before.
        now = behind.clock()
        await store.set_ledger_status(
            "k1", _status("intent"), owner="host-a:4242:tok", note="", now=now, lease_until=now
        )
        out = await ahead.perform("k1", tool="pay", arguments={"n": 1}, call=call)
        assert out.result == {"ok": True} and ran == ["b"]
        # A fresh call on the fast worker runs once, its lease on the database's clock.
        await ahead.perform("k2", tool="pay", arguments={"n": 2}, call=call)
        entry = await store.ledger_entry("k2")
        assert ran == ["b", "b"] and entry is not None and entry.status.value == "done"
        lease = entry.lease_until - datetime.now(UTC)  # 30 s and the margin, from the call's start
        assert timedelta(seconds=60) < lease <= timedelta(seconds=90), lease

    try:
        anyio.run(play)
    finally:
        store.close()


def _not_seen(key: str) -> None:
    return None  # the tool finds no trace of the call: it "never happened" (so far)


def _never(entry: Any, now: datetime) -> bool:
    from tether.policy._ledger import owner_dead

    return owner_dead(entry, now)


def _hash(tool: str, arguments: dict[str, Any]) -> str:
    return content_hash(tool, arguments)


def _status(name: str) -> Any:
    from tether.policy._store import LedgerStatus

    return LedgerStatus(name)


# -- a trace a newer release wrote -----------------------------------------------------------------

# A kind this release does not know, as a later release (or the next one after a rollback) may emit.
FUTURE_EVENT = {"kind": "effect_noted_by_a_later_release", "detail": "x"}


def _trace_with_a_later_kind(path: Path, run_id: str) -> int:
    """A run's trace as a worker of a later release left it when the run paused: two events this
    release knows, then one it does not. Returns the last seq."""
    from tether.trace._tracer import JsonlSink, Tracer

    tracer = Tracer(run_id, [JsonlSink(path)])
    tracer.emit("tool_error", tool="look", error="e1")
    tracer.emit("tool_error", tool="look", error="e2")
    tracer.close()
    with path.open("a") as f:
        f.write(json.dumps({"run_id": run_id, "seq": 3, "ts": "2026-12-03T00:00:00Z", **FUTURE_EVENT}) + "\n")
    tracer = Tracer(run_id, [JsonlSink(path)])
    restore_trace(tracer, path)
    assert [e.seq for e in tracer.events] == [1, 2]  # the unknown line is not held …
    return 3


def test_a_trace_holding_a_kind_this_release_does_not_know_is_continued_after_it(tmp_path: Path) -> None:
    """A run paused on a worker of a later release and resumed on this one (a rollback, or old
    and new side by side) continues its trace. The later release's events of a kind this one
    does not know were skipped when the trace was loaded, and this release numbered its next
    events from the count it kept: their ``seq`` repeated the skipped ones' (and the PostgreSQL
    trace index, keyed by run and seq, dropped them). Numbering now goes on after the highest
    seq written, whatever its kind; the unknown event stays in the file, once."""
    from tether.trace._tracer import JsonlSink, Tracer

    path = tmp_path / "r1.jsonl"
    last = _trace_with_a_later_kind(path, "r1")
    tracer = Tracer("r1", [JsonlSink(path)])
    restore_trace(tracer, path)
    assert tracer.emit("tool_error", tool="look", error="e4").seq == last + 1  # … nor its number
    tracer.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["seq"] for x in lines] == [1, 2, 3, 4]
    assert [x["kind"] for x in lines].count(FUTURE_EVENT["kind"]) == 1
    # A trace of known kinds only continues as before.
    plain = tmp_path / "r2.jsonl"
    tracer = Tracer("r2", [JsonlSink(plain)])
    tracer.emit("tool_error", tool="look", error="a")
    tracer.close()
    tracer = Tracer("r2", [JsonlSink(plain)])
    restore_trace(tracer, plain)
    assert tracer.emit("tool_error", tool="look", error="b").seq == 2


@pytest.mark.slow
def test_a_durable_run_whose_trace_a_later_release_extended_resumes_with_every_event_once(
    operator: Operator,  # noqa: F811
) -> None:
    """The same on a PostgreSQL deployment, where a resumed run takes its numbering from the
    trace index: loading an indexed event of an unknown kind raised, and the resume failed."""
    import psycopg

    from tether.sql._postgres import PgUrl

    op = operator
    trace = op.agent.parent / "traces"
    op.start("w1")
    run_id = op.submit()
    op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
    pg = PgUrl.parse(op.url)

    def indexed() -> list[tuple[int, str]]:
        with psycopg.connect(pg.conninfo, autocommit=True) as conn:
            conn.execute(f"SET search_path = {pg.schema}")
            rows = conn.execute(
                "SELECT seq, kind FROM trace_events WHERE run_id = %s ORDER BY seq", (run_id,)
            )
            return [(int(r[0]), str(r[1])) for r in rows]

    def written() -> list[dict[str, Any]]:
        return [json.loads(x) for x in (trace / f"{run_id}.jsonl").read_text().splitlines()]

    op.until("the index to hold the paused run's events", lambda: len(indexed()) == len(written()) > 0)
    # A worker of a later release wrote one more event, to the file and the index, before the pause.
    line = {"run_id": run_id, "seq": len(written()) + 1, "ts": "2026-12-03T00:00:00Z", **FUTURE_EVENT}
    with (trace / f"{run_id}.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")
    with psycopg.connect(pg.conninfo, autocommit=True) as conn:
        conn.execute(f"SET search_path = {pg.schema}")
        conn.execute(
            "INSERT INTO trace_events (run_id, seq, ts, kind, data) VALUES (%s, %s, %s, %s, %s)",
            (run_id, line["seq"], line["ts"], line["kind"], json.dumps(line)),
        )
    op.approve(run_id)
    op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
    shown = op.runs("show", run_id)
    assert (shown["stop_reason"], shown["problems"]) == ("accepted", []), shown
    assert [r[0] for r in op.lines("effects.log")] == [run_id]
    events = written()
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs  # every event once, in order
    assert [e["kind"] for e in events].count(FUTURE_EVENT["kind"]) == 1 and events[-1]["kind"] == "stop"
    op.until("the index to hold every event", lambda: [s for s, _ in indexed()] == seqs)


# -- old and new releases side by side ---------------------------------------------------------------
# Each test below is played against every commit in UPGRADE_FROM (comma-separated; default: the
# releases this round played), checked out of this repository with ``git archive``: run it again
# after a merge to see today's main upgraded from them, e.g. ``UPGRADE_FROM=ca71041,<main before>``.
OLD_COMMITS = [c for c in os.environ.get("UPGRADE_FROM", "ca71041,483dcef").split(",") if c.strip()]
NEW_SRC = ROOT / "src"


def old_tree(commit: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``src`` tree of ``commit`` of this repository, by ``git archive`` (the test is skipped
    where that commit is not in this checkout)."""
    commit = commit.strip()
    dest = tmp_path_factory.mktemp(f"old-{commit}")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "src"], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"commit {commit} is not in this checkout: {archive.stderr.decode()[-200:]}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest / "src"


@pytest.fixture(scope="module", params=OLD_COMMITS)
def old_src(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``src`` tree of an older commit of this repository (skipped where it is not at hand)."""
    return old_tree(str(request.param), tmp_path_factory)


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


class Mixed(Operator):
    """Workers and CLIs of two releases on one deployment: ``old`` and today's (``NEW_SRC``)."""

    def __init__(self, url: str, folder: Path, capsys: Any, old: Path) -> None:
        super().__init__(url, folder, capsys)
        self.old = old

    def start_on(self, name: str, src: Path) -> None:
        cmd = [
            sys.executable, "-m", "tether.cli", "worker", "--db", self.url, "--app", str(self.agent),
            "--executor-id", f"{name}-{self.suffix}", "--poll", "0.1", "--dead-after", "3", "--grace", "20",
        ]  # fmt: skip
        log = (self.folder / f"{name}.log").open("ab")
        proc = subprocess.Popen(cmd, env=_env(src), stdout=subprocess.PIPE, stderr=log, cwd=self.folder)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line and json.loads(line)["ready"], (self.folder / f"{name}.log").read_text()[-3000:]
        self.procs[name] = proc

    def old_cli(self, *argv: str) -> dict[str, Any]:
        """The older release's CLI, as a person on a machine not yet upgraded types it."""
        done = subprocess.run(
            [sys.executable, "-m", "tether.cli", *argv, "--json"],
            env=_env(self.old), capture_output=True, cwd=self.folder, timeout=120,
        )  # fmt: skip
        out = json.loads(done.stdout.decode().strip().splitlines()[-1])
        assert done.returncode == 0, (argv, out, done.stderr.decode()[-2000:])
        return dict(out)

    def old_submit(self) -> str:
        return str(self.old_cli("submit", "--db", self.url, "--agent", str(self.agent), "note it")["run_id"])

    def old_approve(self, run_id: str) -> None:
        pending = self.old_cli("approvals", "list", "--db", self.url)["proposals"]
        [p] = [p for p in pending if p["run"] == run_id]
        self.old_cli("approvals", "approve", p["id"], "--db", self.url, "--reviewer", "otto")


@pytest.fixture
def mixed(pg_url: str, tmp_path: Path, capsys: Any, old_src: Path) -> Iterator[Mixed]:
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Mixed(pg_url, tmp_path, capsys, old_src)
    op.old_cli("db", "init", "--db", pg_url)  # the deployment as the older release set it up
    try:
        yield op
    finally:
        op.stop()


def _every_run_once(op: Operator, run_ids: list[str]) -> None:
    """Each run finished accepted, its effect once under one key, its trace numbered once."""
    for rid in run_ids:
        shown = op.runs("show", rid)
        assert (shown["status"], shown["stop_reason"], shown["problems"]) == ("finished", "accepted", []), (
            shown
        )
        lines = (op.agent.parent / "traces" / f"{rid}.jsonl").read_text().splitlines()
        seqs = [json.loads(x)["seq"] for x in lines]
        assert seqs == list(range(1, len(seqs) + 1)), (rid, seqs)
    effects = op.lines("effects.log")
    assert Counter(r[0] for r in effects) == Counter(run_ids), effects
    assert len({r[2] for r in effects}) == len(effects)


@pytest.mark.slow
def test_old_and_new_workers_side_by_side_then_a_rollback_finish_every_run_once(mixed: Mixed) -> None:
    """Runs begun on the older release are recovered (kill -9) and resumed by today's workers,
    runs today's workers paused are resumed by the older release's after a rollback; approvals
    are decided on either release's CLI. The schema today's ``db init`` migrated is used by the
    older workers (expand only)."""
    op = mixed
    folder = op.agent.parent
    op.start_on("o1", op.old)
    r1 = op.old_submit()
    op.until("the old run to pause", lambda: op.status(r1) == ["paused"])
    (folder / "gate-A").write_text("")
    r2 = op.old_submit()
    op.until("the old run in flight", lambda: r2 in {r[0] for r in op.lines("reads.log")})
    # Today's release: its db init on the old schema, then its worker beside the old one.
    op.cli("db", "init", "--db", op.url)
    op.start_on("n1", NEW_SRC)
    assert op.signal("o1", signal.SIGKILL) == -signal.SIGKILL  # mid-call: n1 recovers r2
    (folder / "gate-A").unlink()
    op.until("the recovered run to pause", lambda: op.status(r2) == ["paused"])
    op.approve(r1)  # today's CLI decides a run the old release paused …
    op.old_approve(r2)  # … and the old CLI one today's worker paused
    r3 = op.submit()
    op.until("the runs to finish", lambda: op.status(r1, r2) == ["finished", "finished"])
    op.until("today's run to pause", lambda: op.status(r3) == ["paused"])
    # Rollback: an old worker again, today's drains; the old release resumes today's paused run.
    op.start_on("o2", op.old)
    assert op.signal("n1", signal.SIGTERM) == 0
    op.old_approve(r3)
    r4 = op.old_submit()
    op.until("the rolled-back runs to pause or finish", lambda: op.status(r3, r4) == ["finished", "paused"])
    op.approve(r4)
    op.until("the last run to finish", lambda: op.status(r4) == ["finished"])
    _every_run_once(op, [r1, r2, r3, r4])


# A run recovered from a worker that left its first events unwritten (releases up to 5601c3d)
# has them all: played in test_rolling_upgrade_round4.py beside a run whose trace was written,
# on one cluster (the run ``lost`` there).


def _cli_on(src: Path, *argv: str, cwd: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "tether.cli", *argv, "--json"]
    return subprocess.Popen(cmd, env=_env(src), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)


@pytest.mark.slow
def test_new_releases_migrating_an_old_schema_at_once_then_a_rollback_init_agree(
    pg_url: str, tmp_path: Path, old_src: Path
) -> None:
    """The older release set the deployment up; then three of today's ``db init`` (or workers'
    ``--init``) start at the same instant on its schema, as machines upgraded together do; then
    the operator rolls back and the older release's ``db init`` runs on what today's migrated."""
    import psycopg

    from tether.sql._postgres import PgUrl

    first = _cli_on(old_src, "db", "init", "--db", pg_url, cwd=tmp_path)
    assert first.wait(120) == 0, first.communicate()
    racing = [_cli_on(NEW_SRC, "db", "init", "--db", pg_url, cwd=tmp_path) for _ in range(3)]
    outs = [(p.wait(120), p.communicate()) for p in racing]
    assert [rc for rc, _ in outs] == [0, 0, 0], outs
    back = _cli_on(old_src, "db", "init", "--db", pg_url, cwd=tmp_path)
    assert back.wait(120) == 0, back.communicate()
    pg = PgUrl.parse(pg_url)
    with psycopg.connect(pg.conninfo, autocommit=True) as conn:
        conn.execute(f"SET search_path = {pg.schema}")
        names = [r[0] for r in conn.execute("SELECT name FROM _migrations")]
    assert len(names) == len(set(names)) and "workers.002_versions" in names


@pytest.mark.slow
def test_a_sqlite_deployment_killed_mid_write_ahead_log_upgrades_and_rolls_back(
    tmp_path: Path, capsys: Any, old_src: Path
) -> None:
    """A SQLite deployment's worker of the older release is killed (-9) with its files' recent
    commits still in their write-ahead logs; today's worker opens them, resumes the paused run
    and runs a new one (approved on the old CLI, while today's worker holds the files); then a
    rollback to a worker of the older release resumes a run today's paused."""
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    url = f"sqlite:///{tmp_path / 'deployment'}"
    op = Mixed(url, tmp_path, capsys, old_src)
    op.old_cli("db", "init", "--db", url)
    try:
        op.start_on("s1", op.old)
        r1 = op.old_submit()
        op.until("the run to pause", lambda: op.status(r1) == ["paused"])
        assert op.signal("s1", signal.SIGKILL) == -signal.SIGKILL
        logs = [p for p in (tmp_path / "deployment").glob("*-wal") if p.stat().st_size > 0]
        assert logs, "the killed worker left no write-ahead log to play"
        op.start_on("s2", NEW_SRC)
        op.old_approve(r1)
        r2 = op.submit()
        op.until("the runs to go on", lambda: op.status(r1, r2) == ["finished", "paused"])
        assert op.signal("s2", signal.SIGTERM) == 0
        op.start_on("s3", op.old)
        op.approve(r2)
        op.until("the rolled-back run to finish", lambda: op.status(r2) == ["finished"])
        _every_run_once(op, [r1, r2])
    finally:
        op.stop()


# -- a checkpoint a later release wrote ------------------------------------------------------------


@pytest.mark.slow
def test_a_checkpoint_this_release_cannot_read_leaves_the_run_paused_for_one_that_can(
    operator: Operator,  # noqa: F811
) -> None:
    """A run paused on a worker of a later release holds a field this release does not know (as
    the release before this one refuses a checkpoint with a subagent's observations). Approved,
    its resume ran here: the refusal escaped as a traceback, the resume workflow ended in ERROR
    (the run listed ``failed``), and, the resume's id being fixed by the paused state, it could
    never be enqueued again: the approval was lost. Now the resume ends at once, typed
    (``unreadable_checkpoint``, nothing written, the proposal approved and unexecuted), the run
    stands paused, and ``runs move --to latest`` sends its resume to a worker that reads it."""
    import psycopg

    from tether.sql._postgres import PgUrl

    op = operator
    op.start("w1")
    run_id = op.submit()
    op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
    pg = PgUrl.parse(op.url)

    def sql(statement: str, *args: Any) -> list[Any]:
        with psycopg.connect(pg.conninfo, autocommit=True) as conn:
            conn.execute(f"SET search_path = {pg.schema}")
            cur = conn.execute(statement, args)
            return list(cur.fetchall()) if cur.description else []

    [(state,)] = sql("SELECT state FROM run_checkpoints WHERE run_id = %s", run_id)
    later = {**json.loads(state), "field_of_a_later_release": [1]}
    sql("UPDATE run_checkpoints SET state = %s WHERE run_id = %s", json.dumps(later), run_id)
    op.approve(run_id)

    def resumed() -> bool:
        flows = op.runs("show", run_id)["workflows"]
        return len(flows) == 2 and flows[-1]["status"] in ("SUCCESS", "ERROR")

    op.until("the resume to be refused", resumed)
    shown = op.runs("show", run_id)
    assert shown["status"] == "paused", shown
    assert sql("SELECT status, state FROM run_checkpoints WHERE run_id = %s", run_id) == [
        ("paused", json.dumps(later))
    ]
    assert [p["status"] for p in shown["proposals"]] == ["approved"] and op.lines("effects.log") == []
    client = _client(op.url)
    try:
        [out] = [w.output for w in client.workflows(run_id) if w.op == "resume"]
    finally:
        client.close()
    assert out["error"] == "unreadable_checkpoint" and "field_of_a_later_release" in out["detail"], out
    logged = [json.loads(x) for x in (op.folder / "w1.log").read_text().splitlines() if x.startswith("{")]
    [told] = [e for e in logged if e["event"] == "run_not_resumed"]  # the operator is told why
    assert (told["run_id"], told["error"]) == (run_id, "unreadable_checkpoint")
    assert not [e for e in logged if e["event"] == "run_failed"]
    # A worker that reads it (here: the same field as this release writes it), then the move.
    sql("UPDATE run_checkpoints SET state = %s WHERE run_id = %s", state, run_id)
    moved = op.runs("move", run_id, "--to", "latest")
    assert moved["resume_moved"] is True, moved
    op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
    shown = op.runs("show", run_id)
    assert (shown["stop_reason"], shown["problems"]) == ("accepted", []), shown
    assert [r[0] for r in op.lines("effects.log")] == [run_id]  # the approved effect, once


def _client(url: str) -> Any:
    from tether.durable import DurableClient

    return DurableClient(url)


# -- an agent file using a field a release does not know -------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("side", ["old", "new"])
def test_an_agent_file_field_a_release_does_not_know_is_refused_before_anything_is_written(
    pg_url: str, tmp_path: Path, old_src: Path, side: str
) -> None:
    """An agent file upgraded in place for a later release uses a field this one lacks (``new``:
    this tree, as the next release's older side). Its CLI refuses the submit naming the field,
    and its worker refuses to start on it; nothing is queued, nothing is run."""
    src = old_src if side == "old" else NEW_SRC
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    agent = tmp_path / "agent" / "agent.yaml"
    agent.write_text(agent.read_text() + "retries_of_a_later_release: 3\n")
    init = _cli_on(src, "db", "init", "--db", pg_url, cwd=tmp_path)
    assert init.wait(120) == 0, init.communicate()
    submit = _cli_on(src, "submit", "--db", pg_url, "--agent", str(agent), "note it", cwd=tmp_path)
    out, _ = submit.communicate(timeout=120)
    refused = json.loads(out.decode().strip().splitlines()[-1])
    assert submit.returncode != 0 and refused["ok"] is False, refused
    assert "retries_of_a_later_release" in refused["message"], refused
    worker = _cli_on(src, "worker", "--db", pg_url, "--app", str(agent), "--executor-id", "w", cwd=tmp_path)
    out, _ = worker.communicate(timeout=120)
    started = json.loads(out.decode().strip().splitlines()[-1])
    assert worker.returncode != 0 and "retries_of_a_later_release" in started["message"], started
    listed = _cli_on(NEW_SRC, "runs", "--db", pg_url, "list", cwd=tmp_path)
    out, _ = listed.communicate(timeout=120)
    assert json.loads(out.decode().strip().splitlines()[-1])["runs"] == []
    assert (
        not (tmp_path / "agent" / "effects.log").exists() and not (tmp_path / "agent" / "reads.log").exists()
    )


# -- checkpoints across releases ---------------------------------------------------------------------

_ROUND_TRIP = (
    "import sys\n"
    "from tether.runs._checkpoint import state_from_json, state_to_json\n"
    "sys.stdout.write(state_to_json(state_from_json(sys.stdin.read())))\n"
)


def test_a_checkpoint_goes_from_this_release_to_an_older_one_and_back_unchanged(old_src: Path) -> None:
    """The expand rule for checkpoints, checked against each old commit: what a worker of this
    release checkpoints for a paused run, a worker of the older one reads (it resumes it, after
    a rollback) and checkpoints again, and this release reads that back to the same state. A
    field added to the run state must be listed in ``_LATER_FIELDS`` (written only when set)."""
    from tether.core.messages import AssistantMessage, ToolCall, ToolMessage, Usage, UserMessage
    from tether.core.types import CallRecord, Observation
    from tether.policy._trusted import TrustedContext
    from tether.runs._checkpoint import state_from_json, state_to_json
    from tether.runs._values import RunState

    at = datetime(2026, 12, 3, tzinfo=UTC)
    state = RunState(
        "r1", "note it", TrustedContext(tenant="acme", user="ana", roles=frozenset({"ops"})), 0.0, at,
        trajectory=[
            UserMessage("note it"),
            AssistantMessage("looking", (ToolCall("c1", "look", json.dumps({"item": "i1"})),)),
            ToolMessage("c1", '{"item": "i1"}', "look"),
            AssistantMessage(None, (ToolCall("c2", "note", json.dumps({"text": "x"})),)),
        ],
        observations=[Observation("c1", "look", "local", at, '{"item": "i1"}', {"item": "i1"})],
        calls=[CallRecord("c1", "look", {"item": "i1"}, "ok")],
        evidence={"c1"}, steps=2, llm_calls=2, usage=Usage(10, 5), cost_usd=0.01,
    )  # fmt: skip
    mine = state_to_json(state)
    done = subprocess.run(
        [sys.executable, "-c", _ROUND_TRIP],
        input=mine.encode(),
        capture_output=True,
        env=_env(old_src),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]  # the older release reads it
    back = json.loads(state_to_json(state_from_json(done.stdout.decode())))
    expected = json.loads(mine)
    assert {k: v for k, v in back.items() if k != "started"} == {
        k: v for k, v in expected.items() if k != "started"
    }
