"""Servers as found in the wild: declared the way other MCP clients declare them, and servers that
break the protocol (``wild_server.py``: junk on stdout, stray and duplicate answers, floods of
notifications and requests, thousands of tools, a listing that never ends, an invalid schema, a
flood on stderr, a process that ignores SIGTERM or leaves a daemon) or misbehave over Streamable
HTTP (a redirect elsewhere, an event stream that never ends)."""

from __future__ import annotations

import json
import random
import re
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tether.agents._file import load_agent_file, mcp_config
from tether.core.stop import StopReason
from tether.errors import ConfigError, DependencyUnavailable
from tether.mcp._approve import review_server
from tether.mcp._config import load_config
from tether.mcp._review import SINKS, ToolNames, scan_definition, scan_text
from tether.mcp._sandbox import bwrap_status
from tether.mcp._serverlog import MAX_LOG_BYTES
from tether.mcphost._runner import run_question

from .conftest import SERVER, approve, approve_all, script, write_config

pytestmark = pytest.mark.anyio

WILD = Path(__file__).with_name("wild_server.py")
READ = {"tools": ["lookup"], "effects": {"lookup": "read"}}


def wild(name: str, modes: str, **extra: Any) -> dict[str, Any]:
    env = {"WILD": modes, **extra.pop("env", {})}
    return {
        "name": name,
        "transport": "stdio",
        "command": [sys.executable, str(WILD)],
        "env": env,
        **READ,
        **extra,
    }


def content(run: Any, tool: str) -> list[str]:
    return run.seen(tool)  # type: ignore[no-any-return]


# -- declared the ordinary way -------------------------------------------------------------------


@pytest.mark.spec("X1")
async def test_servers_declared_as_other_mcp_clients_declare_them_start_and_serve(
    tmp_path: Path, http_url: str
) -> None:
    """``mcpServers`` (or ``servers``) as a mapping, ``command`` an executable with its ``args``,
    the transport as ``type`` or left out: what Claude Desktop, VS Code and Cursor write."""
    ordinary = {
        "host": {"pins": "pins.db", "state": "state.db", "trace_dir": "traces"},
        "mcpServers": {
            "mine": {"command": sys.executable, "args": [str(SERVER)], **READ},
            "remote": {"type": "streamable-http", "url": http_url, **READ},
            "plain": {"url": http_url, **READ},
        },
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(ordinary), encoding="utf-8")
    config = load_config(path)
    assert [(s.name, s.transport) for s in config.servers] == [
        ("mine", "stdio"),
        ("remote", "http"),
        ("plain", "http"),
    ]
    assert config.servers[0].argv() == [sys.executable, str(SERVER)]  # an executable, never split on spaces
    await approve_all(config)
    calls = [(f"{s}__lookup", {"key": s}) for s in ("mine", "remote", "plain")]
    run = await run_question(config, "Q", script(*calls, "ok"))
    for s in ("mine", "remote", "plain"):
        assert f"value-of-{s}" in content(run, f"{s}__lookup")[0]
    assert "<untrusted_data" in content(run, "mine__lookup")[0]

    agent = tmp_path / "agent.yaml"
    inline = {"mine": {"command": sys.executable, "args": [str(SERVER)], **READ}}
    spec = {
        "name": "a",
        "instructions": "Answer.",
        "model": {"name": "scripted:steps.yaml"},
        "mcp": {"servers": inline},
    }
    agent.write_text(json.dumps(spec), encoding="utf-8")
    assert mcp_config(load_agent_file(agent)).servers[0].argv() == [sys.executable, str(SERVER)]


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"type": "sse", "url": "http://127.0.0.1:1/sse"}, "SSE transport"),
        ({"command": "npx", "args": "-y pkg"}, "args must be a list"),
        ({"args": ["x"], "url": "http://127.0.0.1:1/mcp"}, "args given without command"),
        ({"type": "stdio", "transport": "stdio", "command": "x"}, "transport or type"),
        ({"command": "x", "url": "http://127.0.0.1:1/mcp"}, "transport"),
    ],
    ids=["sse", "args-text", "args-alone", "type-and-transport", "both"],
)
def test_an_ordinary_declaration_that_cannot_work_is_a_config_error_naming_why(
    tmp_path: Path, settings: dict[str, Any], why: str
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"s": settings}}), encoding="utf-8")
    with pytest.raises(ConfigError, match=why):
        load_config(path)


