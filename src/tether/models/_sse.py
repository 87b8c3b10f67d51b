"""An answer read from raw bytes, for every backend: the body decoded (``decoded``; an error
answer read to its error, bounded, ``status_error``; one a client read whole, ``gunzipped``),
its blocks under a size limit (``blocks``), the ``data`` of each server-sent event
(``sse_data``), each event as a JSON object with error objects raised as the errors they report
(``events``), and how far a stream has said it ended (``Ending``, for ``until_cut``)."""

from __future__ import annotations

import json
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from tether.errors import ModelError
from tether.models._base import later_finish
from tether.models._failures import Failures, codings, is_error, is_text
from tether.models._json import loads
from tether.models._retrying import Retryable

__all__ = [
    "BOM",
    "ERROR_BODY_S",
    "Ending",
    "ErrorData",
    "blocks",
    "declared_over",
    "decoded",
    "events",
    "gunzipped",
    "named_error",
    "sse_data",
    "status_error",
    "too_large",
    "until_cut",
]

BOM = b"\xef\xbb\xbf"
T = TypeVar("T")


def decoded(response: Any) -> AsyncIterator[bytes]:
    """The body's blocks as they arrive, decoded: by ``httpx2``, except ``gzip`` (or its
    alias ``x-gzip``, which ``httpx2`` passes through undecoded), decoded here to its end: a
    body may be several gzip members one after another (RFC 1952; a proxy that compresses each
    piece it flushes), and ``httpx2`` reads the first and drops the rest."""
    said = response.headers.get("content-encoding")
    if not said or codings(said) != ["gzip"]:
        return response.aiter_bytes()  # type: ignore[no-any-return]
    return _gunzip(response.aiter_raw())


_PIECE = 256 * 1024  # the most one step of gunzipping writes (a bomb is cut by the size limit)


