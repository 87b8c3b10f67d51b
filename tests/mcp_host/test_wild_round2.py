"""Real servers as users run them, round two: a Streamable HTTP server that forgets its sessions
(restarted, or a session expired), server log notifications, and more of what servers in the
wild do (``sessiondrop_server.py``: the official SDK server behind a layer that answers 404 to a
forgotten session)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.core.stop import StopReason
from tether.errors import ConfigError, DependencyUnavailable
from tether.mcp._config import load_config
from tether.mcp._credentials import resolve_credentials
from tether.mcp._sandbox import bwrap_status
from tether.mcphost._runner import ScriptStep, run_question
from tether.trace._tracer import read_trace
from tether_testing.loopback import Quiet, serving

from . import sessiondrop_server as dropping
from .conftest import _serve, approve, script, stdio_server, web_server, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:.*deprecated as of 2026-07-28")]

DROPPING = Path(__file__).with_name("sessiondrop_server.py")
TOOLS = ["lookup", "record", "forget", "vanish", "chatty"]
EFFECTS = dict.fromkeys(TOOLS, "read")


@pytest.fixture(params=["jsonrpc", "plain"])
def dropping_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The server; its 404 has a JSON-RPC body (the SDK server's) or none (a proxy's)."""
    dropping.STATE.update(records=0, seen=set(), forgotten=set(), forget=False)
    yield from _serve(dropping.build_app(request.param))


@pytest.fixture
def chatty_url() -> Iterator[str]:
    yield from _serve(dropping.build_app())


def _trace(run: Any) -> list[dict[str, Any]]:
    assert run.result.trace_path is not None
    return read_trace(run.result.trace_path)


def _actions(run: Any, server: str = "web") -> list[str]:
    events = _trace(run)
    return [e["action"] for e in events if e["kind"] == "mcp_connection" and e.get("server") == server]


# -- a Streamable HTTP server that no longer knows the session -----------------------------------


@pytest.mark.spec("X1")
@pytest.mark.parametrize(
    ("mode", "recheck"), [("legacy", "each_call"), ("legacy", "on_change"), ("auto", "each_call")]
)
async def test_a_forgotten_session_is_started_again_and_the_request_sent_once_on_it(
    tmp_path: Path, dropping_url: str, mode: str, recheck: str
) -> None:
    """The spec: a 404 to a request carrying the session id means the session is gone, and the
    client starts a new one. The request that got the 404 was not processed, so it is sent again
    on the new session: the effect happens once (three calls in parallel: one new session).
    (``each_call`` meets the 404 on the pin re-check before the call, ``on_change`` on the call
    itself; 2026-07-28 has no session to lose.)"""
    server = web_server("web", dropping_url, mode=mode, recheck=recheck, tools=TOOLS, effects=EFFECTS)
    config = write_config(tmp_path, [server])
    await approve(config, "web")
    together = (("web__record", {"note": "b"}), ("web__record", {"note": "c"}), ("web__lookup", {"key": "d"}))
    steps = [
        *script(("web__record", {"note": "a"}), ("web__forget", {})),
        ScriptStep(calls=together),
        *script("done"),
    ]
    run = await run_question(config, "Q", steps)
    assert run.result.stop_reason is StopReason.ACCEPTED and run.result.answer == "done"
    recorded = run.seen("web__record")
    assert "recorded a (1)" in recorded[0] and all("recorded " in r for r in recorded[1:])
    assert "value-of-d" in run.seen("web__lookup")[0]
    assert dropping.STATE["records"] == 3  # each sent again after its 404, and done once
    # One new session, which the parallel calls on the forgotten one follow.
    assert _actions(run) == (["new_session"] if mode == "legacy" else [])
    assert "unavailable_servers" not in run.summary() or not run.summary()["unavailable_servers"]


