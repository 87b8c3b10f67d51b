"""An operator's rolling upgrade, thirteenth round: from the release before stop 46 (``5928b68``)
to this tree and back, through the CLI of both releases, on what stop 46 added: the stop reason
``interrupted`` (SIGINT/SIGTERM to ``tether run`` or ``tether resume``: exit 130, checkpoint
``stopped``), the trace file's lock (``flock``) and the events written back into a run's file from
the PostgreSQL trace index.

What did not hold, fixed here and pinned below:

- a trace folder on a file system that takes no locks (NFS mounted without its lock service:
  ``flock`` fails with ENOLCK; some FUSE and network mounts: EOPNOTSUPP, ENOSYS) was written by
  every release before the lock; this release's sink raised at its first write, so every run of
  an upgraded worker or ``tether run`` there failed. Such a file is now written unlocked (the
  operator told once, in the log), as before.
- a run submitted for an agent file by a process that had read another agent file whose tools
  module has the same name (``tools``, in another folder: an in-process ``tether run``, a
  console, a test harness playing both releases) was digested with that other folder's module
  (the one this process had imported), bound to a version no worker serves, and stayed queued for
  good (``runs list``: ``queued``, no executor). An agent file's modules are now found on its own
  ``python_path`` first, as a fresh worker finds them: the digest is the worker's.

Played and held (``UPGRADE_FROM``, default ``5928b68``; comma-separated commits of this
repository): a durable run paused on one release whose worker is killed (-9) inside a trace
write is approved on the other release's CLI and finished by the other release's worker, either
way: its effect once, its file readable by both releases' ``tether trace stats``, every event
once and in order (upgrading: the cut event written back from the index; rolling back: the older
release removes the cut line and does not write it back, see the limits); ``tether runs show`` of
either release reads it. A run ``tether run`` of this release stopped ``interrupted`` (SIGINT
mid-tool) is read (``trace stats``), resumed, approved and finished by the older release's CLI,
and back; a factory (``module:function``) run the older release paused, resumed by this
release's ``tether resume`` and interrupted inside its approved effect, is resolved and
finished by the older release's CLI: the effect once.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_rolling_upgrade import _write_version
from test_rolling_upgrade_round6 import NEW_SRC, Mixed, old_tree

from tether.cli import main
from tether.trace._events import EventKind, TraceEvent
from tether.trace._tracer import JsonlSink, read_trace

OLD_COMMITS = [c for c in os.environ.get("UPGRADE_FROM", "5928b68").split(",") if c.strip()]
ROOT = NEW_SRC.parent


@pytest.fixture(scope="module", params=OLD_COMMITS)
def old_src(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``src`` tree of an older commit of this repository (skipped where it is not at hand)."""
    return old_tree(str(request.param), tmp_path_factory)


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _cli(src: Path, cwd: Path, *argv: str, code: int = 0) -> dict[str, Any]:
    """One release's CLI, as a person on its machine types it; its JSON line."""
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", *argv, "--json"],
        env=_env(src), capture_output=True, cwd=cwd, timeout=120,
    )  # fmt: skip
    lines = done.stdout.decode().strip().splitlines()
    assert lines, (argv, done.stderr.decode()[-2000:])
    out = json.loads(lines[-1])
    assert done.returncode == code, (argv, done.returncode, out, done.stderr.decode()[-2000:])
    return dict(out)


def _stats_on_both(old: Path, cwd: Path, trace: Path) -> set[str]:
    """The stop reason each release's ``tether trace stats`` reads in ``trace``."""
    return {str(_cli(src, cwd, "trace", "stats", str(trace))["stop_reason"]) for src in (old, NEW_SRC)}


def _seqs(trace: Path) -> list[int]:
    return [int(e["seq"]) for e in read_trace(trace)]


# -- a trace folder on a file system that takes no locks ------------------------------------------


def _no_locks(fd: int, operation: int) -> None:
    raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))


