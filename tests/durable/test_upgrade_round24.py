"""An operator's rolling upgrade, twenty-fourth round: knowing, in the middle of it, which versions
are present on the deployment.

What did not hold, fixed here and pinned below:

- nothing said which application versions a deployment still had work or workers for. ``tether
  db check`` told the migrations only, and ``tether runs workers`` each worker's version but not
  the runs a version holds: an operator could not tell when the old version's last run had
  finished (safe to stop its last worker) or that runs were queued for a version no worker
  serves any more. There was no ``tether db status`` (exit 2, "invalid choice"). It now says
  what ``db check`` says and, per application version present, its workers alive (PostgreSQL;
  ``None`` on SQLite, whose workers register nowhere) and its runs queued and in flight.

Played on PostgreSQL with the release before (``UPGRADE_FROM``, as round 19) serving agent
version A beside today's worker serving version B, and on a SQLite deployment.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_rolling_upgrade import Operator, _write_version, deployed
from test_rolling_upgrade_round6 import NEW_SRC, Mixed, _env, _every_run_once, old_tree
from test_rolling_upgrade_round19 import OLD_COMMITS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=OLD_COMMITS)
def old_src(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return old_tree(str(request.param), tmp_path_factory)


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


@pytest.fixture
def pg_operator(pg_url: str, tmp_path: Path, capsys: Any) -> Iterator[Operator]:
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Operator(pg_url, tmp_path, capsys)
    op.cli("db", "init", "--db", pg_url)
    try:
        yield op
    finally:
        op.stop()


def _status(op: Operator) -> dict[str, Any]:
    """Today's ``tether db status --json``, in a process of its own, as an operator types it."""
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "db", "status", "--db", op.url, "--json"],
        env=_env(NEW_SRC), capture_output=True, cwd=op.folder, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout.decode()[-2000:], done.stderr.decode()[-2000:])
    out: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return out


def _present(out: dict[str, Any]) -> dict[str, tuple[Any, int, int]]:
    return {v["version"]: (v["workers"], v["queued"], v["in_flight"]) for v in out["versions"]}


def test_runs_queued_for_a_version_whose_last_worker_drained_are_said_to_wait_for_one(
    pg_operator: Operator,
) -> None:
    """The last worker of a version drained (SIGTERM) with a run still queued for it: ``db
    status`` says the version's run waits for a worker (none alive serves it); a worker of that
    version started again takes it, and the version is no longer said to wait. A paused run's
    cancellation marker (a queue no worker serves) is never counted as a run."""
    op = pg_operator
    folder = op.agent.parent
    op.start("w1")
    (folder / "gate-A").write_text("")  # the first four runs hold inside their first tool call
    rids = [op.submit() for _ in range(5)]  # a worker takes four at once: one stays queued
    op.until("four runs in flight", lambda: len({r[0] for r in op.lines("reads.log")}) == 4)
    [version] = {w["app_version"] for w in op.runs("workers")["workers"]}
    assert _present(_status(op)) == {version: (1, 1, 4)}
    op.procs["w1"].send_signal(signal.SIGTERM)  # drained: its four finish their step, no other
    op.until("w1 to drain", lambda: "worker_draining" in _events(op, "w1"))
    (folder / "gate-A").unlink()
    assert op.procs.pop("w1").wait(120) == 0
    out = _status(op)
    [v] = out["versions"]
    # Four left to be recovered from their last step, one queued: none of them taken by anyone.
    assert (v["version"], v["workers"], v["queued"], v["in_flight"]) == (version, 0, 1, 4), out
    assert v["waiting_for_worker"] is True and "no live worker serves it" in _text(op), out
    op.start("w2")  # a worker of that version again: it recovers the four, takes the fifth
    op.until("every run paused", lambda: set(op.status(*rids)) == {"paused"})
    op.runs("cancel", rids[0])  # a paused run cancelled: its marker goes to the cancel queue
    assert op.status(rids[0]) == ["cancelled"]
    assert _present(_status(op)) == {version: (1, 0, 0)}


def _text(op: Operator) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "db", "status", "--db", op.url],
        env=_env(NEW_SRC), capture_output=True, cwd=op.folder, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout.decode()


