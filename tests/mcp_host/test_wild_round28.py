"""Wild servers, round twenty-eight: hostile stdio servers launched the ordinary way
(``python server.py``), a stdio server written by hand (``wild28_server.py``), beside the honest
stdio server (``wild4_server.py``), checked to serve.

Contained already (checked here): an answer with junk before or after it on its line (the call
fails at once, named), an answer for an id never sent, 10 MB of text (named too large), a server
that answers ``initialize`` and exits 0 (could not start, its exit named), one killed by a signal
mid-call (the signal named for the person, the run stopped honestly), one that exits leaving a
child holding its stdout, one that closes its stdin and keeps its stdout (the next call fails,
named, the server set aside), one that describes its tool otherwise at each listing without
``list_changed`` (blocked as changed against its pin), and one writing 2 MB of binary garbage on
one stderr line (escaped into its log, bounded).

Found:

* a stdio answer written inside terminal colour codes (a logger colouring what it writes to
  stdout: ``ESC[32m{...}ESC[0m``) was refused with no id read (the colour's ``[`` taken for a
  bracket), and its call waited out its whole timeout. JSON holds no raw ``ESC``: a line holding
  escape sequences is now read without them;
* a command written with the home folder as a shell reads it (``python ~/srv/server.py``, as
  people write paths in Claude Desktop configs) was launched with ``~`` literal: a folder of that
  name beside the config, so the server failed to start. A part that is ``~`` or starts with
  ``~/`` is now the home folder (a ``~`` elsewhere is left as written).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.core.stop import Limits, StopReason
from tether.errors import DependencyUnavailable
from tether.mcp._serverlog import MAX_LOG_BYTES
from tether.mcp._stdio import _messages
from tether.mcphost._runner import run_question

from .conftest import approve, honest_server, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent


def _entry(*mode: str) -> dict[str, Any]:
    return {
        "name": "x",
        "command": [sys.executable, str(HERE / "wild28_server.py"), *mode],
        "mode": "legacy",
        "effects": {"lookup": "read"},
        "timeout_s": 60,
        "sandbox": "none",
    }


def _value(said: str, key: str) -> bool:
    return said.startswith('<untrusted_data source="x"') and f"\nvalue-of-{key}\n</untrusted_data>" in said


def _failed(said: str, why: str) -> bool:
    return said.startswith('<untrusted_data source="x"') and 'error="upstream_error"' in said and why in said


async def _run(tmp_path: Path, entry: dict[str, Any], keys: list[str], approved: bool = True) -> Any:
    """The run calling ``x__lookup`` with each key, then ``ok__lookup``; no call waits out its
    timeout (60 s)."""
    config = write_config(tmp_path, [entry, honest_server()])
    if approved:
        await approve(config, "x")
    await approve(config, "ok")
    steps = [("x__lookup", {"key": k}) for k in keys]
    with anyio.fail_after(50):
        return await run_question(
            config, "Q", script(*steps, ("ok__lookup", {"key": "z"}), "done"), limits=Limits(max_steps=30)
        )


async def test_an_answer_in_terminal_colours_is_read_and_junk_beside_one_fails_at_once(
    tmp_path: Path,
) -> None:
    """Colour codes around an answer, or inside it, are no part of it: it is read (before: the
    call waited out its timeout); text beside an answer on its line fails that call at once,
    named; an answer for an id never sent is dropped and the call gets its own; 10 MB is named
    too large; the server serves the next call, and the run goes on."""
    keys = ["ansi", "ansiall", "junk", "junkafter", "stray", "huge", "plain"]
    run = await _run(tmp_path, _entry(), keys)
    said = run.seen("x__lookup")
    assert "value-of-z" in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED
    assert [_value(said[i], k) for i, k in enumerate(keys) if k not in ("junk", "junkafter", "huge")] == [
        True
    ] * 4
    assert _failed(said[2], "not valid JSON-RPC") and _failed(said[3], "not valid JSON-RPC")
    assert _failed(said[5], "larger than the host accepts") and "vvvvvvvv" not in said[5]
    assert not run.summary()["unavailable_servers"]


def test_only_escape_sequences_leave_a_line() -> None:
    """A line of JSON is read as written; escape sequences (colours, a title, a charset) around
    it are cut, and an escaped ``ESC`` in a string is kept."""
    line = b'{"jsonrpc": "2.0", "id": 1, "result": {"text": "[32m \\u001b[0m"}}'
    coloured = b"\x1b]0;srv\x07\x1b(B\x1b[1;32m" + line + b"\x1b[0m"
    for each in (line, coloured):
        (read,) = _messages(each)
        assert read.message.id == 1 and read.message.result == {"text": "[32m \x1b[0m"}


async def test_a_server_exiting_after_initialize_is_named_and_the_run_goes_on(tmp_path: Path) -> None:
    """``quit`` answers ``initialize`` and exits 0: it could not be started, its exit named; the
    run goes on with the other server."""
    (tmp_path / "a").mkdir()
    with pytest.raises(DependencyUnavailable, match="exited with code 0"):
        await approve(write_config(tmp_path / "a", [_entry("quit")]), "x")
    run = await _run(tmp_path, _entry("quit"), ["a"], approved=False)
    assert "its server 'x' is unavailable" in run.seen("x__lookup")[0]
    assert "exited with code 0" in run.summary()["unavailable_servers"]["x"]


@pytest.mark.parametrize(("mode", "why"), [("signal", "signal 9"), ("orphan", "code 1")])
async def test_a_server_ending_mid_call_is_named_gone_with_how(tmp_path: Path, mode: str, why: str) -> None:
    """Killed by a signal, or exiting while a child it started holds its stdout: the call fails at
    once (the child's pipe never waited on), the server set aside with how its process ended, and
    the other server serves."""
    entry = _entry(*(["orphan"] if mode == "orphan" else []))
    run = await _run(tmp_path, entry, ["signal" if mode == "signal" else "a"])
    assert 'error="dependency_unavailable"' in run.seen("x__lookup")[0]
    assert why in run.summary()["unavailable_servers"]["x"]


async def test_a_server_closing_its_stdin_is_set_aside_and_the_run_goes_on(tmp_path: Path) -> None:
    """``deaf`` closes its stdin at a call (it answers it) and keeps its stdout open: the next call
    fails at once, named, the server set aside, and the other server serves."""
    run = await _run(tmp_path, _entry("deaf"), ["a", "b"])
    said = run.seen("x__lookup")
    assert _value(said[0], "a") and 'error="dependency_unavailable"' in said[1]
    assert run.result.stop_reason is StopReason.ACCEPTED and "x" in run.summary()["unavailable_servers"]


async def test_a_tool_described_otherwise_at_each_listing_is_blocked_by_its_pin(tmp_path: Path) -> None:
    """``shifty`` describes ``lookup`` anew at each listing, with no ``list_changed``: the run's
    listing differs from the approved one, and the tool is blocked as changed, never called."""
    run = await _run(tmp_path, _entry("shifty"), ["a"])
    assert "unknown tool 'x__lookup'" in run.seen("x__lookup")[0]
    (blocked,) = run.summary()["blocked"]
    assert blocked["status"] == "changed" and blocked["tool"] == "x__lookup"


async def test_binary_garbage_on_stderr_is_logged_escaped_and_bounded(tmp_path: Path) -> None:
    """``noisy`` writes 2 MB of every byte but newline on one stderr line, then serves: its log
    holds it escaped (no control byte but tabs and newlines), within the log's bound."""
    run = await _run(tmp_path, _entry("noisy"), ["a"])
    assert _value(run.seen("x__lookup")[0], "a")
    (log,) = tmp_path.rglob("x.stderr.log")
    data = log.read_bytes()
    assert 0 < len(data) <= MAX_LOG_BYTES + 65536
    assert not {b for b in data if b < 32 and b not in (9, 10)}


async def test_a_command_under_the_home_folder_written_with_a_tilde_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python ~/srv/wild28_server.py`` (as people write paths in Claude Desktop configs) runs
    the server in the home folder, as a shell would read it (before: ``~`` was a folder of that
    name beside the config, and the server failed to start); a ``~`` inside a part is left as
    written."""
    home = tmp_path / "home"
    (home / "srv").mkdir(parents=True)
    (home / "srv" / "wild28_server.py").write_bytes((HERE / "wild28_server.py").read_bytes())
    monkeypatch.setenv("HOME", str(home))
    entry = {**_entry(), "command": f"{sys.executable} ~/srv/wild28_server.py a~b"}
    (tmp_path / "run").mkdir()
    run = await _run(tmp_path / "run", entry, ["a"])
    assert _value(run.seen("x__lookup")[0], "a")
    (launched,) = [s["command"] for s in run.summary()["servers"] if s["server"] == "x"]
    assert launched.endswith(f"{home}/srv/wild28_server.py 'a~b'")
