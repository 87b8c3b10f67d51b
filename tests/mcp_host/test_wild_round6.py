"""Wild servers, round six: Streamable HTTP servers written by hand (``_web``) that set new
cookies with every answer, that are reached at a URL with a token in its query while httpx's
request lines are shown, or that list a tool nested deeper than the SDK's JSON parser reads; the
same listing over stdio (``wild6_server.py``). Each runs next to an honest stdio server
(``wild4_server.py``), and both are checked: the hostile one is contained, the honest one
serves."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.core.stop import StopReason
from tether.mcp._approve import approve_server
from tether.mcp._deep import PARSER_DEPTH
from tether.mcp._httpcap import MAX_COOKIE_CHARS, MAX_COOKIES, MIN_REOPEN_S
from tether.mcphost._runner import run_question
from tether_testing.loopback import Quiet, serving

from .conftest import approve, honest_server, script, write_config
from .wild6_server import DEEP, LOOKUP

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

WILD6 = Path(__file__).with_name("wild6_server.py")
SECRET = "Sup3rSecretT0kenValue"


def _wild_http(mode: str, seen: list[dict[str, str]]) -> type[Quiet]:
    """A Streamable HTTP server by hand (JSON answers; a session id) serving ``lookup``. In mode
    ``cookies`` every answer sets 100 new cookies of 100 characters (``initialize``'s first a
    session cookie, ``sticky=s1``); in ``deep`` it also lists ``deep`` (``wild6_server.DEEP``),
    in ``deep_events`` too, the listing answered as an event stream; in ``resume`` the call of
    ``b`` is answered by an event stream that gives an event id and ends, and each resumption
    of it (a GET with ``Last-Event-ID``) ends at once with nothing, asking to be resumed again.
    ``seen`` gets each request's method and its Cookie header."""

    class App(Quiet):
        protocol_version = "HTTP/1.1"
        made = 0

        def _send(self, status: int, body: Any = None, **headers: str) -> None:
            kind = "text/event-stream" if isinstance(body, bytes) else "application/json"
            raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            if mode == "cookies":
                if isinstance(body, dict) and body.get("result", {}).get("serverInfo"):
                    self.send_header("Set-Cookie", "sticky=s1; Path=/")
                for _ in range(100):
                    App.made += 1
                    self.send_header("Set-Cookie", f"c{App.made}={'x' * 100}; Path=/")
            for key, value in {
                "Content-Type": kind,
                "Content-Length": str(len(raw)),
                **headers,
            }.items():
                self.send_header(key, value)
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(raw)

        def do_GET(self) -> None:
            resumed = self.headers.get("Last-Event-ID")
            seen.append({"method": "resume" if resumed else "GET", "cookie": self.headers.get("Cookie", "")})
            if mode == "resume" and resumed:
                return self._send(200, b"retry: 0\n\n")  # nothing, and again at once
            self._send(405)

        def do_DELETE(self) -> None:
            self._send(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            seen.append({"method": str(method), "cookie": self.headers.get("Cookie", "")})
            if ident is None or method is None:  # a notification, or the host's answer
                return self._send(202)
            result: dict[str, Any] = {}
            if method == "initialize":
                result = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": f"wild6-{mode}", "version": "1"},
                }
                answer = {"jsonrpc": "2.0", "id": ident, "result": result}
                return self._send(200, answer, **{"Mcp-Session-Id": f"sid-{SECRET}"})
            if method == "tools/list":
                result = {"tools": [LOOKUP, DEEP] if mode.startswith("deep") else [LOOKUP]}
                if mode == "deep_events":  # as an event stream, as the SDK's servers answer
                    event = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result})
                    return self._send(200, f"event: message\r\ndata: {event}\r\n\r\n".encode())
            elif method == "tools/call":
                key = (params.get("arguments") or {}).get("key")
                result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
                if mode == "resume" and key == "b":  # an event id and nothing else: resume me
                    return self._send(200, b"id: e1\nretry: 0\ndata: \n\n")
            self._send(200, {"jsonrpc": "2.0", "id": ident, "result": result})

    return App


