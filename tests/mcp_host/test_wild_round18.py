"""Wild servers, round eighteen: a Streamable HTTP server with the official SDK that forgets its
sessions and answers them 400 (``wild18_web.py``), the published reference server of 2025
(``@modelcontextprotocol/server-everything@2025.5.12``, its README's ``streamableHttp`` mode)
restarted under a session, a stdio server written by hand (``wild18_server.py``) flooding
notifications, and the console's review of a server listing a tool nested too deep.

Found:

* a server answering a session it no longer knows with HTTP 400, as servers written before the
  spec said 404 do (the TypeScript SDK's examples and the published reference server of 2025:
  "Bad Request: No valid session ID provided"; Python SDK servers before about v1.10, in plain
  text), was never renewed: after it restarted every call failed with its words for the rest of
  the run. Now a 400 to a request carrying the session id is checked with a ``ping`` on the same
  session: refused too, the session is gone (``SESSION_REFUSED``) and a new one is opened once,
  as for a 404; a listing or a read is sent again on it, but a call with effects is not (a 400,
  unlike a 404, does not say the request went unprocessed): it fails saying so, and its next
  call is served. A 400 the session survives (the ping answered) is the server's answer, as before;
* a server flooding notifications (20,000 ``notifications/tools/list_changed``, or progress for
  tokens the host never gave, before each answer; ``wild18_server.py`` over stdio, the official
  SDK's server over Streamable HTTP) had every one validated by the SDK and dispatched as a task,
  about half a millisecond of the host's one event loop each: a run of two calls took 27 s
  against 4 s, every other server's calls and the model's waiting. Now a list-changed notice
  repeated before the server's next answer is dropped before the SDK, other notifications pass
  at ``_flood.RATE`` a second (``BURST`` at once), and the person is told once per connection;
  answers and the server's own requests always pass;
* a confined server that failed to start by an error of its own program (the published
  ``mcp-server-sqlite`` installed today gets the MCP SDK 2.x and exits with ``AttributeError:
  'Server' object has no attribute 'list_resources'``) was said to have maybe failed for the
  sandbox ("list what it needs in sandbox_read / sandbox_write"); now the hint names its own
  error, which no sandbox causes, and a permission or network failure keeps its advice;
* a tool the host leaves out of a listing (nested past what the transport reads, a definition
  the SDK refuses, one for its app only) was named by ``tether mcp review`` but not on the
  console's review page, which listed the server's other tools only: the person pinning there
  never learned the server listed it. Now the page (and its JSON) names each, with why.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from published_installs import once
from tether.core.stop import StopReason
from tether.errors import DependencyUnavailable
from tether.mcp._deep import PARSER_DEPTH
from tether.mcp._hosting import mcp_sources
from tether.mcphost._build import build_host
from tether.mcphost._runner import run_question
from tether.tools._contract import ToolContext
from tether.trace._tracer import read_trace

from . import wild18_web
from .conftest import _serve, approve, script, web_server, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2", "X3")]

HERE = Path(__file__).parent
WILD6 = HERE / "wild6_server.py"
W18_TOOLS = ["lookup", "record", "forget", "picky", "storm"]
W18_EFFECTS = {"lookup": "read", "record": "write", "forget": "read", "picky": "read", "storm": "read"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- the console's review page names the tools left out ------------------------------------------


def _console(tmp_path: Path, servers: list[dict[str, Any]]) -> Any:
    """A console over a config of ``servers``, with ``root`` (admin everywhere) signed in."""
    pytest.importorskip("starlette", reason="the console extra is not installed")
    pytest.importorskip("jinja2", reason="the console extra is not installed")
    from starlette.testclient import TestClient

    from tether.console import create_app, sqlite_sources
    from tether.console._users import UserStore

    host = {"pins": "pins.db", "state": "state.db", "trace_dir": "traces", "tenant": "tenant-a"}
    config = tmp_path / "mcp.yaml"
    config.write_text(yaml.safe_dump({"host": host, "servers": servers}), encoding="utf-8")
    users = UserStore(tmp_path / "console.db", scrypt_n=2**10)
    sources = sqlite_sources(
        users_db=tmp_path / "console.db",
        approvals_db=tmp_path / "approvals.db",
        trace_dir=tmp_path / "traces",
        mcp_config=config,
        users=users,
    )
    sources.users.add_user("root", "correct horse battery")
    sources.users.grant("root", "*", "admin")
    app = create_app(
        sources, secret_key=b"wild18-console-key-0a1b2c3d4e5f6789", allowed_hosts=("testserver",)
    )
    client = TestClient(app, base_url="http://testserver")
    page = client.get("/login").text
    token = re.search(r'name="csrf_login" value="([^"]+)"', page)
    assert token is not None
    form = {
        "username": "root",
        "password": "correct horse battery",
        "csrf_login": token.group(1),
        "next": "/",
    }
    assert client.post("/login", data=form).status_code == 200
    return client, sources


def test_the_console_review_names_a_tool_left_out_for_nesting_too_deep(tmp_path: Path) -> None:
    """``deep`` nests 400 levels: left out of the listing (the server's ``lookup`` is offered).
    Before, the console's review page showed ``lookup`` alone, nothing saying ``deep`` was listed
    and left out; now the page and its JSON name it, with why, and ``lookup`` can still be pinned."""
    server = {
        "name": "x",
        "command": [sys.executable, str(WILD6)],
        "env": {"W6_MODE": "deep"},
        "sandbox": "none",
    }
    client, sources = _console(tmp_path, [server])
    try:
        html = client.get("/servers").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', html)
        assert csrf is not None
        review = client.post("/api/servers/x/review", headers={"X-CSRF-Token": csrf.group(1)}).json()
        assert [t["tool"] for t in review["tools"]] == ["lookup"]
        [left] = review["left_out"]
        assert left["tool"] == "deep" and f"nests more than {PARSER_DEPTH - 3} levels deep" in left["why"]
        page = client.post("/servers/x/review", data={"csrf_token": csrf.group(1)}).text
        assert "Listed but never offered (1)" in page and "<code>deep</code>" in page
        assert "levels deep" in page
        pinned = client.post(
            "/api/servers/x/pin",
            json={"digest": review["digest"], "tools": ["lookup"]},
            headers={"X-CSRF-Token": csrf.group(1)},
        )
        assert pinned.status_code == 200 and pinned.json()["pinned"] == ["lookup"]
    finally:
        client.close()
        sources.close()


# -- a server that answers a session it no longer knows with a 400 -------------------------------


@pytest.fixture(params=["ts", "py"])
def forgetful_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """``wild18_web``: a forgotten session answered 400 as the TypeScript SDK's examples do (a
    JSON-RPC body) or as the Python SDK did before about v1.10 (plain text)."""
    wild18_web.STATE.update(records=0, seen=set(), forgotten=set(), forget=False, probes=0)
    yield from _serve(wild18_web.build_app(request.param))


def _actions(run: Any, server: str = "web") -> list[str]:
    assert run.result.trace_path is not None
    events = read_trace(run.result.trace_path)
    return [e["action"] for e in events if e["kind"] == "mcp_connection" and e.get("server") == server]


@pytest.mark.parametrize("recheck", ["each_call", "on_change"])
async def test_a_session_the_server_answers_400_is_started_again_and_a_read_sent_again(
    tmp_path: Path, forgetful_url: str, recheck: str
) -> None:
    """Before, only a 404 meant "session gone": a server answering its forgotten session 400 had
    every later call fail with its words ("Bad Request: No valid session ID provided") for the
    rest of the run. Now the 400, confirmed by a ping on the session answered 400 too, opens a new
    session, once, and a read is sent again on it (``each_call`` meets the 400 on the listing
    before the call, ``on_change`` on the call itself)."""
    server = web_server(
        "web", forgetful_url, mode="legacy", recheck=recheck, tools=W18_TOOLS, effects=W18_EFFECTS
    )
    config = write_config(tmp_path, [server])
    await approve(config, "web")
    calls = [("web__lookup", {"key": "a"}), ("web__forget", {}), ("web__lookup", {"key": "b"})]
    run = await run_question(config, "Q", script(*calls, ("web__lookup", {"key": "c"}), "done"))
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert [r.count("value-of-") for r in run.seen("web__lookup")] == [1, 1, 1]
    assert "value-of-b" in run.seen("web__lookup")[1] and "value-of-c" in run.seen("web__lookup")[2]
    assert _actions(run) == ["new_session"]


async def test_a_call_with_effects_answered_400_is_not_sent_again_on_the_new_session(
    tmp_path: Path, forgetful_url: str
) -> None:
    """A 400, unlike a 404, does not say the request went unprocessed: a write that meets it opens
    the new session but is not sent again (the model is told to check before calling again); the
    next write runs on the new session, once. (Called on the source: a run would pause each write
    for a person's approval first.)"""
    server = web_server(
        "web", forgetful_url, mode="legacy", recheck="on_change", tools=W18_TOOLS, effects=W18_EFFECTS
    )
    config = write_config(tmp_path, [server])
    await approve(config, "web")
    host = build_host(config)
    await host.start()
    try:
        source = next(s for s in mcp_sources(host) if s.name == "web")
        specs = {s.name: s for s in host.offered()}
        ctx = ToolContext("w18", "default", frozenset(), None, "c1")
        first = await source.call(specs["web__record"], {"note": "a"}, ctx)
        await source.call(specs["web__forget"], {}, ctx)
        with pytest.raises(DependencyUnavailable, match="was not sent again") as refused:
            await source.call(specs["web__record"], {"note": "b"}, ctx)
        again = await source.call(specs["web__record"], {"note": "c"}, ctx)
        assert "recorded a (1)" in first.text and "recorded c (2)" in again.text
        assert "HTTP 400" in str(refused.value) and wild18_web.STATE["records"] == 2
    finally:
        await host.aclose()


async def test_a_400_the_session_survives_is_the_servers_answer_and_no_new_session(
    tmp_path: Path, forgetful_url: str
) -> None:
    """The server refuses one request with a 400 while the session lives (its ping answered): the
    call fails with the server's words, as before, no new session is opened, and the next call
    is served on the same session."""
    server = web_server(
        "web", forgetful_url, mode="legacy", recheck="on_change", tools=W18_TOOLS, effects=W18_EFFECTS
    )
    config = write_config(tmp_path, [server])
    await approve(config, "web")
    run = await run_question(
        config, "Q", script(("web__picky", {"note": "x"}), ("web__lookup", {"key": "k"}), "done")
    )
    assert run.result.stop_reason is StopReason.ACCEPTED
    refused = run.seen("web__picky")[0]
    assert "value-of" not in refused and "new session" not in refused
    assert "value-of-k" in run.seen("web__lookup")[0]
    assert wild18_web.STATE["probes"] >= 1 and _actions(run) == []


# -- the published reference server of 2025, restarted under a session ---------------------------


@pytest.fixture(scope="module")
def everything_2025(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``@modelcontextprotocol/server-everything@2025.5.12``, installed once per session."""
    folder = once(tmp_path_factory, "npm-everything-2025") / "node_modules" / "@modelcontextprotocol"
    return folder / "server-everything" / "dist" / "index.js"


def _listening(entry: Path, port: int) -> subprocess.Popen[str]:
    """``node dist/index.js streamableHttp`` (its README's ``npx ... streamableHttp``) on ``port``,
    once it says it listens (on stdout)."""
    env = {**os.environ, "PORT": str(port)}
    proc = subprocess.Popen(
        ["node", str(entry), "streamableHttp"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "listening on port" in line:
            return proc
    proc.wait(timeout=10)
    pytest.fail("the reference server exited before listening")


def _stopped(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(timeout=10)
    assert proc.stdout is not None
    proc.stdout.close()


@pytest.mark.npm
async def test_the_2025_reference_server_restarted_under_the_session_is_served_on_a_new_one(
    tmp_path: Path, everything_2025: Path
) -> None:
    """The reference server of 2025 restarted (a deploy, a crash) knows no session: it answers
    the host's next request 400 "Bad Request: No valid session ID provided". Before, every later
    call failed so, the server never renewed; now a new session is opened and ``echo`` (a read)
    is sent again on it; ``add`` (left undeclared: side-effecting) meets a fresh restart and
    is not sent again, saying so, and is served on its next call."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = _listening(everything_2025, port)
    server = web_server(
        "ev", f"http://127.0.0.1:{port}/mcp", mode="legacy", recheck="on_change", timeout_s=30
    )
    server.update(tools=["echo", "add"], effects={"echo": "read"})
    config = write_config(tmp_path, [server])
    host = None
    try:
        pinned, _ = await approve(config, "ev")
        assert pinned == ["add", "echo"]
        host = build_host(config)
        await host.start()
        source = next(s for s in mcp_sources(host) if s.name == "ev")
        specs = {s.name: s for s in host.offered()}
        ctx = ToolContext("w18", "default", frozenset(), None, "c1")
        echo, add = specs["ev__echo"], specs["ev__add"]
        assert "Echo: one" in (await source.call(echo, {"message": "one"}, ctx)).text
        _stopped(proc)
        proc = _listening(everything_2025, port)
        assert "Echo: two" in (await source.call(echo, {"message": "two"}, ctx)).text
        _stopped(proc)
        proc = _listening(everything_2025, port)
        with pytest.raises(DependencyUnavailable, match="was not sent again"):
            await source.call(add, {"a": 2, "b": 40}, ctx)
        assert "42" in (await source.call(add, {"a": 2, "b": 40}, ctx)).text
        assert source.unavailable is None
    finally:
        if host is not None:
            await host.aclose()
        _stopped(proc)


# -- a flood of notifications ----------------------------------------------------------------------


def w18(name: str = "x", **env: str) -> dict[str, Any]:
    """``wild18_server.py``, unconfined (launched faster), its ``lookup`` a read."""
    return {
        "name": name,
        "command": [sys.executable, str(HERE / "wild18_server.py")],
        "env": env,
        "mode": "legacy",
        "sandbox": "none",
        "effects": {"lookup": "read"},
        "recheck": "on_change",
        "timeout_s": 120,
    }


@pytest.mark.parametrize("mode", ["storm", "progress"])
async def test_a_flood_of_notifications_is_held_back_before_the_sdk_and_the_answers_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """20,000 ``tools/list_changed`` (or progress notifications for tokens the host never gave)
    before each answer: each cost the host about half a millisecond of its one event loop in the
    SDK (seconds per call, every other server's and the model's work waiting), and every one
    reached it. Now a repeated notice is dropped before the SDK, the rest held to ``RATE`` a
    second, the person told once; the answers, and the honest server beside, are served, and a
    changed listing is still re-checked."""
    from tether.mcp import _flood
    from tether.mcp._source import McpServerSource

    monkeypatch.setattr(_flood, "RATE", 0.001)  # (none refilled while the test runs: counts exact)
    given: list[str] = []
    original = McpServerSource._on_message

    async def counting(self: McpServerSource, message: Any) -> None:
        given.append(str(getattr(message, "method", "")))
        await original(self, message)

    monkeypatch.setattr(McpServerSource, "_on_message", counting)
    config = write_config(tmp_path, [w18("x", W18_MODE=mode, W18_COUNT="20000"), w18("ok")])
    for name in ("x", "ok"):
        await approve(config, name)
    calls = [("x__lookup", {"key": "a"}), ("ok__lookup", {"key": "b"}), ("x__lookup", {"key": "c"})]
    run = await run_question(config, "Q", script(*calls, "done"))
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert ["value-of-a" in r for r in run.seen("x__lookup")] == [True, False]
    assert "value-of-c" in run.seen("x__lookup")[1] and "value-of-b" in run.seen("ok__lookup")[0]
    if mode == "storm":
        assert given.count("notifications/tools/list_changed") <= 4  # one before each answer at most
    else:
        assert given.count("notifications/progress") == _flood.BURST
    assert run.result.trace_path is not None
    events = read_trace(run.result.trace_path)
    dropped = [
        e for e in events if e["kind"] == "mcp_connection" and e.get("action") == "notifications_dropped"
    ]
    assert [e["server"] for e in dropped] == ["x"]


async def test_a_flood_of_notifications_over_streamable_http_is_held_back_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forgetful_url: str
) -> None:
    """The same over Streamable HTTP (the official SDK's server, its notifications events of the
    call's stream): 5,000 list-changed notices and 5,000 progress notifications reached the SDK;
    now a few do, the call's answer and the next call are served, the person told once."""
    from tether.mcp import _flood
    from tether.mcp._source import McpServerSource

    monkeypatch.setattr(_flood, "RATE", 0.001)  # (none refilled while the test runs: counts exact)
    given: list[str] = []
    original = McpServerSource._on_message

    async def counting(self: McpServerSource, message: Any) -> None:
        given.append(str(getattr(message, "method", "")))
        await original(self, message)

    monkeypatch.setattr(McpServerSource, "_on_message", counting)
    server = web_server(
        "web", forgetful_url, mode="legacy", recheck="on_change", tools=W18_TOOLS, effects=W18_EFFECTS
    )
    server["timeout_s"] = 120
    config = write_config(tmp_path, [server])
    await approve(config, "web")
    steps = script(("web__storm", {"count": 5000}), ("web__lookup", {"key": "k"}), "done")
    run = await run_question(config, "Q", steps)
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert "stormed 5000" in run.seen("web__storm")[0] and "IGNORE" not in run.seen("web__storm")[0]
    assert "value-of-k" in run.seen("web__lookup")[0]
    assert given.count("notifications/tools/list_changed") <= 2
    assert given.count("notifications/progress") == _flood.BURST
    assert run.result.trace_path is not None
    events = read_trace(run.result.trace_path)
    progress = [e for e in events if e["kind"] == "mcp_progress"]
    assert progress and len(progress) < 1000  # (traced at the host's own bounded rate, as before)
    assert [e["action"] for e in events if e["kind"] == "mcp_connection"] == ["notifications_dropped"]


async def test_requests_the_host_never_advertised_and_links_outside_its_roots_are_refused_and_served(
    tmp_path: Path,
) -> None:
    """Held (no change): a server asking for a sample and an answer to a question the host never
    advertised gets errors at once (its call is served, nothing waits); a resource link to
    ``file:///etc/shadow`` is named, never fetched."""
    config = write_config(tmp_path, [w18("x", W18_MODE="unasked"), w18("y", W18_MODE="link")])
    for name in ("x", "y"):
        await approve(config, name)
    run = await run_question(
        config, "Q", script(("x__lookup", {"key": "a"}), ("y__lookup", {"key": "b"}), "done")
    )
    assert run.result.stop_reason is StopReason.ACCEPTED
    unasked = run.seen("x__lookup")[0]
    # (answered -32601, Method not found, since wild round 24: the host has no such method)
    assert "value-of-a" in unasked and '"code": -32601, "message": "Method not found"' in unasked
    assert '"data": "sampling/createMessage"' in unasked and "elicitation={" in unasked
    linked = run.seen("y__lookup")[0]
    assert "value-of-b" in linked and "resource_link not fetched: file:///etc/shadow" in linked
    assert "root:" not in linked  # (no line of the host's shadow file)


# -- a published server broken by its own dependencies -----------------------------------------------


def test_a_server_failing_by_its_own_programs_error_is_not_blamed_on_the_sandbox() -> None:
    """``mcp-server-sqlite`` (PyPI, its README's ``uvx mcp-server-sqlite --db-path ...``) installed
    today gets the MCP SDK 2.x, whose ``Server`` has no ``list_resources``: it exits with an
    ``AttributeError``. Confined, the host said "the sandbox may be the cause: list what it needs
    in sandbox_read / sandbox_write", sending the person after settings; now it names the
    server's own error. A confined server's permission or network failure keeps its advice."""
    from tether.mcp._sandbox import Confinement, SandboxPlan, failure_hint

    plan = SandboxPlan("auto", ["bwrap"], confinement=Confinement("python", (), (), "none"))
    tail = [
        '  File "/opt/env/lib/python3.11/site-packages/mcp_server_sqlite/server.py", line 173, in main',
        "    @server.list_resources()",
        "     ^^^^^^^^^^^^^^^^^^^^^",
        "AttributeError: 'Server' object has no attribute 'list_resources'",
    ]
    hint = failure_hint(plan, tail)
    assert hint is not None and "may be the cause" not in hint
    assert "AttributeError: 'Server' object has no attribute 'list_resources'" in hint
    assert "no sandbox causes" in hint
    for last, advice in (
        ("PermissionError: [Errno 13] Permission denied: '/data/x.db'", "sandbox_write"),
        ("ModuleNotFoundError: No module named 'mcp_server_sqlite'", "sandbox_read"),
        ("TypeError: fetch failed: getaddrinfo ENOTFOUND api.example.com", "host:port"),
    ):
        hint = failure_hint(plan, [last])
        assert hint is not None and "may be the cause" in hint and advice in hint, last
