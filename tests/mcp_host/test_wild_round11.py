"""Wild servers, round eleven (``wild11_server.py``, written by hand, over real stdio; a
Streamable HTTP server by hand): a server's own JSON-RPC error under ``-32000`` (the first code
of the band JSON-RPC leaves to servers) was read as the connection closing, so an ordinary
failure (a rate limit) quarantined or restarted the server and stopped the run; answers sent in
a JSON-RPC batch (which 2025-03-26 servers may send) were refused, or, after a notification,
left their call waiting out its timeout, as did an invalid answer with a ``"method"`` key in its
result; a result of structured content alone (no content block, as the spec allows) showed the
model nothing. Each runs next to an honest stdio server (``wild4_server.py``), and both are
checked: the faults end named and at once, the legitimate answers are served."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.core.stop import StopReason
from tether.errors import DependencyUnavailable
from tether.mcp._failures import SESSION_GONE, session_gone, transport_failure
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace
from tether_testing.loopback import Quiet, serving

from .conftest import approve, honest_server, script, write_config
from .wild11_server import NOTES

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

SERVER = Path(__file__).with_name("wild11_server.py")
BUSY = "rate limited: try again in a minute"


def w11(name: str = "x") -> dict[str, Any]:
    """``wild11_server.py``, unconfined (launched faster), its tools reads."""
    return {
        "name": name,
        "command": [sys.executable, str(SERVER)],
        "mode": "legacy",
        "effects": {"lookup": "read", "stats": "read"},
        "timeout_s": 20,
        "sandbox": "none",
    }


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pins approving ``wild11_server.py`` as ``x`` and the honest server as ``ok``."""
    import anyio

    folder = tmp_path_factory.mktemp("w11pins")
    config = write_config(folder, [w11(), honest_server(20)])

    async def go() -> None:
        await approve(config, "x")
        await approve(config, "ok")

    anyio.run(go)
    return folder / "pins.db"


def _events(run: Any, kind: str) -> list[dict[str, Any]]:
    assert run.result.trace_path is not None
    return [e for e in read_trace(run.result.trace_path) if e["kind"] == kind]


def _starts(counted: list[str]) -> int:
    """How many sessions the hand-written HTTP server started (``initialize`` ids, not calls)."""
    return sum(1 for seen in counted if not str(seen).startswith("call "))


def _lost(run: Any) -> list[dict[str, Any]]:
    return [
        e for e in _events(run, "mcp_connection") if e.get("action") in ("lost", "restarted", "quarantined")
    ]


async def test_a_servers_own_error_under_32000_fails_its_call_and_the_server_keeps_serving(
    tmp_path: Path, pins: Path
) -> None:
    """``busy`` is answered with the server's own error under ``-32000`` (a rate limit): before,
    the host read it as the SDK's "Connection closed", so the call "went away", the server was
    lost (here: quarantined, the run stopped as a dependency unavailable). Now the call fails
    with the server's words, and the same process serves the next call (its count goes on)."""
    config = write_config(tmp_path, [{**w11(), "restart": "never"}, honest_server(20)], pins_from=pins)
    calls = [("x__lookup", {"key": k}) for k in ("a", "busy", "b")]
    run = await run_question(config, "Q", script(*calls, ("ok__lookup", {"key": "d"}), "done"))
    first, busy, after = run.seen("x__lookup")
    assert "value-of-a (call 1)" in first
    assert BUSY in busy and "upstream_error" in busy and "went away" not in busy
    assert "value-of-b (call 3)" in after  # the same process: never lost, never restarted
    assert "value-of-d" in run.seen("ok__lookup")[0]
    assert _lost(run) == [] and run.result.stop_reason is StopReason.ACCEPTED


