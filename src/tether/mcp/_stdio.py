"""The stdio transport: a server process spawned before the MCP SDK is even imported.

Newline-delimited JSON-RPC as the SDK's own, except: a flood of notifications is held back
(``_flood``), an over-long line is discarded as it streams and answered as an error (as is
non-JSON-RPC, and a line of more objects and arrays than the SDK is given, ``_bulk``), a message
may be framed loosely (``_framing``: a byte order mark, pretty-printed over lines, two on one
line, no newline after it), a line may hold a JSON-RPC batch (each of its messages read), an id
written as a float of a whole number (``3.0``) is that number, an error naming no request
(``"id": null``) answers the one request awaiting an answer (``_Waiting``), the server's exit
ends the connection, and shutdown closes stdin, then terminates and kills the process group.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, nullcontext, suppress
from typing import IO, Any

import anyio
import anyio.abc

from tether.mcp._bulk import counted, refusal
from tether.mcp._flood import NotificationGate
from tether.mcp._framing import FLOAT_ID, Framer, whole, whole_id

__all__ = ["MAX_BATCH", "opened", "spawn", "stop", "too_large"]

STOP_GRACE_S = 2.0
EXIT_DRAIN_S = 0.5  # how long the output of an exited server is still read
MAX_BATCH = 256  # messages of one JSON-RPC batch read one by one (a longer one is refused whole)
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")')


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    stderr: IO[str] | None,
    options: Sequence[str] = (),
    data: Sequence[bytes] = (),
    net_fd: int | None = None,
) -> anyio.abc.Process:
    """Start the server in its own session (its process group is killed as one). bwrap's
    ``options`` go on an anonymous file's descriptor (``ARGS_FD``: on no command line), each of
    ``data`` on its own (``{data-fd:N}``), and ``net_fd`` where ``NET_FD`` stands."""
    from tether.mcp._sandbox import ARGS_FD, NET_FD

    if not options:
        return await anyio.open_process(
            list(argv), env=dict(env), cwd=cwd, stderr=stderr, start_new_session=True
        )
    fds: list[int] = []
    try:
        for i, content in enumerate(data):
            fds.append(_memfd(f"bwrap-data-{i}", content))
        named = {f"{{data-fd:{i}}}": str(fd) for i, fd in enumerate(fds)}
        args = b"".join(named.get(o, o).encode("utf-8") + b"\0" for o in options)
        fds.append(_memfd("bwrap-args", args))
        argv = [str(fds[-1]) if a == ARGS_FD else a for a in argv]
        passed = tuple(fds)
        if net_fd is not None:  # the launch's own argument (PORT:NET_FD), before the server's command
            at = next(i for i, a in enumerate(argv) if a.endswith(f":{NET_FD}"))
            argv = [*argv[:at], argv[at].replace(NET_FD, str(net_fd)), *argv[at + 1 :]]
            passed += (net_fd,)
        return await anyio.open_process(
            argv, env=dict(env), cwd=cwd, stderr=stderr, start_new_session=True, pass_fds=passed
        )
    finally:
        for fd in fds:
            os.close(fd)


def _memfd(name: str, content: bytes) -> int:
    fd = os.memfd_create(name)
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _parse(line: bytes) -> Any:
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as err:  # the request it answers, if its id shows, fails now
        from pydantic import ValidationError

        from tether.mcp._deep import cut_deep_tools

        if b'"tools"' in line and (cut := cut_deep_tools(line)) is not None:  # a tool nested too deep
            with suppress(ValueError):
                return SessionMessage(types.jsonrpc_message_adapter.validate_json(cut, by_name=False))
        if (mended := _whole_id(line)) is not None:
            with suppress(ValueError):
                return SessionMessage(types.jsonrpc_message_adapter.validate_python(mended, by_name=False))
        errors = err.errors() if isinstance(err, ValidationError) else []
        why = str(errors[0]["msg"] if errors else err)[:200] or type(err).__name__
        return _refused(line[:4096], f"the server's answer is not valid JSON-RPC ({why})", err, line)


def _whole_id(line: bytes) -> Any:
    """The message of a line whose id is a whole float, its id the integer (``None``: any other)."""
    if FLOAT_ID.search(line) is None:
        return None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    mended = whole_id(message)
    return mended if mended is not message else None


def _messages(line: bytes) -> list[Any]:
    """What one line holds: a message, or each message of a JSON-RPC batch (an array, which
    2025-03-26 servers may send), each parsed (and refused) on its own. A line of more objects
    and arrays than the SDK is given (``_bulk``) fails each request it answers, unparsed."""
    if (over := counted(line)) is not None:
        return _bulky(*over)
    if not line.startswith(b"["):
        return [_parse(line)]
    try:
        batch = json.loads(line)
    except (ValueError, RecursionError):
        return [_parse(line)]
    if (
        not isinstance(batch, list)
        or not 0 < len(batch) <= MAX_BATCH
        or not all(isinstance(m, dict) for m in batch)
    ):
        return [_parse(line)]  # one failure for the line, never one per element (a million of them)
    return [_parse(json.dumps(each).encode("utf-8")) for each in batch]


def _bulky(why: str, value: Any) -> list[Any]:
    """Errors for the requests a line past ``MAX_CONTAINERS`` answers (a batch's, up to
    ``MAX_BATCH``); none answered: one failure for the line."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    answers = value[:MAX_BATCH] if isinstance(value, list) else [value]
    errors = [error for each in answers if (error := refusal(each, why)) is not None]
    if not errors:
        return [ValueError(why)]
    return [SessionMessage(types.jsonrpc_message_adapter.validate_python(error)) for error in errors]


