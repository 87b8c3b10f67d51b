"""How ``tether serve`` holds its connections: uvicorn's HTTP protocol with deadlines, a cap on the
connections held open, a bound on what a client may send ahead of its answers, and request heads
(and chunked trailers) taken only where they read one way (``read_two_ways``)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tether.console import _app  # its deadlines, read when used (a test shortens them)

__all__ = [
    "ACCEPT_BACKLOG",
    "BURSTS_IN_FLIGHT",
    "MAX_AHEAD",
    "MAX_CONNECTIONS",
    "connection_cap",
    "deadline_protocol",
    "read_two_ways",
    "trailer_read_two_ways",
    "trailer_two_ways",
]

# Connections the console holds open at most (``connection_cap``): never more than half the
# descriptors the process may open, the rest left to its stores, traces and MCP servers.
MAX_CONNECTIONS = 4096
# Connections waiting to be accepted (the listen queue): the event loop accepts as many at once,
# each a descriptor, before the cap is applied to any (uvicorn's default is 2048).
ACCEPT_BACKLOG = 64
# Accept bursts whose descriptors may be open beyond the cap: asyncio accepts a burst in one turn
# of its loop, makes each connection's protocol in the next, calls ``connection_made`` (where the
# cap closes one) in the one after, and frees the closed one's descriptor a turn later, while each
# of those turns accepts a burst of its own.
BURSTS_IN_FLIGHT = 3
# Bytes a client may send past a request it has sent whole and not yet had the answer to (the
# next requests, pipelined): past it the connection is read no further until that answer is sent.
MAX_AHEAD = 64 * 1024
# A request head's end (h11's: a line break, an optional CR, a line break), and what in a head
# two parsers read two ways: a header line continued on the next (obsolete line folding: a line
# that begins with a space or a tab), and a line ended by a bare line feed.
_HEAD_END = re.compile(rb"\n\r?\n")
_TWO_READINGS = re.compile(rb"\n[ \t]|(?<!\r)\n")
TWO_READINGS = "a request head's lines end with CRLF and none is folded onto the next (RFC 9112 2.2, 5.2)"


def read_two_ways(buffered: bytes, start: int = 0) -> bool:
    """Whether the request head at the start of ``buffered`` (what a connection sent and the
    parser has not read yet: whole or in part) ends a line with a bare line feed or continues a
    line on the next: what h11 takes (RFC 9112 lets a recipient), and a proxy in front may read
    otherwise. ``start``: the length of the part of this head found clean before (the bytes of
    a head sent in pieces are each searched about once)."""
    begin = max(0, start - 2)  # a line break or a head's end across the two parts
    end = _HEAD_END.search(buffered, begin)
    return _TWO_READINGS.search(buffered, begin, end.start() + 1 if end else len(buffered)) is not None


# A chunked body's last chunk (its size zero, h11's chunk header), after what h11 has left of the
# line break that ends the chunk before (h11 reads it with the next chunk's header): the trailer
# section follows.
_LAST_CHUNK = re.compile(rb"(?:\r?\n)?0{1,20}(?:;[^\r\n]*)?[ \t]*\r\n")
_CHUNK_HEADER = re.compile(rb"(?:\r?\n)?(?P<size>[0-9A-Fa-f]{1,20})(?:;[^\r\n]*)?[ \t]*\r\n")


def trailer_read_two_ways(buffered: bytes, start: int = 0) -> bool:
    """For a chunked body's next chunk header at the start of ``buffered``: whether it is the last
    chunk and its trailer section (whole or in part) is read two ways (``trailer_two_ways``)."""
    last = _LAST_CHUNK.match(buffered)
    return last is not None and trailer_two_ways(buffered[last.end() :], max(0, start - last.end()))


def trailer_two_ways(trailer: bytes, start: int = 0) -> bool:
    """Whether a chunked body's trailer section at the start of ``trailer`` is read two ways as
    ``read_two_ways`` says of a head, or ends with a bare line feed (h11 ended the body there,
    and read what followed as the next request, where a proxy that ends lines at CRLF only read
    on in the trailers)."""
    if trailer[:2] == b"\r\n":
        return False  # no trailers: the body's end
    return trailer[:1] == b"\n" or read_two_ways(trailer, start)


def connection_cap() -> int:
    """The connections ``tether serve`` holds open at once: ``MAX_CONNECTIONS``, or half of the
    process's open-file limit (``RLIMIT_NOFILE``, often 1024), less the ``BURSTS_IN_FLIGHT``
    accept bursts of ``ACCEPT_BACKLOG`` each that may be open before the cap reaches them, where
    that is less. A cap less the one burst accepted at once let a flood, whose connections the
    loop accepted faster than it closed them, take every descriptor ("Too many open files")."""
    try:
        import resource
    except ImportError:  # not POSIX
        return MAX_CONNECTIONS
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, soft // 2 - BURSTS_IN_FLIGHT * ACCEPT_BACKLOG))


def deadline_protocol(max_connections: int | None = None) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (``_Deadline``) for one server, holding at most ``max_connections``
    (``connection_cap``) open. Always uvicorn's h11 protocol, never the httptools one it prefers
    where httptools is installed (``uvicorn[standard]``): that one reads a request's headers
    however long (h11 refuses a head once 16 KiB of it are in without its end), and the limits
    here are h11's, as tested."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    cap = connection_cap() if max_connections is None else max_connections
    return type("Deadline", (_Deadline, H11Protocol), {"cap": cap, "held": {}})


class _OneReading:
    """h11's ``next_event`` for one connection (``_Deadline._read_once``): before h11 reads a
    request head, or a chunked body's last chunk and trailer section, what it has buffered of
    them is searched (``read_two_ways``, ``trailer_read_two_ways``, ``trailer_two_ways``), each
    byte about once (``clean``: the bytes at the buffer's start found clean), and one read two
    ways is a protocol error (uvicorn's 400)."""

    def __init__(self, conn: Any, next_event: Any) -> None:
        self.conn, self.next_event = conn, next_event
        self.clean = 0
        self.part = ""  # of a chunked body: "chunk" (a chunk header next), "trailer", or ""

    def __call__(self) -> Any:
        import h11

        state, part = self.conn.their_state, self.part
        body = state is h11.SEND_BODY and part != ""
        buffered = self.conn.trailing_data[0] if state is h11.IDLE or body else None
        if buffered is not None:
            check = read_two_ways if state is h11.IDLE else _CHECKS[part]
            if check(buffered, self.clean):
                raise h11.RemoteProtocolError(TWO_READINGS)
        event = self.next_event()
        if event is not h11.NEED_DATA:  # what was read is gone from the buffer
            self.clean, self.part = 0, _part_after(event, part)
        elif buffered is not None:  # h11 may have read the last chunk's header, not yet its trailers
            left = self.conn.trailing_data[0]
            header = _CHUNK_HEADER.match(buffered) if part == "chunk" else None
            if header is not None and len(buffered) - len(left) >= header.end():  # read: data next
                self.part = "trailer" if header["size"].strip(b"0") == b"" else ""
            self.clean = len(left)  # all of it searched: what is left of the buffered bytes
        return event


_CHECKS = {"chunk": trailer_read_two_ways, "trailer": trailer_two_ways}


def _part_after(event: Any, before: str) -> str:
    """The part of a chunked request body next after h11's ``event`` (``_OneReading.part``)."""
    import h11

    if isinstance(event, h11.Request):
        return "chunk" if any(name == b"transfer-encoding" for name, _ in event.headers) else ""
    if isinstance(event, h11.Data):
        return "chunk" if event.chunk_end else ""
    return before if event is h11.PAUSED else ""


class _Deadline(asyncio.Protocol):
    """Mixed into uvicorn's HTTP protocol (``deadline_protocol``), with a deadline: a connection
    that has not sent a request's whole headers ``REQUEST_DEADLINE`` seconds after it opened (or
    after its last response) is closed (slowloris); the body's deadline is ``Guard``'s; a response
    the client stops reading is cut (``_watch_reads``: a slow read). uvicorn's own 400 (to a
    request it cannot parse, which the app never sees) carries the console's protective headers;
    a request head that may be read two ways is one (``_read_once``).

    At most ``cap`` connections are held open: one more closes the connection that has waited
    longest for a request (``_make_room``), never one whose request is being served: a stranger's
    idle connections by the hundred used up the process's file descriptors, and no one else's was
    accepted. A client reads its answers before it sends more than ``MAX_AHEAD`` bytes past them
    (``data_received``): requests pipelined behind one whose answer it left unread (a static file,
    whose sending reads on for a disconnect) were read and kept in memory without bound."""

    cap: int
    held: dict[Any, None]  # the server's open connections, the longest waiting first
    # uvicorn's protocol's own
    conn: Any
    cycle: Any
    transport: Any
    loop: Any
    flow: Any

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._ahead = 0
        self.conn.next_event = self._read_once(self.conn.next_event)
        self.flow.resume_reading = self._resume_reading(self.flow.resume_reading)
        self._arm()
        if len(self.held) > self.cap:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self.held.pop(self, None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.more_body:
            self._ahead += len(data)  # past a request read whole, whose answer is not sent yet
            if self._ahead > MAX_AHEAD:
                self.flow.pause_reading()
        super().data_received(data)

    def _read_once(self, next_event: Any) -> Any:
        """h11's ``next_event``, which refuses a request head that a proxy in front may read
        otherwise (``read_two_ways``) before reading it, as a protocol error (uvicorn's 400,
        ``send_400_response``, the connection closed), each head a connection sends, pipelined
        ones too, and a chunked body's trailer section so read (``trailer_read_two_ways``). h11
        read a fold as a space and a bare line feed as a line's end: ``X: a`` then
        `` Transfer-Encoding: chunked`` was one header ``X`` here, while a proxy that reads the
        second line as a header of its own frames the body by chunks where the console read its
        ``Content-Length``, and ``X: a`` then a bare line feed then ``Content-Length: 40`` gave
        the console a body that a proxy which ends lines at CRLF only sends on as the next request
        (request smuggling, past ``Guard``'s refusal of a request framed both ways)."""
        return _OneReading(self.conn, next_event)

    def _resume_reading(self, resume: Any) -> Any:
        """``FlowControl.resume_reading``, which does nothing while the client is ``MAX_AHEAD``
        ahead (uvicorn resumes reading whenever the app waits for a message, as a static file's
        sending does for a disconnect)."""

        def resume_reading() -> None:
            if self._ahead <= MAX_AHEAD:
                resume()

        return resume_reading

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._arm()

    def _arm(self) -> None:
        waiting = self._waiting = self.cycle  # a new request's headers replace it
        self.held.pop(self, None)
        self.held[self] = None  # waiting from now: the newest to wait
        if self._ahead:
            self._ahead = 0
            self.flow.resume_reading()  # the answer is sent: what was sent ahead is read on

        def expire() -> None:
            if self.cycle is waiting and not self.transport.is_closing():
                self.transport.close()

        self.loop.call_later(_app.REQUEST_DEADLINE, expire)

    def _waits(self) -> bool:
        """Whether this connection waits for a request (none begun since ``_arm``)."""
        return self.cycle is self._waiting and not self.transport.is_closing()

    def _make_room(self) -> None:
        """Close the connection that has waited longest for a request (this new one if every
        other is being served)."""
        oldest = next((c for c in self.held if c is not self and c._waits()), self)
        self.held.pop(oldest, None)
        oldest.transport.close()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_reads(self.transport.get_write_buffer_size())

    def _watch_reads(self, left: int) -> None:
        """A response the client stopped reading (a slow read: its window kept shut) holds its
        unsent bytes here, in memory, for as long as the connection lasts, however long the
        response it asked for: one whose client took less than ``MIN_READ_BYTES`` of it in
        ``REQUEST_DEADLINE`` seconds is cut (the connection is aborted)."""
        if getattr(self, "_watching", False):
            return
        self._watching = True

        def check() -> None:
            self._watching = False
            now_left = self.transport.get_write_buffer_size()
            if now_left == 0:
                return  # all handed to the client (or the connection is gone)
            if left - now_left < _app.MIN_READ_BYTES:
                self.transport.abort()
                return
            self._watch_reads(now_left)

        self.loop.call_later(_app.REQUEST_DEADLINE, check)

    def send_400_response(self, msg: str) -> None:
        body = msg.encode("ascii", "replace")
        head = [
            b"HTTP/1.1 400 Bad Request",
            b"content-type: text/plain; charset=utf-8",
            b"content-length: %d" % len(body),
            b"connection: close",
            *[name + b": " + value for name, value in _app.PROTECTIVE_HEADERS],
        ]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()