def test_a_server_cannot_take_the_id_of_the_hosts_own_tools(tmp_path: Path) -> None:
    """Named ``local``, a server's results would carry the source of the host's own tools (and
    the host refused it only when a run started, after it had been reviewed and approved)."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"local": {"command": "x"}, "mine": {"command": "x"}}}))
    with pytest.raises(ConfigError, match="'local' is reserved for the host's own tools"):
        load_config(path)


# -- a stdio server that breaks the protocol -------------------------------------------------------


@pytest.mark.spec("X1")
async def test_junk_on_stdout_stray_ids_and_a_second_answer_never_reach_the_model(tmp_path: Path) -> None:
    config = write_config(tmp_path, [wild("w", "banner,stray")])
    await approve(config, "w")
    run = await run_question(
        config, "Q", script(("w__lookup", {"key": "a"}), ("w__lookup", {"key": "b"}), "ok")
    )
    first, second = content(run, "w__lookup")
    assert "value-of-a" in first and "value-of-b" in second
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert not any("SECOND ANSWER" in s for s in content(run, "w__lookup"))


@pytest.mark.spec("X1", "X4")
async def test_floods_of_notifications_and_requests_do_not_stop_the_call(tmp_path: Path) -> None:
    """Before each answer: thousands of log and progress notifications (tokens never given), then
    thousands of pings, roots and sampling requests (sampling not enabled: each refused)."""
    flood = wild("w", "notes,asks", env={"WILD_FLOOD": "1500"}, timeout_s=120, connect_timeout_s=60)
    config = write_config(tmp_path, [flood])
    await approve(config, "w")
    run = await run_question(config, "Q", script(("w__lookup", {"key": "a"}), "ok"))
    assert "value-of-a" in content(run, "w__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.spec("X2")
async def test_thousands_of_tools_are_reviewed_in_bounded_time_and_a_call_to_one_is_still_flagged(
    tmp_path: Path,
) -> None:
    """The review looks for every listed name in every text; doing it one regex per name per text
    took minutes for a thousand tools (most of it recompiling patterns the cache had dropped)."""
    config = write_config(tmp_path, [wild("w", "tools:3000,callsibling")])
    started = time.monotonic()
    review = await review_server(config, "w")
    took = time.monotonic() - started
    assert len(review.tools) == 3001
    flagged = {t.check.tool: [f.detail for f in t.findings] for t in review.tools if t.findings}
    assert flagged == {"caller": ["extra_02999"]}  # the one that tells the model to call a sibling
    assert took < 90, f"review of 3000 tools took {took:.0f}s"
    pinned, _ = await approve(config, "w", expect=review.digest)
    assert pinned == ["lookup"]  # the config offers only lookup
    run = await run_question(config, "Q", script(("w__lookup", {"key": "a"}), "ok"))
    assert "value-of-a" in content(run, "w__lookup")[0]


def test_tool_names_are_found_in_text_exactly_as_the_whole_word_pattern_finds_them() -> None:
    """The one-pass lookup agrees with ``(?<![A-Za-z0-9_])NAME(?![A-Za-z0-9_])`` (any case) on
    dotted, dashed and odd names, over random text."""
    rng = random.Random(7)
    names = [
        "get-sum",
        "a.b",
        "lookup",
        "LookUp2",
        "x",
        "send_email",
        "w__lookup",
        "two words",
        "ünï",
        "end.",
    ]
    index = ToolNames(names)
    alphabet = [
        "get",
        "sum",
        "a",
        "b",
        "lookup",
        "x",
        "-",
        ".",
        "_",
        " ",
        "w__",
        "two words",
        "ünï",
        "end",
        "Z9",
    ]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        expected = {
            n
            for n in index.others
            if re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", text, re.I)
        }
        assert index.found(text) == expected, text
    assert scan_text("t", "description", "Then call get-sum.", ["get-sum"])[0].kind == "tool_reference"
    assert set(SINKS) <= index.others


@pytest.mark.parametrize("unit", ["x", "a%", "%41", "a.", "a-", "a-a__", "call ", "a=", "You must. "])
def test_the_review_reads_a_long_hostile_description_in_linear_time(unit: str) -> None:
    """256 KiB of one repeated piece: patterns tried from every position of a long run
    (``\\b[...]+@``, ``[...]*%XX``) or a whole-text pass for each ``call`` grew with the square
    of the length (one such pattern: 1.1 s CPU at 16 KiB here, about 280 s at 256 KiB; the scan
    takes about 2 s). CPU time, not wall time: other processes' load does not count."""
    text = (unit * (1 << 18))[: 1 << 18]
    started = time.process_time()
    scan_definition({"name": "huge", "description": text, "inputSchema": {"type": "object"}}, ["a__b"])
    assert time.process_time() - started < 30


