"""``create_app``: the console as a Starlette application (HTML pages and a JSON API, same rules)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit, urlunsplit

import anyio
from jinja2 import Environment
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.console._render import environment
from tether.console._sources import ConsoleSources
from tether.console._users import CLIENT
from tether.console._web import UNSTORABLE, Gate
from tether.errors import ConfigError

__all__ = [
    "LOOPBACK_HOSTS",
    "MAX_HEAD",
    "MIN_READ_BYTES",
    "PROTECTIVE_HEADERS",
    "REQUEST_DEADLINE",
    "Console",
    "create_app",
]

MAX_BODY = 256 * 1024
# The longest request head (request line and headers) the console takes. ``tether serve``'s h11
# refuses a head only while 16 KiB of it are in without its end: one completed by the next read
# was taken (up to 16 KiB and a read), and one sent in a single piece was read whole, as long as
# the server's read took (about 100 KiB on loopback), however it arrives, no longer than this.
MAX_HEAD = 32 * 1024
# The most a request not signed in may send (the sign-in form; the others' bodies are never read).
MAX_ANONYMOUS_BODY = 16 * 1024
SIGN_IN = "/login"
# Seconds a client has to send a request's headers (``tether serve`` closes the connection), then
# its body (408): a client that trickles bytes (slowloris) holds nothing for long.
REQUEST_DEADLINE = 10.0
# The least of a response its client must read in each ``REQUEST_DEADLINE`` seconds once the
# server's send buffer is full (``tether serve``): a client that reads none of a long page, or
# trickles through it, leaves no copy of it held in memory for as long as it likes (a slow read).
MIN_READ_BYTES = 16 * 1024
# Requests the console serves at once (``tether serve --max-requests``): past it a request is
# answered 503 at once, not queued without bound on the threads and memory every other request
# needs. Requests, not connections: an idle connection holds no slot (it is closed at the deadline).
MAX_REQUESTS = 128
# The share of those slots only a request with credentials takes (``Guard.reserved``): sign-in
# forms a stranger holds open fill the rest at most, and the people signed in go on working.
RESERVED_SHARE = 4  # a quarter

# On every response: the app's (Guard) and the server's own 400 (``tether serve``).
PROTECTIVE_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        b"frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    # What an HTTP/1.0 cache reads instead (the console answers HTTP/1.0 requests): stored nowhere.
    (b"pragma", b"no-cache"),
    (b"expires", b"0"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"strict-transport-security", b"max-age=31536000"),  # ignored over plain HTTP (loopback)
]


@dataclass
class Console:
    sources: ConsoleSources
    gate: Gate
    templates: Environment


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_FRAMED_TWICE = "a request has a Content-Length or a Transfer-Encoding, not both"
_HEAD_TOO_LONG = f"request head too long (at most {MAX_HEAD} bytes of request line and headers)"


def _head_size(scope: Scope) -> int:
    """The bytes of a request's head as sent: its request line and each header line."""
    path = scope.get("raw_path") or scope.get("path", "").encode()
    target = len(path) + 1 + len(scope.get("query_string", b""))  # path ? query
    line = len(scope.get("method", "")) + 1 + target + len(b" HTTP/1.1\r\n")
    return line + sum(len(k) + len(b": ") + len(v) + len(b"\r\n") for k, v in scope.get("headers") or [])


_ELSEWHERE = "refused: a request another site's page made (only a link or a form to this console is taken)"


def _made_elsewhere(headers: dict[bytes, bytes]) -> bool:
    """Whether a browser says (Fetch Metadata) that a page of another origin made this request,
    other than as a top-level navigation: an image, a script, a style sheet, a ``fetch``, a
    prefetch or a frame of another site, or of a page on another port of this host (the same
    site: the browser sends it the console's ``SameSite=Strict`` cookies). Such a request, served
    as the person signed in, kept their idle session alive for as long as that page was open and
    spent the share of requests kept for people signed in; its answer, which CORP keeps from
    that page, was made all the same. A link followed or a form sent from elsewhere (a top-level
    navigation) is taken: the CSRF token and the ``Origin`` check decide a form. A request without
    these headers (a program, an older browser) is taken as before."""
    site = headers.get(b"sec-fetch-site", b"").strip().lower()
    if site not in (b"same-site", b"cross-site"):  # same-origin, none (typed, a bookmark), absent
        return False
    mode = headers.get(b"sec-fetch-mode", b"").strip().lower()
    dest = headers.get(b"sec-fetch-dest", b"document").strip().lower()
    return not (mode == b"navigate" and dest == b"document")


# A name or IPv4 address, or a bracketed IPv6 address, with an optional port; or a bare IPv6 address.
_HOST = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::[0-9]{1,5})?|(?P<bare>[0-9a-f:]+)")


