"""Wild servers, round twenty-seven: a Streamable HTTP server written by hand (``wild27_web.py``)
and a stdio one (``wild27_server.py``), each beside the honest stdio server (``wild4_server.py``),
and the published reference server (``@modelcontextprotocol/server-everything``), checked to serve.

Contained already (checked here): on stdio, an answer under its id as a string, ``NaN`` and a
number of 5,000 digits in structured content, an error result with structured content its output
schema does not describe, a ``ping`` or a ``tools/call`` asked of the host during a call, an
answer framed with ``Content-Length`` as language servers frame theirs, progress after the answer,
``"result": null`` and a result without content; over HTTP, a ``307`` back to the same URL, a
``308`` within the origin, an empty JSON body, another session id given with an answer; the
reference server's images, resource links, embedded resources, structured content and progress.

Found:

* an HTTP server closing the connection without answering one request (a worker restarted, a
  proxy or load balancer dropping it: httpx's "Server disconnected without sending a response")
  was taken for gone: the session dropped, the server quarantined and the run stopped
  ("dependency_unavailable"), though it served the next request. The host now asks it a ``ping``:
  a server still answering fails that call alone, named, whether it took effect unknown; one
  that no longer knows the session (restarted) is begun anew, a read sent again and a write not;
  only a server answering nothing is lost, as before;
* a ``429`` or ``5xx`` answered with a page or text (a proxy's, a rate limiter's) reached the model
  as the SDK's "Server returned an error response": it is now named by its status (and the wait a
  ``429`` or ``503`` asks), the page itself never shown;
* an HTTP server closing the connection on a notification POSTed, with no answer (its handler
  failing on a message with no id), ended the SDK's writer: the session was lost at once, and
  the server could not even start. Such a notification is now taken as delivered, as one left
  unacknowledged already was; a server gone fails the next request.
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

from published_installs import once
from tether.core.stop import Limits, StopReason
from tether.errors import DependencyUnavailable
from tether.mcp._hosting import mcp_sources
from tether.mcphost._build import build_host
from tether.mcphost._runner import run_question
from tether.tools._contract import ToolContext
from tether_testing.loopback import serving

from .conftest import approve, honest_server, script, write_config
from .wild27_web import app

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
DROPPED = "the server closed the connection without answering this request"


def _value(said: str, key: str) -> bool:
    """Whether ``said`` is the call's own answer, labelled as the server's."""
    return said.startswith('<untrusted_data source="x"') and f"\nvalue-of-{key}\n</untrusted_data>" in said


def _failed(said: str, why: str) -> bool:
    return said.startswith('<untrusted_data source="x"') and 'error="upstream_error"' in said and why in said


@contextmanager
def _web(effect: str = "read", **kw: bool) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """``wild27_web.py`` on 127.0.0.1: its config entry, and what it was sent."""
    seen: list[str] = []
    stop = threading.Event()
    try:
        with serving(app(seen, stop, **kw)) as base:
            entry = {"name": "x", "url": f"{base}/mcp", "mode": "legacy", "effects": {"lookup": effect}}
            yield {**entry, "timeout_s": 60}, seen
            stop.set()
    finally:
        stop.set()


async def _run(tmp_path: Path, entry: dict[str, Any], keys: list[str], tool: str = "lookup") -> Any:
    """The run calling ``x__<tool>`` with each key, then ``ok``: ``ok`` served, the run done."""
    config = write_config(tmp_path, [entry, honest_server()])
    await approve(config, "x")
    await approve(config, "ok")
    steps = [(f"x__{tool}", {"key": k}) for k in keys]
    with anyio.fail_after(50):  # (the calls' own timeouts are 60 s)
        run = await run_question(
            config, "Q", script(*steps, ("ok__lookup", {"key": "z"}), "done"), limits=Limits(max_steps=30)
        )
    assert "value-of-z" in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED
    assert len(run.seen(f"x__{tool}")) == len(keys) and not run.summary().get("unavailable_servers")
    return run


async def test_a_connection_closed_without_an_answer_fails_that_call_and_the_server_serves(
    tmp_path: Path,
) -> None:
    """``reset`` closes its connection with no answer; the server is there (its ping answered):
    the call fails, named, whether it took effect unknown, sent once; the next call is served on
    the same session (before: the server quarantined, the run stopped)."""
    with _web() as (entry, seen):
        said = (await _run(tmp_path, entry, ["reset", "plain"])).seen("x__lookup")
    assert _failed(said[0], f"{DROPPED} (it still answers): whether it took effect is unknown")
    assert _value(said[1], "plain")
    calls = [s for s in seen if s.startswith("tools/call")]
    assert calls == ["tools/call /mcp 's27-0'"] * 2 and "ping /mcp 's27-0'" in seen
    assert sum(s.startswith("initialize") for s in seen) == 2  # (the approval's, the run's)


async def test_a_server_restarted_under_a_read_is_served_on_a_new_session(tmp_path: Path) -> None:
    """``crash`` closes its connection with no answer, and the server then knows no session it
    gave before (restarted): a new session is begun and the read sent again on it, once."""
    with _web() as (entry, seen):
        said = (await _run(tmp_path, entry, ["crash", "plain"])).seen("x__lookup")
    assert _value(said[0], "crash") and _value(said[1], "plain")
    calls = [s for s in seen if s.startswith("tools/call")]
    assert calls == ["tools/call /mcp 's27-0'", "tools/call /mcp 's27-1'", "tools/call /mcp 's27-1'"]


async def test_a_write_whose_server_restarted_under_it_is_not_sent_again(tmp_path: Path) -> None:
    """The same for a write: it may have run before the server went down, so the new session is
    begun but the call is not sent again (the model told to check first); the next write is served
    on the new session, once. (Called on the source: a run would pause each write for a person.)"""
    with _web("write") as (entry, seen):
        config = write_config(tmp_path, [entry])
        await approve(config, "x")
        host = build_host(config)
        await host.start()
        try:
            source = next(s for s in mcp_sources(host) if s.name == "x")
            lookup = next(s for s in host.offered() if s.name == "x__lookup")
            ctx = ToolContext("w27", "default", frozenset(), None, "c1")
            with pytest.raises(DependencyUnavailable, match="was not sent again") as refused:
                await source.call(lookup, {"key": "crash"}, ctx)
            again = await source.call(lookup, {"key": "after"}, ctx)
        finally:
            await host.aclose()
    assert "closed the connection without answering x__lookup" in str(refused.value)
    assert "value-of-after" in again.text
    calls = [s for s in seen if s.startswith("tools/call")]
    assert calls == ["tools/call /mcp 's27-0'", "tools/call /mcp 's27-1'"]


async def test_a_server_gone_under_a_call_is_still_lost(tmp_path: Path) -> None:
    """``die`` closes its connection with no answer and stops serving (its port closed): the ping
    gets no answer, the server is lost as before, and the honest one still serves."""
    with _web() as (entry, _seen):
        config = write_config(tmp_path, [entry, honest_server()])
        await approve(config, "x")
        await approve(config, "ok")
        steps = script(("x__lookup", {"key": "die"}), ("ok__lookup", {"key": "z"}), "done")
        with anyio.fail_after(50):
            run = await run_question(config, "Q", steps)
    said = run.seen("x__lookup")[0]
    assert 'error="dependency_unavailable"' in said and "went away during x__lookup" in said
    assert "quarantined" in run.summary()["unavailable_servers"]["x"]


async def test_a_server_closing_the_connection_on_each_notification_starts_and_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every notification POSTed has its connection closed with no answer (a handler failing on a
    message with no id, as ``message["id"]`` does): before, the SDK's writer ended and the server
    could not even start ("Connection closed"); now the notification is taken as delivered, named
    on the terminal, and the calls are served."""
    with _web(drop_notes=True) as (entry, seen):
        said = (await _run(tmp_path, entry, ["a", "b"])).seen("x__lookup")
    assert _value(said[0], "a") and _value(said[1], "b")
    assert "notifications/initialized /mcp 's27-0'" in seen
    logged = [r.getMessage() for r in caplog.records]
    assert (
        "[x] closed the connection on a notification (notifications/initialized): taken as delivered"
        in logged
    )