async def test_a_server_with_a_huge_description_is_reviewed_and_its_other_tools_served(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, [wild("w", "desc:2")])
    started = time.monotonic()
    review = await review_server(config, "w")
    assert time.monotonic() - started < 90
    # Too large to offer a model (round five): left out as invalid, named, never scanned.
    assert [t.check.tool for t in review.tools] == ["lookup"]
    assert "more than the host offers a model" in review.invalid["huge"]
    pinned, _ = await approve(config, "w", expect=review.digest)
    run = await run_question(config, "Q", script(("w__lookup", {"key": "a"}), "ok"))
    assert pinned == ["lookup"] and "value-of-a" in content(run, "w__lookup")[0]


@pytest.mark.spec("X2")
async def test_a_tool_listing_that_never_ends_is_refused_and_the_other_server_still_serves(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, [wild("w", "pages"), wild("ok", "")])
    with pytest.raises(
        DependencyUnavailable, match=r"tool listing never ended \(went past 100 pages of no tools\)"
    ) as refused:
        await approve(config, "w")
    # The server started and answered (confined or not): the sandbox is not named as a cause.
    assert "sandbox may be the cause" not in str(refused.value)
    await approve(config, "ok")
    run = await run_question(config, "Q", script(("ok__lookup", {"key": "a"}), "ok"))
    assert "never ended" in run.summary()["unavailable_servers"]["w"]
    assert "value-of-a" in content(run, "ok__lookup")[0]


async def test_a_recursive_or_invalid_input_schema_is_flagged_and_the_honest_tool_still_works(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, [wild("w", "schema", tools=None, effects={"lookup": "read"})])
    review = await review_server(config, "w")
    findings = {t.check.tool: [f.kind for f in t.findings] for t in review.tools}
    assert findings == {"deep": ["invalid_schema"], "lookup": []}
    pinned, skipped = await approve(config, "w")
    assert pinned == ["lookup"] and "deep" in skipped
    run = await run_question(config, "Q", script(("w__lookup", {"key": "a"}), "ok"))
    assert "value-of-a" in content(run, "w__lookup")[0]


# -- its process ------------------------------------------------------------------------------------


@pytest.mark.spec("X1")
async def test_a_server_flooding_stderr_starts_in_time_and_its_log_stays_bounded(tmp_path: Path) -> None:
    """48 MiB on stderr before it serves: the host drains it as fast as it comes (a slow drain
    left the server blocked on a full pipe past the connect timeout) and keeps 16 MiB a launch."""
    config = write_config(tmp_path, [wild("w", "stderr:48", connect_timeout_s=20)], server_stderr="log")
    await approve(config, "w")
    run = await run_question(config, "Q", script(("w__lookup", {"key": "a"}), "ok"))
    assert "value-of-a" in content(run, "w__lookup")[0]
    logs = tmp_path / "tether-output" / "mcp-logs"
    log, older = logs / "w.stderr.log", logs / "w.stderr.log.1"  # the approval's launch, moved aside
    for path in (log, older):
        assert MAX_LOG_BYTES <= path.stat().st_size < MAX_LOG_BYTES + 4096
        assert re.search(
            rb"\xe2\x80\xa6 \d+ more lines not kept \(over \d+ bytes\)\n$", path.read_bytes()[-200:]
        )


