"""A worker told to stop ends in bounded time: the grace, then out — even while a tool's thread
will not finish (a blocking call the host cannot interrupt). Python's own exit would wait on
that thread for as long as it runs; the worker says which threads it left and exits. And the
stop is heard whichever of the worker's threads the kernel hands the signal to."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tether.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

TOOLS = """
import asyncio
import os
import time
from typing import Annotated

from pydantic import Field

from tether.tools import Effect, tool

FOLDER = os.path.dirname(os.path.abspath(__file__))


@tool(effect=Effect.READ)
async def wait_on(seconds: Annotated[float, Field(description="How long.")]) -> dict:
    '''A blocking call handed to the loop's executor, as asyncio does with a DNS lookup.'''
    open(os.path.join(FOLDER, "started"), "w").close()
    await asyncio.get_running_loop().run_in_executor(None, time.sleep, seconds)
    return {"waited": seconds}
"""

AGENT = """\
name: exit-agent
instructions: Wait.
model: {name: "scripted:steps.json"}
tools: [{function: "tools:wait_on"}]
policy: {tenant: acme, user: ana, roles: [ops]}
"""


def _events(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def _worker(url: str, folder: Path, grace: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = folder / "worker.log"
    cmd = [
        sys.executable, "-m", "tether.cli", "worker", "--db", url, "--app", str(folder / "agent.yaml"),
        "--executor-id", "exit-1", "--poll", "0.1", "--grace", grace,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log.open("ab"), cwd=folder)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line and json.loads(line)["ready"], log.read_text()[-3000:]
    return proc, log


@pytest.mark.parametrize("seconds", [0.0, 120.0], ids=["finishes", "hangs"])
def test_a_stopped_worker_exits_past_a_tool_thread_that_never_returns(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], seconds: float
) -> None:
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "agent.yaml").write_text(AGENT)
    (tmp_path / "steps.json").write_text(json.dumps([{"call": "wait_on", "arguments": {"seconds": seconds}}]))
    assert main(["db", "init", "--db", pg_url, "--json"]) == 0
    proc, log = _worker(pg_url, tmp_path, grace="1")
    try:
        assert main(["submit", "--db", pg_url, "--agent", str(tmp_path / "agent.yaml"), "go", "--json"]) == 0
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "started").exists(), log.read_text()[-3000:]
        if not seconds:  # the quick call returns and its run finishes before the stop
            while "run_finished" not in [e["event"] for e in _events(log)] and time.monotonic() < deadline:
                time.sleep(0.05)
        # (a hanging call is in its thread once "started" is written: the tool wrote it there)
        proc.send_signal(signal.SIGTERM)
        # The grace (1 s) and the last joins, not the tool's 120 s.
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    events = _events(log)
    kinds = [e["event"] for e in events]
    assert kinds.index("worker_stopped") < kinds.index("worker_exited")
    [stopped] = [e for e in events if e["event"] == "worker_stopped"]
    forced = [e for e in events if e["event"] == "worker_exit_forced"]
    if seconds:
        assert stopped["cut_steps"] == 1  # the step was still running when the grace ran out
        [one] = forced
        assert one["threads"]  # named, for the operator
    else:
        assert stopped["cut_steps"] == 0 and forced == []  # an ordinary stop leaves no thread behind


FAKE_WORKER = """
import json, signal, sys, threading, time

from tether.cli._commands.worker import _work
from tether.durable import WorkerConfig


class Fake:
    executor_id = "fake"

    def __init__(self, config):
        pass

    def start(self):
        def hit():
            time.sleep(0.2)
            # The process's SIGTERM, as the kernel may deliver it: to a thread other than main.
            signal.pthread_kill(threading.get_ident(), {sig})
            time.sleep(120)

        threading.Thread(target=hit, daemon=True).start()
        return self

    def stop(self):
        print(json.dumps({{"stopped": True}}), flush=True)

    def queue_depth(self):
        return 0


sys.exit(_work(Fake, WorkerConfig("sqlite:///unused.db", apps=("a",)), as_json=True))
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_delivered_to_another_thread_still_drains_the_worker(tmp_path: Path, sig: str) -> None:
    """The worker's main thread waits for the stop; a signal the kernel gives one of the
    worker's other threads (DBOS's, a pool's) only flags it. An untimed wait never looked: the
    worker ran on after SIGTERM until killed (a rolling upgrade's drain that never came)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    script = FAKE_WORKER.format(sig=f"signal.{sig}")
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["ready"] is True  # it served first: the signal came while it waited
    assert lines[-1] == {"stopped": True} and proc.returncode == 0, proc.stderr[-2000:]