def _host_name(value: bytes) -> str:
    """The host of a ``Host`` header, without its port, lower-cased (``[::1]:8700`` -> ``::1``);
    empty unless the whole header is a host name or address and an optional numeric port, so
    ``127.0.0.1:80@evil.example`` or ``localhost:8700.evil.example`` names no allowed host."""
    text = value.decode("latin-1").strip().lower()
    found = _HOST.fullmatch(text)
    if found is None:
        return ""
    return found["v6"] or found["name"] or found["bare"] or ""


class Guard:
    """In front of every request: its head is at most ``MAX_HEAD`` bytes (431, the connection
    closed); the ``Host`` header must name this console (421: DNS
    rebinding); a request framed by both a ``Content-Length`` and a ``Transfer-Encoding`` is
    refused (400) and its connection closed; a request a browser says another site's page made,
    other than a link or a form (``_made_elsewhere``: Fetch Metadata), is refused (403) before
    anything is looked up; a path or query with a NUL character is refused (400, ``UNSTORABLE``); the
    body is read whole before a handler runs, at most ``MAX_BODY`` bytes (413)
    within ``REQUEST_DEADLINE`` seconds (408), and only when the request is signed in (``gate``:
    a session or API token valid now) or is the sign-in form (``MAX_ANONYMOUS_BODY``): anyone
    else's body is never read, the app answers it as it answers any request not signed in;
    every response gets ``PROTECTIVE_HEADERS``, its ``Location`` is a path on this console
    (``_relative_location``), and every cookie set over HTTPS is ``Secure`` (``_secure_cookie``:
    a console behind a TLS proxy without ``--secure-cookies``); the client's address is kept for
    the audit entries; a WebSocket handshake is refused (404). Past
    ``max_requests`` being served a request is 503 at once, past all but ``reserved`` of them one
    without credentials (``_room``)."""

    def __init__(
        self,
        app: ASGIApp,
        allowed_hosts: Iterable[str] = LOOPBACK_HOSTS,
        gate: Gate | None = None,
        max_requests: int = MAX_REQUESTS,
    ) -> None:
        self.app = app
        self.gate = gate
        self.max_requests, self.serving = max_requests, 0
        self.reserved = max(1, max_requests // RESERVED_SHARE) if gate is not None and max_requests > 1 else 0
        # Each entry is read as a Host header (its port ignored); one that is no host is an error.
        names = {entry: _host_name(entry.encode("latin-1")) for entry in allowed_hosts}
        if bad := [entry for entry, name in names.items() if not name]:
            raise ConfigError(f"not a host name or address: {', '.join(map(repr, bad))}")
        self.allowed_hosts = frozenset(names.values())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await _refuse_websocket(scope, send)
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return

        https = scope.get("scheme") == "https"  # as the client sent it (a trusted proxy's X-Forwarded-Proto)

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent = [_secure_cookie(k, v) if https else (k, v) for k, v in message.get("headers", [])]
                headers = [_relative_location(k, v) for k, v in sent]
                names = {k.lower() for k, _ in headers}
                message["headers"] = [
                    *headers,
                    *[(k, v) for k, v in PROTECTIVE_HEADERS if k not in names],
                ]
            await send(message)

        if _head_size(scope) > MAX_HEAD:  # before its cookies or headers are read, whoever sent it
            too_long = PlainTextResponse(_HEAD_TOO_LONG, status_code=431, headers={"connection": "close"})
            await too_long(scope, receive, wrapped)
            return
        if self.serving >= self._room(scope):  # a flood: refused at once, with the headers
            await PlainTextResponse("too many requests at once", status_code=503)(scope, receive, wrapped)
            return
        self.serving += 1
        try:
            await self._serve(scope, receive, wrapped)
        finally:
            self.serving -= 1

    def _room(self, scope: Scope) -> int:
        """The requests being served past which this one is refused: all but ``reserved`` for a
        sign-in, and for a request with neither this console's signed session cookie nor an API
        token (``Gate.has_credentials``: no look-up); every slot for the others. A sign-in form is
        the only body the console waits on from a stranger; any other request a stranger sends
        (a made-up token too) is answered at once, its body never read."""
        if scope.get("path") == SIGN_IN or self.gate is None:
            return self.max_requests - self.reserved
        return self.max_requests - (0 if self.gate.has_credentials(Request(scope)) else self.reserved)

    async def _serve(self, scope: Scope, receive: Receive, wrapped: Send) -> None:
        headers = dict(scope.get("headers") or [])
        if b"transfer-encoding" in headers and b"content-length" in headers:
            # Framed two ways: a proxy in front that reads the length would send what the chunks
            # leave over as the next request on a shared connection (request smuggling). Refused,
            # and the connection closed with it (RFC 9112 6.1), whatever follows on it unread.
            refused = PlainTextResponse(_FRAMED_TWICE, status_code=400, headers={"connection": "close"})
            await refused(scope, receive, wrapped)
            return
        if _host_name(headers.get(b"host", b"")) not in self.allowed_hosts:
            await PlainTextResponse("unknown host name", status_code=421)(scope, receive, wrapped)
            return
        if _made_elsewhere(headers):  # before any look-up: no session is seen, none kept alive
            await PlainTextResponse(_ELSEWHERE, status_code=403)(scope, receive, wrapped)
            return
        if "\x00" in scope.get("path", "") or b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
            await PlainTextResponse(UNSTORABLE, status_code=400)(scope, receive, wrapped)
            return
        client = scope.get("client")
        CLIENT.set(str(client[0]) if client else "")
        declared = headers.get(b"content-length")
        if declared in (None, b"0") and scope.get("method") not in ("POST", "PUT", "PATCH", "DELETE"):
            await self.app(scope, receive, wrapped)  # no body
            return
        limit = await self._limit(scope)
        if limit == 0:  # not signed in: the app refuses it without its body (never read)
            await self.app(scope, _no_body, wrapped)
            return
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await PlainTextResponse("request body too large", status_code=413)(scope, receive, wrapped)
            return
        body = await _read_body(receive, limit)
        if isinstance(body, int):
            if body:  # nothing to answer when the client has gone
                message = "request body too large" if body == 413 else "request body too slow"
                await PlainTextResponse(message, status_code=body)(scope, receive, wrapped)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, wrapped)

    async def _limit(self, scope: Scope) -> int:
        """The most of this request's body that is read: 0 for a request not signed in."""
        if self.gate is None:
            return MAX_BODY
        if scope.get("path") == SIGN_IN:
            return MAX_ANONYMOUS_BODY
        return MAX_BODY if await self.gate.signed_in(Request(scope)) else 0


