"""Wild servers, round nineteen: a stdio server written by hand (``wild19_server.py``) that dies
in the middle of a call, next to the honest one (``wild4_server.py``), checked to serve.

Found:

* a server dying mid-call was reported as ``MCPError: Connection closed`` alone: the trace's
  ``lost`` row and the quarantine's detail never named its exit status (the loss was recorded
  before the process was reaped), and a server that closes its output before writing its last
  words (a process tearing down) lost those lines too; with ``restart: on_failure`` nothing but
  the trace row named the loss at all. Now a stdio server whose connection ends under a call is
  given a moment (``EXIT_WAIT_S``) to exit and its stderr read to the end: the exit status
  (``exit``, a signal named as such, also when the sandbox launcher reports it as 128 plus its
  number) and the last stderr lines go to the trace and to the person's log (and to the
  quarantine's detail); the model still reads the short cause only;
* the published SQLite server (``mcp-server-sqlite --db-path <file>``, its README's launch), confined
  without ``sandbox_write``, made its database in its private /tmp: every write succeeded and was
  lost when it exited, silently (the host named only paths that existed). Now a path its command
  names whose folder exists on the host, not shown to the server, is named to the person (a
  warning with the run) and traced (the launch's ``not_shown``), as an existing one is.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tether.core.stop import StopReason
from tether.mcp._failures import exit_status
from tether.mcp._hosting import mcp_sources
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace

from .conftest import approve, honest_server, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
LAST_WORDS = "MemoryError: shard 7"


def _dying(death: str, **extra: Any) -> dict[str, Any]:
    """``wild19_server.py``, its ``crash`` tool dying as ``death`` says."""
    return {
        "name": "x",
        "command": [sys.executable, str(HERE / "wild19_server.py")],
        "mode": "legacy",
        "effects": {"lookup": "read", "crash": "read"},
        "timeout_s": 60,
        "env": {"W19_DEATH": death},
        **extra,
    }


async def _crash_then_lookups(tmp_path: Path, server: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``x__crash``, then a lookup on each server (on ``x`` only when it restarts): the run and
    the trace's ``lost`` row."""
    config = write_config(tmp_path, [server, honest_server()])
    await approve(config, "x")
    await approve(config, "ok")
    again = [("x__lookup", {"key": "b"})] if server.get("restart") == "on_failure" else []
    steps = script(("x__crash", {"key": "a"}), ("ok__lookup", {"key": "c"}), *again, "done")
    run = await run_question(config, "Q", steps)
    assert run.result.trace_path is not None
    events = read_trace(run.result.trace_path)
    (lost,) = [e for e in events if e["kind"] == "mcp_connection" and e["action"] == "lost"]
    assert "value-of-c" in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED
    return run, lost


async def test_a_server_exiting_mid_call_is_reported_with_its_exit_status_and_last_stderr_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run, lost = await _crash_then_lookups(tmp_path, _dying("exit", sandbox="none"))
    assert lost["exit"] == "code 3" and lost["stderr_tail"][-1] == LAST_WORDS
    detail = run.summary()["unavailable_servers"]["x"]
    assert "its process exited with code 3" in detail and LAST_WORDS in detail
    logged = [r.getMessage() for r in caplog.records if "connection lost" in r.getMessage()]
    assert logged and "code 3" in logged[0] and LAST_WORDS in logged[0]
    # The model reads the short cause: neither the exit nor the server's own words.
    (shown,) = run.seen("x__crash")
    assert "Connection closed" in shown and LAST_WORDS not in shown and "code 3" not in shown


async def test_a_server_closing_its_output_before_its_last_words_is_waited_for_and_restarted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Confined as by default, restarted on failure: the words it wrote after its output closed
    and its exit status are on record, and the next call is served by a new process."""
    run, lost = await _crash_then_lookups(tmp_path, _dying("late", restart="on_failure"))
    assert lost["exit"] == "code 4" and lost["stderr_tail"][-1] == "fatal: giving up after shard 7"
    assert "value-of-b" in run.seen("x__lookup")[-1]
    logged = [r.getMessage() for r in caplog.records if "connection lost" in r.getMessage()]
    assert logged and "exited with code 4" in logged[0] and "giving up" in logged[0]


@pytest.mark.parametrize("sandbox", ["none", "auto"])
async def test_a_server_killed_mid_call_is_named_killed_by_its_signal(tmp_path: Path, sandbox: str) -> None:
    run, lost = await _crash_then_lookups(tmp_path, _dying("signal", sandbox=sandbox, restart="on_failure"))
    (source,) = [s for s in mcp_sources(run.host) if s.name == "x"]
    plan = source.sandbox_plan  # (auto: unconfined where no launcher works)
    confined = plan is not None and plan.confinement is not None
    assert lost["exit"] == (
        "code 137 (signal 9, as its sandbox launcher reports it)" if confined else "signal 9"
    )
    assert lost["stderr_tail"][-1] == LAST_WORDS and "value-of-b" in run.seen("x__lookup")[-1]


def test_exit_statuses_are_named() -> None:
    assert exit_status(None) is None and exit_status(0) == "code 0" and exit_status(-15) == "signal 15"
    assert exit_status(137) == "code 137"  # unconfined: the server's own status
    assert exit_status(137, confined=True).startswith("code 137 (signal 9")  # type: ignore[union-attr]
    assert exit_status(255, confined=True) == "code 255"


# -- a file its command names, in a folder the sandbox does not show -------------------------------
# Found with the published SQLite server (``mcp-server-sqlite --db-path <file>``, as its README
# says): confined without ``sandbox_write``, it made the database in its private /tmp and every
# write succeeded, lost when it exited; the host said nothing, as the file did not exist yet.


@pytest.mark.parametrize("declared", [False, True])
async def test_a_file_to_be_made_in_a_folder_not_shown_is_named_to_the_person(
    tmp_path: Path, declared: bool
) -> None:
    store = tmp_path / "data"
    store.mkdir()
    db = store / "notes.db"  # (made by the server: not there yet)
    server = _dying("exit", name="x", restart="on_failure")
    server["command"] = [*server["command"], "--db-path", str(db)]
    if declared:
        server["sandbox_write"] = [str(store)]
    config = write_config(tmp_path, [server])
    await approve(config, "x")
    run = await run_question(config, "Q", script(("x__lookup", {"key": "b"}), "done"))
    assert "value-of-b" in run.seen("x__lookup")[-1]
    (source,) = mcp_sources(run.host)
    if source.sandbox_plan is None or source.sandbox_plan.confinement is None:
        pytest.skip("no sandbox launcher works here")
    named = [w for w in source.warnings if str(db) in w]
    assert run.result.trace_path is not None
    events = read_trace(run.result.trace_path)
    (confined,) = [e for e in events if e["kind"] == "mcp_sandbox" and e["action"] == "confined"]
    if declared:
        assert not named and "not_shown" not in confined
    else:
        assert named and "sandbox_write" in named[0] and "lost when it exits" in named[0]
        assert confined["not_shown"] == [str(db)]


def test_a_missing_name_at_the_root_is_an_argument_not_a_file(tmp_path: Path) -> None:
    """``--path /mcp`` (an endpoint) is no file to make: only a missing path in a deeper folder
    that exists is named (``_unshown``)."""
    from tether.mcp._sandbox import _unshown

    class _Launch:
        def translate(self, path: Path) -> None:
            return None

    made = tmp_path / "notes.db"
    found = _unshown(["--path", "/mcp-endpoint-w19", f"--db={made}", "/no-such-w19/x.db"], _Launch(), [])  # type: ignore[arg-type]
    assert found == (str(made),)
