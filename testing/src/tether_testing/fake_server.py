"""A small chat-completions server on 127.0.0.1, for tests, demos and benchmarks.

It speaks just enough HTTP/1.1 (keep-alive, ``Content-Length`` requests, chunked SSE
responses) to be driven by the official ``openai`` client. What it answers is decided by a
*responder*: a function of the parsed request body and the request's index that returns a
``Reply`` — a message (text, tool calls, reasoning), an HTTP error with headers, a delay
(to provoke client timeouts) or a dropped connection. Every request is recorded verbatim,
so tests can compare the bytes the backend sent across turns.

It runs on its own event loop in a background thread (``with FakeChatServer(fn) as srv``),
or as a process: ``python -m tether_testing.fake_server`` prints its URL and serves a
scripted tool loop (used by ``bench/overhead.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CUTS", "FakeChatServer", "Pause", "Received", "Reply", "scripted", "tool_loop_responder"]


@dataclass(frozen=True)
class Pause:
    """An item of an answer's body (``Reply.edit``): the server sends what it has written, then
    waits ``seconds`` (a stall mid-answer, or after the headers when it comes first)."""

    seconds: float


@dataclass(frozen=True)
class Reply:
    """What the server answers to one request.

    ``status`` other than 200 sends ``error_body`` (JSON), or ``body`` as it is (an HTML page, a
    text that is not JSON), with ``headers``; ``delay_s`` waits before answering; ``drop`` closes
    the connection without an answer. ``tool_calls`` are ``(name, raw_arguments)`` pairs: the
    arguments are sent as given, malformed or not. ``cut`` breaks a 200 answer on purpose (one
    of ``CUTS``), streamed or whole. ``trickle_s`` sends the answer one byte at a time (a server
    that never stalls long enough for a read timeout, yet never finishes in time).

    Faults of any shape: ``edit`` changes the answer before it is sent — it gets the protocol's
    stream events in order (or, for a whole answer, a list of the one JSON object) and returns
    what to send: a dict is encoded as the protocol's event (or JSON body), ``bytes`` go out as
    they are, a ``Pause`` stalls. A ``content-type`` in ``headers`` replaces the protocol's (a
    server that mislabels its answer). ``gzip`` compresses the body (``content-encoding: gzip``);
    ``http_chunk`` sends it in HTTP chunks of that many bytes (a whole answer too).
    """

    content: str | None = None
    tool_calls: Sequence[tuple[str, str]] = ()
    reasoning: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    error_body: Any = None
    body: bytes | None = None
    delay_s: float = 0.0
    drop: bool = False
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    chunks: int = 3  # pieces each streamed string is cut into
    cut: str | None = None
    trickle_s: float = 0.0  # > 0: the whole answer, headers included, one byte every trickle_s
    edit: Callable[[list[Any]], list[Any]] | None = None
    gzip: bool = False
    http_chunk: int = 0

    def __post_init__(self) -> None:
        if self.cut is not None and self.cut not in CUTS:
            raise ValueError(f"unknown cut {self.cut!r}; one of {', '.join(CUTS)}")

    @staticmethod
    def text(content: str, **kw: Any) -> Reply:
        return Reply(content=content, **kw)

    @staticmethod
    def calls(*calls: tuple[str, str], **kw: Any) -> Reply:
        return Reply(tool_calls=calls, **kw)

    @staticmethod
    def error(status: int, message: str = "error", *, headers: dict[str, str] | None = None) -> Reply:
        body = {"error": {"message": message, "type": "server_error", "code": status}}
        return Reply(status=status, error_body=body, headers=headers or {})


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Responder = Callable[[dict[str, Any], int], Reply]

CLOSE = "connection: close\r\n"  # sent with every broken answer: never reused for a retry

# Where a 200 answer can break (streamed: SSE events in HTTP chunks; whole: one JSON body, which
# a cut that names only its stream form breaks half-way, as mid_chunk does).
CUTS: dict[str, str] = {
    "after_headers": "the status line and headers, then the connection closes",
    "mid_chunk": "streamed: half an HTTP chunk then close; whole: half the body then close",
    "before_finish": "streamed: the content, then a clean end with no finish reason and no [DONE]",
    "before_done": "streamed: all but the terminal event, then a clean end (chat: [DONE]; no cut)",
    "malformed": "streamed: an event whose data is not JSON; whole: a body that is not JSON",
    "error_event": "streamed: some content, then a data event carrying an error object",
}

_REASONS = {
    200: "OK",
    301: "Moved Permanently",
    307: "Temporary Redirect",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def _cut(text: str, n: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


class FakeChatServer:
    """A chat-completions endpoint on 127.0.0.1 (``url`` ends in ``/v1``). Servers of other
    protocols subclass it: their ``endpoint`` and ``_answer`` (``tether.testing``)."""

    endpoint = "/chat/completions"

    def __init__(
        self, responder: Responder, *, model: str = "fake-model", port: int = 0, ignore_stream: bool = False
    ) -> None:
        """``ignore_stream``: answer whole JSON even when the request asks for a stream (some
        servers do)."""
        self.responder = responder
        self.ignore_stream = ignore_stream
        self.model = model
        self.port = port
        self.received: list[Received] = []
        self.handler_s = 0.0  # time spent deciding and writing replies (subtracted by benchmarks)
        self._count = itertools.count()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the requests to ``endpoint`` received, in order."""
        return [r.json() for r in self.received if r.path.endswith(self.endpoint)]

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> FakeChatServer:
        self._thread = threading.Thread(target=self._run_thread, name="fake-chat-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake chat server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def _run_thread(self) -> None:
        asyncio.run(self.serve())

    async def serve(self, on_ready: Callable[[str], None] | None = None) -> None:
        """Serve until stopped (``__exit__``) or cancelled."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        if on_ready is not None:
            on_ready(self.url)
        async with self._server:
            await self._stop.wait()

    # -- HTTP ---------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                started = time.perf_counter()
                keep = await self._route(method, path, headers, body, writer)
                self.handler_s += time.perf_counter() - started
                if not keep or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _route(
        self, method: str, path: str, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        if method == "GET" and path.endswith("/stats"):
            stats = {"requests": len(self.received), "handler_s": self.handler_s}
            await self._send_json(writer, 200, stats)
            return True
        if method == "POST" and path.endswith("/stats/reset"):
            self.received.clear()
            self.handler_s = 0.0
            await self._send_json(writer, 200, {})
            return True
        if method != "POST" or not path.endswith(self.endpoint):
            await self._send_json(writer, 404, {"error": {"message": f"no route {path}"}})
            return True
        self.received.append(Received(method, path, headers, body))
        request = json.loads(body)
        reply = self.responder(request, next(self._count))
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.drop:
            return False
        if reply.trickle_s > 0:
            collect = _Collect()
            await self._answer(collect, request, reply)  # type: ignore[arg-type]
            for i in range(len(collect.data)):
                if writer.is_closing():
                    break
                writer.write(collect.data[i : i + 1])
                await writer.drain()
                await asyncio.sleep(reply.trickle_s)
            return False
        return await self._answer(writer, request, reply)

    async def _answer(self, writer: asyncio.StreamWriter, request: dict[str, Any], reply: Reply) -> bool:
        """Write the answer to one request; False when the connection must close after it."""
        if reply.status != 200:
            if reply.body is not None:
                headers = {"content-type": "text/html", **reply.headers}
                await self._send_raw(writer, reply.status, headers, reply.body)
            else:
                body = reply.error_body if reply.error_body is not None else self.error_body(reply)
                await self._send_json(writer, reply.status, body, reply.headers)
            return True
        stream = bool(request.get("stream")) and not self.ignore_stream
        items: list[Any]
        if stream:
            items = self.events(request, reply)
        elif reply.cut == "malformed":
            items = [b'{"id": "x", "choices": [{"message": ']  # whole, but not JSON
        else:
            items = [self.whole(request, reply)]
        if reply.edit is not None:
            items = reply.edit(items)
        pieces = [
            (self.encode_event(i) if stream else json.dumps(i).encode()) if isinstance(i, dict) else i
            for i in items
        ]
        kind = "text/event-stream" if stream else "application/json"
        paused = any(isinstance(p, Pause) for p in pieces)  # sent as it comes: chunked
        return await self._send_body(
            writer, reply, kind, pieces, chunked=stream or paused or reply.http_chunk > 0
        )

    async def _send_body(
        self, writer: asyncio.StreamWriter, reply: Reply, kind: str, pieces: list[Any], *, chunked: bool
    ) -> bool:
        """A 200 answer from its pieces (bytes, or ``Pause``), broken as ``reply.cut`` says."""
        broken = reply.cut is not None or any(isinstance(p, Pause) for p in pieces)
        kind = reply.headers.get("content-type", kind)  # a server that mislabels its answer
        head = [f"HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\n"]
        head += [f"{k}: {v}\r\n" for k, v in reply.headers.items() if k != "content-type"]
        if broken:  # a broken answer ends its connection: never reused for a retry
            head.append(CLOSE)
        if reply.gzip:
            head.append("content-encoding: gzip\r\n")
            pieces = _gzip(pieces)
        if not chunked:
            data = b"".join(p for p in pieces if isinstance(p, bytes))
            writer.write(f"{''.join(head)}content-length: {len(data)}\r\n\r\n".encode())
            if reply.cut in (None, "malformed"):
                writer.write(data)  # whole (a malformed one: whole, but not JSON)
            elif reply.cut != "after_headers":
                writer.write(data[: len(data) // 2])  # the connection dies half-way through the body
            await writer.drain()
            return not broken
        writer.write(("".join(head) + "transfer-encoding: chunked\r\n\r\n").encode())
        if reply.cut == "after_headers":
            await writer.drain()
            return False  # the caller closes the connection
        size = reply.http_chunk
        for i, piece in enumerate(pieces):
            if isinstance(piece, Pause):
                await writer.drain()
                await asyncio.sleep(piece.seconds)
                continue
            if reply.cut == "mid_chunk" and i == len(pieces) // 2:
                # Announce the whole chunk, send half of it, then the connection dies.
                writer.write(b"%x\r\n%s" % (len(piece), piece[: len(piece) // 2]))
                await writer.drain()
                return False
            for part in [piece[k : k + size] for k in range(0, len(piece), size)] if size else [piece]:
                if part:
                    writer.write(b"%x\r\n%s\r\n" % (len(part), part))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return not broken

    async def _send_json(
        self, writer: asyncio.StreamWriter, status: int, payload: Any, headers: dict[str, str] | None = None
    ) -> None:
        await self._send_raw(
            writer,
            status,
            {"content-type": "application/json", **(headers or {})},
            json.dumps(payload).encode(),
        )

    async def _send_raw(
        self, writer: asyncio.StreamWriter, status: int, headers: dict[str, str], data: bytes
    ) -> None:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        reason = _REASONS.get(status, "Error")
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-length: {len(data)}\r\n{extra}\r\n".encode() + data
        )
        await writer.drain()

    # -- what each protocol fills in (chat completions here; tether_testing.servers the others)

    def error_body(self, reply: Reply) -> Any:
        """The protocol's error body for a failing reply that names none."""
        return {}

    def encode_event(self, event: dict[str, Any]) -> bytes:
        """One stream event as it goes on the wire."""
        return f"data: {json.dumps(event)}\n\n".encode()

    def whole(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """The protocol's whole (not streamed) answer."""
        return self._completion(reply)

    def events(self, request: dict[str, Any], reply: Reply) -> list[Any]:
        """The protocol's stream events in order (dicts, or bytes sent as they are), cut as
        ``reply.cut`` says."""
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        chunks = self._chunks(reply, include_usage)
        events: list[Any] = [*chunks, b"data: [DONE]\n\n"]
        if reply.cut == "before_finish":
            # Only the deltas before the one carrying the finish reason.
            events = events[: next(i for i, c in enumerate(chunks) if _finish_of(c) is not None)]
        elif reply.cut == "before_done":
            events = events[:-1]
        elif reply.cut == "malformed":
            events = [*events[:2], b"data: {not json at all\n\n"]
        elif reply.cut == "error_event":
            events = [*events[:2], {"error": {"message": "the model crashed while generating", "code": 500}}]
        return events

    # -- chat-completions payloads ------------------------------------------------------------

    def _usage(self, reply: Reply) -> dict[str, Any]:
        if reply.usage is not None:
            return reply.usage
        return {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}

    def _completion(self, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.finish_reason == "refusal":  # OpenAI's refusal field; the choice itself ends "stop"
            message.update(content=None, refusal=reply.content)
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{next(self._ids)}", "type": "function", "function": {"name": n, "arguments": a}}
                for n, a in reply.tool_calls
            ]
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        finish = "stop" if finish == "refusal" else finish
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": self._usage(reply),
        }

    def _chunks(self, reply: Reply, include_usage: bool) -> list[dict[str, Any]]:
        base = {"id": f"chatcmpl-{next(self._ids)}", "object": "chat.completion.chunk", "created": 0}
        base["model"] = self.model

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        out = [chunk({"role": "assistant", "content": ""})]
        out += [chunk({"reasoning_content": p}) for p in _cut(reply.reasoning or "", reply.chunks)]
        key = "refusal" if reply.finish_reason == "refusal" else "content"
        out += [chunk({key: p}) for p in _cut(reply.content or "", reply.chunks)]
        for index, (name, arguments) in enumerate(reply.tool_calls):
            head = {"index": index, "id": f"call_{next(self._ids)}", "type": "function"}
            out.append(chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}))
            for piece in _cut(arguments, reply.chunks):
                out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        out.append(chunk({}, "stop" if finish == "refusal" else finish))
        if include_usage:
            out.append({**base, "choices": [], "usage": self._usage(reply)})
        return out