@contextlib.contextmanager
def _web(mode: str) -> Iterator[tuple[dict[str, Any], list[dict[str, str]]]]:
    """The hand-written server in ``mode``, served on 127.0.0.1, as its config entry and what it saw."""
    seen: list[dict[str, str]] = []
    with serving(_wild_http(mode, seen)) as base:
        entry = {"name": "web", "url": f"{base}/mcp", "mode": "legacy", "effects": {"lookup": "read"}}
        yield {**entry, "timeout_s": 20}, seen


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pins approving ``lookup`` of the honest server ``ok`` (saves a launch a test)."""
    import anyio

    folder = tmp_path_factory.mktemp("w6pins")
    anyio.run(approve, write_config(folder, [honest_server(20)]), "ok")
    return folder / "pins.db"


def _steps(server: str = "web") -> Any:
    """``server``'s lookup three times (a, b, c), then ok's once (d)."""
    calls = [(f"{server}__lookup", {"key": k}) for k in "abc"]
    return script(*calls, ("ok__lookup", {"key": "d"}), "done")


def _served(run: Any, server: str = "web") -> None:
    """Every lookup of ``server`` and of the honest server answered, and the run accepted."""
    answers = run.seen(f"{server}__lookup")
    assert [f"value-of-{k}" in s for k, s in zip("abc", answers, strict=True)] == [True] * 3
    assert "value-of-d" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_cookies_a_server_sets_with_every_answer_are_capped_and_its_session_cookie_kept(
    tmp_path: Path, pins: Path
) -> None:
    """100 new cookies with each answer: before, every one was kept and sent back with each
    request, the Cookie header growing by 10 kB an answer for the connection's life (past 64 kB
    the server refused the requests); now the jar keeps ``MAX_COOKIES``, ``MAX_COOKIE_CHARS``
    in all, the server's session cookie (set first) is sent with every later request, and the
    calls are answered."""
    with _web("cookies") as (web, seen):
        config = write_config(tmp_path, [web, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        seen.clear()
        run = await run_question(config, "Q", _steps())
    _served(run)
    later = [s["cookie"] for s in seen if s["method"] != "initialize"]  # after a connection's first
    assert later and all("sticky=s1" in cookie for cookie in later)
    assert max(len(c) for c in later) <= MAX_COOKIE_CHARS + 3 * MAX_COOKIES
    assert max(c.count("=") for c in later) <= MAX_COOKIES


async def test_what_httpx_and_the_sdk_log_shows_a_servers_url_bare_and_no_session_id(
    tmp_path: Path, pins: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Where INFO is shown (``logging.basicConfig(level=logging.INFO)``, as many applications
    do), httpx logs a line for every request with its URL, and the SDK the session id it is
    given: a token in the server's URL query was printed with each request, and the session's
    id once; now the URL is bare there as on the console, the id hidden, and the calls are
    answered."""
    caplog.set_level(logging.INFO, logger="httpx2")
    caplog.set_level(logging.INFO, logger="mcp.client.streamable_http")
    with _web("honest") as (web, _):
        web["url"] += f"?api_key={SECRET}"
        config = write_config(tmp_path, [web, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        run = await run_question(config, "Q", _steps())
    _served(run)
    said = [r.getMessage() for r in caplog.records]
    assert [line for line in said if line.startswith("[web] httpx: HTTP Request: POST http://127.0.0.1:")]
    assert "[web] mcp sdk: Received session ID: [secret]" in said
    assert not [line for line in said if SECRET in line or "api_key" in line]


async def test_a_call_whose_stream_keeps_asking_to_be_resumed_is_paced_and_ends_at_its_timeout(
    tmp_path: Path, pins: Path
) -> None:
    """Held already (a guard, not a fix): the answer's event stream gives an event id and ends,
    and every resumption ends at once with nothing (``retry: 0``). Resuming is the protocol's
    (a server may close a stream and be polled for the rest), so the call waits for its answer
    until its timeout, as for a server that never answers; the resumptions are paced as every
    event stream is (``MIN_REOPEN_S``), and the server's other calls and the honest server
    serve."""
    with _web("resume") as (web, seen):
        config = write_config(tmp_path, [{**web, "timeout_s": 3}, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        seen.clear()
        started = time.monotonic()
        run = await run_question(config, "Q", _steps())
        elapsed, resumed = time.monotonic() - started, [s for s in seen if s["method"] == "resume"]
    first, second, third = run.seen("web__lookup")
    assert "value-of-a" in first and "value-of-c" in third and "value-of-b" not in second
    assert "timed out" in second and elapsed < 10
    assert 2 <= len(resumed) <= elapsed / MIN_REOPEN_S + 2
    assert "value-of-d" in run.seen("ok__lookup")[0]


@pytest.mark.parametrize("transport", ["stdio", "deep", "deep_events"])
async def test_a_tool_nested_deeper_than_the_sdk_reads_is_left_out_and_the_others_served(
    tmp_path: Path, pins: Path, transport: str
) -> None:
    """A tool whose input schema nests 400 levels: before, the SDK's JSON parser refused the
    whole listing (more than ``PARSER_DEPTH``; over HTTP as a JSON body or an event), and the
    server listed nothing: unavailable; now
    that tool alone is left out, named, at review and every listing, and the server's other tool
    and the honest server serve."""
    with contextlib.ExitStack() as stack:
        if transport != "stdio":  # over HTTP, the listing a JSON body or an event
            server, _ = stack.enter_context(_web(transport))
            server["name"] = "x"
        else:
            server = {
                **honest_server(20),
                "name": "x",
                "command": [sys.executable, str(WILD6)],
                "env": {"W6_MODE": "deep"},
            }
        server["effects"] = {"lookup": "read", "deep": "read"}
        config = write_config(tmp_path, [server, honest_server(20)], pins_from=pins)
        review, pinned, skipped = await approve_server(config, "x", actor="tester")
        assert pinned == ["lookup"] and [t.check.tool for t in review.tools] == ["lookup"]
        assert f"nests more than {PARSER_DEPTH - 3} levels deep" in skipped["deep"]
        calls = [("x__deep", {}), *[("x__lookup", {"key": k}) for k in "abc"], ("ok__lookup", {"key": "d"})]
        run = await run_question(config, "Q", script(*calls, "done"))
    _served(run, "x")
    assert "value-of" not in run.seen("x__deep")[0]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 4096])
async def test_events_are_passed_on_whole_and_only_a_listing_too_deep_is_rewritten(size: int) -> None:
    """However the stream is cut into chunks (an event's end, ``\\r\\n\\r\\n``, split between two):
    every other event passes byte for byte, the listing's ``deep`` alone is cut."""
    from tether.mcp._deep import CUT, cut_events

    listing = json.dumps({"jsonrpc": "2.0", "id": 2, "result": {"tools": [LOOKUP, DEEP]}})
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"tools": 1}})
    before, after = f"id: 1\r\ndata: {note}\r\n\r\n".encode(), b": a comment\n\n"
    stream = before + f"event: message\r\nid: 2\r\ndata: {listing}\r\n\r\n".encode() + after

    async def chunks() -> Any:
        for at in range(0, len(stream), size):
            yield stream[at : at + size]

    out = b"".join([chunk async for chunk in cut_events(chunks(), 1 << 20)])
    assert out.startswith(before) and out.endswith(after)
    middle = out[len(before) : -len(after)].split(b"\n")
    assert middle[:2] == [b"event: message", b"id: 2"] and middle[3:] == [b"", b""]
    tools = json.loads(middle[2].removeprefix(b"data: "))["result"]["tools"]
    assert tools[0] == LOOKUP and tools[1]["name"] == "deep" and CUT in tools[1]
