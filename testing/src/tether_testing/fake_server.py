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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CUTS", "FakeChatServer", "Received", "Reply", "scripted", "tool_loop_responder"]


@dataclass(frozen=True)
class Reply:
    """What the server answers to one request.

    ``status`` other than 200 sends ``error_body`` (JSON) with ``headers``; ``delay_s`` waits
    before answering; ``drop`` closes the connection without an answer. ``tool_calls`` are
    ``(name, raw_arguments)`` pairs: the arguments are sent as given, malformed or not.
    ``cut`` breaks a 200 answer on purpose (one of ``CUTS``), streamed or whole. ``trickle_s``
    sends the answer one byte at a time (a server that never stalls long enough for a read
    timeout, yet never finishes in time).
    """

    content: str | None = None
    tool_calls: Sequence[tuple[str, str]] = ()
    reasoning: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    error_body: Any = None
    delay_s: float = 0.0
    drop: bool = False
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    chunks: int = 3  # pieces each streamed string is cut into
    cut: str | None = None
    trickle_s: float = 0.0  # > 0: the whole answer, headers included, one byte every trickle_s

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

# Where a 200 answer can break (streamed: SSE events in HTTP chunks; whole: one JSON body).
CUTS: dict[str, str] = {
    "after_headers": "the status line and headers, then the connection closes",
    "mid_chunk": "streamed: half an HTTP chunk then close; whole: half the body then close",
    "before_finish": "streamed: the content, then a clean end with no finish reason and no [DONE]",
    "before_done": "streamed: everything but [DONE], then a clean end",
    "malformed": "streamed: an event whose data is not JSON; whole: a body that is not JSON",
    "error_event": "streamed: some content, then a data event carrying an error object",
}

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests"}


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
        if reply.status != 200:
            await self._send_json(writer, reply.status, reply.error_body or {}, reply.headers)
            return True
        if request.get("stream") and not self.ignore_stream:
            include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
            await self._stream(writer, reply, include_usage)
        elif reply.cut is not None:
            await self._send_broken(writer, reply)
        else:
            await self._send_json(writer, 200, self._completion(reply))
        return reply.cut is None

    async def _send_json(
        self, writer: asyncio.StreamWriter, status: int, payload: Any, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        reason = _REASONS.get(status, "Error")
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\n{extra}\r\n".encode()
            + data
        )
        await writer.drain()

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

    async def _stream(self, writer: asyncio.StreamWriter, reply: Reply, include_usage: bool) -> None:
        # A broken answer ends its connection: say so, so a client never reuses it for a retry.
        close = b"connection: close\r\n" if reply.cut else b""
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            + close
            + b"\r\n"
        )
        if reply.cut == "after_headers":
            await writer.drain()
            return  # the caller closes the connection
        chunks = self._chunks(reply, include_usage)
        events = [f"data: {json.dumps(c)}\n\n" for c in chunks]
        events.append("data: [DONE]\n\n")
        if reply.cut == "before_finish":
            # Only the deltas before the one carrying the finish reason.
            first_finish = next(i for i, c in enumerate(chunks) if _finish_of(c) is not None)
            events = events[:first_finish]
        elif reply.cut == "before_done":
            events = events[:-1]
        elif reply.cut == "malformed":
            events = [*events[:2], "data: {not json at all\n\n"]
        elif reply.cut == "error_event":
            error = {"error": {"message": "the model crashed while generating", "code": 500}}
            events = [*events[:2], f"data: {json.dumps(error)}\n\n"]
        for i, event in enumerate(events):
            data = event.encode()
            if reply.cut == "mid_chunk" and i == len(events) // 2:
                # Announce the whole chunk, send half of it, then the connection dies.
                writer.write(b"%x\r\n%s" % (len(data), data[: len(data) // 2]))
                await writer.drain()
                return
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _send_broken(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        """A whole (non-streamed) 200 answer, broken as ``reply.cut`` says."""
        data = json.dumps(self._completion(reply)).encode()
        if reply.cut == "malformed":
            data = b'{"id": "chatcmpl-x", "choices": [{"message": '
        head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + CLOSE
        writer.write(f"{head}content-length: {len(data)}\r\n\r\n".encode())
        if reply.cut == "malformed":
            writer.write(data)  # whole, but not JSON
        elif reply.cut != "after_headers":
            writer.write(data[: len(data) // 2])  # the connection dies half-way through the body
        await writer.drain()


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