def _http_app(counted: list[str], session: str = "s1") -> type[Quiet]:
    """A Streamable HTTP server by hand (JSON answers) serving ``lookup`` as the stdio one does,
    ``busy`` answered with its own ``-32000`` error, ``expired`` with its own error about its own
    sign-in session (at HTTP 200), ``renamed`` with a new session id that is
    not ASCII; ``session`` is the session id ``initialize`` gives, ``counted`` gets each
    ``initialize``'s id and ``call <key>`` for each call."""

    class App(Quiet):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: Any = None, **headers: str) -> None:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            for key, value in {
                "Content-Type": "application/json",
                "Content-Length": str(len(raw)),
                **headers,
            }.items():
                self.send_header(key, value)
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(raw)

        def _unreadable(self, key: str, answer: dict[str, Any]) -> None:
            """``answer`` behind 20 000 headers (past what h11 reads), or in chunks whose framing
            is broken (a chunk size that is no number)."""
            raw = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if key == "big_headers":
                for n in range(20_000):
                    self.send_header(f"X-Filler-{n}", "x" * 8)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                body = raw
            else:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                body = b"%x\r\n%s\r\nzz\r\n" % (len(raw[:10]), raw[:10])
            with contextlib.suppress(OSError):
                self.wfile.write(body)
            self.close_connection = True

        def do_GET(self) -> None:
            self._send(405)

        def do_DELETE(self) -> None:
            self._send(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            if ident is None or method is None:
                return self._send(202)
            if method == "initialize":
                counted.append(ident)
                value = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "wild11-http", "version": "1"},
                }
                answer = {"jsonrpc": "2.0", "id": ident, "result": value}
                return self._send(200, answer, **{"Mcp-Session-Id": session})
            if method == "tools/list":
                from .wild11_server import TOOLS

                return self._send(200, {"jsonrpc": "2.0", "id": ident, "result": {"tools": TOOLS[:1]}})
            key = (params.get("arguments") or {}).get("key")
            counted.append(f"call {key}")
            if key == "expired":  # its own sign-in, not the MCP session: answered at 200
                error = {"code": -32603, "message": "your login session expired: sign in again"}
                return self._send(200, {"jsonrpc": "2.0", "id": ident, "error": error})
            if key == "busy":
                error = {"code": -32000, "message": BUSY}
                return self._send(200, {"jsonrpc": "2.0", "id": ident, "error": error})
            value = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
            if key == "accepted":  # a request taken for a notification
                return self._send(202)
            if key in ("big_headers", "bad_chunks"):
                return self._unreadable(key, {"jsonrpc": "2.0", "id": ident, "result": value})
            renamed = {"Mcp-Session-Id": "s\u00e9ance-2"} if key == "renamed" else {}
            self._send(200, {"jsonrpc": "2.0", "id": ident, "result": value}, **renamed)

    return App


@contextlib.contextmanager
def _web(counted: list[str], session: str = "s1") -> Iterator[dict[str, Any]]:
    with serving(_http_app(counted, session)) as base:
        yield {
            "name": "web",
            "url": f"{base}/mcp",
            "mode": "legacy",
            "effects": {"lookup": "read"},
            "timeout_s": 20,
        }


