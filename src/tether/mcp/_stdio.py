"""The stdio transport: a server process spawned before the MCP SDK is even imported.

Newline-delimited JSON-RPC as the SDK's own, except: a flood of notifications is held back
(``_flood``), an over-long line is discarded as it streams and answered as an error (as is
non-JSON-RPC, and a line of more objects and arrays than the SDK is given, ``_bulk``), a message
may be framed loosely (``_framing``: a byte order mark, pretty-printed over lines, two on one
line, no newline after it), a line may hold a JSON-RPC batch (each of its messages read), an id
written as a float of a whole number (``3.0``) is that number, terminal escape sequences (a
logger's colours) are no part of a line (``_plain``), text that is not well-formed Unicode is
read as U+FFFD (``well_formed``), an error naming no request (``"id": null``) answers the one
request awaiting an answer (``_Waiting``), the server's exit ends the connection, and shutdown
closes stdin, then terminates and kills the process group.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, nullcontext, suppress
from typing import IO, Any

import anyio
import anyio.abc

from tether.mcp._bulk import counted, refusal
from tether.mcp._flood import NotificationGate
from tether.mcp._framing import FLOAT_ID, Framer, well_formed, whole, whole_id
from tether.mcp._reaper import HOST_MARK, watching

__all__ = ["MARK", "MAX_BATCH", "NOT_JSON_RPC", "opened", "spawn", "stop", "too_large"]

# Each launch's mark in its environment (inherited by what it starts): how ``stop`` finds the
# processes a server left behind outside its process group (a daemon in a session of its own).
MARK = "TETHER_MCP_LAUNCH"
_MARKS: weakref.WeakKeyDictionary[anyio.abc.Process, bytes] = weakref.WeakKeyDictionary()

STOP_GRACE_S = 2.0
EXIT_DRAIN_S = 0.5  # how long the output of an exited server is still read
NOT_JSON_RPC = "the server's answer is not valid JSON-RPC"
MAX_BATCH = 256  # messages of one JSON-RPC batch read one by one (a longer one is refused whole)
_KEPT = 4096  # the first and last bytes of an over-long line kept (where its id shows)
_ID = rb'(-?\d+|"(?:[^"\\]|\\.){0,200}")'  # an id as JSON writes it
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')  # a string, or a bracket outside one
_VALUE = re.compile(rb"\s*:\s*" + _ID + rb"\s*[,}]")
_KEY = re.compile(rb"\s*:")
_LAST_ID = re.compile(rb'"id"\s*:\s*' + _ID + rb"\s*}\s*$")
# A terminal escape sequence: CSI (colours, ``ESC [ 32 m``), OSC (a title, a link) or another.
_ESCAPE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[ -/]*[0-~])")


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

    mark, host = secrets.token_hex(16), watching()
    env = {**env, MARK: mark, **({HOST_MARK: host} if host else {})}
    if not options:
        return _marked(
            await anyio.open_process(
                list(argv), env=dict(env), cwd=cwd, stderr=stderr, start_new_session=True
            ),
            mark,
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
        process = await anyio.open_process(
            argv, env=dict(env), cwd=cwd, stderr=stderr, start_new_session=True, pass_fds=passed
        )
        return _marked(process, mark)
    finally:
        for fd in fds:
            os.close(fd)


def _marked(process: anyio.abc.Process, mark: str) -> anyio.abc.Process:
    _MARKS[process] = f"{MARK}={mark}".encode()
    return process


def _leftovers(process: anyio.abc.Process) -> list[int]:
    """The live processes ``process`` left: those in its process group and those carrying its
    launch mark in their environment (what it started in a session of its own: a daemon, once
    orphaned too), zombies not counted (Linux ``/proc``; elsewhere: the group's id while it is
    in use). A process that left the group and cleared its environment is not found."""
    mark = _MARKS.get(process)
    if not os.path.isdir("/proc"):
        return [process.pid] if _group_alive(process.pid) else []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                state, _, group = stat.read().rpartition(b")")[2].split()[:3]
            if state == b"Z":
                continue
            if int(group) != process.pid:
                with open(f"/proc/{entry}/environ", "rb") as environ:
                    if mark is None or mark not in environ.read().split(b"\0"):
                        continue
        except (OSError, ValueError):  # gone, or not this user's
            continue
        found.append(int(entry))
    return found


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
        return _refused(line[:4096], f"{NOT_JSON_RPC} ({why})", err, line)


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
    line = well_formed(_plain(line))
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


def _plain(line: bytes) -> bytes:
    """``line`` without terminal escape sequences: a server whose logger colours what it writes
    to stdout (``ESC[32m{...}ESC[0m``) had its answer refused with no id read (the ``[`` of the
    colour taken for a bracket), and the call waited out its timeout. JSON holds no raw ``ESC``
    (not even in a string), so only a line that is not JSON as written is changed."""
    return _ESCAPE.sub(b"", line) if b"\x1b" in line else line


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


class _Cut:
    """An over-long line dropped as it streams: its size, and its first and last ``_KEPT`` bytes
    (where the id of the answer it is shows)."""

    def __init__(self) -> None:
        self.size, self.head, self.tail = 0, b"", b""

    def add(self, *pieces: bytes | bytearray) -> None:
        for piece in pieces:
            if len(self.head) < _KEPT:
                self.head = (self.head + piece[:_KEPT])[:_KEPT]
            self.tail = (self.tail + piece[-_KEPT:])[-_KEPT:]
            self.size += len(piece)

    def refused(self, limit: int) -> Any:
        """The error for the request it answers (``_too_long``); the next line starts afresh."""
        head, tail, size = self.head, self.tail, self.size
        self.size, self.head, self.tail = 0, b"", b""
        return _too_long(head, tail, size, limit)


def _too_long(head: bytes, tail: bytes, size: int, limit: int) -> Any:
    """An oversized answer becomes an error for the request it answers (if its id shows)."""
    discarded = ValueError(f"a message of more than {size} bytes was discarded")
    return _refused(head, too_large(limit), discarded, tail=tail)


def _refused(head: bytes, why: str, otherwise: ValueError, line: bytes = b"", tail: bytes = b"") -> Any:
    """An error for the request an invalid answer answers, if its id shows (``otherwise``: not an
    answer, or no id). A whole line is read as JSON where it parses: a ``"method"`` anywhere in
    an answer's result does not make it a request, and an object naming no ``jsonrpc``,
    ``result`` or ``error`` object is no answer (a structured logger's line on stdout, pino's
    ``{"level": 30, "msg": …, "id": 2}``: it failed the request of that id, or the start); of a
    line that does not, or a message cut, the id is its top-level one (``_answered_id``)."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    request_id: Any = None
    try:
        message = json.loads(line) if line else None
    except (ValueError, RecursionError):
        message = None
    if isinstance(message, dict):
        answering = "jsonrpc" in message or "result" in message or isinstance(message.get("error"), dict)
        if answering and "method" not in message and isinstance(message.get("id"), (int, str)):
            request_id = message["id"]
    else:
        request_id = _answered_id(head, tail or line[-_KEPT:])
    if request_id is None or isinstance(request_id, bool):
        return otherwise
    error = types.ErrorData(code=-32603, message=why)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _answered_id(head: bytes, tail: bytes) -> Any:
    """The id of the answer whose first bytes are ``head`` and last ``tail`` (``None``: none shows,
    or it is a request). Its top-level ``"id"`` in the head, read by depth: an ``"id"`` of a row
    nested in a result written before the answer's own id (``{"jsonrpc", "result", "id"}``, as
    hand-written servers order it) was taken for it, and the refusal went to no request (the call
    waited out its timeout) or to another; else an id closing the message (``"id": 5}``)."""
    depth = 0
    for token in _TOKEN.finditer(head):
        text = token.group()
        if text in (b"{", b"["):
            depth += 1
        elif text in (b"}", b"]"):
            depth -= 1
        elif depth == 1 and text == b'"method"' and _KEY.match(head, token.end()):
            return None  # a request or a notification of its own
        elif depth == 1 and text == b'"id"' and (value := _VALUE.match(head, token.end())):
            return _read_id(value.group(1))
    if (last := _LAST_ID.search(tail)) is not None and b'"method"' not in tail:
        return _read_id(last.group(1))
    return None


def _read_id(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:  # (a string of a bad escape)
        return None


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
        dropped = _Cut()  # an oversized line dropped as it streams (``size`` 0: none)
        try:
            async with read_writer:
                async for chunk in stdout:
                    while chunk:
                        cut = chunk.find(b"\n")
                        piece, chunk = (chunk, b"") if cut < 0 else (chunk[:cut], chunk[cut + 1 :])
                        if dropped.size:
                            dropped.add(piece)
                        elif len(buffer) + len(piece) > max_line_bytes:
                            dropped.add(buffer, piece)
                            buffer = bytearray()
                        else:
                            buffer += piece
                        if cut < 0:
                            break
                        if dropped.size:
                            await read_writer.send(dropped.refused(max_line_bytes))
                        else:
                            await deliver(framer.lines(bytes(buffer)))
                            buffer = bytearray()
                    if not dropped.size and whole(buffer):  # a message with no newline after it
                        await deliver(framer.lines(bytes(buffer)))
                        buffer = bytearray()
                if not dropped.size:  # the output ended: what it left unended
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
        """A failed exit ends the connection once what it wrote is read; an exit 0 leaves that to
        the output's end (a launcher handed the server its stdin and stdout: ``sh -c 'srv &'``)."""
        await process.wait()
        if process.returncode == 0:
            return
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
    await _end_leftovers(process)
    # Closing waits for the exit only, not for a pipe EOF a grandchild could withhold.
    with anyio.move_on_after(STOP_GRACE_S), suppress(OSError, anyio.BrokenResourceError):
        await process.aclose()


async def _end_leftovers(process: anyio.abc.Process) -> None:
    """What the server left behind ends with it (``_leftovers``: its process group, a daemon, the
    server a launcher handed off to): asked to end (SIGTERM), killed after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not (left := _leftovers(process)):
            return
        with suppress(OSError):
            os.killpg(process.pid, sig)
        for pid in left:
            with suppress(OSError):
                os.kill(pid, sig)
        if sig == signal.SIGKILL:
            return
        with anyio.move_on_after(STOP_GRACE_S):
            while _leftovers(process):
                await anyio.sleep(0.02)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except OSError:
        return False
    return True


@asynccontextmanager
async def opened(
    process: anyio.abc.Process, max_line: int, on_flood: Callable[[str], None] | None = None
) -> AsyncIterator[Any]:
    """The transport over a running process, as the context manager the SDK's ``Client`` enters
    (``on_flood``: told once when the server's notifications begin to be dropped, ``_flood``)."""
    async with _transport(process, max_line, NotificationGate(on_flood)) as streams:
        yield nullcontext(streams)
