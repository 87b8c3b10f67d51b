"""An operator's rolling upgrade, twenty-second round: the rollout itself — old workers told to
stop (SIGTERM, twice, SIGINT) in the middle of a tool's effect and of a model call, and how an
orchestrator learns that a worker is ready or draining.

What did not hold, fixed here and pinned below:

- an orchestrator had no honest readiness signal: the worker's one "ready" line on stdout, and
  JSON events on stderr. Worse, a stop asked while the worker started (a rollout that changed
  its mind, a pod deleted while it migrated) still printed ``"ready": true`` and then drained at
  once. ``tether worker --ready-file PATH`` keeps a file that exists only while the worker takes
  runs: a stale one (a worker killed -9) is removed before the start, it is written whole once
  the worker serves, removed before the drain begins (SIGTERM, SIGINT, a later release's
  migration), never written, nor the ready line printed, when the stop came during the start;
  an unwritable place is refused before anything starts (``bad_ready_file``).

Played and held (pinned): on SQLite and PostgreSQL, a worker stopped while a run's effect is
under way (SIGTERM, and SIGTERM twice: the second cuts nothing) or while a model call is under
way (SIGINT) lets that step finish, starts no other, exits 0; a new worker continues the run, each
effect once and each model call once. A run paused by the old release whose tool the new agent
file declares with another effect (``delete`` for ``write``) or drops: the approval given for what
the reviewer was shown is refused on resume (``effect_changed``) or meets no tool, never runs.
The release before's console (``UPGRADE_FROM``, as round 19) on the store today's ``db init``
migrated, and today's console on a store the old worker still writes, both serve every page and
API answer (200), list the same runs and proposals, and decide: each run resumed, effect once;
``runs list``/``show`` and ``approvals list`` of both CLIs list runs of both releases alike.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
APP = "upgrade22_app:build"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'deployment'}"
    else:
        yield str(request.getfixturevalue("pg_url"))


class Fleet:
    """Worker processes of ``upgrade22_app`` and the CLI, each in its own process."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url, self.folder = url, folder
        paths = [str(ROOT / "src"), str(ROOT / "tests" / "durable")]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "DURABLE_DIR": str(folder)}
        self.suffix = uuid.uuid4().hex[:6]
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable, "-m", "tether.cli", "worker", "--db", self.url, "--app", APP,
            "--executor-id", f"{name}-{self.suffix}", "--poll", "0.1", "--dead-after", "3",
            "--grace", "120", "--ready-file", str(self.ready(name)),
        ]  # fmt: skip
        log = (self.folder / f"{name}.log").open("ab")
        proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=log, cwd=self.folder)
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line and json.loads(line)["ready"], self.log(name)
        # The file says so too, whole, naming this process.
        assert json.loads(self.ready(name).read_text())["pid"] == proc.pid
        return proc

    def ready(self, name: str) -> Path:
        return self.folder / f"{name}.ready"

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text()[-3000:]

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = (self.folder / f"{name}.log").read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def cli(self, *argv: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "tether.cli", *argv, "--db", self.url, "--json"],
            env=self.env, capture_output=True, cwd=self.folder, timeout=180,
        )  # fmt: skip
        lines = done.stdout.decode().strip().splitlines()
        assert lines, done.stderr.decode()[-3000:]
        out: dict[str, Any] = json.loads(lines[-1])
        return out

    def submit(self, objective: str) -> str:
        out = self.cli("submit", "--agent", APP, "--tenant", "acme", objective)
        assert out.get("run_id"), out
        return str(out["run_id"])

    def until(self, what: str, probe: Any, timeout_s: float = 120.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = probe()
            if got:
                return got
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def lines(self, name: str) -> list[list[str]]:
        path = self.folder / name
        return [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def fleet(url: str, tmp_path: Path) -> Iterator[Fleet]:
    folder = tmp_path / "fleet"
    folder.mkdir()
    fleet = Fleet(url, folder)
    assert fleet.cli("db", "init")["ok"]
    try:
        yield fleet
    finally:
        fleet.stop()


@pytest.mark.parametrize(
    ("held", "signals"),
    [("effect", ["SIGTERM"]), ("effect", ["SIGTERM", "SIGTERM"]), ("model", ["SIGINT"])],
    ids=["effect-sigterm", "effect-sigterm-twice", "model-sigint"],
)
def test_an_old_worker_stopped_mid_call_drains_unready_and_a_new_one_continues_once(
    fleet: Fleet, held: str, signals: list[str]
) -> None:
    """The old worker holds a run inside its effect (or its model call) when the rollout stops
    it: its ready file goes at once, while the step is still under way; the step finishes, the
    worker exits 0 having cut nothing; a new worker continues the run: each effect once, each
    model call once, the run finished."""
    (fleet.folder / f"{held}-gate").write_text("")
    old = fleet.start("old")
    run_id = fleet.submit("dr-1: log a; log b")
    fleet.until(f"the run held in its {held}", lambda: fleet.lines("held.log"))
    for name in signals:
        old.send_signal(getattr(signal, name))
        fleet.until("the ready file to go", lambda: not fleet.ready("old").exists())
    assert old.poll() is None, fleet.log("old")  # still draining: the gate holds the step
    (fleet.folder / f"{held}-gate").unlink()
    assert old.wait(180) == 0, fleet.log("old")
    [stopped] = [e for e in fleet.events("old") if e["event"] == "worker_stopped"]
    assert stopped["cut_steps"] == 0, stopped
    assert not fleet.ready("old").exists()

    fleet.start("new")
    shown = fleet.until(
        "the run to finish", lambda: (s := fleet.cli("runs", "show", run_id))["status"] == "finished" and s
    )
    assert (shown["stop_reason"], shown["problems"]) == ("accepted", []), shown
    assert Counter(r[2] for r in fleet.lines("effects.log")) == Counter(["dr-1:a", "dr-1:b"])
    assert len({r[0] for r in fleet.lines("effects.log")}) == 2  # two idempotency keys, once each
    asked = Counter(r[1] for r in fleet.lines("model.log") if r[0] == "dr-1")
    assert asked == Counter({"0": 1, "1": 1, "2": 1}), asked  # no model call asked twice


FAKE_WORKER = """
import json, os, signal, sys, threading, time

from tether.cli._commands.worker import _work
from tether.durable import WorkerConfig

READY = sys.argv[1]


class Fake:
    executor_id = "fake"

    def __init__(self, config):
        pass

    def start(self):
        print(json.dumps({{"starting": True, "stale_ready_file": os.path.exists(READY)}}), flush=True)
        if {stop_in_start}:
            os.kill(os.getpid(), signal.SIGTERM)  # the rollout changed its mind: a stop in the start
            time.sleep(0.5)
        else:
            def later():
                while not os.path.exists(READY):
                    time.sleep(0.05)
                os.kill(os.getpid(), signal.SIGTERM)

            threading.Thread(target=later, daemon=True).start()
        return self

    def stop(self):
        print(json.dumps({{"stopped": True, "ready_file": os.path.exists(READY)}}), flush=True)

    def queue_depth(self):
        return 0


sys.exit(_work(Fake, WorkerConfig("sqlite:///unused", apps=("a",)), as_json=True, ready_file=READY))
"""


def _fake(folder: Path, ready: Path, *, stop_in_start: bool) -> tuple[int, list[dict[str, Any]], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    script = FAKE_WORKER.format(stop_in_start=stop_in_start)
    done = subprocess.run(
        [sys.executable, "-c", script, str(ready)], env=env, cwd=folder, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


@pytest.mark.parametrize("stop_in_start", [False, True], ids=["served", "stopped-while-starting"])
def test_the_ready_file_exists_only_while_the_worker_takes_runs(tmp_path: Path, stop_in_start: bool) -> None:
    """A stale ready file (a worker killed -9 left it) is gone before the start; the file is
    written once the worker serves and gone before its stop; a stop asked during the start
    leaves no ready line and no file, and the worker exits 0."""
    ready = tmp_path / "worker.ready"
    ready.write_text('{"ready": true, "pid": 1}\n')
    code, lines, err = _fake(tmp_path, ready, stop_in_start=stop_in_start)
    assert code == 0, err[-2000:]
    assert lines[0] == {"starting": True, "stale_ready_file": False}
    said_ready = [line for line in lines if line.get("ready")]
    assert said_ready == ([] if stop_in_start else [said_ready[0]]), lines
    assert lines[-1] == {"stopped": True, "ready_file": False}
    assert not ready.exists()


def test_a_ready_file_that_cannot_be_written_is_refused_before_the_start(tmp_path: Path) -> None:
    """A ready file in a folder that is not there: ``bad_ready_file`` before anything starts (an
    orchestrator would otherwise wait on a worker that serves for good)."""
    code, lines, _ = _fake(tmp_path, tmp_path / "nowhere" / "worker.ready", stop_in_start=False)
    assert code != 0 and lines[-1]["error"] == "bad_ready_file", lines
    assert not any(line.get("starting") for line in lines)


# -- config drift: the agent file changed under a paused run -----------------------------------


def _drift(folder: Path, change: str) -> None:
    """The agent file as the new release ships it: ``note`` declared anew (``delete`` for
    ``write``), or removed from the file's tools."""
    tools = folder / "tools.py"
    if change == "effect":
        text = tools.read_text()
        marker = "@tool(effect=Effect.WRITE)\nasync def note"
        assert marker in text
        tools.write_text(text.replace(marker, "@tool(effect=Effect.DELETE)\nasync def note"))
    else:
        agent = folder / "agent.yaml"
        agent.write_text(agent.read_text().replace(', {function: "tools:note"}', ""))


@pytest.mark.parametrize("change", ["effect", "removed"])
def test_an_approval_given_under_the_old_definition_authorises_no_other_effect(
    url: str, tmp_path: Path, capsys: Any, change: str
) -> None:
    """A run paused by the old release for its ``note`` (a ``write``); the new release's agent
    file declares ``note`` a ``delete`` (or drops it); the old worker drains, the new one starts
    (on PostgreSQL the paused run is moved to it, as the guide says); the reviewer approves what
    they were shown. The resume refuses the call (``effect_changed``) or finds no such tool: the
    effect never happens, the approval stays as given, and the run ends."""
    from test_rolling_upgrade import Operator, _write_version

    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Operator(url, tmp_path, capsys)
    op.cli("db", "init", "--db", url)
    try:
        op.start("old")
        run_id = op.submit()
        op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
        _drift(tmp_path / "agent", change)
        op.start("new")
        assert op.signal("old", signal.SIGTERM) == 0
        if not url.startswith("sqlite"):
            moved = op.runs("move", run_id, "--to", "latest")
            assert moved["from"] != moved["to"], moved
        op.approve(run_id)
        op.until("the run to end", lambda: op.status(run_id)[0] not in ("paused", "running", "queued"))
        shown = op.runs("show", run_id)
        assert [p["status"] for p in shown["proposals"]] == ["approved"]  # the approval, as given
        problems = [(p["tool"], p["kind"], p["reason"]) for p in shown["problems"]]
        if change == "effect":
            assert shown["stop_reason"] == "approval_denied", shown
            assert problems == [("note", "denied", "effect_changed")], shown
        else:
            assert problems == [("note", "rejected", "unknown tool 'note'")], shown
        assert shown["status"] == "finished" and shown["effects"] == [], shown
        assert op.lines("effects.log") == []  # the note never ran
    finally:
        op.stop()


# -- consoles of both releases while the deployment is upgraded ---------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Console:
    """``tether serve`` of one release on the deployment, and a reviewer's API token for it."""

    def __init__(self, src: Path, url: str, folder: Path, tag: str, *, resume_app: bool) -> None:
        from test_rolling_upgrade_round6 import _env

        users = folder / f"{tag}-users.db"
        env = _env(src)
        base = [sys.executable, "-m", "tether.cli", "users", "--db", str(users)]
        add = [*base, "add", "rita", "--tenant", "acme", "--role", "reviewer", "--password-stdin"]
        subprocess.run(
            add, env=env, input=b"a-long-password-123\n", check=True, capture_output=True, cwd=folder
        )
        made = subprocess.run([*base, "token", "rita"], env=env, check=True, capture_output=True, cwd=folder)
        self.token = next(
            w for w in made.stdout.decode().split() if w.startswith("tether_") and w.count("_") >= 2
        )
        self.port = _free_port()
        cmd = [
            sys.executable, "-m", "tether.cli", "serve", "--db", url, "--users", str(users),
            "--traces", str(folder / "agent" / "traces"), "--port", str(self.port),
        ]  # fmt: skip
        cmd += ["--resume-app", "agent-files"] if resume_app else []
        log = (folder / f"console-{tag}.log").open("ab")
        self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, cwd=folder)
        deadline = time.monotonic() + 120
        while self.get("/api/me")[0] != 200:
            assert self.proc.poll() is None and time.monotonic() < deadline, (
                folder / f"console-{tag}.log"
            ).read_text()
            time.sleep(0.2)

    def get(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, str]:
        import urllib.error
        import urllib.request

        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode()
        except OSError:
            return 0, ""

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def old_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release before (``UPGRADE_FROM``'s first commit, as round 19; skipped where absent)."""
    from test_rolling_upgrade_round6 import old_tree
    from test_rolling_upgrade_round19 import OLD_COMMITS

    return old_tree(OLD_COMMITS[0], tmp_path_factory)


def test_consoles_of_both_releases_serve_and_decide_while_workers_of_both_run(
    url: str, tmp_path: Path, capsys: Any, old_src: Path
) -> None:
    """The release before's deployment and worker; runs paused under it; today's ``db init``;
    the old console (on the migrated store) and today's serve beside an old worker and today's.
    Every page and API answer of either console is 200 and lists the same runs and proposals;
    decisions on either console resume the runs, each on its worker, each effect once."""
    from test_rolling_upgrade import _write_version
    from test_rolling_upgrade_round6 import NEW_SRC, Mixed

    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Mixed(url, tmp_path, capsys, old_src)
    consoles: dict[str, Console] = {}
    try:
        op.old_cli("db", "init", "--db", url)
        op.start_on("old", old_src)
        r1, r2 = op.old_submit(), op.old_submit()
        op.until("the old runs to pause", lambda: op.status(r1, r2) == ["paused", "paused"])
        op.cli("db", "init", "--db", url)
        consoles = {
            "old": Console(old_src, url, tmp_path, "old", resume_app=False),
            "new": Console(NEW_SRC, url, tmp_path, "new", resume_app=True),
        }
        op.start_on("new", NEW_SRC)
        r3 = op.submit()
        op.until("today's run to pause", lambda: op.status(r3) == ["paused"])
        seen: dict[str, Any] = {}
        for tag, console in consoles.items():
            for path in ("/approvals", "/runs", *(f"/runs/{r}" for r in (r1, r3))):
                assert console.get(path)[0] == 200, (tag, path, console.get(path))
            status, text = console.get("/api/approvals")
            assert status == 200, (tag, text)
            seen[tag] = sorted((p["run_id"], p["status"], p["effect"]) for p in json.loads(text)["proposals"])
            status, text = console.get("/api/runs")
            assert status == 200 and {r1, r2, r3} <= {r["run_id"] for r in json.loads(text)["runs"]}, text
        assert seen["old"] == seen["new"] == sorted((r, "pending", "write") for r in (r1, r2, r3))
        # The CLIs of both releases list the same, runs of either release in one listing.
        assert {r["run_id"] for r in op.runs("list")["runs"]} >= {r1, r2, r3}
        assert [op.runs("show", r)["status"] for r in (r1, r2, r3)] == ["paused"] * 3
        for listed in (
            op.cli("approvals", "list", "--db", url),
            op.old_cli("approvals", "list", "--db", url),
        ):
            assert sorted(p["run"] for p in listed["proposals"]) == sorted([r1, r2, r3]), listed
        proposals = json.loads(consoles["new"].get("/api/approvals")[1])["proposals"]
        for tag, run_id in (("old", r1), ("new", r2), ("old", r3)):
            [p] = [p for p in proposals if p["run_id"] == run_id]
            status, text = consoles[tag].get(
                f"/api/approvals/{p['id']}/approve", {"content_hash": p["content_hash"]}
            )
            assert status == 200 and json.loads(text)["status"] == "approved", (tag, text)
        op.until("every run to finish", lambda: op.status(r1, r2, r3) == ["finished"] * 3)
        assert Counter(r[0] for r in op.lines("effects.log")) == Counter([r1, r2, r3])
        for console in consoles.values():
            assert console.get(f"/api/runs/{r1}")[0] == console.get("/runs")[0] == 200
    finally:
        for console in consoles.values():
            console.stop()
        op.stop()