async def test_an_http_error_status_with_a_page_is_named_for_the_model(tmp_path: Path) -> None:
    """``html`` is answered ``500`` with an HTML page, ``busy`` ``429`` asking to be retried in an
    hour (as proxies, gateways and rate limiters answer): the model reads the status, and the
    wait asked (before: "Server returned an error response", whatever the status); the page is
    never shown; the session serves the next call."""
    with _web() as (entry, seen):
        said = (await _run(tmp_path, entry, ["html", "busy", "plain"])).seen("x__lookup")
    assert _failed(said[0], "the server answered HTTP 500 Internal Server Error")
    assert _failed(said[1], "HTTP 429 Too Many Requests (rate limited), asking to be retried after 3600s")
    assert _value(said[2], "plain") and "<html>" not in "".join(said) and "slow down" not in "".join(said)
    assert sum(s.startswith("initialize") for s in seen) == 2


async def test_http_answers_of_odd_redirects_and_bodies_fail_alone(tmp_path: Path) -> None:
    """Already contained, kept: a ``307`` back to the same URL (not followed, named), a ``308``
    within the origin (followed), an empty JSON body, another session id with an answer: each
    call fails or is served alone, the session kept."""
    keys = ["loop", "away", "empty", "newsession", "plain"]
    with _web() as (entry, seen):
        said = (await _run(tmp_path, entry, keys)).seen("x__lookup")
    assert _failed(said[0], "not followed") and _value(said[1], "away") and _failed(said[2], "JSON")
    assert _value(said[3], "newsession") and _value(said[4], "plain")
    assert sum(s.startswith("initialize") for s in seen) == 2


