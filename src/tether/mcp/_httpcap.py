"""What the host takes of a Streamable HTTP server's answers, below the SDK (one transport per
connection):

* a JSON body is read up to the host's limit, as a stdio line is (the SDK reads it whole and
  caps only an SSE event);
* a compressed body (``Content-Encoding``: the host asks for ``gzip`` or ``deflate`` only) is
  decoded here, in bounded pieces, before any of these checks: the limit counts decoded bytes
  and the checks read the decoded answer (``_Decoded``). httpx decoded it after the transport,
  so a gzip bomb of 1 MiB reached the SDK as 1 GiB, and a compressed answer with another
  request's id or a listing nested too deep passed unchecked; an encoding the host did not ask
  for fails the request it answers;
* a JSON body answering a POSTed request must answer that request: one with another id (a
  forged answer, or another request's) or no answer at all would leave the request waiting out
  its timeout (and could resolve another one), so it becomes an error for the request it came to;
* a ``tools/list`` answer (a JSON body or an event) with a tool nested deeper than the SDK's
  parser goes has that tool cut (``_deep``), as on stdio;
* a JSON body or an event (of any stream) holding more objects and arrays than the SDK is given
  (``_bulk.MAX_CONTAINERS``) fails the request it answers, or is dropped, as on stdio;
* a session id (``Mcp-Session-Id``) that is not ASCII (MCP allows visible ASCII only) fails the
  request it came with, named: httpx cannot send it back, and the SDK's writer failed on the
  next request, the connection closing as "Connection closed" with no reason given;
* an answer httpx cannot read (headers past h11's limit, broken chunked framing) fails the
  request it answers, named, as an answer too large does: it ended the SDK's writer, the
  session lost as "Connection closed";
* a connection closed with no answer (or in the middle of one) to a request is asked a ``ping``
  (``_dropped``): a server still answering failed that request alone (a worker restarted, a proxy
  or load balancer dropping the connection), whether it took effect unknown, and one that no
  longer knows the session lost it (``SESSION_REFUSED``: the request may have run); only a server
  answering nothing within ``ACK_WAIT_S`` is lost (before, any such close quarantined the server);
* a 404 to a request carrying the session id is the session gone (``SESSION_GONE``): the status
  says so, never a server's words (its own sign-in "session expired" answered at 200 had the
  host start a new session and send the call again), unless its JSON-RPC error names the request
  and says the server serves no such method or params (``REFUSED_AS_ASKED``): servers mapping
  error codes to statuses, as the 2026-07-28 revision has them, answer so in a session they know
  (its body is read within ``ACK_WAIT_S``);
* a 400 to a request carrying the session id is the session gone too (``SESSION_REFUSED``) when a
  ``ping`` on the same session is answered 400 or 404 as well: servers written before the spec
  said 404 answer an unknown session 400 (the TypeScript SDK's examples, "Bad Request: No valid
  session ID provided"); a request the server only found malformed keeps its 400, as does one
  whose error names it and says the server serves no such method or params (the ping's too);
* a JSON body's UTF-8 byte order mark is dropped (the SDK refused the body), and an error naming
  no request (``"id": null``) is the error of the request the POST carried;
* a 401 or 403 to a request is named as the authorization it is (the SDK says only "Server
  returned an error response"): the host runs no OAuth, its token goes in the server's headers;
  a 429 or 5xx whose body is no JSON (a proxy's page) is named by its status (``_httpstatus``);
* event streams are reopened (GET) at most every ``MIN_REOPEN_S``: a server ending each at once
  with ``retry: 0`` had the SDK reconnect as fast as the network allowed, for the session's life;
* a notification or answer POSTed and left unacknowledged is taken as accepted after
  ``ACK_WAIT_S`` (the SDK sends nothing else until then), as is one whose connection the server
  closed with no answer;
* the cookies a server sets are kept up to ``MAX_COOKIES`` and ``MAX_COOKIE_CHARS`` in all
  (``cookie_jar``): every one was kept and sent back with each request, a server setting new
  ones with each answer grew the connection's jar and every request without bound.
"""

from __future__ import annotations

import json
import logging
import re
import zlib
from collections.abc import AsyncIterator, Callable
from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy
from typing import Any

import anyio
import httpx2

