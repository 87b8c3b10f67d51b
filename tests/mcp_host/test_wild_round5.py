"""Wild servers, round five: Streamable HTTP servers written by hand (``_wild_http``) that answer
a request under another request's id or with no answer at all, refuse the host with 401 or 403
(OAuth metadata named), end their event streams at once asking to be reopened at once
(``retry: 0``), or hold the host's notifications unacknowledged; a stdio server
(``wild5_server.py``) listing a harmless tool too large to offer a model, tools too large together,
or giving megabytes of instructions. Each runs next to an
honest stdio server (``wild4_server.py``), and both are checked: the hostile one is contained,
the honest one serves."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.core.stop import StopReason
from tether.mcp import _listing
from tether.mcp._approve import approve_server
from tether.mcp._httpcap import ACK_WAIT_S, MIN_REOPEN_S
from tether.mcp._listing import MAX_DEFINITION_CHARS
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace
from tether_testing.loopback import Quiet, serving

from .conftest import approve, honest_server, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

WILD5 = Path(__file__).with_name("wild5_server.py")
LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}
OAUTH = 'Bearer error="invalid_token", resource_metadata="http://127.0.0.1:9/.well-known/oauth-protected-resource"'


def _wild_http(mode: str, seen: dict[str, int]) -> type[Quiet]:
    """A Streamable HTTP server by hand (JSON answers; a session id). ``lookup`` answers its first
    and third calls honestly; its second, by ``mode``: ``forged`` under the id of a request never
    sent, ``request`` with a request of its own instead of an answer, ``401``/``403`` refused (the
    401 naming OAuth metadata). ``locked`` refuses everything with 401; ``reopen`` ends each event
    stream (GET) at once with ``retry: 0``, and answers the second call after 2 s;
    ``unacknowledged`` holds each POSTed notification 30 s before its 202. ``seen`` counts each method
    (and each GET)."""

    class App(Quiet):
        protocol_version = "HTTP/1.1"

        def _send(
            self, status: int, body: Any = None, kind: str = "application/json", **headers: str
        ) -> None:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            for key, value in {"Content-Type": kind, "Content-Length": str(len(raw)), **headers}.items():
                self.send_header(key, value)
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(raw)

        def do_GET(self) -> None:
            seen["GET"] = seen.get("GET", 0) + 1
            if mode == "reopen":
                return self._send(200, b"retry: 0\n\n", "text/event-stream")
            self._send(405)

        def do_DELETE(self) -> None:
            self._send(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            seen[method] = calls = seen.get(method, 0) + 1
            if mode == "locked":
                return self._send(401, {"error": "invalid_token"}, **{"WWW-Authenticate": OAUTH})
            if ident is None or method is None:  # a notification, or the host's answer
                time.sleep(30.0 if mode == "unacknowledged" else 0.0)
                return self._send(202)
            result: dict[str, Any] = {}
            if method == "initialize":
                result = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": f"wild5-{mode}", "version": "1"},
                }
                answer = {"jsonrpc": "2.0", "id": ident, "result": result}
                return self._send(200, answer, **{"Mcp-Session-Id": "s1"})
            if method == "tools/list":
                result = {"tools": [LOOKUP]}
            elif method == "tools/call":
                key = (params.get("arguments") or {}).get("key")
                result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
                if calls == 2 and mode in ("401", "403"):
                    return self._send(int(mode), {"error": "no"}, **{"WWW-Authenticate": OAUTH})
                if calls == 2 and mode == "forged":
                    return self._send(200, {"jsonrpc": "2.0", "id": 4242, "result": {"content": []}})
                if calls == 2 and mode == "request":
                    return self._send(200, {"jsonrpc": "2.0", "id": ident, "method": "ping"})
                if calls == 2 and mode == "reopen":
                    time.sleep(2.0)
            self._send(200, {"jsonrpc": "2.0", "id": ident, "result": result})

    return App


@contextlib.contextmanager
def _web(mode: str) -> Iterator[tuple[dict[str, Any], dict[str, int]]]:
    """The hand-written server in ``mode``, served on 127.0.0.1, as its config entry and its counts."""
    seen: dict[str, int] = {}
    with serving(_wild_http(mode, seen)) as base:
        entry = {"name": "web", "url": f"{base}/mcp", "mode": "legacy", "effects": {"lookup": "read"}}
        yield {**entry, "timeout_s": 20}, seen


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pins approving ``lookup`` of the honest server ``ok`` (saves a launch a test)."""
    import anyio

    folder = tmp_path_factory.mktemp("w5pins")
    anyio.run(approve, write_config(folder, [honest_server(20)]), "ok")
    return folder / "pins.db"


