"""Wild servers, round seven: a Streamable HTTP server (round six's, by hand) that answers
``tools/list`` with an event stream whose lines end as the event-stream format allows but in
another mix than ``\\r\\n\\r\\n`` (an LF line, then a CRLF empty line), listing a tool nested
deeper than the SDK's JSON parser reads. It runs next to an honest stdio server
(``wild4_server.py``), and both are checked: the hostile tool is left out, the other tools serve."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.mcp._approve import approve_server
from tether.mcp._deep import CUT, PARSER_DEPTH, cut_events
from tether.mcphost._runner import run_question
from tether_testing.loopback import serving

from .conftest import approve, honest_server, script, write_config
from .test_wild_round6 import _served, _wild_http
from .wild6_server import DEEP, LOOKUP

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

# (a line's end, the empty line that ends an event): as the SDK's event-stream reader takes them
FRAMINGS = {"lf_then_crlf": (b"\n", b"\r\n"), "crlf_then_cr": (b"\r\n", b"\r"), "lf_then_cr": (b"\n", b"\r")}
_NOTE = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}}
_LOG = b"data: " + json.dumps(_NOTE).encode() + b"\n\n"


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pins approving ``lookup`` of the honest server ``ok`` (saves a launch a test)."""
    import anyio

    folder = tmp_path_factory.mktemp("w7pins")
    anyio.run(approve, write_config(folder, [honest_server(20)]), "ok")
    return folder / "pins.db"


@contextlib.contextmanager
def _mixed_web() -> Iterator[dict[str, Any]]:
    """Round six's server in mode ``deep_events``, its event streams' lines ending in LF and an
    event's empty line in CRLF (``\\n\\r\\n``), a log message sent before the listing."""
    base_app = _wild_http("deep_events", [])

    class App(base_app):  # type: ignore[misc,valid-type]  (a class made at run time)
        def _send(self, status: int, body: Any = None, **headers: str) -> None:
            if isinstance(body, bytes):  # a log message first: the listing is not the only event
                body = (_LOG + body).replace(b"\r\n", b"\n").replace(b"\n\n", b"\n\r\n")
            super()._send(status, body, **headers)

    with serving(App) as base:
        yield {"name": "x", "url": f"{base}/mcp", "mode": "legacy", "timeout_s": 20}


async def test_a_listing_too_deep_in_events_framed_lf_then_crlf_is_cut_and_the_others_served(
    tmp_path: Path, pins: Path
) -> None:
    """Before, the host found an event's end only at ``\\r\\n\\r\\n``, ``\\n\\n`` or ``\\r\\r``:
    a listing after a log message, each ended by ``\\n\\r\\n`` (an end the SDK reads), was
    taken for one event with the message and went on uncut, the SDK refused the
    whole listing for its one tool nested too deep, and the server was unavailable; now that
    tool alone is left out, named, and the server's other tool and the honest server serve."""
    with _mixed_web() as server:
        server["effects"] = {"lookup": "read", "deep": "read"}
        config = write_config(tmp_path, [server, honest_server(20)], pins_from=pins)
        review, pinned, skipped = await approve_server(config, "x", actor="tester")
        assert pinned == ["lookup"] and [t.check.tool for t in review.tools] == ["lookup"]
        assert f"nests more than {PARSER_DEPTH - 3} levels deep" in skipped["deep"]
        calls = [("x__deep", {}), *[("x__lookup", {"key": k}) for k in "abc"], ("ok__lookup", {"key": "d"})]
        run = await run_question(config, "Q", script(*calls, "done"))
    _served(run, "x")
    assert "value-of" not in run.seen("x__deep")[0]


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
@pytest.mark.parametrize("size", [1, 2, 3, 4096])
async def test_events_in_every_framing_pass_whole_and_only_the_deep_listing_is_cut(
    framing: str, size: int
) -> None:
    """An event's end in any mix of line endings the format allows (CRLF, LF, CR), the stream cut
    into chunks of ``size`` (a CRLF split between two): the other events pass byte for byte (a
    CRLF inside an event is one line's end, not an empty line), the listing's ``deep`` alone is
    cut."""
    eol, blank = FRAMINGS[framing]
    listing = json.dumps({"jsonrpc": "2.0", "id": 2, "result": {"tools": [LOOKUP, DEEP]}}).encode()
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"tools": 1}})
    before = b"id: 1" + eol + b"data: " + note.encode() + eol + blank
    after = b": a comment" + eol + blank
    stream = before + b"event: message" + eol + b"id: 2" + eol + b"data: " + listing + eol + blank + after

    async def chunks() -> Any:
        for at in range(0, len(stream), size):
            yield stream[at : at + size]

    out = b"".join([chunk async for chunk in cut_events(chunks(), 1 << 20)])
    assert out.startswith(before) and out.endswith(after)
    middle = out[len(before) : -len(after)].split(b"\n")
    assert middle[:2] == [b"event: message", b"id: 2"] and middle[3:] == [b"", b""]
    tools = json.loads(middle[2].removeprefix(b"data: "))["result"]["tools"]
    assert tools[0] == LOOKUP and tools[1]["name"] == "deep" and CUT in tools[1]