from tether.mcp._bulk import counted
from tether.mcp._clean import escape_for_review
from tether.mcp._deep import FOREIGN, cut_deep_tools, cut_events, foreign_answer
from tether.mcp._failures import AUTH_REFUSED, DROPPED, REFUSED_AS_ASKED, SESSION_GONE, SESSION_REFUSED
from tether.mcp._flood import NotificationGate
from tether.mcp._framing import BOM, FLOAT_ID, id_key, well_formed
from tether.mcp._httpstatus import refusal, status_failure
from tether.mcp._stdio import NOT_JSON_RPC, too_large

__all__ = [
    "ACCEPTED_ENCODINGS",
    "ACK_WAIT_S",
    "MAX_COOKIES",
    "MAX_COOKIE_CHARS",
    "MIN_REOPEN_S",
    "CappedTransport",
    "cookie_jar",
]

MIN_REOPEN_S = 0.5
ACK_WAIT_S = 5.0
MAX_COOKIES = 32  # a connection's cookies (a sticky-session cookie or two is what servers set)
MAX_COOKIE_CHARS = 8192  # their names and values in all: the Cookie header every request carries
# httpcore's and h11's words for a server that closed the connection (its answer never came whole).
_GONE = re.compile(r"disconnected without sending|peer closed connection")
_SESSION_404 = "Session not found: the server answered HTTP 404 to the session id"
_SESSION_400 = "Session not found: the server answered HTTP 400 to the session id, and 400 to a ping on it"
_PROBE_ID = "tether-session-probe"
_PING = json.dumps({"jsonrpc": "2.0", "id": _PROBE_ID, "method": "ping"}).encode()
_PROBE_BYTES = 65_536  # what is read of the answer to that ping
_SENDABLE = re.compile(r"[\t\x20-\x7e]*")  # what a header sent back can hold (MCP asks for 0x21-0x7e)
ACCEPTED_ENCODINGS = "gzip, deflate"  # what the host asks for (decoded with the standard library)
_PIECE = 65_536  # decoded bytes produced at a time from a compressed body
logger = logging.getLogger("tether.mcp")
_NULL_ID = re.compile(rb'"id"\s*:\s*null')


class _TooLarge(httpx2.StreamError):
    """The body went past the limit (a ``StreamError``: the SDK fails the request it answers)."""


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream, limit: int) -> None:
        self._stream, self._limit = stream, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            if (seen := seen + len(chunk)) > self._limit:
                raise _TooLarge(too_large(self._limit))
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class _Decoded(httpx2.AsyncByteStream):
    """A body in ``Content-Encoding`` ``codings`` (outermost last), decoded in pieces of at most
    ``_PIECE`` bytes, so what a small compressed chunk expands to is never held at once."""

    def __init__(self, stream: httpx2.AsyncByteStream, codings: list[str]) -> None:
        self._stream = stream
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
        self._layers = [zlib.decompressobj(wbits[c]) for c in reversed(codings)]

    def _through(self, depth: int, data: bytes) -> Any:
        """What ``data`` decodes to through the layers from ``depth`` on, piece by piece."""
        if depth == len(self._layers):
            yield data
            return
        layer = self._layers[depth]
        try:
            while data:
                piece = layer.decompress(data, _PIECE)
                data = layer.unconsumed_tail
                yield from self._through(depth + 1, piece)
        except zlib.error as err:
            raise _BadBody(f"the server's answer could not be decoded ({err})") from None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            for piece in self._through(0, chunk):
                if piece:
                    yield piece

    async def aclose(self) -> None:
        await self._stream.aclose()


class _BadBody(httpx2.StreamError):
    """A compressed body that does not decode (the SDK fails the request it answers)."""


def _decoded(response: httpx2.Response) -> tuple[httpx2.Response, str | None]:
    """``response`` with its body decoded here (``_Decoded``) and its ``Content-Encoding`` gone
    (httpx decodes nothing after the transport); or why it cannot be (an encoding not asked for)."""
    header = response.headers.get("content-encoding", "")
    codings = [c.strip().lower() for c in header.split(",") if c.strip().lower() not in ("", "identity")]
    if not codings:
        return response, None
    if unknown := [c for c in codings if c not in ("gzip", "x-gzip", "deflate")]:
        shown = escape_for_review(", ".join(unknown), limit=80)
        return response, f"the server's answer was encoded as {shown}, which the host did not ask for"
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    headers = httpx2.Headers(response.headers)
    del headers["content-encoding"]
    headers.pop("content-length", None)
    stream = _Decoded(response.stream, codings)
    return httpx2.Response(
        response.status_code, headers=headers, stream=stream, extensions=response.extensions
    ), None