def _alive(op: Operator) -> dict[str, str]:
    """executor id -> version of the workers alive, as ``tether runs workers`` lists them."""
    return {
        w["executor_id"]: w["app_version"] for w in op.runs("workers")["workers"] if w["state"] == "alive"
    }


def test_db_status_names_each_version_present_during_a_rolling_upgrade(mixed: Mixed) -> None:
    """The older release's worker serves agent version A and holds a run in flight; today's
    ``db init`` migrates, today's worker serves version B. ``db status`` lists both versions, A
    with its worker and its run in flight, B with its worker; once A's run is done and its worker
    drained, only B is present. Normal upgrade still works: every run finishes once."""
    op = mixed
    folder = op.agent.parent
    op.start_on("o1", op.old)
    (folder / "gate-A").write_text("")  # A's run holds inside its first tool call
    r1 = op.old_submit()
    op.until("the old run in flight", lambda: r1 in {r[0] for r in op.lines("reads.log")})
    op.cli("db", "init", "--db", op.url)
    _write_version(folder, "B")
    op.start_on("n1", NEW_SRC)
    alive = _alive(op)
    old_v, new_v = alive[f"o1-{op.suffix}"], alive[f"n1-{op.suffix}"]
    assert old_v != new_v, alive
    out = _status(op)
    assert out["ok"] and out["pending"] == [] and out["release"], out
    present = _present(out)
    assert present[old_v] == (1, 0, 1), out
    assert present[new_v] == (1, 0, 0), out
    (folder / "gate-A").unlink()
    op.until("the old run to end", lambda: op.status(r1) != ["running"])
    r2 = op.submit()  # bound to the newest live version: B
    op.until("the new run to pause", lambda: op.status(r2) == ["paused"])
    op.approve(r2)
    op.until("the new run to finish", lambda: op.status(r2) == ["finished"])
    assert op.signal("o1", signal.SIGTERM) == 0
    present = _present(_status(op))
    assert old_v not in present and present[new_v] == (1, 0, 0), present
    assert "Traceback" not in (op.folder / "o1.log").read_text()


def test_db_status_on_sqlite_counts_a_versions_runs_and_says_workers_are_not_registered(
    tmp_path: Path, capsys: Any
) -> None:
    """A SQLite deployment: no version present before any run; a run in flight counts under the
    deployment's one version, its workers ``None`` (they register nowhere), and the text says so."""
    op = deployed(tmp_path, capsys, lambda folder: _write_version(folder, "A"))
    try:
        out = _status(op)
        assert out["versions"] == [] and out["target"].startswith("SQLite deployment"), out
        (op.agent.parent / "gate-A").write_text("")
        op.start("w1")
        rid = op.submit()
        op.until("the run in flight", lambda: rid in {r[0] for r in op.lines("reads.log")})
        [v] = _status(op)["versions"]
        assert (v["workers"], v["queued"], v["in_flight"], v["this_release"]) == (None, 0, 1, True), v
        (op.agent.parent / "gate-A").unlink()
        op.until("the run to pause", lambda: op.status(rid) == ["paused"])
        op.approve(rid)
        op.until("the run to finish", lambda: op.status(rid) == ["finished"])
        assert _status(op)["versions"] == []
        _every_run_once(op, [rid])
    finally:
        op.stop()


def _events(op: Operator, name: str) -> list[str]:
    lines = (op.folder / f"{name}.log").read_text().splitlines()
    return [json.loads(line).get("event", "") for line in lines if line.startswith("{")]


class ModuleFleet:
    """Workers of a ``module:factory`` app (``roll24_app``, written into ``folder``: its source is
    its version) and today's CLI, each in a process of its own."""

    APP = "roll24_app:build"

    def __init__(self, url: str, folder: Path) -> None:
        self.url, self.folder = url, folder
        paths = [str(NEW_SRC), str(NEW_SRC.parent / "tests" / "durable"), str(folder)]
        self.env = {**_env(NEW_SRC), "PYTHONPATH": ":".join(paths), "DURABLE_DIR": str(folder)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def write(self, version: str) -> None:
        source = f"# version {version}\nfrom upgrade22_app import build  # noqa: F401\n"
        (self.folder / "roll24_app.py").write_text(source)

    def start(self, name: str) -> None:
        cmd = [
            sys.executable, "-m", "tether.cli", "worker", "--db", self.url, "--app", self.APP,
            "--executor-id", name, "--poll", "0.1", "--dead-after", "3", "--grace", "120",
        ]  # fmt: skip
        log = (self.folder / f"{name}.log").open("ab")
        proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=log, cwd=self.folder)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line and json.loads(line)["ready"], (self.folder / f"{name}.log").read_text()[-3000:]
        self.procs[name] = proc

    def cli(self, *argv: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "tether.cli", *argv, "--db", self.url, "--json"],
            env=self.env, capture_output=True, cwd=self.folder, timeout=120,
        )  # fmt: skip
        lines = done.stdout.decode().strip().splitlines()
        assert lines, done.stderr.decode()[-3000:]
        out: dict[str, Any] = json.loads(lines[-1])
        return out

    def submit(self, objective: str) -> str:
        return str(self.cli("submit", "--agent", self.APP, "--tenant", "acme", objective)["run_id"])

    def show(self, run_id: str) -> dict[str, Any]:
        return self.cli("runs", "show", run_id)

    def events(self, name: str) -> list[str]:
        lines = (self.folder / f"{name}.log").read_text().splitlines()
        return [json.loads(line).get("event", "") for line in lines if line.startswith("{")]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def module_fleet(pg_url: str, tmp_path: Path) -> Iterator[ModuleFleet]:
    fleet = ModuleFleet(pg_url, tmp_path)
    assert fleet.cli("db", "init")["ok"]
    try:
        yield fleet
    finally:
        fleet.stop()


def _until(what: str, probe: Any, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if got := probe():
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_run_submitted_while_the_newest_version_drains_goes_to_a_version_still_serving(
    module_fleet: ModuleFleet,
) -> None:
    """A rollback of a ``module:factory`` app: version B's worker (the newest) is told to stop
    while a run of B is in a model call; version A's worker serves on. A run submitted during
    B's drain was bound to B (the newest worker still beating) and, once B's worker exited,
    waited for good with A's worker idle. A draining worker now serves no app (``runs workers``:
    ``draining``; ``db status``: none alive for B): the run goes to A and A's worker runs it.
    B's run finishes its call and B's drained worker exits 0; a worker of B started again
    continues that run. Every effect once, both runs finished."""
    fleet, folder = module_fleet, module_fleet.folder
    fleet.write("A")
    fleet.start("a1")
    fleet.write("B")
    fleet.start("b1")
    workers = {w["executor_id"]: w["app_version"] for w in fleet.cli("runs", "workers")["workers"]}
    version_a, version_b = workers["a1"], workers["b1"]
    assert version_a != version_b, workers
    (folder / "model-gate").write_text("")  # model calls hold
    r1 = fleet.submit("r1: read i1; log one")
    assert fleet.show(r1)["version"] == version_b  # the newest serving
    _until("B's run in its model call", lambda: (folder / "held.log").exists())
    fleet.procs["b1"].send_signal(signal.SIGTERM)  # the rollback: B's worker drains
    _until("b1 to drain", lambda: "worker_draining" in fleet.events("b1"))
    states = {w["executor_id"]: w["state"] for w in fleet.cli("runs", "workers")["workers"]}
    assert states == {"a1": "alive", "b1": "draining"}, states
    out = fleet.cli("db", "status")
    present = {v["version"]: (v["workers"], v["in_flight"]) for v in out["versions"]}
    assert present == {version_a: (1, 0), version_b: (0, 1)}, out
    r2 = fleet.submit("r2: read i2; log two")
    assert fleet.show(r2)["version"] == version_a
    (folder / "model-gate").unlink()
    assert fleet.procs.pop("b1").wait(180) == 0
    _until("A's worker to finish the new run", lambda: fleet.show(r2)["status"] == "finished")
    fleet.start("b2")  # B again: it continues B's run from its last step
    _until("B's run to finish", lambda: fleet.show(r1)["status"] == "finished")
    logged = [r.split("\t")[2] for r in (folder / "effects.log").read_text().splitlines()]
    assert sorted(logged) == ["r1:one", "r2:two"], logged
    assert [w["version"] for w in fleet.show(r2)["workflows"]] == [version_a]