@pytest.mark.spec("X1")
async def test_a_server_that_loses_every_new_session_is_renewed_once_per_call_then_lost(
    tmp_path: Path, dropping_url: str
) -> None:
    server = web_server("web", dropping_url, mode="legacy", recheck="on_change", tools=TOOLS, effects=EFFECTS)
    config = write_config(tmp_path, [server])
    await approve(config, "web")
    run = await run_question(config, "Q", script(("web__lookup", {"key": "a"}), ("web__vanish", {}), "done"))
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert "value-of-a" in run.seen("web__lookup")[0]
    assert "dependency_unavailable" in run.seen("web__vanish")[0]
    assert _actions(run) == ["new_session", "lost"]  # one new session, not one per 404


# -- server log notifications --------------------------------------------------------------------


@pytest.mark.spec("X1")
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_server_log_notifications_reach_the_trace_escaped_and_bounded_never_the_model(
    tmp_path: Path, chatty_url: str, transport: str, mode: str
) -> None:
    """A flood of log notifications (with terminal escapes and an instruction in them) before the
    answer: a bounded number are traced, escaped, the rest counted; the model sees the answer only."""
    if transport == "stdio":
        server = {"name": "web", "transport": "stdio", "command": [sys.executable, str(DROPPING)]}
    else:
        server = web_server("web", chatty_url)
    server.update(mode=mode, tools=TOOLS, effects=EFFECTS)
    config = write_config(tmp_path, [server])
    await approve(config, "web")
    run = await run_question(
        config, "Q", script(("web__chatty", {"count": 500}), ("web__lookup", {"key": "k"}), "ok")
    )
    assert run.result.stop_reason is StopReason.ACCEPTED
    said = run.seen("web__chatty")[0]
    assert "said" in said and "IGNORE" not in said and "line 0" not in said
    assert "value-of-k" in run.seen("web__lookup")[0]  # the flood stopped nothing
    logs = [e for e in _trace(run) if e["kind"] == "mcp_log"]
    assert logs and logs[0]["server"] == "web" and logs[0]["level"] == "warning"
    assert "line 0" in logs[0]["message"] and "\x1b" not in logs[0]["message"]  # escaped, visible
    assert len(logs) < 500 and len(logs) + sum(e["held_back"] for e in logs) <= 501  # rate-limited, counted
    assert all("\x1b" not in e["message"] and "\u202e" not in (e["logger"] or "") for e in logs)


# -- configs as other clients write them -----------------------------------------------------------