class _Events(httpx2.AsyncByteStream):
    """An event stream, a message of too many objects and arrays refused, a tool nested too
    deep cut and a flood of notifications held back (``cut_events``); on the stream answering a
    POSTed request ``asked``, an answer naming another request is an error (``foreign_answer``)
    and an answer past the limit is the error saying so."""

    def __init__(
        self, stream: httpx2.AsyncByteStream, limit: int, gate: NotificationGate, asked: Any
    ) -> None:
        self._stream, self._limit, self._gate, self._asked = stream, limit, gate, asked

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in cut_events(self._stream, self._limit, self._gate, self._asked):
            yield chunk if self._asked is None else foreign_answer(chunk, self._asked)

    async def aclose(self) -> None:
        await self._stream.aclose()


class _Failing(httpx2.AsyncByteStream):
    """A body that fails as it is read (what was read of it went past the limit)."""

    def __init__(self, err: Exception) -> None:
        self._err = err

    async def __aiter__(self) -> AsyncIterator[bytes]:
        raise self._err
        yield b""  # pragma: no cover - (an async generator)


class CappedTransport(httpx2.AsyncBaseTransport):
    """httpx's own transport, each answer held to what the host takes (module docstring)."""

    def __init__(self, limit: int, server: str = "", on_flood: Callable[[str], None] | None = None) -> None:
        self._inner, self._limit, self._server = httpx2.AsyncHTTPTransport(), limit, server
        self._gate = NotificationGate(on_flood)  # (the connection's every event stream)
        self._last_get: float | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        asked = _request_id(request)
        if request.method == "GET":
            await self._pace()
        elif request.method == "POST" and asked is None:
            return await self._delivered(request)
        request.headers["Accept-Encoding"] = ACCEPTED_ENCODINGS
        try:
            response, undecodable = _decoded(await self._inner.handle_async_request(request))
        except httpx2.RemoteProtocolError as err:
            if asked is None or (failed := await self._unread(request, err)) is None:
                raise  # the server gone, not its answer: the connection is lost
            return httpx2.Response(200, json={**failed, "id": asked}, request=request)
        if undecodable is not None:
            await response.aclose()
            if asked is not None:
                return _replaced(response, _error(asked, -32603, undecodable))
            return _replaced(response, _Failing(_BadBody(undecodable)))
        if (bad := _bad_session_id(response)) is not None:
            await response.aclose()
            del response.headers["mcp-session-id"]  # never adopted by the SDK
            return _replaced(
                response, _error(asked, -32603, bad) if asked is not None else _Failing(_BadBody(bad))
            )
        if asked is not None and response.status_code in (400, 404) and "mcp-session-id" in request.headers:
            response, gone = await self._session_status(request, response, asked)
            if gone is not None:
                return gone
        if asked is not None and response.status_code in (401, 403):
            await response.aclose()
            return _replaced(response, _error(asked, AUTH_REFUSED, refusal(response)))
        content_type = response.headers.get("content-type", "").lower()
        if asked is not None and (named := status_failure(response, content_type)) is not None:
            await response.aclose()
            return _replaced(response, _error(asked, -32603, named))
        if content_type.startswith("text/event-stream"):  # each event capped by the SDK
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            return _replaced(response, _Events(response.stream, self._limit, self._gate, asked))
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        stream = _Capped(response.stream, self._limit)
        ok = 200 <= response.status_code < 300 and content_type.startswith("application/json")
        if asked is None or not ok:
            return _replaced(response, stream)
        try:
            body = b"".join([chunk async for chunk in stream])
        except (_TooLarge, _BadBody) as err:
            return _replaced(response, _Failing(err))
        except httpx2.RemoteProtocolError as err:
            if (failed := await self._unread(request, err)) is None:
                raise
            return _replaced(response, {**failed, "id": asked})
        finally:
            await stream.aclose()
        body = _mended(body, asked)
        if (wrong := _not_its_answer(body, asked)) is not None:
            return _replaced(response, _error(asked, -32603, wrong))
        if (over := counted(body)) is not None:
            return _replaced(response, _error(asked, -32603, over[0]))
        self._gate.admit(None, False)  # (an answer: a list-changed notice after it is new)
        if b'"tools"' in body and (cut := cut_deep_tools(body)) is not None:
            body = cut  # a listing the SDK would refuse whole for one tool nested too deep
        return _replaced(response, httpx2.ByteStream(body))

    async def _delivered(self, request: httpx2.Request) -> httpx2.Response:
        """A notification or an answer POSTed: the SDK sends the next message only once the
        server acknowledges it, so one left unacknowledged is taken as accepted after
        ``ACK_WAIT_S`` (a server holding the POST froze the whole session until httpx's read
        timeout, which then ended the SDK's writer: every later call waited out its timeout), and
        so is one whose connection the server closed with no answer (a handler failing on a
        message with no id: the SDK's writer ended, the session lost, the server never started);
        a server gone fails the next request."""
        request.headers["Accept-Encoding"] = ACCEPTED_ENCODINGS
        with anyio.move_on_after(ACK_WAIT_S):
            try:
                response, undecodable = _decoded(await self._inner.handle_async_request(request))
            except httpx2.RemoteProtocolError as err:
                if not _GONE.search(str(err)):
                    raise
                logger.warning(
                    "[%s] closed the connection on a %s: taken as delivered", self._server, _what(request)
                )
                return httpx2.Response(202, request=request)
            if undecodable is not None:
                await response.aclose()
                return _replaced(response, _Failing(_BadBody(undecodable)))
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            return _replaced(response, _Capped(response.stream, self._limit))
        what = _what(request)
        logger.warning(
            "[%s] left a %s unacknowledged for %gs: taken as accepted", self._server, what, ACK_WAIT_S
        )
        return httpx2.Response(202, request=request)

    async def _session_status(
        self, request: httpx2.Request, response: httpx2.Response, asked: Any
    ) -> tuple[httpx2.Response, httpx2.Response | None]:
        """A 404 or 400 to request ``asked`` carrying the session id: the session gone, as only the
        host says it (``SESSION_GONE``; a 400 once its ping is refused too, ``SESSION_REFUSED``),
        or ``None`` and the response (its body read, bounded) when it is the request's own answer:
        a 400 the session's ping does not get, or an error naming ``asked`` that says the server
        serves no such method or params (``REFUSED_AS_ASKED``: it read the request in its session
        and answered it at the status it maps the code to, as the 2026-07-28 revision has a method
        it lacks answered 404 and invalid params 400)."""
        body = await _read_bounded(response, self._limit)
        response = _replaced(response, httpx2.ByteStream(body))
        response.headers.pop("content-length", None)
        if _names(body, asked):
            return response, None
        if response.status_code == 404:
            return response, _replaced(response, _error(asked, SESSION_GONE, _SESSION_404))
        if await self._session_unknown(request):
            return response, _replaced(response, _error(asked, SESSION_REFUSED, _SESSION_400))
        return response, None

    async def _session_unknown(self, request: httpx2.Request) -> bool:
        """Whether the server, having answered ``request`` 400, no longer knows its session: a
        ``ping`` with the same headers (the session id, credentials, cookies) is answered 400 or
        404 too. Servers before the spec said 404 (Python SDK servers before about v1.10, the
        TypeScript SDK's examples and servers built on them) answer an unknown session 400, which
        is also what a server says of a request it finds malformed: only the ping tells them apart
        (no answer in ``ACK_WAIT_S``, or any other: the session is taken as known)."""
        if "mcp-session-id" not in request.headers:
            return False  # (no session to lose)
        answer = await self._ping(request)
        return answer is not None and answer[0] in (400, 404) and not _names(answer[1], _PROBE_ID)

    async def _unread(self, request: httpx2.Request, err: Exception) -> dict[str, Any] | None:
        """The error (its id left to the caller) for a request whose answer httpx could not read
        (``_malformed``), or whose connection closed with none (``_dropped``); ``None``: gone."""
        if _GONE.search(str(err)):
            return await self._dropped(request)
        return _error(None, -32603, _malformed(err))

    async def _dropped(self, request: httpx2.Request) -> dict[str, Any] | None:
        """The error (its id left to the caller) for a request whose connection the server closed
        with no (whole) answer, when a ``ping`` with its headers shows the server still there; the
        session gone if it answers the ping 400 or 404 (``SESSION_REFUSED``: the request may
        have run). ``None``: no answer to the ping either, the server gone."""
        if (answer := await self._ping(request)) is None:
            return None
        if (
            "mcp-session-id" in request.headers
            and answer[0] in (400, 404)
            and not _names(answer[1], _PROBE_ID)
        ):
            return _error(None, SESSION_REFUSED, f"{DROPPED}, and no longer knows the session")
        return _error(None, -32603, f"{DROPPED} (it still answers): whether it took effect is unknown")

    async def _ping(self, request: httpx2.Request) -> tuple[int, bytes] | None:
        """A ``ping`` sent as ``request`` was (its headers): its status and the start of its body,
        or ``None`` when the server gives no answer within ``ACK_WAIT_S``."""
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
        probe = httpx2.Request(
            "POST", request.url, headers=headers, content=_PING, extensions=request.extensions
        )
        with anyio.move_on_after(ACK_WAIT_S):
            try:
                answer = await self._inner.handle_async_request(probe)
                return answer.status_code, await _read_bounded(answer, _PROBE_BYTES)
            except httpx2.HTTPError:
                return None
        return None

    async def _pace(self) -> None:
        """Wait until ``MIN_REOPEN_S`` has passed since the last event stream was opened."""
        now = anyio.current_time()
        if self._last_get is not None and now - self._last_get < MIN_REOPEN_S:
            await anyio.sleep(self._last_get + MIN_REOPEN_S - now)
        self._last_get = anyio.current_time()

    async def aclose(self) -> None:
        await self._inner.aclose()