async def test_a_stdio_server_answering_oddly_is_contained(tmp_path: Path) -> None:
    """Already contained, kept: each call gets its own answer, labelled, or fails alone, named, at
    once (no call waits out its timeout), and the server serves the next call."""
    entry = {
        "name": "x",
        "command": [sys.executable, str(HERE / "wild27_server.py")],
        "mode": "legacy",
        "effects": {"lookup": "read", "typed": "read"},
        "timeout_s": 60,
        "sandbox": "none",
    }
    served = ["strid", "nan", "pinghost", "lsp", "hostcall", "progafter", "plain"]
    failing = ["bignum", "nullresult", "nocontent"]
    said = (await _run(tmp_path, entry, served + failing)).seen("x__lookup")
    assert [_value(s, k) for s, k in zip(said, served, strict=False)] == [True] * len(served)
    assert _failed(said[7], "number out of range") and _failed(said[8], "not valid JSON-RPC")
    assert _failed(said[9], "content")
    (tmp_path / "t").mkdir()
    typed = (await _run(tmp_path / "t", entry, ["errstruct", "plain"], tool="typed")).seen("x__typed")
    assert 'error="server_error"' in typed[0] and "failed: value-of-errstruct" in typed[0]
    assert '{"value": "value-of-plain"}' in typed[1]


@pytest.mark.slow
@pytest.mark.npm
async def test_the_reference_servers_content_kinds_are_read_or_named(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``@modelcontextprotocol/server-everything`` (npm, ``node dist/index.js stdio``, confined):
    its image and audio-free tools as a user calls them: the image named, not passed on; links
    named, not fetched; an embedded text resource read, a binary one named; structured content
    read; a long operation's progress shown and its answer read."""
    package = once(tmp_path_factory, "npm-everything") / "node_modules" / "@modelcontextprotocol"
    index = package / "server-everything" / "dist" / "index.js"
    tools = {
        "get-tiny-image": {},
        "get-resource-links": {"count": 2},
        "get-resource-reference": {"resourceType": "Blob", "resourceId": 2},
        "get-structured-content": {"location": "Chicago"},
        "trigger-long-running-operation": {"duration": 1, "steps": 2},
        "echo": {"message": "after"},
    }
    entry = {
        "name": "e",
        "command": ["node", str(index), "stdio"],
        "mode": "legacy",
        "timeout_s": 60,
        "effects": dict.fromkeys(tools, "read"),
    }
    config = write_config(tmp_path, [entry])
    pinned, _ = await approve(config, "e")
    assert set(tools) <= set(pinned)
    steps = [(f"e__{t}", a) for t, a in tools.items()]
    run = await run_question(config, "Q", script(*steps, "done"), limits=Limits(max_steps=20))
    assert run.result.stop_reason is StopReason.ACCEPTED
    said = {t: run.seen(f"e__{t}")[0] for t in tools}
    assert all(s.startswith('<untrusted_data source="e"') and "error=" not in s for s in said.values())
    assert "[image content omitted]" in said["get-tiny-image"] and "base64" not in said["get-tiny-image"]
    assert said["get-resource-links"].count("[resource_link not fetched: demo://resource/") == 2
    assert (
        "[embedded binary resource omitted: demo://resource/dynamic/blob/2]" in said["get-resource-reference"]
    )
    assert '"temperature"' in said["get-structured-content"]
    assert "Long running operation completed" in said["trigger-long-running-operation"]
    assert "Echo: after" in said["echo"]