def _processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (the test's own, unique path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.spec("X1")
async def test_a_server_ignoring_sigterm_is_killed_at_shutdown_within_bounds(tmp_path: Path) -> None:
    marker = str(tmp_path / "stubborn")
    config = write_config(tmp_path, [wild("w", "stubborn", env={"WILD_PIDFILE": marker}, sandbox="none")])
    await approve(config, "w")
    started = time.monotonic()
    run = await run_question(config, "Q", script(("w__lookup", {"key": "a"}), "ok"))
    assert "value-of-a" in content(run, "w__lookup")[0]
    assert time.monotonic() - started < 30
    assert _processes_with(marker) == []


@pytest.mark.skipif(
    bwrap_status(None)[0] is None, reason=f"bwrap does not work here: {bwrap_status(None)[1]}"
)
async def test_a_confined_servers_daemon_does_not_outlive_it(tmp_path: Path) -> None:
    """A grandchild in a session of its own escapes the process group the host kills; confined,
    it dies with the sandbox. (Unconfined, ``sandbox: none``, it is ended by its launch mark:
    test_wild_round25.)"""
    marker = str(tmp_path / "daemon")
    config = write_config(tmp_path, [wild("w", "daemon", env={"WILD_PIDFILE": marker})])
    await approve(config, "w")
    run = await run_question(config, "Q", script(("w__lookup", {"key": "a"}), "ok"))
    assert "value-of-a" in content(run, "w__lookup")[0]
    deadline = time.monotonic() + 5
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(marker) == []


# -- Streamable HTTP ----------------------------------------------------------------------------------


@pytest.fixture
def odd_http() -> Iterator[tuple[str, str, list[str]]]:
    """A hand-written Streamable HTTP server: ``/redirect`` sends every request to another host
    (which records what reaches it); ``/endless`` answers tools/call with an event stream of
    keep-alive comments that never ends. Yields (base URL, other host's URL, its hits)."""
    hits: list[str] = []

    class Other(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    class Odd(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _empty(self, status: int, **headers: str) -> None:
            self.send_response(status)
            for k, v in {"Content-Length": "0", **headers}.items():
                self.send_header(k, v)
            self.end_headers()

        do_GET = do_DELETE = lambda self: self._empty(405)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if self.path == "/redirect":
                return self._empty(307, Location=f"{other_url}/mcp")
            rid, method = message.get("id"), message.get("method")
            if rid is None:
                return self._empty(202)
            if method == "tools/call":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    while True:
                        self.wfile.write(b": keep-alive\n\n")
                        self.wfile.flush()
                        time.sleep(0.2)
                except OSError:
                    return
            results = {
                "initialize": {
                    "protocolVersion": message.get("params", {}).get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "odd", "version": "1"},
                },
                "tools/list": {"tools": [{"name": "lookup", "inputSchema": {"type": "object"}}]},
            }
            body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": results.get(method, {})}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    other = ThreadingHTTPServer(("127.0.0.1", 0), Other)
    odd = ThreadingHTTPServer(("127.0.0.1", 0), Odd)
    odd.daemon_threads = True
    other_url = f"http://127.0.0.1:{other.server_address[1]}"
    for server in (other, odd):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{odd.server_address[1]}", other_url, hits
    finally:
        for server in (other, odd):
            server.shutdown()
            server.server_close()


@pytest.mark.spec("X1")
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_redirect_to_another_host_is_not_followed_and_an_endless_stream_times_out(
    tmp_path: Path, odd_http: tuple[str, str, list[str]], mode: str
) -> None:
    base, other, hits = odd_http
    servers = [
        {"name": "moved", "url": f"{base}/redirect", "mode": mode, **READ},
        {"name": "endless", "url": f"{base}/endless", "mode": mode, "timeout_s": 1.5, **READ},
        wild("ok", ""),
    ]
    config = write_config(tmp_path, servers)
    with pytest.raises(DependencyUnavailable, match=f"Redirect to {other}/mcp not followed"):
        await approve(config, "moved")
    await approve(config, "endless")
    await approve(config, "ok")
    steps = script(("ok__lookup", {"key": "a"}), ("endless__lookup", {}), "ok")
    started = time.monotonic()
    run = await run_question(config, "Q", steps)
    assert "timed out after 1.5s" in content(run, "endless__lookup")[0]
    assert "value-of-a" in content(run, "ok__lookup")[0]
    assert time.monotonic() - started < 30
    assert "not followed" in run.summary()["unavailable_servers"]["moved"]
    assert hits == []  # nothing reached the other host
