"""The host's HTTP proxy for a confined server whose ``network`` is a ``host:port`` allowlist.

It listens on a socket the launch bound at ``127.0.0.1:PROXY_PORT`` in the server's own network
namespace and connects out from the host's. It speaks ``CONNECT`` (TLS end to end) and
absolute-form ``http://`` requests; a refused destination gets ``403`` with the reason and
``on_refused`` hears of it once. Request heads are parsed by h11, capped at ``HEAD_LIMIT``. At
most ``MAX_CONNECTIONS`` of a server's connections are open at once (each holds descriptors of
the host's process): one more is answered ``503`` and closed at once.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h11

from tether.mcp._netallow import PROXY_PORT, Address, Entry, matching, parse_host, special_address

__all__ = ["HEAD_LIMIT", "MAX_CONNECTIONS", "PROXY_PORT", "receive_listener", "serving"]

HEAD_LIMIT = 16 * 1024
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 15.0
MAX_CONNECTIONS = 64  # one server's connections open at once through the host's proxy
_HOP = {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"upgrade", b"te"}
_log = logging.getLogger("tether.mcp")


class _Answer(Exception):
    """The proxy's own answer to a request it does not forward."""

    def __init__(self, status: int, reason: str, why: str, destination: str | None = None) -> None:
        super().__init__(why)
        self.status, self.reason, self.why, self.destination = status, reason, why, destination


async def receive_listener(channel: socket.socket, timeout_s: float) -> socket.socket | None:
    """The listening socket the launch sends over ``channel`` (None: the launch failed first)."""
    channel.setblocking(False)
    with anyio.fail_after(timeout_s):
        await anyio.wait_readable(channel)
    _data, fds, _flags, _addr = socket.recv_fds(channel, 16, 4)
    for extra in fds[1:]:
        socket.close(extra)
    return socket.socket(fileno=fds[0]) if fds else None


@asynccontextmanager
async def serving(
    sock: socket.socket, entries: Iterable[Entry], on_refused: Callable[[str, str], None]
) -> AsyncIterator[None]:
    """Serve the proxy on ``sock`` (listening) while the block runs; then stop every connection."""
    allowed = tuple(entries)
    told: set[str] = set()
    open_now = [0]

    def refused(destination: str, why: str) -> None:
        if destination not in told and len(told) < 1000:
            told.add(destination)
            on_refused(destination, why)

    async def handle(client: anyio.abc.SocketStream) -> None:
        async with client:
            if open_now[0] >= MAX_CONNECTIONS:  # its descriptors are the host's: one more is closed
                why = f"this server already has {MAX_CONNECTIONS} connections open through the host's proxy"
                with suppress(Exception):
                    await client.send(_answer(503, "Service Unavailable", why))
                return
            open_now[0] += 1
            try:
                await _serve_one(client, allowed, refused)
            except Exception as err:  # one connection's failure never ends the proxy
                _log.debug("network proxy: %s: %s", type(err).__name__, err)
            finally:
                open_now[0] -= 1

    async def serve(tg: anyio.abc.TaskGroup) -> None:
        try:
            await listener.serve(handle, tg)
        except Exception as err:  # the server loses its network, not its connection
            _log.warning("network proxy stopped: %s: %s", type(err).__name__, err)

    listener = await anyio.abc.SocketListener.from_socket(sock)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(serve, tg)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


async def _serve_one(
    client: anyio.abc.SocketStream, entries: tuple[Entry, ...], refused: Callable[[str, str], None]
) -> None:
    try:
        with anyio.fail_after(HEAD_TIMEOUT_S):
            head, rest = await _read_head(client)
        host, port, forward = _request(head)
        with anyio.fail_after(CONNECT_TIMEOUT_S):
            upstream = await _connect(entries, f"[{host}]" if ":" in host else host, port)
    except _Answer as answer:
        if answer.status == 403 and answer.destination is not None:
            refused(answer.destination, answer.why)
        await client.send(_answer(answer.status, answer.reason, answer.why))
        return
    async with upstream:
        if forward is None:
            await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            await upstream.send(forward)
        if rest:
            await upstream.send(rest)
        await _pipe(client, upstream)


def _answer(status: int, reason: str, why: str) -> bytes:
    """The proxy's own answer (plain text), closing the connection."""
    body = f"tether: {why}\n".encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