def test_a_trace_on_a_file_system_without_locks_is_written_unlocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """``flock`` fails (ENOLCK, as on NFS without its lock service): the sink still ends a cut
    line and writes every event, and ``tether run`` on an agent file there finishes its run (it
    failed at its first trace write); a lock error that is no such refusal is still raised."""
    trace = tmp_path / "r1.jsonl"
    whole = json.dumps({"run_id": "r1", "seq": 1, "ts": "t", "kind": "run_started"})
    trace.write_text(whole + "\n" + whole[:20])  # a writer killed inside its second line
    monkeypatch.setattr(fcntl, "flock", _no_locks)
    sink = JsonlSink(trace, flush="each_event")
    sink.write(TraceEvent("r1", 2, "t", EventKind.STOP, {"reason": "accepted"}))
    sink.close()
    assert _seqs(trace) == [1, 2]
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    agent = str(tmp_path / "agent" / "agent.yaml")
    capsys.readouterr()
    assert main(["run", "--agent", agent, "--db", str(tmp_path / "approvals.db"), "note it", "--json"]) == 5
    paused = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert paused["stop_reason"] == "approval_required", paused
    assert _seqs(Path(paused["trace"]))[-1] == len(_seqs(Path(paused["trace"])))

    def refused(fd: int, operation: int) -> None:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    monkeypatch.setattr(fcntl, "flock", refused)
    with pytest.raises(OSError):
        JsonlSink(trace, flush="each_event").write(TraceEvent("r1", 3, "t", EventKind.STOP, {"reason": "x"}))


# -- a submit in a process that read another agent file ------------------------------------------

_DIGEST = "import sys\nfrom tether.agents._file import agent_digest, load_agent_file\n" + (
    "print(agent_digest(load_agent_file(sys.argv[1])))"
)


def test_an_agent_file_digested_after_another_folders_tools_module_is_bound_to_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two agent files, each with a ``tools`` module in its own folder. A process that imported
    B's (an in-process ``tether run``, a console) digests A as a fresh worker does: from A's
    folder. It digested B's module (already imported) instead, so a run it submitted for A was
    bound to a version no worker serves and stayed queued for good (played: the second run of a
    rolling upgrade submitted in such a process)."""
    from tether.agents._file import agent_digest, load_agent_file, snapshot

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "tools", raising=False)
    for name, version in (("a", "A"), ("b", "B")):
        (tmp_path / name).mkdir()
        _write_version(tmp_path / name, version)
    a, b = tmp_path / "a" / "agent.yaml", tmp_path / "b" / "agent.yaml"
    fresh = (
        subprocess.run(
            [sys.executable, "-c", _DIGEST, str(a)], env=_env(NEW_SRC), capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    try:
        snapshot(load_agent_file(b))  # B's tools imported in this process
        assert sys.modules["tools"].__file__ == str((tmp_path / "b" / "tools.py").resolve())
        assert agent_digest(load_agent_file(a)) == fresh
        assert agent_digest(load_agent_file(b)) != fresh
    finally:
        sys.modules.pop("tools", None)


# -- durable runs killed inside a trace write, on either release -----------------------------------


def _killed_mid_write(op: Mixed, name: str, run_id: str) -> dict[str, Any]:
    """Kill (-9) the worker ``name`` as it was inside a write of ``run_id``'s trace: the file's
    last line cut in half (the PostgreSQL index holds the event: its thread is waited for); that
    event."""
    from tether.trace._pg_index import PgTraceIndex

    trace = op.agent.parent / "traces" / f"{run_id}.jsonl"
    index = PgTraceIndex(op.url)
    try:
        op.until("the index to hold the file", lambda: len(index.events(run_id)) == len(_seqs(trace)))
    finally:
        index.shutdown()
    assert op.signal(name, signal.SIGKILL) == -signal.SIGKILL
    written = trace.read_bytes()
    last = written.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    trace.write_bytes(written[: len(written) - len(last) // 2 - 1])
    return dict(json.loads(last))


def test_runs_paused_on_one_release_whose_worker_is_killed_mid_write_finish_once_on_the_other(
    pg_url: str, tmp_path: Path, capsys: Any, old_src: Path
) -> None:
    """Upgrading: an older worker pauses r1 and is killed (-9) inside a trace write; this
    release's CLI approves it and this release's worker finishes it. Rolling back: this
    release's worker pauses r2 and is killed the same way; the older CLI approves it and an older
    worker finishes it. Each effect once; both releases' ``runs show`` and ``trace stats`` read
    both runs; every event of a file once and in order; r1's cut event is back in its file (this
    release writes it back from the index; the older one does not: r2's file lacks it)."""
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Mixed(pg_url, tmp_path, capsys, old_src)
    _cli(old_src, tmp_path, "db", "init", "--db", pg_url)
    try:
        op.start_on("o1", old_src)
        r1 = op.old_submit()
        op.until("r1 to pause", lambda: op.status(r1) == ["paused"])
        op.cli("db", "init", "--db", pg_url)  # the upgrade: this release's init, then its worker
        op.start_on("n1", NEW_SRC)
        cut1 = _killed_mid_write(op, "o1", r1)
        op.approve(r1)
        op.until("r1 to finish", lambda: op.status(r1) == ["finished"])
        r2 = op.submit()
        op.until("r2 to pause", lambda: op.status(r2) == ["paused"])
        op.start_on("o2", old_src)  # the rollback: an older worker beside, this release's killed
        cut2 = _killed_mid_write(op, "n1", r2)
        op.old_approve(r2)
        op.until("r2 to finish", lambda: op.status(r2) == ["finished"])
        assert Counter(r[0] for r in op.lines("effects.log")) == {r1: 1, r2: 1}
        for run_id, cut in ((r1, cut1), (r2, cut2)):
            for src in (old_src, NEW_SRC):
                shown = _cli(src, tmp_path, "runs", "--db", pg_url, "show", run_id)
                assert (shown["status"], shown["stop_reason"], shown["problems"]) == (
                    "finished",
                    "accepted",
                    [],
                )
            trace = op.agent.parent / "traces" / f"{run_id}.jsonl"
            assert _stats_on_both(old_src, tmp_path, trace) == {"accepted"}
            seqs = _seqs(trace)
            assert seqs == sorted(set(seqs)) and seqs[-1] > cut["seq"], seqs
        events = read_trace(op.agent.parent / "traces" / f"{r1}.jsonl")
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1)) and events[
            cut1["seq"] - 1
        ] == cut1
    finally:
        op.stop()


