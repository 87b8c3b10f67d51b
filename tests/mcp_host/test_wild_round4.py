"""Wild servers, round four (``wild4_server.py``, written by hand, over real stdio): a flood of
list-changed notices hiding a rug pull, a listing of more tools than the host takes (in fewer
pages than the page limit), lone surrogates, a huge nested notification. Each runs next to an
honest server, and both are checked."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tether.core.stop import StopReason
from tether.mcp._source import MAX_LISTED_TOOLS
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace

from .conftest import approve, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

SERVER = Path(__file__).with_name("wild4_server.py")
LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


def w4(name: str, mode: str = "honest", **extra: Any) -> dict[str, Any]:
    """The server in ``mode``, unconfined (launched faster)."""
    return {
        "name": name,
        "command": [sys.executable, str(SERVER)],
        "env": {"W4_MODE": mode, **extra.pop("env", {})},
        "mode": "legacy",
        "effects": {"lookup": "read"},
        "timeout_s": 20,
        "sandbox": "none",
        **extra,
    }


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import anyio

    folder = tmp_path_factory.mktemp("w4pins")
    config = write_config(folder, [w4("x"), w4("ok")])

    async def go() -> None:
        for name in ("x", "ok"):
            await approve(config, name)

    anyio.run(go)
    return folder / "pins.db"


def _events(run: Any, kind: str) -> list[dict[str, Any]]:
    assert run.result.trace_path is not None
    return [e for e in read_trace(run.result.trace_path) if e["kind"] == kind]


def _steps(*keys: str) -> Any:
    """A call of x's lookup per key of ``keys`` (``ok:`` ones to the honest server), then done."""
    calls = [
        ("ok__lookup", {"key": k[3:]}) if k.startswith("ok:") else ("x__lookup", {"key": k}) for k in keys
    ]
    return script(*calls, "done")


async def test_a_flood_of_list_changed_notices_is_one_trace_row_and_the_change_is_still_caught(
    tmp_path: Path, pins: Path
) -> None:
    """3000 ``tools/list_changed`` notices in one call, then ``lookup`` listed with a new
    description: before, one trace row per notice (3000, unbounded); now one until the next
    listing, which still happens before the next call (``recheck: on_change``) and blocks the
    changed tool; the honest server serves."""
    config = write_config(tmp_path, [w4("x", "changed_flood", recheck="on_change"), w4("ok")], pins_from=pins)
    run = await run_question(config, "Q", _steps("a", "b", "d", "ok:c"))
    first, second, third = run.seen("x__lookup")
    assert "value-of-a" in first and "value-of-b" in second
    assert "capability_blocked" in third and "value-of-d" not in third
    rows = [e for e in _events(run, "mcp_capability_check") if e.get("trigger") == "list_changed"]
    assert len(rows) == 1
    assert "value-of-c" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


async def test_a_listing_of_more_tools_than_the_host_takes_fails_that_server_at_once(
    tmp_path: Path, pins: Path
) -> None:
    """60 pages of 3000 tools (fewer pages than the page limit): before, the host took them all
    and the server missed its 30 s connect timeout; now refused past ``MAX_LISTED_TOOLS``,
    named, in seconds, and the honest server serves."""
    config = write_config(tmp_path, [w4("x", "fat_pages"), w4("ok")], pins_from=pins)
    started = time.monotonic()
    run = await run_question(config, "Q", _steps("ok:c", "a"))
    assert time.monotonic() - started < 15
    why = run.summary()["unavailable_servers"]["x"]
    assert f"its tool listing went past {MAX_LISTED_TOOLS} tools" in why
    assert "value-of-c" in run.seen("ok__lookup")[0]


@pytest.mark.parametrize(
    ("mode", "said"),
    # (a lone surrogate is read as U+FFFD since wild round 32, as the TypeScript SDK reads it)
    [("surrogate", "value-of-b \ufffd end"), ("huge_note", "value-of-b")],
)
async def test_lone_surrogates_and_a_huge_nested_notification_are_contained(
    tmp_path: Path, pins: Path, mode: str, said: str
) -> None:
    """Held already (a guard, not a fix): a lone surrogate never reaches the model as itself; a 5 MB
    log notification nested 200 deep is dropped or logged, and the call answers."""
    config = write_config(tmp_path, [w4("x", mode), w4("ok")], pins_from=pins)
    run = await run_question(config, "Q", _steps("a", "b", "ok:c"))
    first, second = run.seen("x__lookup")
    assert "value-of-a" in first and said in second and "\ud800" not in second
    assert "value-of-c" in run.seen("ok__lookup")[0]


# -- over Streamable HTTP: an answer larger than the host accepts ------------------------------------


def _giant_http_app() -> type[BaseHTTPRequestHandler]:
    """A Streamable HTTP server by hand (JSON answers only): ``lookup`` answers its first call,
    then answers each with a 10 MB JSON body (no SSE: the SDK caps an SSE event itself)."""
    calls = [0]

    class App(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def _send(self, status: int, body: bytes = b"") -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(405)

        def do_DELETE(self) -> None:
            self._send(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            if ident is None:
                return self._send(202)
            if method == "initialize":
                result: dict[str, Any] = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "giant", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [LOOKUP]}
            elif method == "tools/call":
                calls[0] += 1
                key = (params.get("arguments") or {}).get("key")
                text = f"value-of-{key}" + (" " + "G" * 10_000_000 if calls[0] > 1 else "")
                result = {"content": [{"type": "text", "text": text}]}
            else:
                return self._send(200, json.dumps({"jsonrpc": "2.0", "id": ident, "result": {}}).encode())
            self._send(200, json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode())

    return App


@pytest.fixture
def giant_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _giant_http_app())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


async def test_an_http_answer_larger_than_the_host_accepts_fails_its_call_as_on_stdio(
    tmp_path: Path, pins: Path, giant_url: str
) -> None:
    """A 10 MB JSON body: before, read whole (no cap on this path: stdio discards a line past
    the host's limit as it streams) and handed on cut; now the read stops at the same limit
    and the call it answers fails at once, named; the server and the honest one keep serving."""
    web = {
        "name": "web",
        "transport": "http",
        "url": giant_url,
        "mode": "legacy",
        "effects": {"lookup": "read"},
    }
    config = write_config(tmp_path, [web, w4("ok")], pins_from=pins)
    await approve(config, "web")
    steps = script(
        ("web__lookup", {"key": "a"}), ("web__lookup", {"key": "b"}), ("ok__lookup", {"key": "c"}), "done"
    )
    run = await run_question(config, "Q", steps)
    first, second = run.seen("web__lookup")
    assert "value-of-a" in first
    assert "larger than the host accepts" in second and "GGGG" not in second
    assert "value-of-c" in run.seen("ok__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED
