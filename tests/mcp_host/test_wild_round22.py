"""Wild servers, round twenty-two: a Streamable HTTP server written by hand (``wild22_web.py``) and
a stdio one (``wild22_server.py``), each next to the honest stdio server (``wild4_server.py``),
checked to serve.

Found:

* a session whose server implements no ``ping`` (answered ``-32601``, as hand-written servers
  answer any method they lack) was taken for gone when a call's event stream ended without its
  answer (round twenty's check asks the session a ``ping``): the server was quarantined and the
  run stopped. Now an answer that it serves no such method or params (``REFUSED_AS_ASKED``) is an
  answer: the session is there, the call alone fails;
* a server answering each JSON-RPC error at the HTTP status its code maps to, as the 2026-07-28
  revision has servers do (``-32601`` at 404, ``-32602`` at 400), in its sessions too: a call it
  refused for its params (400) had its session pinged, the ping answered 404, and the session was
  taken for gone (started again, the call sent again, the server lost); a call answered 404 was
  the session gone at once. Now an error that names the request and says the server serves no
  such method or params is the request's own answer, the session kept (a session the server no
  longer knows is still gone: its words name no request, or say something else);
* a server whose JSON bodies start with a UTF-8 byte order mark (.NET writers given
  ``Encoding.UTF8``) could not even start over HTTP (the SDK refused each body), as on stdio
  before round eleven;
* an HTTP error naming no request (``"id": null``, JSON-RPC's answer to a request whose id a
  server could not read), at HTTP 200, was named a forged answer; it is the request's error, as
  the SDK reads one at an error status;
* a stdio server answering each notification it reads with an error naming no request (servers
  that take a missing id for ``null``) could not start: its error for ``notifications/initialized``
  was given to the ``tools/list`` written just after it (round twenty's reading of such an error
  while one request waits). Now such an error goes to the one waiting request only when every
  notification (or answer) the host wrote before it is known to be read (a later request answered);
* a stdio answer past the host's limit whose result comes before its id (``{"jsonrpc", "result",
  "id"}``, as hand-written servers order it), its result holding rows with ids of their own, had
  its refusal sent to the first row's id: the call waited out its timeout. Now the answer's own id
  is read by depth in its first bytes, or where it closes the message in its last.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.core.stop import StopReason
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace
from tether_testing.loopback import serving

from .conftest import approve, honest_server, script, write_config
from .wild22_web import app

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
VALUE = "value-of-{}\n</untrusted_data>"


@contextmanager
def _web(mode: str) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """``wild22_web.py`` in ``mode`` on 127.0.0.1: its config entry, and the methods it was sent."""
    seen: list[str] = []
    stop = threading.Event()
    try:
        with serving(app(mode, seen, stop)) as base:
            entry = {"name": "x", "url": f"{base}/mcp", "mode": "legacy", "effects": {"lookup": "read"}}
            yield {**entry, "timeout_s": 60}, seen
            stop.set()
    finally:
        stop.set()


def _stdio(*args: str) -> dict[str, Any]:
    return {
        "name": "x",
        "command": [sys.executable, str(HERE / "wild22_server.py"), *args],
        "mode": "legacy",
        "effects": {"lookup": "read"},
        "timeout_s": 60,
        "sandbox": "none",
    }


async def _run(tmp_path: Path, entry: dict[str, Any], keys: list[str]) -> Any:
    config = write_config(tmp_path, [entry, honest_server()])
    await approve(config, "x")
    await approve(config, "ok")
    steps = [("x__lookup", {"key": k}) for k in keys]
    with anyio.fail_after(30):  # (the calls' own timeouts are 60 s)
        return await run_question(config, "Q", script(*steps, ("ok__lookup", {"key": "z"}), "done"))


def _answers(run: Any, keys: list[str]) -> dict[str, str]:
    """What the model read of each call, by key; the honest server served and the run ended as
    the model meant."""
    seen = run.seen("x__lookup")
    assert len(seen) == len(keys)
    assert VALUE.format("z") in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED
    return dict(zip(keys, seen, strict=True))


def _one_session(seen: list[str]) -> None:
    """No session was started again once the calls began."""
    assert "initialize" not in seen[seen.index("tools/call") :]


@pytest.mark.parametrize("mode", ["noping", "mapped"])
async def test_a_session_implementing_no_ping_is_there_when_a_calls_stream_is_cut(
    tmp_path: Path, mode: str
) -> None:
    """The stream of ``cut``'s answer ends with no answer; the session's ping is answered
    ``-32601`` (at 200, or at 404 as ``mapped`` maps it): ``cut`` alone fails, named, and ``c`` is
    served on the same session (before: the server was quarantined and the run stopped)."""
    keys = ["a", "cut", "c"]
    with _web(mode) as (entry, seen):
        run = await _run(tmp_path, entry, keys)
    said = _answers(run, keys)
    assert VALUE.format("a") in said["a"] and VALUE.format("c") in said["c"]
    assert 'error="upstream_error"' in said["cut"] and "the session still answers" in said["cut"]
    assert seen.count("ping") == 1
    _one_session(seen)
    assert run.result.trace_path is not None
    events = read_trace(run.result.trace_path)
    assert not [e for e in events if e["kind"] == "mcp_connection" and e.get("action") == "lost"]


async def test_errors_answered_at_the_status_their_code_maps_to_are_the_calls_own(tmp_path: Path) -> None:
    """``bad`` is refused ``-32602`` at 400, ``nomethod`` ``-32601`` at 404, each naming its
    request: each fails with the server's words, and the session serves on (before: the session
    was taken for gone, started again, and the server lost)."""
    keys = ["a", "bad", "nomethod", "c"]
    with _web("mapped") as (entry, seen):
        run = await _run(tmp_path, entry, keys)
    said = _answers(run, keys)
    assert VALUE.format("a") in said["a"] and VALUE.format("c") in said["c"]
    assert 'error="upstream_error"' in said["bad"] and "no such key as bad" in said["bad"]
    assert 'error="upstream_error"' in said["nomethod"] and "Method not found" in said["nomethod"]
    _one_session(seen)
    assert "ping" not in seen  # (the error named its request: nothing to ask)


def test_a_session_the_server_no_longer_knows_is_still_gone_whatever_its_words() -> None:
    """What servers answer for a session they no longer know (the Python and TypeScript SDKs' id
    ``null``, another id, another code) never reads as the request's own answer; only an error
    naming the request that says it serves no such method or params does."""
    from tether.mcp._httpcap import _names

    gone = [
        b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Session not found"}}',
        b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32601, "message": "Method not found"}}',
        b'{"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": "Unknown session"}}',
        b'{"jsonrpc": "2.0", "id": 7, "error": {"code": -32001, "message": "Session not found"}}',
        b'{"jsonrpc": "2.0", "id": 8, "error": {"code": -32601, "message": "Method not found"}}',
        b"Bad Request: No valid session ID provided",
        b"",
    ]
    assert not [body for body in gone if _names(body, 7)]
    assert _names(b'{"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "m"}}', 7)
    assert _names(b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": "7", "error": {"code": -32602, "message": "m"}}', 7)


async def test_a_404_whose_body_never_ends_is_still_the_session_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call of ``held`` is answered 404 with a JSON body that never ends: its body is read
    for whom it answers only within ``ACK_WAIT_S``, then the session is gone as before: a new one is
    opened and the call served on it (unbounded, the read held the call to its 60 s timeout)."""
    from tether.mcp import _httpcap

    monkeypatch.setattr(_httpcap, "ACK_WAIT_S", 0.2)
    keys = ["a", "held", "c"]
    with _web("held") as (entry, seen):
        run = await _run(tmp_path, entry, keys)
    said = _answers(run, keys)
    assert all(VALUE.format(key) in said[key] for key in keys)
    assert seen[seen.index("tools/call") :].count("initialize") == 1