def _replaced(response: httpx2.Response, body: httpx2.AsyncByteStream | dict[str, Any]) -> httpx2.Response:
    """``response`` with ``body`` (decoded, or made here: never left for httpx to decode)."""
    headers = httpx2.Headers(response.headers)
    headers.pop("content-encoding", None)
    if isinstance(body, dict):
        headers = httpx2.Headers({**dict(headers), "content-type": "application/json"})
        headers.pop("content-length", None)
        body = httpx2.ByteStream(json.dumps(body).encode())
    return httpx2.Response(response.status_code, headers=headers, stream=body, extensions=response.extensions)


def _malformed(err: Exception) -> str:
    """Why an answer httpx could not read (its headers past h11's limit, its framing broken)
    failed the request it answers: the server's answer, not its connection, was at fault."""
    return f"the server's HTTP answer could not be read ({escape_for_review(str(err), limit=200)})"


def _bad_session_id(response: httpx2.Response) -> str | None:
    """Why the session id a server gives cannot be sent back (``None``: none given, or it can)."""
    given = response.headers.get("mcp-session-id")
    if given is None or _SENDABLE.fullmatch(given):
        return None
    shown = escape_for_review(given, limit=80)
    return (
        f"the server gave a session id the host cannot send back ({shown}): MCP allows only "
        "visible ASCII characters in it"
    )