@pytest.mark.spec("X1")
async def test_a_variable_in_env_is_the_servers_credential_and_an_unset_one_is_named(
    tmp_path: Path, approved_pins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``"env": {"TOKEN": "${MY_TOKEN}"}`` (Claude Code, Cursor; ``${env:MY_TOKEN}`` in VS Code):
    the server gets the variable's value (before, the literal ``${MY_TOKEN}``), kept out of the
    trace like any credential; unset, the start fails naming the variable."""
    monkeypatch.setenv("MY_HOSTILE_TOKEN", "tok-5e4d3c2b1a09")
    env = {"HOSTILE_TOKEN": "${MY_HOSTILE_TOKEN}", "HOSTILE_INSTRUCTIONS": "plain words"}
    h = stdio_server("h", env=env, effects={"whoami": "read", "lookup": "read"})
    config = write_config(tmp_path, [h], pins_from=approved_pins)
    run = await run_question(config, "Q", script(("h__whoami", {}), ("h__lookup", {"key": "k"}), "ok"))
    assert "token=tok-5e4d3c2b1a09 provider_key=absent" in run.seen("h__whoami")[0]
    assert "value-of-k" in run.seen("h__lookup")[0]
    assert run.result.trace_path is not None and "tok-5e4d3c2b1a09" not in run.result.trace_path.read_text()

    monkeypatch.delenv("MY_HOSTILE_TOKEN")
    with pytest.raises(ConfigError, match="needs environment variable MY_HOSTILE_TOKEN"):
        await run_question(config, "Q", script("never"))


def test_a_variable_in_a_header_is_a_credential_and_elsewhere_expanded_or_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mcp.json"

    def load(settings: dict[str, Any]) -> Any:
        path.write_text(json.dumps({"mcpServers": {"s": settings}}), encoding="utf-8")
        return load_config(path).servers[0]

    remote = load({"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer ${env:API_TOKEN}"}})
    rendered = resolve_credentials(
        "s", remote.credentials, remote.headers, environ={"API_TOKEN": "t0k3n-abcdef"}
    )
    assert rendered.headers == {"Authorization": "Bearer t0k3n-abcdef"}  # not "Bearer $t0k3n-abcdef"
    assert load({"command": "node", "args": ["server.js"], "env": {"MODE": "plain"}}).env == {"MODE": "plain"}
    # Elsewhere (command, args, url, cwd, part of an env value) it is expanded at load, as
    # Claude Code expands it; unset, the error names the variable (before: refused outright).
    for var in ("PATH_PART", "HOST", "WORKSPACE"):
        monkeypatch.delenv(var, raising=False)
    for settings in (
        {"url": "http://127.0.0.1:1/${PATH_PART}/mcp"},
        {"command": "node", "env": {"URL": "https://${HOST}/api"}},
        {"command": "node", "cwd": "${WORKSPACE}"},
    ):
        with pytest.raises(ConfigError, match=r"needs environment variable (PATH_PART|HOST|WORKSPACE)"):
            load(settings)
    monkeypatch.setenv("HOME", "/home/someone")
    assert load({"command": "node", "args": ["${HOME}/server.js"]}).command == [
        "node",
        "/home/someone/server.js",
    ]
    with pytest.raises(
        ConfigError, match=r"cmd /c is a Windows command line; here write the command it runs \(npx -y"
    ):
        load({"command": "cmd", "args": ["/c", "npx", "-y", "@modelcontextprotocol/server-everything"]})


# -- what real servers list, answer and need --------------------------------------------------------

ODDITIES = Path(__file__).with_name("oddities_server.py")
ODD_TOOLS = ["refs", "untyped", "enum", "nullable", "media", "late", "typed", "loose"]


@pytest.mark.spec("X1")
async def test_real_schemas_and_content_kinds_are_served_and_an_invalid_listing_names_where(
    tmp_path: Path,
) -> None:
    """``$ref``/``$defs``, ``anyOf``, a property without a type, a 5000-value enum: offered and
    checked; images, audio, links and embedded resources: named or shown, never fetched; progress
    after the answer: harmless; an output schema answered without structured content: refused.
    A tool without ``"type": "object"`` (the SDK refuses the listing): left out, naming the field."""
    odd = {"name": "o", "transport": "stdio", "command": [sys.executable, str(ODDITIES)], "mode": "legacy"}
    config = write_config(
        tmp_path, [{**odd, "tools": ODD_TOOLS, "effects": dict.fromkeys(ODD_TOOLS, "read")}]
    )
    await approve(config, "o")
    steps = script(
        ("o__refs", {"at": {"x": 1}, "id": 3}),
        ("o__refs", {"at": {"y": 1}}),
        ("o__untyped", {"key": [1]}),
        ("o__enum", {"city": "city-04999"}),
        ("o__nullable", {"note": None}),
        ("o__media", {}),
        ("o__late", {}),
        ("o__typed", {}),
        ("o__loose", {}),
        "done",
    )
    run = await run_question(config, "Q", steps)
    assert run.result.stop_reason is StopReason.ACCEPTED and sorted(run.offered()) == sorted(
        f"o__{t}" for t in ODD_TOOLS
    )
    good, bad = run.seen("o__refs")
    assert 'refs got {"at": {"x": 1}, "id": 3}' in good and "missing field 'at.x'" in bad
    assert 'untyped got {"key": [1]}' in run.seen("o__untyped")[0]
    assert "city-04999" in run.seen("o__enum")[0] and '{"note": null}' in run.seen("o__nullable")[0]
    media = run.seen("o__media")[0]
    for shown in (
        "[image content omitted]",
        "[audio content omitted]",
        "[resource_link not fetched:",
        "embedded words",
    ):
        assert shown in media
    assert "done early" in run.seen("o__late")[0]
    assert "invalid_output" in run.seen("o__typed")[0] and "three" in run.seen("o__loose")[0]

    (tmp_path / "broken").mkdir()
    broken = write_config(tmp_path / "broken", [{**odd, "name": "b", "env": {"ODD_NO_TYPE": "1"}}])
    # The SDK refuses the listing as a whole; a schema naming no type is read as the object schema
    # its arguments always are (wild round 24; a tool invalid otherwise is left out alone, named).
    pinned, skipped = await approve(broken, "b")
    assert "lookup" in pinned and "notype" in pinned and skipped == {}


SERVER_JS = """
const answer = require("./lib/answer.js");
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
  const r = JSON.parse(line);
  if (r.id === undefined) return;
  const key = { type: "object", properties: { key: { type: "string" } } };
  const tools = [{ name: "lookup", description: "Looks up.", inputSchema: key }];
  const results = {
    initialize: { protocolVersion: (r.params || {}).protocolVersion, capabilities: { tools: {} },
                  serverInfo: { name: "n", version: "1" } },
    "tools/list": { tools },
    "tools/call": { content: [{ type: "text", text: answer(((r.params || {}).arguments || {}).key) }] },
  };
  send({ jsonrpc: "2.0", id: r.id, result: results[r.method] || {} });
});
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.skipif(bwrap_status(None)[0] is None, reason="bwrap does not work here")
async def test_a_confined_node_package_holding_the_config_is_explained_and_apart_it_serves(
    tmp_path: Path,
) -> None:
    """``node server.js`` beside its ``package.json`` and modules, as a user writes one: served
    confined; with the MCP config in the same folder, that folder is never shown to the server,
    and its failure says so (before: only "list what it needs in sandbox_read", which cannot
    help)."""
    package = tmp_path / "srv"
    (package / "lib").mkdir(parents=True)
    (package / "package.json").write_text('{"name": "srv", "version": "1.0.0"}')
    (package / "lib" / "answer.js").write_text("module.exports = (k) => `value-of-${k}`;")
    (package / "server.js").write_text(SERVER_JS)
    node = {
        "command": ["node", "server.js"],
        "transport": "stdio",
        "tools": ["lookup"],
        "effects": {"lookup": "read"},
    }
    (tmp_path / "cfg").mkdir()
    apart = write_config(tmp_path / "cfg", [{"name": "n", "cwd": str(package), **node}])
    await approve(apart, "n")
    run = await run_question(apart, "Q", script(("n__lookup", {"key": "k"}), "ok"))
    assert "value-of-k" in run.seen("n__lookup")[0]

    together = write_config(package, [{"name": "n", **node}])
    with pytest.raises(
        DependencyUnavailable, match=f"it was not shown {re.escape(str(package))} .*keep the MCP config"
    ):
        await approve(together, "n")