@pytest.mark.parametrize("mode", ["bom", "null_id"])
async def test_a_body_after_a_byte_order_mark_or_an_error_naming_no_request_is_the_answer(
    tmp_path: Path, mode: str
) -> None:
    """``bom``: every body starts with a byte order mark: the server starts and serves (before: it
    could not start). ``null_id``: ``bad`` is answered with an error of ``"id": null`` at 200: the
    call fails with the server's words (before: named a forged answer)."""
    keys = ["a", "bad", "c"]
    with _web(mode) as (entry, seen):
        run = await _run(tmp_path, entry, keys)
    said = _answers(run, keys)
    assert VALUE.format("a") in said["a"] and VALUE.format("c") in said["c"]
    assert 'error="upstream_error"' in said["bad"] and "no such key as bad" in said["bad"]
    assert "forged" not in said["bad"]
    _one_session(seen)


@pytest.mark.parametrize("args", [(), ("noted",)])
async def test_errors_naming_no_request_for_notifications_never_fail_the_next_request(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """``noted``: the server answers ``notifications/initialized`` (and any notification) with an
    error of ``"id": null``: it starts and serves (before: its ``tools/list`` failed with that
    error and it never started). Either way the call of key ``unreadable``, answered with such an
    error while it alone waits, still fails at once with the server's words (round twenty)."""
    keys = ["a", "unreadable", "c"]
    said = _answers(await _run(tmp_path, _stdio(*args), keys), keys)
    assert VALUE.format("a") in said["a"] and VALUE.format("c") in said["c"]
    assert 'error="upstream_error"' in said["unreadable"] and "Parse error" in said["unreadable"]


async def test_an_answer_past_the_limit_with_its_id_last_fails_its_own_call_at_once(tmp_path: Path) -> None:
    """``rows`` is answered past the host's limit, its result (rows with ids of their own) before
    its id: the call fails at once, named (before: the refusal went to the first row's id, no
    request's, and the call waited out its 60 s timeout), and the server serves on."""
    keys = ["a", "rows", "c"]
    said = _answers(await _run(tmp_path, _stdio(), keys), keys)
    assert VALUE.format("a") in said["a"] and VALUE.format("c") in said["c"]
    assert 'error="upstream_error"' in said["rows"] and "larger than the host accepts" in said["rows"]