def _request_id(request: httpx2.Request) -> Any:
    """The id of the JSON-RPC request a POST carries (``None``: not one request)."""
    if request.method != "POST":
        return None
    try:
        message = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        return None
    if isinstance(message, dict) and "method" in message and message.get("id") is not None:
        return message["id"]
    return None


def _what(request: httpx2.Request) -> str:
    """What a POST without a request carries: a notification (its method) or an answer."""
    try:
        message = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        return "message"
    method = message.get("method") if isinstance(message, dict) else None
    return f"notification ({escape_for_review(method, limit=80)})" if isinstance(method, str) else "answer"


def _not_its_answer(body: bytes, asked: Any) -> str | None:
    """Why a JSON body is no answer to request ``asked`` (``None``: it is one). A body that is
    no JSON-RPC message (not JSON, a string, an object without ``"jsonrpc": "2.0"``) is named in
    one line, as on stdio (the SDK's words were a multi-line dump of validation errors)."""
    try:
        message = json.loads(body)
    except ValueError:  # (in the SDK's words first, which earlier rounds pinned)
        return f"Failed to parse JSON response: {NOT_JSON_RPC} (not JSON)"
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return f"{NOT_JSON_RPC} (no JSON-RPC 2.0 message)"
    if "result" not in message and "error" not in message:
        what = "a request or notification of its own" if "method" in message else "no answer"
        return f"the server's answer to this request was {what}, not an answer"
    if id_key(message.get("id")) != id_key(asked):
        return FOREIGN
    return None