def too_large(limit: int) -> str:
    """Why an answer past the host's limit (on stdio or HTTP) failed the request it answers."""
    return f"the server's answer was larger than the host accepts ({limit} bytes)"


def _too_long(head: bytes, size: int, limit: int) -> Any:
    """An oversized answer becomes an error for the request it answers (if its id shows)."""
    return _refused(head, too_large(limit), ValueError(f"a message of more than {size} bytes was discarded"))


def _refused(head: bytes, why: str, otherwise: ValueError, line: bytes = b"") -> Any:
    """An error for the request an invalid answer answers, if its id shows (``otherwise``: not an
    answer, or no id). A whole line is read as JSON where it parses: a ``"method"`` anywhere in
    an answer's result does not make it a request."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    request_id: Any = None
    try:
        message = json.loads(line) if line else None
    except (ValueError, RecursionError):
        message = None
    if isinstance(message, dict):
        if "method" not in message and isinstance(message.get("id"), (int, str)):
            request_id = message["id"]
    elif (found := _ID.search(head)) is not None and b'"method"' not in head:
        request_id = json.loads(found.group(1))
    if request_id is None or isinstance(request_id, bool):
        return otherwise
    error = types.ErrorData(code=-32603, message=why)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _admitted(gate: NotificationGate, item: Any) -> bool:
    """Whether ``item`` (a parsed message, or an error) is given to the SDK (``_flood``)."""
    message = getattr(item, "message", None)
    if message is None:
        return True
    notification = not hasattr(message, "id")
    return gate.admit(getattr(message, "method", None), notification)


class _Waiting:
    """The host's requests the server has not answered yet. JSON-RPC has a server that cannot read
    a request's id answer ``"id": null`` (a parse error, an invalid request): the SDK drops such an
    error, and the request it answers waited out its timeout. While one request alone awaits an
    answer, that error can only be its answer and is given to it; with several, it stays dropped.
    So does one that may answer a notification or an answer the host wrote since the last request
    the server answered (servers that answer each message they read, taking a missing id for
    ``null``, write one for ``notifications/initialized``: the ``tools/list`` written just after
    it failed, and the server never started): a server reads in order, so only a request whose
    answer came after those messages shows they were read."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}  # each request waiting, and where it was written
        self.written = 0  # messages written
        self.unnamed = 0  # where the last message no answer can name was written (0: none)
        self.read = 0  # where the last request the server answered was written

    def sent(self, message: Any) -> None:
        method, ident = getattr(message, "method", None), getattr(message, "id", None)
        self.written += 1
        if method is not None and ident is not None:
            self.ids[str(ident)] = self.written
            return
        self.unnamed = self.written
        if method == "notifications/cancelled" and isinstance(params := message.params, dict):
            self.ids.pop(str(params.get("requestId")), None)

    def received(self, item: Any) -> Any:
        """``item``, or for an error naming no request, that error for the one request waiting."""
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        message = getattr(item, "message", None)
        if not isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
            return item
        if message.id is not None:
            self.read = max(self.read, self.ids.pop(str(message.id), 0))
            return item
        if not isinstance(message, types.JSONRPCError) or len(self.ids) != 1 or self.unnamed > self.read:
            return item
        (only,) = self.ids
        said = message.error.message[:500]
        error = types.ErrorData(
            code=message.error.code,
            message=f"the server could not read this request (its error names no request): {said}",
        )
        ident = int(only) if only.lstrip("-").isdigit() else only
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=ident, error=error))


