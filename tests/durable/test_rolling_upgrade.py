"""An operator's rolling upgrade, played with real ``tether worker`` processes on PostgreSQL as the
scale-out guide's "Versions" paragraph documents it, and a deployment written by an earlier
release opened by today's code.

The agent file is upgraded in place (its path is the same on every machine, as the guide asks):
version B changes a tool, the file (instructions, a tool added) and the model's script. Runs of A
are in flight and paused for approval when B arrives; an A worker is killed (SIGKILL) mid-run and
a survivor of A recovers its runs; paused A runs are approved after the upgrade (one on A, one
moved to B with ``tether runs move``); new submits go to B; the last A worker drains (SIGTERM) once
``tether runs list --version A`` has nothing queued or running; then the operator rolls back to A.
Every run finishes, each effect happens once, and each run's effects come from the version the
run was on — never from files edited under a running worker.
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

TOOLS = '''
import os
from typing import Annotated

import anyio
from pydantic import Field

from tether.tools import Effect, ToolContext, tool

VERSION = {version!r}
FOLDER = os.path.dirname(os.path.abspath(__file__))


def _log(name, line):
    fd = os.open(os.path.join(FOLDER, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


@tool(effect=Effect.READ, timeout_s=600)  # held at the gate while workers start on a busy machine
async def look(item: Annotated[str, Field(description="Item id.")], ctx: ToolContext) -> dict:
    """Look an item up (it waits while the test holds this version's gate)."""
    _log("reads.log", f"{{ctx.run_id}}\\t{{VERSION}}")
    while os.path.exists(os.path.join(FOLDER, "gate-" + VERSION)):
        await anyio.sleep(0.05)
    return {{"item": item, "version": VERSION}}


@tool(effect=Effect.WRITE)
async def note(text: Annotated[str, Field(description="The note.")], ctx: ToolContext) -> dict:
    """Write a note (a side effect a person approves)."""
    _log("effects.log", f"{{ctx.run_id}}\\t{{VERSION}}\\t{{ctx.idempotency_key}}")
    return {{"noted": text, "version": VERSION}}
{extra}'''

ADDED = '''

@tool(effect=Effect.READ)
async def count(n: Annotated[int, Field(description="How many.")]) -> dict:
    """Count (a tool version B adds)."""
    return {"n": n}
'''

AGENT = """\
name: upgrade-agent
instructions: {instructions}
model: {{name: "scripted:steps.json"}}
tools: [{tools}]
policy: {{tenant: acme, user: ana, roles: [ops]}}
trace: {{dir: traces}}
"""


def _write_version(folder: Path, version: str) -> None:
    """Version A, or B: a changed tool module, agent file and script, and an added tool."""
    b = version == "B"
    (folder / "tools.py").write_text(TOOLS.format(version=version, extra=ADDED if b else ""))
    tools = ['{function: "tools:look"}', '{function: "tools:note"}']
    look: Any = {"call": "look", "arguments": {"item": "i1"}}
    if b:  # the same number of turns: a run moved from A to B ends after its note, as on A
        tools.append('{function: "tools:count"}')
        look = [look, {"call": "count", "arguments": {"n": 2}}]
    steps = [look, {"call": "note", "arguments": {"text": f"written by {version}"}}]
    (folder / "steps.json").write_text(json.dumps(steps))
    what = "Look, count, then note." if b else "Look, then note."
    (folder / "agent.yaml").write_text(AGENT.format(instructions=what, tools=", ".join(tools)))


class Operator:
    """Worker processes serving one agent file, and the CLI as a person types it."""

    def __init__(self, url: str, folder: Path, capsys: Any) -> None:
        self.url, self.folder, self.capsys = url, folder, capsys
        self.agent = folder / "agent" / "agent.yaml"
        self.suffix = uuid.uuid4().hex[:6]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        cmd = [
            sys.executable, "-m", "tether.cli", "worker", "--db", self.url, "--app", str(self.agent),
            "--executor-id", f"{name}-{self.suffix}", "--poll", "0.1", "--dead-after", "3", "--grace", "20",
        ]  # fmt: skip
        log = (self.folder / f"{name}.log").open("ab")
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, cwd=self.folder)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line and json.loads(line)["ready"], (self.folder / f"{name}.log").read_text()[-3000:]
        self.procs[name] = proc

    def signal(self, name: str, sig: int) -> int:
        proc = self.procs.pop(name)
        proc.send_signal(sig)
        try:  # a drain: the grace (20 s), then the exit's own bound (worker_exit_forced), under load
            return proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError((self.folder / f"{name}.log").read_text()[-3000:]) from None

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                proc.kill()

    def cli(self, *argv: str) -> dict[str, Any]:
        self.capsys.readouterr()
        code = main([*argv, "--json"])
        out = json.loads(self.capsys.readouterr().out.strip().splitlines()[-1])
        # `runs show` exits with its run's code (5: paused for approval), as `tether run` would.
        assert code == 0 or (argv[3:4] == ("show",) and out.get("status")), (argv, out)
        return out

    def runs(self, *argv: str) -> dict[str, Any]:
        return self.cli("runs", "--db", self.url, *argv)

    def submit(self) -> str:
        return str(self.cli("submit", "--db", self.url, "--agent", str(self.agent), "note it")["run_id"])

    def approve(self, run_id: str) -> None:
        pending = self.cli("approvals", "list", "--db", self.url)["proposals"]
        [p] = [p for p in pending if p["run"] == run_id]
        self.cli("approvals", "approve", p["id"], "--db", self.url, "--reviewer", "rita")

    def until(self, what: str, probe: Any, timeout_s: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = probe()
            if got:
                return got
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}: {self.runs('list')['runs']}")

    def status(self, *run_ids: str) -> list[str]:
        return [self.runs("show", rid)["status"] for rid in run_ids]

    def lines(self, name: str) -> list[list[str]]:
        path = self.agent.parent / name
        return [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def operator(pg_url: str, tmp_path: Path, capsys: Any) -> Iterator[Operator]:
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Operator(pg_url, tmp_path, capsys)
    op.cli("db", "init", "--db", pg_url)
    try:
        yield op
    finally:
        op.stop()


def deployed(folder: Path, capsys: Any, write_agent: Callable[[Path], None]) -> Operator:
    """A SQLite deployment in ``folder`` (``deployment/``), initialised, serving the agent
    ``write_agent`` writes into ``folder/agent``; its operator, no worker started yet."""
    (folder / "agent").mkdir()
    write_agent(folder / "agent")
    url = f"sqlite:///{folder / 'deployment'}"
    op = Operator(url, folder, capsys)
    op.cli("db", "init", "--db", url)
    return op


def test_an_agent_file_upgraded_in_place_then_rolled_back_loses_and_repeats_nothing(
    operator: Operator,
) -> None:
    op = operator
    folder = op.agent.parent
    op.start("a1")
    version: dict[str, str] = {}
    r1, r2 = op.submit(), op.submit()
    op.until("A's first runs to pause", lambda: op.status(r1, r2) == ["paused", "paused"])
    (folder / "gate-A").write_text("")  # A's next runs hold inside their first tool call
    r3, r4 = op.submit(), op.submit()
    op.until("A's runs in flight", lambda: {r[0] for r in op.lines("reads.log")} >= {r3, r4})
    op.start("a2")  # a second worker of A, idle so far
    version["A"] = op.runs("show", r1)["version"]

    # Version B is deployed in place, and its first worker starts.
    _write_version(folder, "B")
    op.start("b1")
    r5 = op.submit()
    version["B"] = op.runs("show", r5)["version"]
    assert version["B"] != version["A"]
    # An A worker dies mid-run; a survivor of A recovers its runs, with A's code.
    op.signal("a1", signal.SIGKILL)
    (folder / "gate-A").unlink()
    op.until("every run to pause", lambda: set(op.status(r1, r2, r3, r4, r5)) == {"paused"})
    # People decide after the upgrade, on A while a worker of A is alive.
    for rid in (r1, r3, r4):
        op.approve(rid)
    op.until("A's runs to finish", lambda: set(op.status(r1, r3, r4)) == {"finished"})
    # The documented check before the last A worker goes; it drains.
    for state in ("queued", "running"):
        assert op.runs("list", "--version", version["A"], "--status", state)["runs"] == []
    assert op.signal("a2", signal.SIGTERM) == 0
    # A person approves an A run nobody moved: its resume waits for a worker of A, none comes;
    # the operator moves it to B all the same.
    op.approve(r2)
    op.until("the resume to be queued", lambda: op.status(r2) == ["queued"])
    moved = op.runs("move", r2, "--to", "latest")
    assert (moved["from"], moved["to"], moved["resume_moved"]) == (version["A"], version["B"], True)
    op.approve(r5)
    op.until("the moved run to finish", lambda: op.status(r2) == ["finished"])
    assert [w["version"] for w in op.runs("show", r2)["workflows"]] == [version["A"], version["B"]]

    # Rollback: A's files again, an A worker, new submits go to it; B's worker drains.
    _write_version(folder, "A")
    op.start("a3")
    r6 = op.submit()
    assert op.runs("show", r6)["version"] == version["A"]
    op.until("B's run to finish", lambda: op.status(r5) == ["finished"])
    assert op.signal("b1", signal.SIGTERM) == 0
    op.until("the rolled-back run to pause", lambda: op.status(r6) == ["paused"])
    op.approve(r6)
    op.until("the rolled-back run to finish", lambda: op.status(r6) == ["finished"])

    runs = {"A": [r1, r3, r4, r6], "B": [r2, r5]}  # r2 was moved to B before its approval
    for rid in (r1, r2, r3, r4, r5, r6):
        shown = op.runs("show", rid)
        assert (shown["status"], shown["stop_reason"], shown["problems"]) == ("finished", "accepted", []), (
            shown
        )
    # Each run's effect happened once, with the code of the version it ran on.
    effects = op.lines("effects.log")
    assert Counter(r[0] for r in effects) == Counter(runs["A"] + runs["B"]), effects
    assert {r[0]: r[1] for r in effects} == {rid: v for v, ids in runs.items() for rid in ids}
    assert len({r[2] for r in effects}) == len(effects)  # no idempotency key twice
    # Reads: the A runs (the killed worker's too) read with A's code, never with B's.
    reads = op.lines("reads.log")
    assert {r[1] for r in reads if r[0] in (r1, r3, r4, r6)} == {"A"}, reads
    assert {r[1] for r in reads if r[0] == r5} == {"B"}
    workers = {w["executor_id"].split("-")[0]: w["state"] for w in op.runs("workers")["workers"]}
    assert workers["a2"] == workers["b1"] == "stopped" and workers["a3"] == "alive"


def test_a_worker_keeps_the_agent_version_it_started_with_when_the_files_are_edited(tmp_path: Path) -> None:
    """The unit under the test above: an agent-file app built after its files were edited in
    place builds the version it was started with; a new app reads the new files."""
    from tether.agents._file import agent_digest, load_agent_file
    from tether.agents._record import AgentFileApp

    folder = tmp_path / "agent"
    folder.mkdir()
    _write_version(folder, "A")
    (folder / "agent.yaml").write_text(
        (folder / "agent.yaml")
        .read_text()
        .replace("instructions: Look, then note.", "instructions_file: doing.md")
    )
    (folder / "doing.md").write_text("Version A's instructions.")
    sys.modules.pop("tools", None)
    try:
        app = AgentFileApp(folder / "agent.yaml")
        _write_version(folder, "B")
        (folder / "doing.md").write_text("Version B's instructions.")
        # The app's first run, in a process that has not run one yet.
        host, agent = app(f"sqlite:///{tmp_path / 'state'}")
        assert agent.instructions == "Version A's instructions."
        specs = anyio.run(host.local.list_tools)
        assert sorted(spec.name for spec in specs) == ["look", "note"]  # not B's added tool
        assert host.local.get("look").function.__globals__["VERSION"] == "A"  # not B's module
        script = agent.model._function.script  # the scripted model's steps
        assert [[c[0] for c in step.calls] for step in script] == [["look"], ["note"]]  # not B's script
        anyio.run(host.aclose)
        assert app.digest != agent_digest(load_agent_file(folder / "agent.yaml"))  # a new worker is B
    finally:
        sys.modules.pop("tools", None)


# -- a deployment written by an earlier release -----------------------------------------------------

# What releases before 2026-12-01 (main@6feacb4) wrote: their worker table, without versions, and
# their migration journal; their runs are DBOS workflows named "tether.run".
OLD_TABLES = (
    "CREATE TABLE IF NOT EXISTS _migrations"
    " (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    """CREATE TABLE tether_workers (
        executor_id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        heartbeat_at TIMESTAMPTZ NOT NULL,
        recovered_at TIMESTAMPTZ,
        recovered_by TEXT
    )""",
    "INSERT INTO _migrations (name) VALUES ('pg_w001_workers')",
    "INSERT INTO tether_workers (executor_id, host, pid, heartbeat_at) VALUES ('old-1', 'h', 1, now())",
)


def _old_deployment(url: str) -> None:
    import psycopg
    from dbos import DBOS

    from tether.durable._config import dbos_config
    from tether.sql._postgres import PgUrl

    cfg = dbos_config(url, executor_id="old-1")
    DBOS.migrate(cfg["system_database_url"], schema=cfg["dbos_system_schema"])  # its worker did
    pg = PgUrl.parse(url)
    with psycopg.connect(pg.conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {pg.schema}")
        conn.execute(f"SET search_path = {pg.schema}")
        for statement in OLD_TABLES:
            conn.execute(statement)


def _submit_as_before(client: Any, app: str, objective: str, version: str) -> str:
    """A run as an earlier release's ``tether submit`` enqueued it (``DurableClient._enqueue``)."""
    from tether.durable._config import QUEUE, context_to_json
    from tether.policy import TrustedContext

    context = TrustedContext(tenant="acme", roles=frozenset({"ops"}), user="ana")
    run_id = f"old-{uuid.uuid4().hex[:8]}"
    request = {"op": "start", "run_id": run_id, "app": app, "objective": objective,
               "context": context_to_json(context)}  # fmt: skip
    options = {"workflow_name": "tether.run", "queue_name": QUEUE, "workflow_id": run_id,
               "app_version": version, "queue_partition_key": "acme",
               "attributes": {"run_id": run_id, "op": "start", "tenant": "acme"}}  # fmt: skip
    client.dbos.enqueue(options, request)
    return run_id


def _durable_worker(url: str, folder: Path, name: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(HERE)]),
        "DURABLE_DIR": str(folder),
    }
    cmd = [
        sys.executable, "-m", "tether.cli", "worker", "--db", url, "--app", "durable_app:build",
        "--executor-id", f"{name}-{uuid.uuid4().hex[:6]}", "--poll", "0.1",
    ]  # fmt: skip
    log = (folder / f"{name}.log").open("ab")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, cwd=folder)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line and json.loads(line)["ready"], (folder / f"{name}.log").read_text()[-3000:]
    return proc


def _old_runs_go_on(url: str, folder: Path, capsys: Any, version: str | None) -> None:
    """Runs an earlier release enqueued are listed, run, paused, approved and resumed by today's
    worker (``version``: the one they were enqueued with; None: the worker's), effects once."""
    from tether.durable import DurableClient

    op = Operator(url, folder, capsys)
    os.environ["DURABLE_DIR"] = str(folder)
    client = DurableClient(url)
    worker = _durable_worker(url, folder, "w1")
    try:
        if version is None:
            [version] = [
                w["app_version"] for w in op.runs("workers")["workers"] if w["executor_id"][:3] == "w1-"
            ]
        paying = _submit_as_before(client, "durable_app:build", "ol-1: log a; pay 5; log b", version)
        logging = _submit_as_before(client, "durable_app:build", "ol-2: log c", version)
        listed = {r["run_id"]: r for r in op.runs("list", "--version", version)["runs"]}
        assert {paying, logging} <= set(listed)  # the operator sees them
        op.until("the old runs to run", lambda: op.status(paying, logging) == ["paused", "finished"])
        op.approve(paying)
        op.until("the approved run to resume", lambda: op.status(paying) == ["finished"])
        shown = op.runs("show", paying)
        assert shown["stop_reason"] == "accepted"
        # Its resume has its start's name: a worker of the earlier release could run it too.
        assert [(w.op, w.name) for w in client.workflows(paying)] == [
            ("start", "tether.run"),
            ("resume", "tether.run"),
        ]
        import durable_app

        logged = [r[2] for r in durable_app.effects()]
        assert sorted(logged) == ["5", "ol-1:a", "ol-1:b", "ol-2:c"], logged  # the payment once
    finally:
        worker.terminate()
        worker.wait(120)  # a drain under load: a generous deadline
        client.close()
        os.environ.pop("DURABLE_DIR", None)


def test_a_postgres_deployment_of_an_earlier_release_is_upgraded_in_place_and_its_runs_go_on(
    pg_url: str, tmp_path: Path, capsys: Any
) -> None:
    _old_deployment(pg_url)
    assert main(["db", "init", "--db", pg_url]) == 0  # the upgrade step the guide names
    _old_runs_go_on(pg_url, tmp_path, capsys, None)
    workers = {w["executor_id"]: w for w in Operator(pg_url, tmp_path, capsys).runs("workers")["workers"]}
    assert workers["old-1"]["app_version"] is None  # the earlier release's row is kept


def test_a_sqlite_deployment_of_an_earlier_release_runs_the_runs_it_queued(
    tmp_path: Path, capsys: Any
) -> None:
    """A SQLite deployment has one version for every release: today's worker takes the runs an
    earlier release's client queued, under that release's workflow name."""
    from tether.durable._config import APP_VERSION
    from tether.durable._deploy import init_deployment

    url = f"sqlite:///{tmp_path / 'deployment'}"
    init_deployment(url)
    _old_runs_go_on(url, tmp_path, capsys, APP_VERSION)


def test_a_sqlite_deployment_upgraded_in_place_resumes_its_paused_runs_on_the_new_version(
    tmp_path: Path, capsys: Any
) -> None:
    """One worker, one version: stop it, upgrade the agent file in place, start it again; a run
    paused before is approved after, and resumes on the new version (its effect once), instead
    of being refused for the version it was submitted with."""
    op = deployed(tmp_path, capsys, lambda folder: _write_version(folder, "A"))
    try:
        op.start("s1")
        paused = op.submit()
        op.until("the run to pause", lambda: op.status(paused) == ["paused"])
        assert op.signal("s1", signal.SIGTERM) == 0
        _write_version(tmp_path / "agent", "B")
        op.start("s2")
        op.approve(paused)
        op.until("the run to finish", lambda: op.status(paused) == ["finished"])
        shown = op.runs("show", paused)
        assert (shown["stop_reason"], shown["problems"]) == ("accepted", []), shown
        assert [(r[0], r[1]) for r in op.lines("effects.log")] == [(paused, "B")]
        events = [json.loads(x) for x in (tmp_path / "s2.log").read_text().splitlines() if x.startswith("{")]
        assert [e["run_id"] for e in events if e["event"] == "run_version_changed"] == [paused]
    finally:
        op.stop()