def _mended(body: bytes, asked: Any) -> bytes:
    """A JSON body as the SDK reads it: a JSON-RPC batch (an array) is the answer to ``asked`` it
    holds, and an id written as a float of a whole number (``3.0``) is the integer asked (the SDK
    refuses both: the call failed naming nine validation errors). An error naming no request
    (``"id": null``: JSON-RPC has a server that could not read a request's id answer so) is the
    error of the request this POST carried, as the SDK reads one at an error status (at 200 it
    was named a forged answer); a UTF-8 byte order mark before the body (as .NET writers given
    ``Encoding.UTF8`` write one) is dropped, as on stdio (the SDK refused the body: such a server
    could not even start), and text that is not well-formed Unicode is read as U+FFFD
    (``well_formed``). Any other body is as sent."""
    body = well_formed(body.removeprefix(BOM))
    if body.lstrip()[:1] != b"[" and FLOAT_ID.search(body) is None and _NULL_ID.search(body) is None:
        return body
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if _unnamed_error(message):
        return json.dumps({**message, "id": asked}).encode()
    if isinstance(message, list):
        answers = [
            m
            for m in message
            if isinstance(m, dict) and "method" not in m and id_key(m.get("id")) == id_key(asked)
        ]
        if len(answers) != 1:
            return body
        message = answers[0]
    if not isinstance(message, dict) or id_key(message.get("id")) != id_key(asked):
        return body
    return json.dumps({**message, "id": asked}).encode()


async def _read_bounded(response: httpx2.Response, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``response``'s body, decoded as the host decodes one, read within
    ``ACK_WAIT_S`` (``b""``: not JSON, past the limit or that time, or unreadable: a body that
    never ends holds nothing up); the response is closed."""
    kind = response.headers.get("content-type", "").lower()
    response, undecodable = _decoded(response)
    try:
        if undecodable is not None or not kind.startswith("application/json"):
            return b""
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        with anyio.move_on_after(ACK_WAIT_S):
            return b"".join([chunk async for chunk in _Capped(response.stream, limit)])
        return b""
    except (httpx2.HTTPError, _TooLarge, _BadBody):
        return b""
    finally:
        with anyio.CancelScope(shield=True):
            await response.aclose()


def _names(body: bytes, asked: Any) -> bool:
    """Whether ``body`` is a JSON-RPC error answering request ``asked`` by its id that the server
    serves no such method or params (``REFUSED_AS_ASKED``)."""
    try:
        message = json.loads(body.removeprefix(BOM)) if body else None
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(message, dict)
        and isinstance(error := message.get("error"), dict)
        and error.get("code") in REFUSED_AS_ASKED
        and "method" not in message
        and message.get("id") is not None
        and id_key(message.get("id")) == id_key(asked)
    )


def _unnamed_error(message: Any) -> bool:
    """Whether ``message`` is a JSON-RPC error naming no request (``"id": null``)."""
    return (
        isinstance(message, dict)
        and "error" in message
        and message.get("id", 0) is None
        and not {"method", "result"} & message.keys()
    )


def _error(asked: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": asked, "error": {"code": code, "message": message}}


class _CappedPolicy(DefaultCookiePolicy):
    """The standard policy, and a cookie is refused once the jar holds ``MAX_COOKIES`` or it
    would bring the jar past ``MAX_COOKIE_CHARS`` (one replacing a cookie of the same name,
    domain and path counts in place of it). The first cookies stay: a server's session cookie,
    set first, is kept whatever follows it."""

    def __init__(self) -> None:
        super().__init__()
        self.jar: CookieJar | None = None

    def set_ok(self, cookie: Cookie, request: Any) -> bool:
        kept = [
            c
            for c in self.jar or ()
            if (c.domain, c.path, c.name) != (cookie.domain, cookie.path, cookie.name)
        ]
        size = (
            sum(len(c.name) + len(c.value or "") for c in kept) + len(cookie.name) + len(cookie.value or "")
        )
        if len(kept) >= MAX_COOKIES or size > MAX_COOKIE_CHARS:
            return False
        return bool(super().set_ok(cookie, request))


def cookie_jar() -> CookieJar:
    """A connection's cookies, capped (``_CappedPolicy``): given to httpx as a jar (it copies
    the cookies of a ``Cookies`` given it into a jar of its own, with the standard policy)."""
    policy = _CappedPolicy()
    policy.jar = CookieJar(policy)
    return policy.jar