def _steps() -> Any:
    """web's lookup three times (a, b, c), then ok's once (d)."""
    calls = [("web__lookup", {"key": k}) for k in "abc"]
    return script(*calls, ("ok__lookup", {"key": "d"}), "done")


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("forged", "answered this request with the id of another request"),
        ("request", "was a request or notification of its own, not an answer"),
    ],
)
async def test_an_http_answer_to_another_request_or_none_fails_its_call_at_once(
    tmp_path: Path, pins: Path, mode: str, said: str
) -> None:
    """A JSON body answering a call under an id never sent, or holding a request instead of an
    answer: before, dropped by the SDK and the call waited out its 20 s timeout; now the call
    fails at once, named, and the server's next answer and the honest server's are its own."""
    with _web(mode) as (web, _):
        config = write_config(tmp_path, [web, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        started = time.monotonic()
        run = await run_question(config, "Q", _steps())
        assert time.monotonic() - started < 10
    first, second, third = run.seen("web__lookup")
    assert "value-of-a" in first and "value-of-c" in third
    assert said in second and "upstream_error" in second and "timed out" not in second
    assert "value-of-d" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("401", "HTTP 401 Unauthorized: the server wants authorization (Bearer) and names OAuth metadata"),
        ("403", "HTTP 403 Forbidden: the server refused the host's credentials"),
    ],
)
async def test_an_http_refusal_of_the_hosts_credentials_is_named_as_authorization(
    tmp_path: Path, pins: Path, mode: str, said: str
) -> None:
    """A 401 (with OAuth protected-resource metadata) or 403 to a call: before, "server web
    failed: Server returned an error response", an upstream error the model is told to retry;
    now named as authorization, unavailable (retrying cannot help), the server's own header text
    (its metadata URL) not shown; the run ends honestly on it, the honest server having served."""
    with _web(mode) as (web, _):
        config = write_config(tmp_path, [web, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        steps = script(
            ("web__lookup", {"key": "a"}), ("ok__lookup", {"key": "d"}), ("web__lookup", {"key": "b"}), "done"
        )
        run = await run_question(config, "Q", steps)
    first, second = run.seen("web__lookup")[:2]
    assert "value-of-a" in first and "value-of-d" in run.seen("ok__lookup")[0]
    assert said in second and "dependency_unavailable" in second and '"cause": "unauthorized"' in second
    assert "well-known" not in second and "Server returned an error response" not in second


async def test_an_http_server_refusing_the_host_at_start_is_named_as_authorization(
    tmp_path: Path, pins: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every request refused with 401 (OAuth metadata named): unavailable at once, named as
    authorization, never retried past its start; the honest server serves. The terminal's line
    about the 401 shows the URL bare (it showed the token in its query)."""
    with _web("locked") as (web, seen):
        web["url"] += "?api_key=Sup3rSecretT0kenValue"
        config = write_config(tmp_path, [web, honest_server(20)], pins_from=pins)
        steps = script(("ok__lookup", {"key": "d"}), "done")
        started = time.monotonic()
        run = await run_question(config, "Q", steps)
        assert time.monotonic() - started < 10
    why = run.summary()["unavailable_servers"]["web"]
    assert "HTTP 401 Unauthorized: the server wants authorization (Bearer)" in why
    assert seen.get("initialize") == 1 and "value-of-d" in run.seen("ok__lookup")[0]
    said = [r.getMessage() for r in caplog.records if "HTTP 401 Unauthorized from" in r.getMessage()]
    assert said and not [line for line in said if "Sup3rSecret" in line]


async def test_event_streams_ended_at_once_are_reopened_at_a_bounded_rate(tmp_path: Path, pins: Path) -> None:
    """Each GET event stream ends at once with ``retry: 0``: before, the SDK reopened it as fast as
    the network allowed for the session's life (about 25 a second on a loaded machine, hundreds
    idle); now at most one per ``MIN_REOPEN_S``, and the calls are answered."""
    with _web("reopen") as (web, seen):
        config = write_config(tmp_path, [web, honest_server(20)], pins_from=pins)
        await approve(config, "web")
        seen.clear()
        started = time.monotonic()
        run = await run_question(config, "Q", _steps())
        elapsed, reopened = time.monotonic() - started, seen.get("GET", 0)
    assert [f"value-of-{k}" in s for k, s in zip("abc", run.seen("web__lookup"), strict=True)] == [True] * 3
    assert 2 <= reopened <= elapsed / MIN_REOPEN_S + 2
    assert "value-of-d" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_a_notification_left_unacknowledged_does_not_freeze_the_session(
    tmp_path: Path, pins: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server holds the POST of each notification (``notifications/initialized`` first) for
    30 s: before, the SDK sent nothing more until it was answered, the listing timed out (20 s)
    and the server never started (past httpx's read timeout the SDK's writer ended, every later
    call waiting out its timeout); now taken as accepted after ``ACK_WAIT_S``, and every call
    is answered; the honest server serves."""
    with _web("unacknowledged") as (web, seen):
        config = write_config(tmp_path, [web, honest_server(20)], pins_from=pins)
        started = time.monotonic()
        await approve(config, "web")
        run = await run_question(config, "Q", _steps())
        assert time.monotonic() - started < 4 * ACK_WAIT_S
    assert [f"value-of-{k}" in s for k, s in zip("abc", run.seen("web__lookup"), strict=True)] == [True] * 3
    assert seen["notifications/initialized"] == 2  # one a connection, each taken as accepted
    said = "[web] left a notification (notifications/initialized) unacknowledged for 5s: taken as accepted"
    assert said in [r.getMessage() for r in caplog.records]
    assert "value-of-d" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_a_tool_too_large_to_offer_a_model_is_left_out_and_its_server_serves(
    tmp_path: Path, pins: Path
) -> None:
    """A harmless tool whose definition is a quarter megabyte (plain prose, a 20 000-key enum):
    before, it was reviewed unflagged, approved and offered whole, each model request of the run
    that large (a megabyte of it, 340k tokens: past every context window); now left out as
    invalid at review, approval and every listing, named with its size, and the server's other
    tool and the honest server serve."""
    server = {
        **honest_server(20),
        "name": "x",
        "command": [sys.executable, str(WILD5)],
        "env": {"W5_MODE": "big_definition"},
    }
    config = write_config(
        tmp_path,
        [{**server, "effects": {"lookup": "read", "big": "read"}}, honest_server(20)],
        pins_from=pins,
    )
    review, pinned, skipped = await approve_server(config, "x", actor="tester")
    assert pinned == ["lookup"] and [t.check.tool for t in review.tools] == ["lookup"]
    assert f"more than the host offers a model ({MAX_DEFINITION_CHARS})" in skipped["big"]
    steps = script(
        ("x__big", {"key": "item-3"}), ("x__lookup", {"key": "a"}), ("ok__lookup", {"key": "d"}), "done"
    )
    run = await run_question(config, "Q", steps)
    assert run.result.trace_path is not None
    events = read_trace(run.result.trace_path)
    [started] = [e for e in events if e["kind"] == "run_started"]
    assert sorted(started["tools"]) == ["ok__lookup", "x__lookup"]
    assert max(e["request_bytes"] for e in events if e["kind"] == "context_composed") < 20_000
    assert "value-of-item-3" not in run.seen("x__big")[0] and "value-of-a" in run.seen("x__lookup")[0]
    assert "value-of-d" in run.seen("ok__lookup")[0]


async def test_megabytes_of_server_instructions_are_cut_for_review(tmp_path: Path, pins: Path) -> None:
    """2 MB of plain instructions (never sent to a model, shown at review): before, kept whole,
    scanned for some 20 s and printed whole on the person's terminal; now cut at the size of
    the largest definition, named, and the server's tool is approved and served."""
    server = {
        **honest_server(20),
        "name": "x",
        "command": [sys.executable, str(WILD5)],
        "env": {"W5_MODE": "big_instructions"},
    }
    config = write_config(tmp_path, [server, honest_server(20)], pins_from=pins)
    review, pinned, _ = await approve_server(config, "x", actor="tester")
    assert review.instructions is not None and len(review.instructions) < MAX_DEFINITION_CHARS + 200
    assert review.instructions.endswith(
        "[cut by the host: 1976000 characters in all, the rest never shown nor sent to a model]"
    )
    assert pinned == ["lookup"]
    run = await run_question(
        config, "Q", script(("x__lookup", {"key": "a"}), ("ok__lookup", {"key": "d"}), "done")
    )
    assert "value-of-a" in run.seen("x__lookup")[0] and "value-of-d" in run.seen("ok__lookup")[0]


async def test_a_server_offering_more_than_a_model_takes_is_offered_none_until_narrowed(
    tmp_path: Path, pins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tools each under the size of one definition but together more than the host offers from
    one server (the limit lowered here to 4000 characters, so that a few kilobytes show it):
    before, all offered; now the server is offered none, named with how to narrow it, and the
    honest server serves; narrowed with the config's ``tools``, the same server serves."""
    monkeypatch.setattr(_listing, "MAX_OFFERED_CHARS", 4000)
    server = {
        **honest_server(20),
        "name": "x",
        "command": [sys.executable, str(WILD5)],
        "env": {"W5_MODE": "many"},
    }
    (tmp_path / "narrowed").mkdir()
    config = write_config(tmp_path, [server, honest_server(20)], pins_from=pins)
    _, pinned, _ = await approve_server(config, "x", actor="tester")
    assert sorted(pinned) == ["lookup", "t0", "t1", "t2", "t3", "t4", "t5"]
    steps = script(("x__lookup", {"key": "a"}), ("ok__lookup", {"key": "d"}), "done")
    run = await run_question(config, "Q", steps)
    why = run.summary()["unavailable_servers"]["x"]
    assert "offers more than a model takes: the definitions of its 7 offered tools come to" in why
    assert "narrow them with the config's tools" in why and "value-of-a" not in run.seen("x__lookup")[0]
    assert "value-of-d" in run.seen("ok__lookup")[0]
    narrowed = write_config(
        tmp_path / "narrowed",
        [{**server, "tools": ["lookup"]}, honest_server(20)],
        pins_from=tmp_path / "pins.db",
    )
    run = await run_question(narrowed, "Q", steps)
    assert "value-of-a" in run.seen("x__lookup")[0] and "value-of-d" in run.seen("ok__lookup")[0]
