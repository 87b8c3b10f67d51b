"""X1: real servers over stdio (subprocess) and Streamable HTTP (127.0.0.1), in both protocol eras."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tether.core.stop import StopReason
from tether.mcp._elicitation import Answer, ScriptedResponder
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace

from .conftest import approve, script, stdio_server, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1")]

EFFECTS = {"lookup": "read", "ask_colour": "read"}


@pytest.mark.slow  # a subprocess per run
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_server_answers_and_elicits_in_both_eras(
    tmp_path: Path, approved_pins: Path, mode: str
) -> None:
    config = write_config(
        tmp_path,
        [
            stdio_server(
                "h", mode=mode, tools=["lookup", "ask_colour"], effects=EFFECTS, elicitation={"enabled": True}
            )
        ],
    )
    await approve(config, "h")
    person = ScriptedResponder([Answer("accept", {"colour": "blue"})])
    run = await run_question(
        config,
        "What is alpha?",
        script(("h__lookup", {"key": "alpha"}), ("h__ask_colour", {})),
        responder=person,
    )
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert run.offered() == ["h__ask_colour", "h__lookup"]  # allowlist from the config, sorted
    assert "value-of-alpha" in run.seen("h__lookup")[0]
    assert "action=accept content={'colour': 'blue'}" in run.seen("h__ask_colour")[0]
    # The question was shown attributed to the server and the tool that asked.
    assert person.shown[0].server == "h" and person.shown[0].tool == "h__ask_colour"
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    launch = next(e for e in trace if e["kind"] == "server_launch")
    assert launch["command"].endswith("hostile_server.py") and launch["transport"] == "stdio"
    # Recorded before the launch (its time precedes the run's first event's).
    assert launch["state"] == "launching" and launch["at"] < trace[0]["ts"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_server_answers_and_confirms_destructive_calls_in_both_eras(
    tmp_path: Path, http_url: str, mode: str
) -> None:
    server = {
        "name": "web",
        "transport": "http",
        "url": http_url,
        "mode": mode,
        "tools": ["lookup", "delete_record"],
        "effects": {
            "lookup": "read",
            "delete_record": "read",
        },  # the test's host auto-runs it; the server confirms
        "elicitation": {"enabled": True},
    }
    config = write_config(tmp_path, [server])
    await approve(config, "web")
    person = ScriptedResponder([Answer("decline"), Answer("accept", {"confirm": True})])
    run = await run_question(
        config,
        "Delete r1",
        script(
            ("web__lookup", {"key": "r1"}),
            ("web__delete_record", {"record_id": "r1"}),
            ("web__delete_record", {"record_id": "r1"}),
        ),
        responder=person,
    )
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert "value-of-r1" in run.seen("web__lookup")[0]
    first, second = run.seen("web__delete_record")
    assert "record r1 kept: not confirmed" in first  # declined: nothing deleted
    assert "record r1 deleted" in second
    assert person.shown[0].message == "Delete record r1? This cannot be undone."


def _live_in_group(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that are not zombies (Linux /proc)."""
    from pathlib import Path

    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


async def test_stopping_a_stdio_server_does_not_wait_on_a_grandchild_holding_its_output() -> None:
    import gc
    import os
    import signal
    import time
    import warnings

    import anyio

    from tether.mcp._stdio import spawn, stop

    # The server exits at once when its stdin closes; the child it left behind keeps stdout open.
    script = "sleep 30 & read line; exit 0"
    process = await spawn(["/bin/sh", "-c", script], env={"PATH": os.environ["PATH"]}, cwd=None, stderr=None)
    try:
        gc.collect()  # what earlier tests left for the collector warns now, not inside the check
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            started = time.monotonic()
            await stop(process)
            took = time.monotonic() - started
            gc.collect()
        assert process.returncode == 0  # it ended by itself, as asked (stdin closed)
        assert took < 1.5  # its pipe's end was not awaited (the grandchild lives 30 s)
        leaks = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
        assert not [m for m in leaks if "pipe" in m.lower() or "subprocess" in m or str(process.pid) in m]
        assert process.stdout is not None
        with anyio.fail_after(1), pytest.raises(anyio.ClosedResourceError):
            await process.stdout.receive()  # its pipes are closed on the host's side
        # The child it left in its process group did not outlive it.
        deadline = time.monotonic() + 5
        while _live_in_group(process.pid) and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert _live_in_group(process.pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await anyio.sleep(0)