def _gzip(pieces: list[Any]) -> list[Any]:
    """The pieces as one gzip stream, each flushed so it can be read as it arrives."""
    z = zlib.compressobj(wbits=31)
    out: list[Any] = [
        z.compress(p) + z.flush(zlib.Z_SYNC_FLUSH) if isinstance(p, bytes) else p for p in pieces
    ]
    out.append(z.flush())
    return out


class _Collect:
    """A stand-in for a stream writer that keeps what is written (for ``Reply.trickle_s``)."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None


def _finish_of(chunk: dict[str, Any]) -> str | None:
    choices = chunk.get("choices") or [{}]
    return choices[0].get("finish_reason") if choices else None


def scripted(replies: Sequence[Reply]) -> Responder:
    """Answer request ``i`` with ``replies[i]``; past the end, an HTTP 400 that names the problem."""

    def respond(request: dict[str, Any], index: int) -> Reply:
        if index < len(replies):
            return replies[index]
        return Reply.error(400, f"script exhausted: request {index + 1} of {len(replies)}")

    return respond


def tool_loop_responder(steps: int | None = None, *, tool: str = "lookup") -> Responder:
    """Ask for ``tool`` until the request holds ``steps`` tool results, then answer.

    With ``steps=None`` the target is read from the first user message (``steps=N``)."""

    def respond(request: dict[str, Any], index: int) -> Reply:
        messages = request.get("messages", ())
        target = steps
        if target is None:
            first = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
            found = re.search(r"steps=(\d+)", first)
            target = int(found.group(1)) if found else 1
        done = sum(1 for m in messages if m.get("role") == "tool")
        if done < target:
            return Reply(tool_calls=((tool, json.dumps({"key": f"k{done}"})),), chunks=1)
        return Reply(content=f"done after {done} steps", chunks=1)

    return respond


def _main() -> None:  # pragma: no cover - exercised by bench/overhead.py
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="Serve a scripted tool loop on 127.0.0.1.")
    parser.add_argument("--steps", type=int, default=None, help="default: steps=N in the question")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = FakeChatServer(tool_loop_responder(args.steps), port=args.port)

    def ready(url: str) -> None:
        sys.stdout.write(url + "\n")
        sys.stdout.flush()

    asyncio.run(server.serve(ready))


if __name__ == "__main__":
    _main()