# -- a run stopped 'interrupted', read and continued by the older release ----------------------------


def _interrupted(cmd: list[str], src: Path, cwd: Path, started: Path) -> dict[str, Any]:
    """Run ``cmd`` on ``src`` until ``started`` grows, then SIGINT it: its JSON line (exit 130)."""
    before = started.read_text() if started.exists() else ""
    proc = subprocess.Popen(cmd, env=_env(src), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while (started.read_text() if started.exists() else "") == before and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out.decode()[-2000:], err.decode()[-2000:])
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


def test_a_run_this_release_interrupted_is_read_and_finished_by_the_older_cli_and_back(
    tmp_path: Path, old_src: Path
) -> None:
    """This release's ``tether run`` is stopped by SIGINT inside a read (exit 130,
    ``interrupted``); the older release's ``trace stats`` reads the stop, its ``tether resume``
    continues the run to its approval, its CLI approves; this release's ``tether resume``
    finishes it. The effect once, the file numbered once, both releases read ``accepted``."""
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    agent, db = tmp_path / "agent" / "agent.yaml", str(tmp_path / "approvals.db")
    (tmp_path / "agent" / "gate-A").write_text("")
    cmd = [sys.executable, "-m", "tether.cli", "run", "--agent", str(agent), "--db", db, "note it", "--json"]
    stopped = _interrupted(cmd, NEW_SRC, tmp_path, tmp_path / "agent" / "reads.log")
    (tmp_path / "agent" / "gate-A").unlink()
    run_id, trace = stopped["run_id"], Path(stopped["trace"])
    assert (stopped["stop_reason"], stopped["exit"]) == ("interrupted", 130), stopped
    assert _stats_on_both(old_src, tmp_path, trace) == {"interrupted"}
    paused = _cli(old_src, tmp_path, "resume", run_id, "--db", db, code=5)
    assert paused["stop_reason"] == "approval_required", paused
    [proposal] = _cli(old_src, tmp_path, "approvals", "list", "--db", db)["proposals"]
    _cli(old_src, tmp_path, "approvals", "approve", proposal["id"], "--db", db, "--reviewer", "rita")
    done = _cli(NEW_SRC, tmp_path, "resume", run_id, "--db", db)
    assert (done["stop_reason"], done["problems"]) == ("accepted", []), done
    effects = (tmp_path / "agent" / "effects.log").read_text().splitlines()
    assert [e.split("\t")[0] for e in effects] == [run_id]
    assert _seqs(trace) == list(range(1, len(_seqs(trace)) + 1))
    assert _stats_on_both(old_src, tmp_path, trace) == {"accepted"}