@asynccontextmanager
async def _transport(
    process: anyio.abc.Process, max_line_bytes: int, gate: NotificationGate
) -> AsyncIterator[Any]:
    """The SDK transport streams (read, write) over an already running process."""
    assert process.stdin is not None and process.stdout is not None
    read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_reader = anyio.create_memory_object_stream[Any](0)
    stdout, stdin = process.stdout, process.stdin
    waiting = _Waiting()
    framer = Framer(max_line_bytes)

    async def deliver(lines: list[bytes]) -> None:
        for line in lines:
            for item in _messages(line):
                if _admitted(gate, item):
                    await read_writer.send(waiting.received(item))

    async def reader() -> None:
        # A bytearray grows in place: a line of bytes joined chunk by chunk (64 KiB from a pipe)
        # was copied whole at each, 0.5 s of the event loop for one line of 8 MiB, 33 s for 64.
        buffer = bytearray()
        discarding = 0  # bytes of an oversized line dropped so far (0: not discarding)
        head = b""
        try:
            async with read_writer:
                async for chunk in stdout:
                    while chunk:
                        cut = chunk.find(b"\n")
                        piece, chunk = (chunk, b"") if cut < 0 else (chunk[:cut], chunk[cut + 1 :])
                        if discarding:
                            discarding += len(piece)
                        elif len(buffer) + len(piece) > max_line_bytes:
                            head = (bytes(buffer[:4096]) + piece[:4096])[:4096]
                            discarding = len(buffer) + len(piece)
                            buffer = bytearray()
                        else:
                            buffer += piece
                        if cut < 0:
                            break
                        if discarding:
                            await read_writer.send(_too_long(head, discarding, max_line_bytes))
                            discarding = 0
                        else:
                            await deliver(framer.lines(bytes(buffer)))
                            buffer = bytearray()
                    if not discarding and whole(buffer):  # a message with no newline after it
                        await deliver(framer.lines(bytes(buffer)))
                        buffer = bytearray()
                if not discarding:  # the output ended: what it left unended
                    await deliver([*framer.rest(), *framer.lines(bytes(buffer))])
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            pass

    async def writer() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    waiting.sent(message.message)
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((data + "\n").encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the server stopped reading: no request left hanging

    async def exited() -> None:
        """The server's exit ends the connection (a child may hold its stdout open), once what it
        wrote is read."""
        await process.wait()
        await anyio.sleep(EXIT_DRAIN_S)
        await read_writer.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        tg.start_soon(exited)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await stop(process)
            tg.cancel_scope.cancel()


async def stop(process: anyio.abc.Process) -> None:
    """Close stdin; after grace periods terminate, then kill, the server's process group."""
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    for sig in (signal.SIGTERM, signal.SIGKILL, None):
        with anyio.move_on_after(STOP_GRACE_S):
            while process.returncode is None:
                await anyio.sleep(0.01)
        if process.returncode is not None or sig is None:
            break
        with suppress(OSError):
            os.killpg(process.pid, sig)
    # Its leftovers in the group end with it (the group keeps its id while any member lives).
    with suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    # Closing waits for the exit only, not for a pipe EOF a grandchild could withhold.
    with anyio.move_on_after(STOP_GRACE_S), suppress(OSError, anyio.BrokenResourceError):
        await process.aclose()


@asynccontextmanager
async def opened(
    process: anyio.abc.Process, max_line: int, on_flood: Callable[[str], None] | None = None
) -> AsyncIterator[Any]:
    """The transport over a running process, as the context manager the SDK's ``Client`` enters
    (``on_flood``: told once when the server's notifications begin to be dropped, ``_flood``)."""
    async with _transport(process, max_line, NotificationGate(on_flood)) as streams:
        yield nullcontext(streams)