async def _gunzip(raw: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Every gzip member of the raw blocks, decoded in pieces of at most ``_PIECE`` bytes: a
    small block that inflates a thousandfold (a gzip bomb) is never held whole; the reader's
    size limit stops it after the first pieces past the limit."""
    z, first = zlib.decompressobj(wbits=31), True
    async for block in raw:
        while True:
            try:
                piece = z.decompress(block, _PIECE)
            except zlib.error as err:
                if first:  # not gzip at all (a label on a plain body): unreadable, maybe not next time
                    raise Retryable("unusable_response", f"the body does not decode as gzip: {err}") from None
                return  # bytes after the last member: ignored, as gzip does
            if piece:
                yield piece
            if z.eof:  # another member may follow
                block, z, first = z.unused_data, zlib.decompressobj(wbits=31), False
            else:  # input the piece's bound left; none, and a full piece may still have more out
                block = z.unconsumed_tail
            if not block and len(piece) < _PIECE:
                break


def gunzipped(headers: Any, raw: bytes, limit: int = 64 * 1024) -> bytes:
    """An error answer's body as read whole by a client that left it compressed: labelled
    ``gzip`` by its alias ``x-gzip`` (which ``httpx2`` does not decode), it still starts with
    gzip's magic bytes; decoded here (every member, at most ``limit`` bytes), so its error object
    is read. Any other body, as it is."""
    said = headers.get("content-encoding")
    if not said or codings(said) != ["gzip"] or not raw.startswith(b"\x1f\x8b"):
        return raw
    out: list[bytes] = []
    while raw and sum(map(len, out)) < limit:
        z = zlib.decompressobj(wbits=31)
        try:
            out.append(z.decompress(raw, limit))
        except zlib.error:
            break
        if not z.eof:
            break
        raw = z.unused_data
    return b"".join(out)[:limit] if out else raw


ERROR_BODY_S = 2.0  # the longest an error answer's body is waited for: its status already decides


async def status_error(response: Any, failures: Failures, limit: int = 64 * 1024) -> Exception:
    """The error an answer with an error (or redirect) status says, for either transport: its
    body read at most ``limit`` bytes, declared or received, decoded as an answer is
    (``decoded``: ``x-gzip`` and every gzip member, in bounded pieces; one labelled ``gzip`` or
    ``deflate`` read as sent and inflated here, ``inflated``: kept as it is when the label was
    wrong), then closed; a body cut or too large stands as an empty one. The body only adds detail to what
    the status and headers decide, so it is waited for at most ``ERROR_BODY_S`` seconds and half
    the time left to the call (``anyio.current_effective_deadline``): a server that sends a 401
    and then stalls its body gets the 401's error, named and final, with what of the body came
    (not a timeout of the whole attempt, retried as if the server might answer next time, and
    a 429's ``retry-after`` lost with it)."""
    import anyio
    import httpx2

    raw = b""
    said = codings(response.headers.get("content-encoding", ""))
    zipped = said in (["gzip"], ["deflate"])  # read as sent, inflated here: a wrong label is no loss
    try:
        if not declared_over(response.headers, limit):
            parts: list[bytes] = []
            left = anyio.current_effective_deadline() - anyio.current_time()
            with anyio.move_on_after(max(0.0, min(ERROR_BODY_S, left / 2))):
                total = 0
                async for block in response.aiter_raw() if zipped else decoded(response):
                    total += len(block)
                    if total > limit:
                        raise too_large(limit)
                    parts.append(block)
            raw = b"".join(parts)
    except (httpx2.RequestError, ModelError, Retryable):
        raw = b""
    finally:
        await response.aclose()
    if zipped:
        raw = inflated(said[0], raw, limit)
    return failures.status(response.status_code, raw, response.headers)


def inflated(coding: str, raw: bytes, limit: int) -> bytes:
    """An error answer's body labelled ``gzip`` or ``deflate``, inflated (every gzip member; a
    ``deflate`` body zlib-wrapped or bare), at most ``limit`` bytes; as it is when it does not
    inflate (a label on a plain body: its text is the server's message, and stays; bytes that
    are not text are named by their size, ``Failures.status``, never shown)."""
    if coding == "gzip":
        return gunzipped({"content-encoding": "gzip"}, raw, limit)  # no gzip magic: as it is
    z = zlib.decompressobj()  # RFC 9110's deflate: zlib's format, its header and checksum checked
    try:
        out = z.decompress(raw, limit)
        if z.eof or len(out) >= limit:
            return out
    except zlib.error:
        pass
    if is_text(raw):  # bare deflate has no header to check: plain text is taken for what it is
        return raw
    z = zlib.decompressobj(wbits=-zlib.MAX_WBITS)  # deflate sent bare, as some servers do
    try:
        out = z.decompress(raw, limit)
    except zlib.error:
        return raw
    return out if z.eof or len(out) >= limit else raw


def declared_over(headers: Any, limit: int) -> bool:
    """Whether the body's declared length (``content-length``) is over ``limit``: such an
    answer is refused unread."""
    declared = headers.get("content-length", "")
    return declared.isdigit() and int(declared) > limit


def too_large(limit: int) -> ModelError:
    """The error for an answer of more than ``limit`` bytes, declared or received."""
    return ModelError(f"the answer is larger than max_response_bytes ({limit} bytes): refused, not read")


async def blocks(response: Any, limit: int) -> AsyncIterator[bytes]:
    """The body's blocks as they arrive, decoded; ``ModelError`` past ``limit`` bytes in all
    (declared or received): an answer that large is refused, not held."""
    if declared_over(response.headers, limit):
        raise too_large(limit)
    total = 0
    async for block in response.aiter_bytes():
        total += len(block)
        if total > limit:
            raise too_large(limit)
        yield block


class ErrorData(bytes):
    """The data of an event named ``error`` (``event: error``): the server says the stream
    failed, whether or not the data carries the protocol's own error marker (a proxy's or a
    framework's error event: ``{"message": ...}``, plain text), or any data at all (an event
    with no ``data:`` line, which the standard would not dispatch, is still the server's word
    that the stream failed: both official SDKs dispatch it and fail on it; empty ``ErrorData``)."""


def named_error(payload: bytes, failures: Failures) -> Exception:
    """The error an ``error``-named event reports: its JSON read as an error object, or its
    text (``Failures.reported``: retried unless it names the request as the problem)."""
    try:
        body: object = json.loads(payload)
    except (ValueError, RecursionError):
        body = payload.decode("utf-8", "replace").strip() or "(no detail)"
    return failures.reported(body, "in an error event mid-stream")


async def sse_data(response: Any, limit: int) -> AsyncIterator[bytes]:
    """The ``data`` of each server-sent event, split by hand from raw bytes (cheaper per chunk than
    decoding text lines; events are ASCII-framed, payloads UTF-8) as the SSE standard says:
    lines end in LF, CRLF or CR; an event's ``data:`` lines are joined by LF and end at a blank
    line; comments and other fields (``retry:``) and a byte-order mark at the start are
    skipped; an event sent again under its own ``id:`` is yielded once (``_Resent``); an
    event named ``error`` (``event: error``) is yielded as ``ErrorData``, with or without data.
    At the end of the body an unfinished event is still yielded (a cut one then fails to
    parse). More than ``limit`` bytes in all is a ``ModelError``. Blocks that end no line are
    joined once one does (a huge event in small blocks is copied once)."""
    pending = b""
    unended: list[bytes] = []  # blocks since the last line end
    data: list[bytes] = []
    named = False  # the event under way is named ``error``
    eid: bytes | None = None  # the event under way's own ``id:`` (none: it gave none)
    resent = _Resent()
    start = True  # a byte-order mark at the start of the stream is dropped (the standard says so)
    async for block in blocks(response, limit):
        if not (start or b"\n" in block or b"\r" in block or pending.endswith(b"\r")):
            unended.append(block)
            continue
        pending, unended = b"".join((pending, *unended, block)), []
        if start:
            if len(pending) < 3 and BOM.startswith(pending):
                continue  # the mark may be split across blocks
            start = False
            pending = pending.removeprefix(BOM)
        if b"\r" in pending:
            held = pending.endswith(b"\r")  # its LF may be in the next block
            pending = pending[:-1] if held else pending
            pending = pending.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + (b"\r" if held else b"")
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line:
                if data:
                    joined = data[0] if len(data) == 1 else b"\n".join(data)
                    if named:
                        yield ErrorData(joined)
                    elif eid is None or not resent.again(eid, joined):
                        yield joined
                    data = []
                elif named:  # an error event with no data still says the stream failed (``ErrorData``)
                    yield ErrorData(b"")
                named, eid = False, None  # the event's type and id end with it (dispatched or not)
            elif line.startswith(b"event:"):
                named = line[6:].strip() == b"error"
            elif line.startswith(b"id:"):
                eid = line[3:].strip()
    pending = b"".join((pending, *unended))
    if pending.startswith(b"data:"):
        data.append(pending[6:] if pending[5:6] == b" " else pending[5:])
    if data or named:
        yield ErrorData(b"\n".join(data)) if named else b"\n".join(data)


class _Resent:
    """The events a stream gave ids of their own (``id:``), to tell one sent again: the same id
    and the same data as an event before it (a proxy that resumed the stream from a
    ``Last-Event-ID`` it misjudged, and resent events already passed on) is read once, as a
    Responses event sent again under its ``sequence_number`` is (before: its text or arguments
    said twice, and the doubled answer accepted). An id given to two different events (a
    server that gives every event the completion's id) names no event: from then on nothing
    is told apart by it (two equal pieces of text under one id are both read)."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: dict[bytes, int] | None = {}

    def again(self, eid: bytes, data: bytes) -> bool:
        if self.seen is None or not eid:
            return False
        said, was = hash(data), self.seen.get(eid)
        if was is None:
            self.seen[eid] = said
            return False
        if was == said:
            return True
        self.seen = None
        return False


async def events(response: Any, failures: Failures, limit: int) -> AsyncIterator[dict[str, Any]]:
    """Each stream event as a JSON object; one that is not is a ``Retryable`` unreadable stream,
    an error object (``is_error``) or an event named ``error`` the error it reports
    (``Failures.reported``). ``[DONE]`` (chat's end of stream, which a proxy may send in any
    protocol's stream, as the ``openai`` SDK reads it) ends the events there: the reader judges
    whether what came before is a whole answer, as it does a stream that ends."""
    async for payload in sse_data(response, limit):
        if type(payload) is ErrorData:
            raise named_error(payload, failures)
        if not payload or payload.isspace():
            continue  # an event with empty data (a keep-alive) carries nothing
        if payload.strip() == b"[DONE]":
            return
        try:
            event = loads(payload)
        except ValueError:
            raise Retryable("stream_unreadable", f"stream event is not JSON: {payload[:200]!r}") from None
        if not isinstance(event, dict):
            raise Retryable("stream_unreadable", f"stream event is not an object: {payload[:200]!r}")
        if is_error(event):
            raise failures.reported(event, "mid-stream")
        yield event


class Ending:
    """How far a stream has said it ended: its finish (stop reason) so far (``said``; the later
    one, as ``later_finish`` keeps it), whether its terminal event came (``done``), and whether
    content came after the finish (``content``: events out of order, or a proxy that replayed
    the answer after its end). The answer read so far is ``whole`` once the terminal event came,
    or once a finish came with no content after it: a stream cut (or ended without its terminal
    event) after a finish said before the end of its content may have lost the rest of it, and
    what arrived is half an answer, not one that merely lost its usage and terminal event."""

    __slots__ = ("done", "finish", "late")

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """A message begun again (a proxy that retried upstream): nothing said of its end yet."""
        self.finish: str | None = None
        self.late = False
        self.done = False

    def said(self, raw: object) -> None:
        """A finish the stream said (none, ``""``: nothing)."""
        self.finish = later_finish(self.finish, raw)

    def content(self) -> None:
        """Content arrived: after a finish, that finish no longer makes the answer whole."""
        if self.finish is not None:
            self.late = True

    def whole(self) -> bool:
        return self.done or (self.finish is not None and not self.late)


async def until_cut(source: AsyncIterator[T], whole: Callable[[], bool]) -> AsyncIterator[T]:
    """The items of ``source``; a connection cut (``httpx2.RequestError``) ends them quietly
    once ``whole()`` says the answer read so far is whole (``Ending.whole``: a chat stream past
    its finish reason lost only its usage chunk and ``[DONE]``, an Anthropic stream past its
    ``message_delta`` only ``message_stop``: asking again would pay for the answer twice)."""
    import httpx2

    try:
        async for item in source:
            yield item
    except httpx2.RequestError:
        if not whole():
            raise