FACTORY = '''
from pathlib import Path
from typing import Annotated

import anyio
from pydantic import Field

from tether.core.messages import AssistantMessage, ToolCall, ToolMessage
from tether.host import Host
from tether.policy import Approvals, Policy, SqliteApprovalStore, TrustedContext
from tether.runs._values import Agent
from tether.testing import FunctionModel
from tether.tools import Effect, ToolContext, tool

FOLDER = Path(__file__).parent


@tool(effect=Effect.WRITE)
async def send(text: Annotated[str, Field(description="The message.")], ctx: ToolContext) -> dict:
    """Send a message (a side effect a person approves); held while the gate file exists."""
    with open(FOLDER / "effects.log", "a") as f:
        f.write(ctx.run_id + "\\t" + ctx.idempotency_key + "\\n")
    while (FOLDER / "gate").exists():
        await anyio.sleep(0.05)
    return {"sent": text}


def _model(request):
    if [m for m in request.messages if isinstance(m, ToolMessage)]:
        return AssistantMessage(content="sent")
    return AssistantMessage(tool_calls=(ToolCall("c1", "send", '{"text": "hi"}'),))


def build(db):
    host = Host(policy=Policy(), approvals=Approvals(SqliteApprovalStore(Path(db)), app="factory_app:build"),
                trace_dir=FOLDER / "traces")
    host.add_tools(send)
    return host, Agent(instructions="Send hi.", model=FunctionModel(_model, name="stand-in"))


async def _start(db):
    host, agent = build(db)
    async with host:
        result = await host.run(agent, "send hi", context=TrustedContext(tenant="acme", user="ana"))
    print(result.run_id, result.stop_reason)


if __name__ == "__main__":
    import sys
    anyio.run(_start, sys.argv[1])
'''


def test_a_factory_run_interrupted_inside_its_effect_is_resolved_and_finished_by_the_older_cli(
    tmp_path: Path, old_src: Path
) -> None:
    """A ``module:function`` run paused on the older release; approved there; this release's
    ``tether resume`` is stopped by SIGINT inside the approved effect (exit 130). The older
    release's ``tether resume`` pauses it for a person (outcome unknown, never run again), its
    ``approvals resolve`` records that it happened, its resume finishes the run: the effect once."""
    (tmp_path / "factory_app.py").write_text(FACTORY)
    db = str(tmp_path / "approvals.db")
    started = subprocess.run(
        [sys.executable, str(tmp_path / "factory_app.py"), db],
        env=_env(old_src),
        capture_output=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    run_id, stop = started.stdout.decode().split()[-2:]
    assert stop == "approval_required"
    # The CLIs import factory_app from their working folder (python -m puts it first on the path).
    [proposal] = _cli(old_src, tmp_path, "approvals", "list", "--db", db)["proposals"]
    _cli(old_src, tmp_path, "approvals", "approve", proposal["id"], "--db", db, "--reviewer", "rita")
    (tmp_path / "gate").write_text("")
    cmd = [sys.executable, "-m", "tether.cli", "resume", run_id, "--db", db, "--json"]
    stopped = _interrupted(cmd, NEW_SRC, tmp_path, tmp_path / "effects.log")
    (tmp_path / "gate").unlink()
    assert stopped["stop_reason"] == "interrupted", stopped
    [(_, key)] = [line.split("\t") for line in (tmp_path / "effects.log").read_text().splitlines()]
    unknown = _cli(old_src, tmp_path, "resume", run_id, "--db", db, code=5)
    assert key in unknown["detail"] and "outcome" in unknown["detail"], unknown
    resolve = ("approvals", "resolve", key, "--happened", "yes", "--db", db, "--reviewer", "rita")
    _cli(old_src, tmp_path, *resolve)
    done = _cli(old_src, tmp_path, "resume", run_id, "--db", db)
    assert done["stop_reason"] == "accepted", done
    assert len((tmp_path / "effects.log").read_text().splitlines()) == 1
    trace = tmp_path / "traces" / f"{run_id}.jsonl"
    assert _seqs(trace) == list(range(1, len(_seqs(trace)) + 1))
    assert _stats_on_both(old_src, tmp_path, trace) == {"accepted"}