def _redirecting(status: int, location: str) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"location", location.encode())],
                }
            )
            await send({"type": "http.response.body", "body": b""})

    return app


@pytest.mark.spec("X1")
async def test_slash_redirected_and_json_only_http_servers_serve_and_another_origin_is_refused(
    tmp_path: Path,
) -> None:
    """``/mcp`` mounted at ``/mcp/`` (Starlette answers 307 within the origin) and a JSON-only
    server (no event streams): served. A 308 to another origin: refused, naming it."""
    slash = _serve(dropping.build_server().streamable_http_app(streamable_http_path="/mcp/"))
    plain = _serve(dropping.build_server().streamable_http_app(json_response=True))
    slash_url, json_url = next(slash), next(plain)
    moved = _serve(_redirecting(308, json_url))
    moved_url = next(moved)
    try:
        servers = [
            web_server("slash", slash_url, mode="legacy"),
            web_server("json", json_url),
            web_server("moved", moved_url.replace("/mcp", "/old"), mode="legacy"),
        ]
        config = write_config(
            tmp_path, [{**s, "tools": ["lookup"], "effects": {"lookup": "read"}} for s in servers]
        )
        for name in ("slash", "json"):
            await approve(config, name)
        run = await run_question(
            config, "Q", script(("slash__lookup", {"key": "a"}), ("json__lookup", {"key": "b"}), "ok")
        )
        assert "value-of-a" in run.seen("slash__lookup")[0] and "value-of-b" in run.seen("json__lookup")[0]
        with pytest.raises(DependencyUnavailable, match=f"Redirect to {re.escape(json_url)} not followed"):
            await approve(config, "moved")  # another port: another origin
    finally:
        for server in (slash, plain, moved):
            server.close()


