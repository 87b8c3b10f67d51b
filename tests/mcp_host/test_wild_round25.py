"""Wild servers, round twenty-five: servers launched as people launch them (``wild25_server.py``,
by hand; ``wild25_sdk_server.py`` on the official SDK over Streamable HTTP), each beside the honest
stdio server (``wild4_server.py``), checked to serve.

Found:

* a launcher that starts the server with its own stdin and stdout and exits 0 (a wrapper that
  forks the real server; a server that daemonises, fork-setsid-fork) could not be started
  ("Connection closed; its process exited with code 0"): the launcher's exit ended the
  connection while the server it handed its pipes to was answering. Now an exit with status 0
  leaves the connection to its output's end (a failure, any other status, still ends it at
  once); a hand-off to a process that never answers fails at the connect timeout, named;
* the processes an unconfined server started in a session of their own (a daemon that ignores
  SIGTERM) outlived the host's shutdown (the process group it killed no longer held them), as
  did a server a launcher handed off to: each launch now carries a mark in its environment, and
  the host's stop ends (SIGTERM, then SIGKILL) every live process carrying it;
* a host killed outright (``kill -9`` of ``tether run``) left its unconfined servers running when
  they ignore the end of their stdin and SIGTERM, with their daemons: a watchdog started once per
  host process now waits on a pipe from it and, when the pipe ends however the host ended, ends
  every process carrying the host's mark;
* an HTTP session the server no longer knew before the start was done (a 404 to the listing
  right after ``initialize``: a server that restarted, a balancer's other replica) failed the
  start ("Session not found"), though a call meeting the same 404 begins a new session: the
  start now begins one anew, once (a server that forgets every session still fails, named).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from tether.core.stop import StopReason
from tether.mcphost._runner import run_question

from .conftest import _serve, approve, honest_server, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
SERVER = HERE / "wild25_server.py"


def _stdio(tmp_path: Path, *flags: str, modes: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "name": "x",
        "command": [sys.executable, str(SERVER), *flags],
        "env": {"W25": modes, "W25_PIDS": str(tmp_path / "pids")},
        "mode": "legacy",
        "effects": {"lookup": "read"},
        "timeout_s": 60,
        "sandbox": "none",
        **extra,
    }


def _pids(tmp_path: Path, suffix: str = "") -> list[int]:
    path = tmp_path / f"pids{suffix}"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def _all_ended(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def _kill_left(pids: list[int]) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


async def _run(tmp_path: Path, entry: dict[str, Any], keys: tuple[str, ...] = ("a", "b")) -> Any:
    """The run of ``x`` (approved) beside ``ok``; ``ok`` is served either way."""
    config = write_config(tmp_path, [entry, honest_server()])
    await approve(config, "ok")
    with anyio.fail_after(40):
        await approve(config, "x")
        steps = [("x__lookup", {"key": k}) for k in keys]
        run = await run_question(config, "Q", script(*steps, ("ok__lookup", {"key": "z"}), "done"))
    assert "value-of-z" in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED
    return run


# -- launchers that hand the server off -----------------------------------------------------------


@pytest.mark.parametrize("flag", ["--hand-off", "--daemonise"])
async def test_a_launcher_that_starts_the_server_and_exits_has_it_served(tmp_path: Path, flag: str) -> None:
    """The launcher exits 0 at once, its server (a child; or a daemon in a session of its own),
    slow to start, answering on the pipes it was handed: served (before: "Connection closed;
    its process exited with code 0"), and the server ends with the run."""
    try:
        run = await _run(tmp_path, _stdio(tmp_path, flag, modes="slow"))
        said = run.seen("x__lookup")
        assert ["value-of-a" in said[0], "value-of-b" in said[1]] == [True, True]
        assert "error=" not in said[0] + said[1] and not run.summary().get("unavailable_servers")
        assert _pids(tmp_path) and _all_ended(_pids(tmp_path))
    finally:
        _kill_left(_pids(tmp_path))


async def test_a_hand_off_to_a_process_that_never_answers_fails_at_the_connect_timeout(
    tmp_path: Path,
) -> None:
    """Contained: the start fails at ``connect_timeout_s``, named; the run goes on with ``ok``,
    and the mute process does not outlive it."""
    entry = _stdio(tmp_path, "--daemonise", "--mute", connect_timeout_s=2)
    config = write_config(tmp_path, [entry, honest_server()])
    try:
        await approve(config, "ok")
        with anyio.fail_after(40):
            steps = script(("x__lookup", {"key": "a"}), ("ok__lookup", {"key": "z"}), "done")
            run = await run_question(config, "Q", steps)
        assert "value-of-z" in run.seen("ok__lookup")[-1]
        unavailable = run.summary()["unavailable_servers"]["x"]
        assert "could not be started" in unavailable and "connect timeout (2s)" in unavailable
        assert _pids(tmp_path) and _all_ended(_pids(tmp_path))
    finally:
        _kill_left(_pids(tmp_path))


# -- what a server leaves behind ---------------------------------------------------------------------


async def test_an_unconfined_servers_daemon_ends_with_the_run(tmp_path: Path) -> None:
    """The server starts a daemon in a session of its own that ignores SIGTERM (outside the
    process group the host kills): it is ended with the server (before: it lived on), and the
    server was served."""
    try:
        run = await _run(tmp_path, _stdio(tmp_path, modes="daemon"))
        assert "value-of-a" in run.seen("x__lookup")[0]
        started = _pids(tmp_path)
        assert len(started) == 4  # the server and its daemon, at the approval and in the run
        assert _all_ended(started)
    finally:
        _kill_left(_pids(tmp_path))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_tether_run_leaves_no_server_behind(tmp_path: Path, sig: signal.Signals) -> None:
    """``tether run`` from an agent file, its unconfined server stubborn (SIGTERM, SIGHUP and the
    end of its stdin ignored) with a daemon, killed mid-call (SIGKILL: no code of the host runs;
    SIGTERM: the run ends interrupted): the server and its daemon end all the same (before: both
    lived on). The same file's run, not killed, is served."""
    (tmp_path / "steps.yaml").write_text(
        yaml.safe_dump([{"call": "x__lookup", "arguments": {"key": "hang"}}, {"final": "done"}])
    )
    entry = {k: v for k, v in _stdio(tmp_path, modes="stubborn,daemon").items() if k != "mode"}
    agent = {
        "name": "launcher-check",
        "instructions": "Use the tool.",
        "model": {"name": "scripted:steps.yaml"},
        "policy": {"tenant": "t"},
        "trace": {"dir": "traces"},
        "mcp": {"servers": [entry], "host": {"pins": "pins.db", "state": "state.db"}},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(agent))

    def tether(*argv: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "tether.cli", *argv]
        out = subprocess.PIPE
        return subprocess.Popen(command, cwd=tmp_path, stdout=out, stderr=out, text=True)

    try:
        approving = tether("mcp", "approve", "x", "--agent", str(path))
        assert approving.wait(60) == 0, approving.communicate()
        assert _all_ended(_pids(tmp_path))  # the approval's launch ended with it
        (tmp_path / "pids").unlink()
        running = tether("run", "Q", "--agent", str(path), "--json")
        deadline = time.monotonic() + 60
        while not _pids(tmp_path, ".hang") and time.monotonic() < deadline and running.poll() is None:
            time.sleep(0.05)
        assert _pids(tmp_path, ".hang"), running.communicate()
        running.send_signal(sig)
        running.communicate(timeout=60)
        assert running.returncode == (-9 if sig == signal.SIGKILL else 130)
        started = _pids(tmp_path)
        assert len(started) == 2 and _all_ended(started)
    finally:
        _kill_left(_pids(tmp_path))
    # Served as written: the same file, a call that answers.
    (tmp_path / "steps.yaml").write_text(
        yaml.safe_dump([{"call": "x__lookup", "arguments": {"key": "a"}}, {"final": "done"}])
    )
    (tmp_path / "pids").unlink()
    try:
        served = tether("run", "Q", "--agent", str(path), "--json")
        out, err = served.communicate(timeout=60)
        done = json.loads(out.strip().splitlines()[-1])
        assert served.returncode == 0 and done["stop_reason"] == "accepted", (out, err)
        assert [(c["tool"], c["status"]) for c in done["calls"]] == [("x__lookup", "ok")]
        assert _all_ended(_pids(tmp_path))
    finally:
        _kill_left(_pids(tmp_path))


# -- Streamable HTTP: a session forgotten at the start ----------------------------------------------


def _sdk() -> Any:
    spec = importlib.util.spec_from_file_location("wild25_sdk_server", HERE / "wild25_sdk_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def forgetful() -> Iterator[tuple[dict[str, str], list[tuple[str, bool]]]]:
    """URLs of two servers: ``first`` forgets its first session at once, ``every`` each one."""
    seen: list[tuple[str, bool]] = []
    module = _sdk()
    first, every = _serve(module.forgetful("first", seen)), _serve(module.forgetful("every", seen))
    try:
        yield {"first": next(first), "every": next(every)}, seen
    finally:
        for served in (first, every):
            served.close()


async def test_a_session_forgotten_during_the_start_is_begun_anew(
    tmp_path: Path, forgetful: tuple[dict[str, str], list[tuple[str, bool]]]
) -> None:
    """The listing right after ``initialize`` is answered 404 (the session unknown): a new
    session is begun and the server served (before: "could not be started: Session not found");
    a server that forgets every session fails the start, named, after one new session only."""
    urls, seen = forgetful
    web = {"transport": "http", "mode": "legacy", "effects": {"lookup": "read"}, "timeout_s": 30}
    config = write_config(tmp_path, [{"name": "x", "url": urls["first"], **web}, honest_server()])
    with anyio.fail_after(40):
        pinned, _ = await approve(config, "x")
        await approve(config, "ok")
        steps = script(("x__lookup", {"key": "a"}), ("ok__lookup", {"key": "z"}), "done")
        run = await run_question(config, "Q", steps)
    assert pinned == ["lookup"] and "value-of-a" in run.seen("x__lookup")[0]
    assert "value-of-z" in run.seen("ok__lookup")[0]
    (tmp_path / "every").mkdir()
    config = write_config(tmp_path / "every", [{"name": "x", "url": urls["every"], **web}, honest_server()])
    seen.clear()
    with anyio.fail_after(40):
        await approve(config, "ok")
        run = await run_question(config, "Q", steps)
    unavailable = run.summary()["unavailable_servers"]["x"]
    assert "could not be started" in unavailable and "Session not found" in unavailable
    assert "value-of-z" in run.seen("ok__lookup")[0]
    assert [m for m, carried in seen if m == "POST" and not carried] == ["POST", "POST"]  # two sessions
