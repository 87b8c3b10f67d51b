"""A confined server's network allowlist (``network: ["host:port", ...]``).

The server runs in a network namespace of its own whose only way out is the host's HTTP proxy
(``HTTP_PROXY``/``HTTPS_PROXY``): a listed destination is reached, by plain ``http://`` and by
``CONNECT``; one not listed is answered 403 with the reason, traced once, and the run goes on;
a direct connection that ignores the proxy reaches nothing of the host, its loopback services
included; a listed name that resolves to the host's loopback is refused unless the entry names
loopback itself. Entries are checked when the config is read.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.clisupport.output import block_fix
from tether.errors import ConfigError
from tether.mcp._config import ServerConfig
from tether.mcp._sandbox import bwrap_status
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace

from .conftest import approve, bare_tcp_server, script, write_config

pytestmark = [pytest.mark.spec("X4")]
confined = pytest.mark.skipif(
    bwrap_status(None)[0] is None, reason=f"bwrap does not work here: {bwrap_status(None)[1]}"
)

NETPROBE = Path(__file__).with_name("netprobe_server.py")
EFFECTS = {"fetch": "read", "tunnel": "read", "connect": "read"}
GREETING = "HOST-LOOPBACK-SERVICE"


@contextlib.contextmanager
def web() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on the host's 127.0.0.1: (its port, the paths it was asked for)."""
    asked: list[str] = []
    ports: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = f"HELLO-FROM-{ports[0]}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ports.append(int(server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ports[0], asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def greeter() -> Iterator[int]:
    def greet(conn: socket.socket) -> None:
        with conn:
            conn.sendall(GREETING.encode())

    with bare_tcp_server(greet) as port:
        yield port


def _server(network: Any) -> dict[str, Any]:
    command = [sys.executable, str(NETPROBE)]
    return {"name": "n", "transport": "stdio", "command": command, "effects": EFFECTS, "network": network}


def _refusals(run: Any) -> list[str]:
    trace = read_trace(run.result.trace_path)
    return [
        e["destination"] for e in trace if e["kind"] == "mcp_sandbox" and e["action"] == "network_refused"
    ]


@confined
@pytest.mark.slow
@pytest.mark.anyio
async def test_only_listed_destinations_are_reached_and_only_through_the_proxy(
    tmp_path: Path, greeter: int
) -> None:
    with web() as (listed, listed_asked), web() as (unlisted, unlisted_asked):
        config = write_config(tmp_path, [_server([f"127.0.0.1:{listed}", f"127.0.0.1:{greeter}"])])
        await approve(config, "n")
        run = await run_question(
            config,
            "Q",
            script(
                ("n__fetch", {"url": f"http://127.0.0.1:{listed}/ok"}),
                ("n__tunnel", {"host": "127.0.0.1", "port": greeter}),
                ("n__fetch", {"url": f"http://127.0.0.1:{unlisted}/stolen"}),
                ("n__tunnel", {"host": "127.0.0.1", "port": unlisted}),
                ("n__fetch", {"url": f"http://localhost:{listed}/by-name"}),
                ("n__fetch", {"url": f"http://127.0.0.1:{unlisted}/again"}),
                ("n__connect", {"host": "127.0.0.1", "port": listed}),
                ("n__connect", {"host": "127.0.0.1", "port": greeter}),
                "done",
            ),
        )
    ok, refused, by_name, again = run.seen("n__fetch")
    tunnelled, refused_tunnel = run.seen("n__tunnel")
    # The legitimate use: listed destinations, by plain http:// and through a CONNECT tunnel.
    assert f"FETCHED:200:HELLO-FROM-{listed}" in ok and listed_asked == ["/ok"]
    assert f"TUNNEL:{GREETING}" in tunnelled
    # Off the list (another port, or the listed port by a name not listed): 403 with the reason.
    for answer in (refused, refused_tunnel, by_name, again):
        assert "403" in answer and "not in this server's network allowlist" in answer, answer
    assert unlisted_asked == [] and "HELLO-FROM" not in by_name
    # Ignoring the proxy reaches nothing of the host: not even a listed port of its loopback.
    for direct in run.seen("n__connect"):
        assert "cannot connect" in direct and GREETING not in direct, direct
    # Traced: the allowlist, and each refused destination once.
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    (launch,) = [e for e in trace if e["kind"] == "mcp_sandbox" and e["action"] == "confined"]
    assert launch["network"] == "allowlist"
    assert launch["network_allow"] == [f"127.0.0.1:{listed}", f"127.0.0.1:{greeter}"]
    assert sorted(_refusals(run)) == sorted([f"127.0.0.1:{unlisted}", f"localhost:{listed}"])
    assert run.result.stop_reason == "accepted"  # the run went on to its answer
    # The person sees each refusal in the run's blocked list (the terminal's lines), with the fix.
    shown = {b["destination"]: block_fix(b) for b in run.blocked if b["kind"] == "network_refused"}
    assert sorted(shown) == sorted([f"127.0.0.1:{unlisted}", f"localhost:{listed}"])
    assert all("add it to that server's network list" in str(fix) for fix in shown.values())