def _secure_cookie(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A header of a response sent over HTTPS: a cookie it sets is ``Secure`` (never sent back
    over plain HTTP, where anyone on the path reads it), with ``--secure-cookies`` or without."""
    if name.lower() != b"set-cookie" or b"secure" in [a.strip().lower() for a in value.split(b";")[1:]]:
        return name, value
    return name, value + b"; Secure"


def _relative_location(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A response header, a ``Location`` made a path on this console: the scheme and host an
    absolute one names (Starlette's trailing-slash redirect writes the request's ``Host`` header
    back, any port it names, and ``http`` behind a TLS proxy) are dropped, and leading slashes or
    backslashes are one ``/`` (``//evil.example`` is another site to a browser). Every redirect
    the console sends stays on the origin the browser is on."""
    if name.lower() != b"location":
        return name, value
    parts = urlsplit(value.decode("latin-1"))
    path = "/" + parts.path.lstrip("/\\")
    return name, urlunsplit(("", "", path, parts.query, parts.fragment)).encode("latin-1")


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _refuse_websocket(scope: Scope, send: Send) -> None:
    """A plain 404 with the protective headers where the server lets the app answer a handshake
    over HTTP, else a close (the server's 403)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(b"content-type", b"text/plain; charset=utf-8"), *PROTECTIVE_HEADERS]
    await send({"type": "websocket.http.response.start", "status": 404, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": b"not found"})


async def _read_body(receive: Receive, limit: int = MAX_BODY) -> bytes | int:
    """The whole body, or the status that refuses it (413, 408); 0 if the client went away."""
    chunks: list[bytes] = []
    seen = 0
    with anyio.move_on_after(REQUEST_DEADLINE):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return 0
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > limit:
                return 413
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
    return 408


class _Static(StaticFiles):
    """The console's own files, each under its one path: ``/static/<name>`` of a file in the
    folder, nothing else (Starlette's files normalise a path, so ``console.css/`` or
    ``./console.css`` served the style sheet under another URL, against which its relative
    references and a cache's key read otherwise)."""

    def __init__(self, *, directory: str) -> None:
        super().__init__(directory=directory)
        self.names = frozenset(p.name for p in Path(directory).iterdir() if p.is_file())

    def get_path(self, scope: Scope) -> str:
        path: str = super().get_path(scope)  # the path normalised: ``a/`` and ``./a`` are ``a``
        full, root = scope["path"], scope.get("root_path", "")  # as Starlette's route path reads
        sent = (full[len(root) :] if root and full.startswith(root) else full).removeprefix("/")
        if sent != path or path not in self.names:
            raise HTTPException(status_code=404)
        return path


def create_app(
    sources: ConsoleSources,
    *,
    secret_key: bytes,
    secure_cookies: bool = False,
    allowed_hosts: Iterable[str] = LOOPBACK_HOSTS,
    max_requests: int = MAX_REQUESTS,
) -> Any:
    """The console's ASGI application over ``sources``. ``allowed_hosts``: the names it answers
    to in the ``Host`` header (the loopback names by default; add the name it is served under);
    ``max_requests``: requests served at once (``Guard``)."""
    from tether.console._api import api_routes
    from tether.console._pages import page_routes

    console = Console(sources, Gate(sources.users, secret_key, secure_cookies), environment())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        sources.close()

    static = _Static(directory=str(Path(__file__).with_name("static")))
    app = Starlette(
        routes=[*page_routes(console), *api_routes(console), Mount("/static", static, name="static")],
        lifespan=lifespan,
    )
    app.state.console = console
    return Guard(app, allowed_hosts, console.gate, max_requests)
