"""Wild servers, round twenty: a stdio server written by hand (``wild20_server.py``), a Streamable
HTTP one (``wild20_web.py``) and the published reference server in its ``sse`` mode (its README's
``npx @modelcontextprotocol/server-everything sse``), each next to the honest stdio server
(``wild4_server.py``), checked to serve.
Found:
* a call whose answer's event stream ended with no answer (a server, or a proxy before it,
  closing that one stream early) was read as the server gone: its session was dropped and the
  server quarantined, so the run stopped ("dependency_unavailable") though the server served on.
  Now the session is asked (a ``ping``, ``STREAM_CHECK_S``): still there, the call alone fails,
  named, and the server keeps serving; gone (the ping refused), the server is lost as before;
* a stdio server answering a request it could not read as JSON-RPC has it (an error of
  ``"id": null``) left the call waiting out its whole timeout (the SDK drops such an error). Now,
  while one request alone awaits an answer, the error is that request's answer, named;
* a URL serving the older HTTP+SSE transport (2024-11-05: the reference server's ``sse`` mode)
  failed to start as ``MCPError: Not Found`` alone. Now the host asks the URL as the spec's
  backwards-compatibility section does (a ``GET`` whose event stream opens with an ``endpoint``
  event) and tells the person what the URL serves and what to configure instead.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from published_installs import once
from tether.core.stop import StopReason
from tether.errors import ConfigError, DependencyUnavailable
from tether.mcp._failures import STREAM_CHECK_S
from tether.mcp._startup import serves_legacy_sse
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace
from tether_testing.loopback import serving

from .conftest import approve, honest_server, script, write_config
from .wild20_server import UNREADABLE
from .wild20_web import app

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
LEGACY = "serves the older HTTP+SSE transport (2024-11-05"


def _served(run: Any, key: str = "c") -> bool:
    """The honest server answered its lookup and the run ended as the model meant."""
    return f"value-of-{key}" in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED


@contextmanager
def _web(mode: str) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """``wild20_web.py`` in ``mode`` on 127.0.0.1: its config entry, and the methods it was sent."""
    seen: list[str] = []
    stop = threading.Event()
    try:
        with serving(app(mode, seen, stop)) as base:
            entry = {"name": "web", "url": f"{base}/mcp", "mode": "legacy", "effects": {"lookup": "read"}}
            yield {**entry, "timeout_s": 60}, seen
            stop.set()
    finally:
        stop.set()


@pytest.mark.parametrize("mode", ["ended", "ended_id"])
async def test_a_calls_event_stream_ended_without_its_answer_fails_that_call_and_the_session_serves(
    tmp_path: Path, mode: str
) -> None:
    """The stream of ``b``'s answer ends with no answer (with no event, or with one of an id whose
    resumption is refused): ``b`` fails, named, its outcome unknown; the session still answers, so
    ``c`` on the same server is served, as is the other server, and the run ends as meant. Before:
    the server was quarantined and the run stopped after ``b``."""
    with _web(mode) as (entry, seen):
        config = write_config(tmp_path, [entry, honest_server()])
        await approve(config, "web")
        await approve(config, "ok")
        steps = [("web__lookup", {"key": k}) for k in "abc"]
        run = await run_question(config, "Q", script(*steps, ("ok__lookup", {"key": "d"}), "done"))
    first, second, third = run.seen("web__lookup")
    assert "value-of-a" in first and "value-of-c" in third and _served(run, key="d")
    assert 'error="upstream_error"' in second and "without the answer" in second
    assert "whether web__lookup took effect is unknown" in second
    calls = seen[seen.index("tools/call") :]
    assert "initialize" not in calls and calls.count("ping") == 1  # one session, asked once
    assert run.result.trace_path is not None
    events = read_trace(run.result.trace_path)
    ended = [e for e in events if e["kind"] == "mcp_connection" and e.get("action") == "stream_ended"]
    assert [e["tool"] for e in ended] == ["web__lookup"]
    assert not [e for e in events if e["kind"] == "mcp_connection" and e.get("action") == "lost"]


async def test_a_calls_event_stream_ended_by_a_server_that_lost_the_session_is_still_a_lost_server(
    tmp_path: Path,
) -> None:
    """The same stream's end where the session is gone (its ping answered 404: the server restarted
    under it) is still the server lost: the call fails as before, and the other server serves."""
    assert STREAM_CHECK_S > 0
    with _web("gone") as (entry, seen):
        config = write_config(tmp_path, [entry, honest_server()])
        await approve(config, "web")
        await approve(config, "ok")
        steps = [("web__lookup", {"key": k}) for k in "ab"]
        run = await run_question(config, "Q", script(*steps, ("ok__lookup", {"key": "d"}), "done"))
    first, second = run.seen("web__lookup")
    assert "value-of-a" in first and 'error="dependency_unavailable"' in second
    assert "went away during web__lookup" in second and "ping" in seen
    assert "value-of-d" in run.seen("ok__lookup")[-1]


async def test_an_error_naming_no_request_answers_the_one_request_waiting(tmp_path: Path) -> None:
    """``wild20_server.py`` answers the call of key ``unreadable`` with an error of ``"id": null``:
    that call fails at once with the server's words (before: it waited out its 60 s timeout),
    and the server goes on serving, as does the other one."""
    server = {
        "name": "x",
        "command": [sys.executable, str(HERE / "wild20_server.py")],
        "mode": "legacy",
        "effects": {"lookup": "read"},
        "timeout_s": 60,
        "sandbox": "none",
    }
    config = write_config(tmp_path, [server, honest_server()])
    await approve(config, "x")
    await approve(config, "ok")
    steps = [("x__lookup", {"key": "unreadable"}), ("x__lookup", {"key": "b"}), ("ok__lookup", {"key": "c"})]
    with anyio.fail_after(30):  # (the call's own timeout is 60 s)
        run = await run_question(config, "Q", script(*steps, "done"))
    unreadable, served = run.seen("x__lookup")
    assert 'error="upstream_error"' in unreadable and UNREADABLE in unreadable
    assert "could not read this request" in unreadable
    assert "value-of-b" in served and _served(run)


async def test_a_url_of_the_older_sse_transport_is_named_with_what_to_configure(tmp_path: Path) -> None:
    """A URL whose server speaks HTTP+SSE (2024-11-05) refuses the ``initialize`` POST (404): the
    person is told the URL serves that transport, which the host does not speak, and what to set
    instead; the model reads the short cause only, and the other server serves."""
    with _web("legacy_sse") as (entry, seen):
        config = write_config(tmp_path, [entry, honest_server()])
        with pytest.raises(DependencyUnavailable) as caught:
            await approve(config, "web")
        assert LEGACY in str(caught.value) and "`url`" in str(caught.value)
        await approve(config, "ok")
        run = await run_question(
            config, "Q", script(("web__lookup", {"key": "a"}), ("ok__lookup", {"key": "c"}), "ok")
        )
    assert LEGACY not in run.seen("web__lookup")[0] and _served(run)
    assert LEGACY in run.summary()["unavailable_servers"]["web"]
    assert "GET" in seen


async def test_only_an_event_stream_opening_with_an_endpoint_event_is_the_older_transport() -> None:
    """A Streamable HTTP server's ``GET`` (405), its own stream (no ``endpoint`` event first) and
    no server at all are not the older transport."""
    for mode in ("ended", "legacy_sse"):
        with _web(mode) as (entry, _):
            assert await serves_legacy_sse(entry["url"]) is (mode == "legacy_sse")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    assert await serves_legacy_sse(f"http://127.0.0.1:{port}/sse") is False


def test_a_config_of_the_sse_transport_says_what_to_configure_instead(tmp_path: Path) -> None:
    """Another client's entry for the older transport (``type: sse``) is refused saying what works:
    the server's Streamable HTTP endpoint, or its stdio form."""
    with pytest.raises(ConfigError) as caught:
        write_config(tmp_path, [{"name": "s", "type": "sse", "url": "http://127.0.0.1:1/sse"}])
    assert "SSE transport (2024-11-05)" in str(caught.value)
    assert "`/mcp`" in str(caught.value) and "`command`" in str(caught.value)


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``@modelcontextprotocol/server-everything``, installed once per session."""
    folder = once(tmp_path_factory, "npm-everything") / "node_modules" / "@modelcontextprotocol"
    return folder / "server-everything" / "dist" / "index.js"


@pytest.mark.slow
@pytest.mark.npm
async def test_the_reference_servers_sse_mode_is_named_with_what_to_configure(
    tmp_path: Path, everything: Path
) -> None:
    """The published reference server started as its README's ``sse`` mode, its URL
    (``/sse``) configured as a user would: the start fails naming the transport and the setting."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "PORT": str(port)}
    # It says on stderr when it listens.
    proc = subprocess.Popen(["node", str(everything), "sse"], env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if "running on port" in line:
                break
        else:
            pytest.fail("the reference server exited before listening")
        config = write_config(tmp_path, [{"name": "ref", "url": f"http://127.0.0.1:{port}/sse"}])
        with pytest.raises(DependencyUnavailable) as caught:
            await approve(config, "ref")
        assert LEGACY in str(caught.value) and "streamableHttp" in str(caught.value)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stderr.close()