async def _read_head(client: anyio.abc.SocketStream) -> tuple[bytes, bytes]:
    buffer = b""
    while (end := buffer.find(b"\r\n\r\n")) < 0 and len(buffer) <= HEAD_LIMIT:
        try:
            buffer += await client.receive()
        except anyio.EndOfStream:
            raise _Answer(400, "Bad Request", "the request ended before its head") from None
    if end < 0 or end + 4 > HEAD_LIMIT:
        raise _Answer(431, "Request Header Fields Too Large", f"request head over {HEAD_LIMIT} bytes")
    return buffer[: end + 4], buffer[end + 4 :]


def _request(head: bytes) -> tuple[str, int, bytes | None]:
    """(host, port, the head to send upstream; None for a CONNECT tunnel)."""
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
    parser.receive_data(head)
    try:
        event = parser.next_event()
    except h11.RemoteProtocolError as err:
        raise _Answer(400, "Bad Request", f"not an HTTP request: {err}") from None
    if not isinstance(event, h11.Request):
        raise _Answer(400, "Bad Request", "not an HTTP request")
    method, target = event.method.decode("ascii"), event.target.decode("ascii")
    if method == "CONNECT":
        host, port = _authority(target, None)
        return host, port, None
    parts = urlsplit(target)
    if parts.scheme.lower() != "http" or not parts.netloc:
        why = "only CONNECT host:port and absolute http:// requests go through this proxy"
        raise _Answer(400, "Bad Request", why)
    host, port = _authority(parts.netloc.rpartition("@")[2], 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"{method} {path} HTTP/1.1".encode()]
    headers = [(k, v) for k, v in event.headers if k.lower() not in _HOP]
    if not any(k.lower() == b"host" for k, _ in headers):
        headers.insert(0, (b"host", parts.netloc.rpartition("@")[2].encode("ascii")))
    lines += [k + b": " + v for k, v in headers]
    lines += [b"connection: close", b"", b""]
    return host, port, b"\r\n".join(lines)


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    """``host:port`` of a request (an IPv6 host in brackets) as (host without brackets, port)."""
    if text.startswith("[") and "]" in text:
        host, after = text[1:].split("]", 1)
        port_text = after[1:] if after.startswith(":") else ""
    else:
        host, _, port_text = text.partition(":") if text.count(":") == 1 else (text, "", "")
    if not port_text and default_port is not None:
        port_text = str(default_port)
    if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise _Answer(400, "Bad Request", f"not a host:port destination: {text[:200]!r}")
    return host, int(port_text)


async def _connect(entries: tuple[Entry, ...], authority: str, port: int) -> anyio.abc.SocketStream:
    """A connection to ``authority`` (a name or an address) and ``port``, if the allowlist allows."""
    destination = f"{authority}:{port}"
    try:
        entry = matching(entries, authority, port)
    except ValueError:
        entry = None
    if entry is None:
        why = f"{destination[:300]} is not in this server's network allowlist (network: [host:port, ...])"
        raise _Answer(403, "Forbidden", why, destination[:300])
    name, address = parse_host(authority)
    addresses = [address] if address is not None else await _resolve(name, port)
    if not entry.reaches_special and any(special_address(a) for a in addresses):
        why = (
            f"{destination} resolves to a loopback or link-local address; list that address itself "
            "(or localhost) in network to allow it"
        )
        raise _Answer(403, "Forbidden", why, destination)
    last: OSError | None = None
    for addr in addresses:
        try:
            return await anyio.connect_tcp(str(addr), port)
        except OSError as err:
            last = err
    raise _Answer(502, "Bad Gateway", f"cannot connect to {destination}: {last}")


async def _resolve(name: str, port: int) -> list[Address]:
    try:
        infos = await anyio.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise _Answer(502, "Bad Gateway", f"cannot resolve {name}: {err}") from None
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0])) for info in infos))


async def _pipe(a: anyio.abc.SocketStream, b: anyio.abc.SocketStream) -> None:
    """Bytes both ways until both sides are done (a failure on either ends both)."""

    async def one(src: anyio.abc.SocketStream, dst: anyio.abc.SocketStream, tg: anyio.abc.TaskGroup) -> None:
        try:
            async for chunk in src:
                await dst.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            tg.cancel_scope.cancel()
            return
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await dst.send_eof()

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, a, b, tg)
        tg.start_soon(one, b, a, tg)
