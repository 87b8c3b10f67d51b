"""Wild servers, round twenty-one: a stdio server written by hand (``wild21_server.py``), next to
the honest stdio server (``wild4_server.py``), checked to serve.
Found:
* a server that pretty-prints its messages (``JSON.stringify(m, null, 2)``) could not even start
  (each line of its ``initialize`` answer refused alone), and one answer so written failed;
* an answer with no newline after it waited out the call's timeout, and the next answer, joined
  to it on one line, was lost too (the server quarantined, the run stopped);
* two messages on one line (a log notice and the answer) failed the call;
* an answer whose id is written as a float (``3.0``: servers whose numbers are all doubles)
  was dropped by the SDK and the call waited out its timeout; over HTTP (``wild21_web.py``),
  in a JSON body or an event, the call failed naming nine validation errors;
* an HTTP answer sent as a JSON-RPC batch (an array holding a log notice and the answer) failed
  the call the same way.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.core.stop import StopReason
from tether.mcp._framing import Framer
from tether.mcphost._runner import run_question
from tether_testing.loopback import serving

from .conftest import approve, honest_server, script, write_config
from .wild21_web import app

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent


def _server(*args: str) -> dict[str, Any]:
    return {
        "name": "x",
        "command": [sys.executable, str(HERE / "wild21_server.py"), *args],
        "mode": "legacy",
        "effects": {"lookup": "read"},
        "timeout_s": 60,
        "sandbox": "none",
    }


async def _run(tmp_path: Path, server: dict[str, Any], keys: str | list[str]) -> Any:
    config = write_config(tmp_path, [server, honest_server()])
    await approve(config, "x")
    await approve(config, "ok")
    steps = [("x__lookup", {"key": k}) for k in keys]
    with anyio.fail_after(30):  # (the call's own timeout is 60 s)
        return await run_question(config, "Q", script(*steps, ("ok__lookup", {"key": "z"}), "done"))


def _all_served(run: Any, keys: str | list[str]) -> None:
    seen = run.seen("x__lookup")
    assert len(seen) == len(keys)
    for key, text in zip(keys, seen, strict=True):
        assert f"value-of-{key}" in text and "error=" not in text, text
    assert "value-of-z" in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.parametrize("keys", [["pretty", "b"], ["unended", "b"], ["joined", "b"], ["float_id", "b"]])
async def test_a_loosely_framed_answer_is_read(tmp_path: Path, keys: list[str]) -> None:
    """Each answer as a hand-written server writes it is the call's answer, at once, and the
    server serves on (before: the call failed, or waited out its timeout and lost the next one)."""
    _all_served(await _run(tmp_path, _server(), keys), keys)


async def test_a_server_that_pretty_prints_every_message_starts_and_serves(tmp_path: Path) -> None:
    """Its ``initialize`` and listing answers, over many lines each, are read (before: it could
    not start, and the run went on without it)."""
    _all_served(await _run(tmp_path, _server("pretty"), "ab"), "ab")


@pytest.mark.parametrize("mode", ["float_id", "sse_float", "json_batch"])
async def test_an_http_answer_of_a_whole_float_id_or_in_a_batch_is_read(tmp_path: Path, mode: str) -> None:
    """``wild21_web.py`` answers the call of key ``b`` so: it is ``b``'s answer, and the server
    and the other one serve on (before: ``b`` failed, ``upstream_error``)."""
    seen: list[str] = []
    stop = threading.Event()
    try:
        with serving(app(mode, seen, stop)) as base:
            entry = {"name": "x", "url": f"{base}/mcp", "mode": "legacy", "effects": {"lookup": "read"}}
            run = await _run(tmp_path, {**entry, "timeout_s": 60}, "abc")
    finally:
        stop.set()
    _all_served(run, "abc")


def test_a_message_begun_over_lines_ends_at_its_first_closing_line_whole_or_not() -> None:
    """A lone ``{`` and lines that never make a message end at the first ``}`` or ``]`` at the
    first column, cut (refused as any bad line): never parsed again at each later closing line
    (a server's thousands of ``]`` lines each re-read megabytes), and the next message is read."""
    framer = Framer(1 << 20)
    assert framer.lines(b"{") == [] and framer.lines(b'  "a": [1, 2') == []
    assert framer.lines(b"]") == [b'{\n"a": [1, 2\n]']
    answer = b'{"jsonrpc": "2.0", "id": 1, "result": {}}'
    assert framer.lines(b"]") == [b"]"] and framer.lines(answer) == [answer]
    assert (
        framer.lines(b"{") == []
        and framer.lines(b'  "id": 2') == []
        and framer.lines(b"}") == [b'{\n"id": 2\n}']
    )