def _loopback_name() -> str | None:
    """A host name other than localhost that resolves to loopback here (often the host's own)."""
    import ipaddress

    for name in (socket.gethostname(), "ip6-localhost", "localhost.localdomain"):
        try:
            infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
        except OSError:
            continue
        if infos and all(ipaddress.ip_address(str(i[4][0])).is_loopback for i in infos):
            return name
    return None


@confined
@pytest.mark.slow
@pytest.mark.anyio
async def test_a_listed_name_that_resolves_to_loopback_is_refused_unless_loopback_is_listed(
    tmp_path: Path,
) -> None:
    name = _loopback_name()
    if name is None or name == "localhost":
        pytest.skip("no name besides localhost resolves to loopback here")
    with web() as (port, asked):
        config = write_config(tmp_path, [_server([f"{name}:{port}", f"localhost:{port}"])])
        await approve(config, "n")
        run = await run_question(
            config,
            "Q",
            script(
                ("n__fetch", {"url": f"http://{name}:{port}/rebound"}),
                ("n__fetch", {"url": f"http://{name.upper()}.:{port}/rebound-too"}),
                ("n__fetch", {"url": f"http://localhost:{port}/named"}),
                "done",
            ),
        )
    rebound, rebound_too, named = run.seen("n__fetch")
    for answer in (rebound, rebound_too):
        assert "403" in answer and "resolves to a loopback" in answer, answer
    assert f"FETCHED:200:HELLO-FROM-{port}" in named  # listed as localhost: reached
    assert asked == ["/named"]


@pytest.mark.parametrize(
    ("entries", "normalized"),
    [
        (["api.example.com:443"], ("api.example.com:443",)),
        (["API.Example.com.:443", "api.example.com:443"], ("api.example.com:443",)),
        (["*.example.com:8080"], ("*.example.com:8080",)),
        (["127.0.0.1:80", "[::1]:443", "[2001:DB8::1]:1"], ("127.0.0.1:80", "[::1]:443", "[2001:db8::1]:1")),
        (["localhost:65535"], ("localhost:65535",)),
        ([], "none"),
    ],
)
def test_allowlist_entries_are_read_and_normalized(entries: list[str], normalized: Any) -> None:
    server = ServerConfig(name="n", transport="stdio", command=["x"], network=entries)  # type: ignore[arg-type]
    assert server.network_access == normalized


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("example.com", "a port is required"),
        ("example.com:0", "from 1 to 65535"),
        ("example.com:65536", "from 1 to 65535"),
        ("example.com:https", "from 1 to 65535"),
        ("::1:443", "in brackets"),
        ("https://example.com:443", "without a scheme"),
        ("user@example.com:443", "without a scheme, user"),
        ("*.com:443", "wildcard"),
        ("*.10.0.0.1:443", "wildcard"),
        ("exa mple.com:443", "not a host name"),
        ("-bad.example:443", "not a host name"),
        ("[fe80::1%eth0]:443", "scoped"),
    ],
)
def test_a_bad_allowlist_entry_is_a_config_error_naming_it(tmp_path: Path, entry: str, why: str) -> None:
    with pytest.raises(ConfigError, match="network entry") as caught:
        write_config(tmp_path, [_server(["ok.example.com:443", entry])])
    assert repr(entry) in str(caught.value) and why in str(caught.value)


def test_network_settings_that_contradict_or_do_not_apply_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="list of host:port"):
        write_config(tmp_path, [_server("example.com:443")])
    with pytest.raises(ConfigError, match="contradicts an allowlist"):
        write_config(tmp_path, [{**_server(["example.com:443"]), "allow_network": True}])
    web_server = {"name": "w", "transport": "http", "url": "http://127.0.0.1:1/mcp", "network": ["a.b:1"]}
    with pytest.raises(ConfigError, match="stdio servers only"):
        write_config(tmp_path, [web_server])