async def test_an_http_servers_own_error_under_32000_keeps_its_session(tmp_path: Path, pins: Path) -> None:
    """The same error over Streamable HTTP: before, the session was dropped as lost (and the
    run stopped); now the call fails with the server's words and the next call goes on the same
    session (one ``initialize`` for approval, one for the run)."""
    counted: list[str] = []
    with _web(counted) as web:
        config = write_config(tmp_path, [{**web, "restart": "never"}, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        calls = [("web__lookup", {"key": k}) for k in ("a", "busy", "b")]
        run = await run_question(config, "Q", script(*calls, ("ok__lookup", {"key": "d"}), "done"))
    first, busy, after = run.seen("web__lookup")
    assert "value-of-a" in first and "value-of-b" in after
    assert BUSY in busy and "upstream_error" in busy and "went away" not in busy
    assert _starts(counted) == 2 and "value-of-d" in run.seen("ok__lookup")[0]
    assert _lost(run) == [] and run.result.stop_reason is StopReason.ACCEPTED


async def test_a_session_id_the_host_cannot_send_back_is_named_and_never_adopted(
    tmp_path: Path, pins: Path
) -> None:
    """A session id that is not ASCII (MCP allows visible ASCII only) given at ``initialize``:
    before, httpx failed to send it back, the SDK's writer died and the start failed as
    "Connection closed", no reason given. Now the start fails naming the session id. Given with
    one answer later (``renamed``), that call fails named and the session goes on under the id
    it had; an id with a space (which httpx sends back) is still taken."""
    with _web([], session="s\u00e9ance-1") as web:
        config = write_config(tmp_path, [web])
        with pytest.raises(DependencyUnavailable, match="session id the host cannot send back"):
            await approve(config, "web")
    counted: list[str] = []
    with _web(counted, session="sid 1") as web:
        config = write_config(tmp_path, [{**web, "restart": "never"}, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        calls = [("web__lookup", {"key": k}) for k in ("a", "renamed", "b")]
        run = await run_question(config, "Q", script(*calls, ("ok__lookup", {"key": "d"}), "done"))
    first, renamed, after = run.seen("web__lookup")
    assert "value-of-a" in first and "value-of-b" in after  # before: "Connection closed"
    assert "session id the host cannot send back" in renamed and "value-of" not in renamed
    assert _starts(counted) == 2 and _lost(run) == [] and run.result.stop_reason is StopReason.ACCEPTED


async def test_an_http_request_answered_202_accepted_fails_alone_and_keeps_the_session(
    tmp_path: Path, pins: Path
) -> None:
    """``accepted`` is answered ``202 Accepted`` (as a notification is): the SDK resolves the
    request as ``-32000`` ("server answered a request with 202 Accepted"), which the host read
    as the connection lost (the run stopped, the server unavailable), though only a server that
    is there answers, and a JSON answer missing already fails its call alone (round five). Now
    the call fails naming what the server did, and the next goes on the session."""
    counted: list[str] = []
    with _web(counted) as web:
        config = write_config(tmp_path, [{**web, "restart": "never"}, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        calls = [("web__lookup", {"key": k}) for k in ("a", "accepted", "b")]
        run = await run_question(config, "Q", script(*calls, ("ok__lookup", {"key": "d"}), "done"))
    first, accepted, after = run.seen("web__lookup")
    assert "value-of-a" in first and "value-of-b" in after
    assert "202 Accepted" in accepted and "upstream_error" in accepted and "went away" not in accepted
    assert _starts(counted) == 2 and "value-of-d" in run.seen("ok__lookup")[0]
    assert _lost(run) == [] and run.result.stop_reason is StopReason.ACCEPTED


async def test_an_http_answer_httpx_cannot_read_fails_its_call_and_keeps_the_session(
    tmp_path: Path, pins: Path
) -> None:
    """``big_headers`` is answered behind 20 000 headers (past what h11 reads), ``bad_chunks``
    in chunks whose framing is broken: before, httpx's error ended the SDK's writer and the
    session was lost as "Connection closed" (the run stopped, the server unavailable). Now each
    call fails naming the unreadable answer, as an answer too large does, and the next call goes
    on the same session."""
    counted: list[str] = []
    with _web(counted) as web:
        config = write_config(tmp_path, [{**web, "restart": "never"}, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        calls = [("web__lookup", {"key": k}) for k in ("a", "big_headers", "bad_chunks", "b")]
        run = await run_question(config, "Q", script(*calls, ("ok__lookup", {"key": "d"}), "done"))
    first, headers, chunks, after = run.seen("web__lookup")
    assert "value-of-a" in first and "value-of-b" in after
    for failed in (headers, chunks):
        assert "HTTP answer could not be read" in failed and "upstream_error" in failed, failed
    assert _starts(counted) == 2 and "value-of-d" in run.seen("ok__lookup")[0]
    assert _lost(run) == [] and run.result.stop_reason is StopReason.ACCEPTED


async def test_a_servers_own_words_about_a_session_of_its_own_never_renew_or_lose_the_connection(
    tmp_path: Path, pins: Path
) -> None:
    """A server's own error about a session of its own making: over HTTP at 200 ("your login
    session expired"), over stdio ("browser session not found"). Before, the words alone read
    as the MCP session gone: over HTTP a new session was started and the call sent again (a
    write done twice), over stdio the server was lost. Now only the HTTP 404 to a request
    carrying the session id renews it (round two): each call fails with the server's words,
    is sent once, and the connection stays."""
    counted: list[str] = []
    with _web(counted) as web:
        config = write_config(
            tmp_path, [{**web, "restart": "never"}, {**w11(), "restart": "never"}], pins_from=pins
        )
        await approve(config, "web")
        calls = [("web__lookup", {"key": "expired"}), ("web__lookup", {"key": "b"})]
        calls += [("x__lookup", {"key": "app_session"}), ("x__lookup", {"key": "c"})]
        run = await run_question(config, "Q", script(*calls, "done"))
    expired, after = run.seen("web__lookup")
    assert "login session expired" in expired and "upstream_error" in expired and "value-of-b" in after
    assert counted.count("call expired") == 1 and _starts(counted) == 2  # before: sent twice, 3 sessions
    app, then = run.seen("x__lookup")
    assert "browser session not found" in app and "went away" not in app
    assert "value-of-c (call 2)" in then  # the same process (before: lost)
    assert _lost(run) == [] and not [
        e for e in _events(run, "mcp_connection") if e.get("action") == "new_session"
    ]
    assert run.result.stop_reason is StopReason.ACCEPTED


def test_only_the_sdks_own_closing_words_under_32000_are_a_lost_connection() -> None:
    """Unit level: what the SDK raises when the connection or a request's stream fails is still a
    transport failure; a server's own ``-32000`` error with other words is its answer, as is the
    SDK's word for a request the server answered ``202 Accepted``."""
    from mcp.shared.exceptions import MCPError

    for said in (
        "Connection closed",
        "SSE stream failed: peer closed connection",
        "SSE stream ended without a response",  # also what a server dying mid-call leaves
        "SSE stream ended and reconnection attempts were exhausted",
    ):
        assert transport_failure(MCPError(code=-32000, message=said)), said
    for said in (
        BUSY,
        "Connection closed by the database",
        "server answered a request with 202 Accepted",  # only a server that is there answers
    ):
        assert not transport_failure(MCPError(code=-32000, message=said)), said
    gone = MCPError(code=SESSION_GONE, message="Session not found: the server answered HTTP 404")
    assert transport_failure(gone) and session_gone(gone)  # (``_httpcap``: the status said so)
    for own in ("Session not found", "your login session expired", "browser session not found"):
        assert not session_gone(MCPError(code=-32001, message=own)), own  # a server's own words
        assert not transport_failure(MCPError(code=-32603, message=own)), own


async def test_answers_in_a_batch_are_read_and_an_invalid_answer_naming_a_method_fails_at_once(
    tmp_path: Path, pins: Path
) -> None:
    """``batch`` answers in a JSON-RPC batch after a log notification (before: the line was
    dropped whole and the call waited out its timeout), ``batch_only`` in a batch of one
    (before: refused as not JSON-RPC); both are served, the notification traced.
    ``method_in_result`` answers with an invalid message whose result has a ``"method"`` key:
    it fails its call at once, named (before: taken for a request, the call waited out its
    timeout). The next call and the honest server are served."""
    config = write_config(tmp_path, [w11(), honest_server(20)], pins_from=pins)
    keys = ("batch", "batch_only", "method_in_result", "after")
    calls = [("x__lookup", {"key": k}) for k in keys]
    run = await run_question(config, "Q", script(*calls, ("ok__lookup", {"key": "d"}), "done"))
    batch, alone, invalid, after = run.seen("x__lookup")
    assert "value-of-batch (call 1)" in batch and "value-of-batch_only (call 2)" in alone
    assert "not valid JSON-RPC" in invalid and "timed out" not in invalid and "GET" not in invalid
    assert "value-of-after (call 4)" in after and "value-of-d" in run.seen("ok__lookup")[0]
    assert any("answering in a batch" in e["message"] for e in _events(run, "mcp_log"))
    assert _lost(run) == [] and run.result.stop_reason is StopReason.ACCEPTED


async def test_structured_content_with_no_content_block_is_what_the_model_reads(
    tmp_path: Path, pins: Path
) -> None:
    """``stats`` answers its structured content alone (``"content": []``): before, the model was
    shown an empty result; now it reads the structured content (checked against the output
    schema first). The same answer with a text block is shown as it was, and structured content
    not matching the schema is still refused."""
    config = write_config(tmp_path, [w11(), honest_server(20)], pins_from=pins)
    calls = [("x__stats", {"key": k}) for k in ("alone", "both", "bad")]
    run = await run_question(config, "Q", script(*calls, ("ok__lookup", {"key": "d"}), "done"))
    alone, both, bad = run.seen("x__stats")
    assert '{"count": 3}' in alone  # before: an empty result
    assert '{"count": 3}' in both and "error" not in both
    assert "invalid_output" in bad and "three" not in bad
    assert "value-of-d" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_log_lines_the_sdk_writes_for_a_servers_refused_messages_are_one_line_each_and_paced(
    tmp_path: Path, pins: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bad_notes`` sends 3 000 log notifications the SDK refuses (a level MCP does not have)
    before its answer: the SDK logged each as an error with its traceback (3 000 tracebacks,
    some 60 000 lines, on the person's terminal). Now each such line is one line, the error
    named in it, and they are shown at a bounded rate, those held back counted; the call and
    the honest server are served."""
    import logging

    from tether.mcp import _connection, _flood

    held: dict[str, int] = {}
    # Every one given to the SDK (round 18's gate would drop those past its burst before it).
    monkeypatch.setattr(_flood, "BURST", 2 * NOTES)
    monkeypatch.setattr(_connection, "_SDK_PACE", {})  # this test's server alone
    monkeypatch.setattr(_connection, "_SDK_HELD", held)
    caplog.set_level(logging.INFO)
    config = write_config(tmp_path, [w11(), honest_server(20)], pins_from=pins)
    calls = [("x__lookup", {"key": k}) for k in ("bad_notes", "after")]
    run = await run_question(config, "Q", script(*calls, ("ok__lookup", {"key": "d"}), "done"))
    assert "value-of-bad_notes (call 1)" in run.seen("x__lookup")[0]
    assert "value-of-after (call 2)" in run.seen("x__lookup")[1]
    shown = [
        r for r in caplog.records if r.getMessage().startswith("[x] mcp sdk") and r.levelno >= logging.INFO
    ]
    assert shown and len(shown) < 200  # before: 3 000
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in shown)
    assert "level" in shown[0].getMessage()  # what was refused, in the line
    said = [int(m.group(1)) for r in shown if (m := re.search(r"and (\d+) more such lines", r.getMessage()))]
    assert len(shown) + sum(said) + held.get("x", 0) == NOTES  # every one shown or counted
    assert "value-of-d" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.parametrize("quirk", ["W11_PAGED", "W11_BOM"])
async def test_an_empty_next_cursor_or_a_byte_order_mark_is_read_as_clients_read_it_and_served(
    tmp_path: Path, pins: Path, quirk: str
) -> None:
    """``W11_PAGED``: the listing comes in two pages, the last naming an empty next cursor
    (``""``, the end for clients written in JavaScript): before, the host asked for the page
    ``""``, got the first again, and failed the server at start ("its tool listing never
    ended"); now an empty cursor ends the listing. ``W11_BOM``: the server's first line starts
    with a UTF-8 byte order mark: before, its answer to ``initialize`` was "not valid JSON-RPC"
    and it failed at start; now the mark is dropped. Either way every tool is served (the pins
    are the same tools)."""
    config = write_config(tmp_path, [{**w11(), "env": {quirk: "1"}}, honest_server(20)], pins_from=pins)
    calls = [("x__lookup", {"key": "a"}), ("x__stats", {"key": "both"})]
    run = await run_question(config, "Q", script(*calls, ("ok__lookup", {"key": "d"}), "done"))
    assert "value-of-a (call 1)" in run.seen("x__lookup")[0]
    assert '{"count": 3}' in run.seen("x__stats")[0]
    assert "value-of-d" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_a_tool_with_an_icon_of_a_data_uri_is_offered_and_its_size_counts_only_what_a_model_reads(
    tmp_path: Path,
) -> None:
    """``lookup`` has an icon given as a ``data:`` URI of 96 000 characters (as the spec allows;
    icons are pinned and reviewed, never offered to a model): before, its definition counted as
    larger than a model is offered and the tool was left out ("unknown tool"). Now only what a
    model is offered counts: the tool is approved, offered and served, as is the honest server;
    a description past the limit is still left out (round five)."""
    from tether.mcp._listing import MAX_DEFINITION_CHARS, offered_size

    from .wild11_server import ICON, ICON_CHARS, TOOLS

    assert ICON_CHARS > MAX_DEFINITION_CHARS
    config = write_config(tmp_path, [{**w11(), "env": {"W11_ICONS": "1"}}, honest_server(20)])
    pinned, skipped = await approve(config, "x")
    assert "lookup" in pinned and "lookup" not in skipped
    await approve(config, "ok")
    calls = [("x__lookup", {"key": "a"}), ("ok__lookup", {"key": "d"})]
    run = await run_question(config, "Q", script(*calls, "done"))
    assert "value-of-a (call 1)" in run.seen("x__lookup")[0]  # before: unknown tool
    assert "value-of-d" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED
    prose = {**TOOLS[0], "description": "word " * MAX_DEFINITION_CHARS}
    assert offered_size({**TOOLS[0], "icons": [ICON]}) == offered_size(TOOLS[0]) < MAX_DEFINITION_CHARS
    assert offered_size(prose) > MAX_DEFINITION_CHARS


def test_a_batch_is_read_message_by_message_up_to_its_bound_and_a_longer_one_fails_once() -> None:
    """Unit level (``_stdio._messages``): a batch of answers is read as its messages; one of
    200 000 empty objects (a line of 600 KB) is one failure, not 200 000 (each parsed and
    refused on its own held the event loop for minutes), and its cost stays that of
    reading the line once; a lone message is read as it always was."""
    import time

    from mcp_types import JSONRPCResponse

    from tether.mcp._stdio import MAX_BATCH, _messages

    def answer(n: int) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": n, "result": {"content": []}}

    read = _messages(json.dumps([answer(n) for n in range(MAX_BATCH)]).encode())
    assert [type(m.message) for m in read] == [JSONRPCResponse] * MAX_BATCH
    assert [m.message.id for m in read] == list(range(MAX_BATCH))
    started = time.process_time()
    flood = _messages(b"[" + b",".join([b"{}"] * 200_000) + b"]")
    assert len(flood) == 1 and isinstance(flood[0], ValueError)
    assert time.process_time() - started < 10  # before: 200 000 refusals, past this
    over = _messages(json.dumps([answer(n) for n in range(MAX_BATCH + 1)]).encode())
    assert len(over) == 1  # refused whole, as any line that is not one message
    lone = _messages(json.dumps(answer(7)).encode())
    assert len(lone) == 1 and lone[0].message.id == 7


async def test_a_tool_name_as_long_as_the_spec_allows_is_approved_and_offered_under_one_that_fits(
    tmp_path: Path,
) -> None:
    """``lookup`` listed under a name of 100 characters (as tools made from an OpenAPI
    description are named; the spec allows up to 128 of ``[A-Za-z0-9_.-]``): before, review
    flagged it ("longer than 64") and it could not be approved. Now it is approved, offered
    under a name every provider takes (round two's mechanism) and called by its own; a name
    past 128, or with other characters, is still flagged."""
    from tether.mcp._config import offered_name
    from tether.mcp._pinning import bad_tool_name

    from .wild11_server import LONG

    assert len(LONG) == 100
    config = write_config(tmp_path, [{**w11(), "env": {"W11_LONG": "1"}, "effects": {LONG: "read"}}])
    pinned, skipped = await approve(config, "x")
    assert pinned == [LONG] and skipped == {}  # before: skipped, "longer than 64"
    offered = offered_name("x", LONG)
    run = await run_question(config, "Q", script((offered, {"key": "a"}), "done"))
    assert len(offered) <= 64 and "value-of-a (call 1)" in run.seen(offered)[0]
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert bad_tool_name("a" * 128) is None and bad_tool_name("a" * 129) is not None
    assert bad_tool_name("read file") is not None and bad_tool_name("x__y") is not None
