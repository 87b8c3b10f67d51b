"""A server that cannot start says why, in words a person can act on: the real error (never
"unhandled errors in a TaskGroup"), its exit code and last stderr lines; the model gets only
the short reason. The SDK's own log lines name the server they concern."""

from __future__ import annotations

import logging
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tether.errors import DependencyUnavailable
from tether.mcp._approve import approve_server
from tether.mcphost._runner import run_question

from .conftest import script, write_config

pytestmark = [pytest.mark.slow, pytest.mark.spec("X1")]


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


@pytest.fixture
def html_server() -> Iterator[str]:
    """Answers every request with an HTML page: not an MCP server at all."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b"<html>login page</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_DELETE = do_POST

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.anyio
@pytest.mark.parametrize("sandbox", ["auto", "none"])
async def test_a_crashing_server_names_its_exit_code_and_last_words(tmp_path: Path, sandbox: str) -> None:
    code = (
        "import sys; sys.stderr.write('usage: srv --root DIR\\nerror: unknown option --rot\\n'); sys.exit(2)"
    )
    config = write_config(
        tmp_path,
        [{"name": "c", "transport": "stdio", "command": [sys.executable, "-c", code], "sandbox": sandbox}],
    )
    with pytest.raises(DependencyUnavailable) as caught:
        await approve_server(config, "c", actor="tester")
    message = str(caught.value)
    assert "TaskGroup" not in message and "ExceptionGroup" not in message
    assert "exited with code 2" in message and "error: unknown option --rot" in message


@pytest.mark.anyio
async def test_refused_and_wrong_http_servers_name_their_cause(tmp_path: Path, html_server: str) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/mcp"
    config = write_config(tmp_path, [{"name": "gone", "transport": "http", "url": url}])
    with pytest.raises(DependencyUnavailable) as caught:
        await approve_server(config, "gone", actor="tester")
    assert "TaskGroup" not in str(caught.value) and "ConnectError" in str(caught.value)


@pytest.mark.anyio
async def test_the_sdk_log_lines_name_their_server_and_the_user_sees_the_cause(
    tmp_path: Path, html_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    servers = [{"name": "web", "transport": "http", "url": html_server, "connect_timeout_s": 5}]
    config = write_config(tmp_path, servers)
    with caplog.at_level(logging.WARNING):
        run = await run_question(config, "Q", script(("web__anything", {}), "done"))
    sdk = [r.getMessage() for r in caplog.records if r.name.split(".")[0] in ("mcp", "client")]
    assert sdk and all(m.startswith("[web] mcp sdk: ") for m in sdk), sdk
    why = run.summary()["unavailable_servers"]["web"]
    assert why.startswith("MCP server web could not be started") and "TaskGroup" not in why


@pytest.mark.anyio
@pytest.mark.parametrize("consent", [True, False])
async def test_a_url_required_error_is_asked_as_a_url_elicitation_then_the_call_is_sent_again(
    tmp_path: Path, consent: bool
) -> None:
    from tether.mcp._elicitation import ScriptedResponder

    prober = str(Path(__file__).with_name("prober_server.py"))
    server = {"name": "p", "transport": "stdio", "command": [sys.executable, prober], "mode": "legacy",
              "tools": ["gated"], "effects": {"gated": "read"},
              "elicitation": {"enabled": True, "url_mode": True}}  # fmt: skip
    config = write_config(tmp_path, [server])
    await approve_server(config, "p", actor="tester")
    person = ScriptedResponder(url_consent=consent)
    run = await run_question(config, "Q", script(("p__gated", {}), "done"), responder=person)
    (seen,) = run.seen("p__gated")
    (prompt,) = person.shown
    assert prompt.mode == "url" and prompt.domain == "auth.example"
    if consent:
        assert "GATED-OK" in seen
    else:
        assert "needs the person to open a URL first" in seen and "upstream_error" in seen


@pytest.mark.anyio
async def test_a_late_server_request_after_the_run_gets_an_answer_and_no_local_path(tmp_path: Path) -> None:
    """After a run, its trace is closed; a server's late roots/list (a connection being retired
    after a restart) is still answered, its event kept for the next run's trace; a host failure
    in answering tells the server only that the host could not answer, never a local path."""
    import mcp_types as types

    from tether.mcp._hosting import build_source
    from tether.mcp._opening import shielded
    from tether.trace._tracer import JsonlSink, Tracer

    root = tmp_path / "root"
    root.mkdir()
    server = {
        "name": "p",
        "transport": "stdio",
        "command": [sys.executable, "-c", "pass"],
        "roots": [root.as_uri()],
    }
    config = write_config(tmp_path, [server])
    source, _ = build_source(config.servers[0], config, pins=None)
    trace = tmp_path / "run.jsonl"
    tracer = Tracer("run-1", [JsonlSink(trace)])
    source.bind_tracer(tracer)
    tracer.close()
    roots = shielded(source.name, "roots/list", source.roots)
    answer = await roots(None)
    assert isinstance(answer, types.ListRootsResult) and str(answer.roots[0].uri).startswith("file://")
    assert any(kind == "mcp_roots" for kind, _ in source._pending_events)

    async def broken(_context: Any) -> Any:
        raise ValueError(f"trace {trace} is unwritable")

    failed = await shielded(source.name, "roots/list", broken)(None)
    assert isinstance(failed, types.ErrorData) and str(tmp_path) not in failed.message
    assert failed.message == "the host could not answer roots/list"


@pytest.mark.anyio
async def test_a_launch_the_host_refuses_is_explained_to_the_person_and_kept_short_for_the_model(
    tmp_path: Path,
) -> None:
    """``npx -y`` of a package npx never installed, confined (no network): the person reads the
    reason and the fix; the model reads only that the host could not launch it."""
    import shutil

    from tether.mcp._sandbox import bwrap_status

    if shutil.which("npx") is None or bwrap_status(None)[0] is None:
        pytest.skip("needs npx and a working bwrap")
    package = "@tether-tests/never-installed-server"
    config = write_config(tmp_path, [{"name": "n", "transport": "stdio", "command": ["npx", "-y", package]}])
    run = await run_question(config, "Q", script(("n__anything", {}), "done"))
    (seen,) = run.seen("n__anything")
    assert "could not launch it as configured" in seen and ".npm" not in seen
    detail = run.summary()["unavailable_servers"]["n"]
    assert f"{package} is not installed in the npm cache" in detail and "network: any" in detail