async def _ask(port: int, request: bytes) -> bytes:
    """Send ``request`` to the proxy and read until it closes or a greeting follows its answer."""
    import anyio

    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        answer = b""
        with anyio.move_on_after(10):
            while not (answer.startswith(b"HTTP/1.1 200") and GREETING.encode() in answer):
                try:
                    answer += await stream.receive()
                except anyio.EndOfStream:
                    break
        return answer


@pytest.mark.anyio
async def test_the_proxy_refuses_names_rebound_to_special_addresses_and_bad_requests(
    greeter: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's proxy alone (no sandbox): a wildcard entry whose names resolve to loopback,
    link-local (cloud metadata) or IPv4-mapped loopback is refused; loopback listed as an
    address or as localhost is reached; a head over the cap or not HTTP is answered 4xx."""
    import anyio

    from tether.mcp._netallow import allowlist
    from tether.mcp._netproxy import HEAD_LIMIT, serving

    fake = {
        "rebound.example.com": "127.0.0.1",
        "metadata.example.com": "169.254.169.254",
        "mapped.example.com": "::ffff:127.0.0.1",
        "localhost": "127.0.0.1",
    }

    async def resolve(host: str, port: int, **kw: Any) -> list[Any]:
        family = socket.AF_INET6 if ":" in fake[host] else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (fake[host], port))]

    monkeypatch.setattr(anyio, "getaddrinfo", resolve)
    entries = allowlist([f"*.example.com:{greeter}", f"localhost:{greeter}", f"127.0.0.1:{greeter}"])
    told: list[tuple[str, str]] = []
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    async with serving(sock, entries, lambda d, why: told.append((d, why))):
        answers = {
            name: await _ask(port, f"CONNECT {name}:{greeter} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            for name in ("rebound.example.com", "metadata.example.com", "mapped.example.com", "localhost")
        }
        literal = await _ask(port, f"CONNECT 127.0.0.1:{greeter} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        again = await _ask(port, f"CONNECT rebound.example.com:{greeter} HTTP/1.0\r\n\r\n".encode())
        huge = await _ask(port, b"CONNECT a:1 HTTP/1.1\r\nX: " + b"y" * HEAD_LIMIT + b"\r\n\r\n")
        garbage = await _ask(port, b"\x16\x03\x01 not http\r\n\r\n")
        https_form = await _ask(port, b"GET https://a.example.com/ HTTP/1.1\r\nHost: a\r\n\r\n")
    for name in ("rebound.example.com", "metadata.example.com", "mapped.example.com"):
        assert answers[name].startswith(b"HTTP/1.1 403") and b"resolves to a loopback" in answers[name]
        assert GREETING.encode() not in answers[name]
    assert answers["localhost"].startswith(b"HTTP/1.1 200") and GREETING.encode() in answers["localhost"]
    assert literal.startswith(b"HTTP/1.1 200") and GREETING.encode() in literal
    assert again.startswith(b"HTTP/1.1 403")
    assert [d for d, _ in told] == [f"{n}.example.com:{greeter}" for n in ("rebound", "metadata", "mapped")]
    assert huge.startswith(b"HTTP/1.1 431") and garbage.startswith(b"HTTP/1.1 400")
    assert https_form.startswith(b"HTTP/1.1 400")
    assert sock.fileno() == -1  # the listening socket is closed with the proxy


def test_the_review_and_a_failure_hint_name_the_allowlist() -> None:
    from tether.mcp._approve import ServerReview
    from tether.mcp._sandbox import Confinement, SandboxPlan, failure_hint

    allow = ("api.example.com:443",)
    plan = SandboxPlan("auto", ["bwrap"], confinement=Confinement("python", (), (), allow), proxy=allow)
    launch = {"transport": "stdio", "command": "x", **plan.describe()}
    assert launch["network"] == "allowlist" and launch["network_allow"] == list(allow)
    (line,) = [s for s in ServerReview("n", launch).summary() if "sandbox:" in s]
    assert "network only to api.example.com:443, through the host's proxy" in line
    anything = {**launch, "network": "any", "network_allow": None}
    (line,) = [s for s in ServerReview("n", anything).summary() if "sandbox:" in s]
    assert "loopback included (network: any: no allowlist)" in line
    hint = failure_hint(plan, ["urllib.error.HTTPError: HTTP Error 403: Forbidden"])
    assert hint is not None and "goes through an HTTP proxy" in hint and "host:port" in hint
    none = SandboxPlan("auto", ["bwrap"], confinement=Confinement("python", (), (), "none"))
    hint = failure_hint(none, ["socket.gaierror: [Errno -3] Temporary failure in name resolution"])
    assert hint is not None and "has no network here: list the host:port" in hint