@pytest.fixture
def unauthorized_url() -> Iterator[str]:
    """An HTTP endpoint that answers every request 401 (a missing or wrong token)."""

    class Handler(Quiet):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(401)
            self.send_header("www-authenticate", 'Bearer realm="mcp"')
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "25")
            self.end_headers()
            self.wfile.write(b'{"error":"invalid_token"}')

    with serving(Handler) as url:
        yield url + "/mcp"


@pytest.mark.spec("X1")
async def test_an_http_error_status_is_named_for_the_person_and_the_other_server_serves(
    tmp_path: Path, unauthorized_url: str, chatty_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK says only "Server returned an error response"; a 401 (a wrong token) is named on
    the terminal and in the trace."""
    servers = [web_server("locked", unauthorized_url, mode="legacy"), web_server("web", chatty_url)]
    config = write_config(
        tmp_path, [{**s, "tools": ["lookup"], "effects": {"lookup": "read"}} for s in servers]
    )
    await approve(config, "web")
    run = await run_question(config, "Q", script(("web__lookup", {"key": "k"}), "ok"))
    assert "value-of-k" in run.seen("web__lookup")[0]
    assert "locked" in run.summary()["unavailable_servers"]
    errors = [e for e in _trace(run) if e["kind"] == "mcp_connection" and e["action"] == "http_error"]
    assert errors and errors[0]["server"] == "locked" and errors[0]["cause"] == "HTTP 401 Unauthorized"
    assert any("[locked] HTTP 401 Unauthorized from " in r.getMessage() for r in caplog.records)
    assert not [e for e in _trace(run) if e.get("server") == "web" and e.get("action") == "http_error"]


# -- tool names a provider refuses ---------------------------------------------------------------


async def test_tool_names_a_provider_refuses_are_offered_under_names_every_provider_takes(
    tmp_path: Path,
) -> None:
    """A dotted tool name, or one the server id makes longer than 64 characters, would make
    OpenAI and Anthropic refuse the whole request: the model is offered a name they take
    (distinct, stable), and a call by it reaches the server's own tool; a plain name is kept."""
    from tether.mcp._config import offered_name

    from . import names_server

    server = {"name": "files", "transport": "stdio", "command": [sys.executable, names_server.__file__]}
    server["effects"] = {"read.file": "read", names_server.LONG: "read", "lookup": "read"}
    config = write_config(tmp_path, [server])
    await approve(config, "files")
    dotted, long = offered_name("files", "read.file"), offered_name("files", names_server.LONG)
    run = await run_question(
        config,
        "Q",
        script(
            (dotted, {"path": "a.txt"}), (long, {"region": "north"}), ("files__lookup", {"key": "k"}), "ok"
        ),
    )
    assert run.result.stop_reason is StopReason.ACCEPTED
    [started] = [e.data for e in run.result.events if str(e.kind) == "run_started"]
    assert sorted(started["tools"]) == sorted([dotted, long, "files__lookup"])
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in started["tools"])
    assert len({dotted, long, offered_name("files", "read_file")}) == 3  # never two on one name
    assert "contents of a.txt" in run.seen(dotted)[0]
    assert "summary of north" in run.seen(long)[0]
    assert "value-of-k" in run.seen("files__lookup")[0]
