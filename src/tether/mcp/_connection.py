"""One MCP server's SDK client, run in a detached task of its own (a supervised connection):
whatever the transport's task groups do ends that task only, never the caller; callers get
``ConnectionLost`` when the connection ends under them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio
from pydantic import ValidationError

__all__ = ["Connection", "ConnectionLost", "describe_error", "spawn_detached"]

T = TypeVar("T")
# The server a piece of SDK code works for (each connection's task, each call): its log lines name it.
SERVER: ContextVar[str | None] = ContextVar("tether_mcp_server", default=None)
# The SDK's client session logs as "client"; httpx (its HTTP client) as "httpx2".
_SDK_LOGGERS = {"mcp": "mcp sdk", "client": "mcp sdk", "httpx2": "httpx"}
_factory_installed = False
SDK_LOG_RATE = (5.0, 20)  # a server's SDK warnings shown a second, and at once (``_paced``)
_SDK_PACE: dict[str, Any] = {}
_SDK_HELD: dict[str, int] = {}


def _attribute_sdk_logs() -> None:
    """Prefix the SDK's and httpx's log records with their server, escaped, each URL in them
    bare and a session id hidden (``bare_urls``: httpx logs each request's URL at INFO, a token
    in its query was printed wherever INFO was shown), an exception named on the same line (not
    its traceback: the SDK logged one for each message of a server's it refused) and paced
    (``_paced``) (installed once, chained)."""
    global _factory_installed
    if _factory_installed:
        return
    _factory_installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        server = SERVER.get()
        if server is not None and (said := _SDK_LOGGERS.get(record.name.split(".", 1)[0])):
            from tether.mcp._clean import escape_for_review
            from tether.mcp._shown import bare_urls

            text = escape_for_review(bare_urls(record.getMessage()), limit=2000)
            if record.exc_info and record.exc_info[1] is not None:  # what the server sent, named
                text += f" ({escape_for_review(describe_error(record.exc_info[1]), limit=400)})"
            record.exc_info, record.exc_text, record.stack_info = None, None, None
            record.msg, record.args = f"[{server}] {said}: {text}", None
            _paced(record, server)
        return record

    logging.setLogRecordFactory(factory)


def _paced(record: logging.LogRecord, server: str) -> None:
    """A server's SDK warnings and errors shown at a bounded rate (each server can make the SDK
    log one per message it sends): past it a record is lowered to DEBUG, which no handler of
    the person's shows, and counted; the next one shown says how many were held back."""
    if record.levelno < logging.WARNING:
        return
    from tether.core.ratelimit import TokenBucket

    bucket = _SDK_PACE.setdefault(server, TokenBucket(*SDK_LOG_RATE))
    if not bucket.take():
        _SDK_HELD[server] = _SDK_HELD.get(server, 0) + 1
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
    elif held := _SDK_HELD.pop(server, 0):
        record.msg = f"{record.msg} (and {held} more such lines of this server's held back)"


_TASKS: set[Any] = set()  # strong references: asyncio keeps only weak ones to running tasks


class ConnectionLost(Exception):
    """The connection ended (or never came up); ``cause`` is the transport's own error, if any."""

    def __init__(self, cause: BaseException | None) -> None:
        super().__init__(describe_error(cause) if cause is not None else "connection closed")
        self.cause = cause


def describe_error(err: BaseException) -> str:
    """The innermost error of a task-group failure, as one line."""
    while True:
        if isinstance(err, BaseExceptionGroup) and err.exceptions:
            # The first failure that is not a cancellation caused by it.
            real = [e for e in err.exceptions if not _cancellation(e)]
            err = (real or list(err.exceptions))[0]
        elif isinstance(err, ConnectionLost) and err.cause is not None:
            err = err.cause
        else:
            break
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if isinstance(err, ValidationError) and err.errors():
        # The first line only counts the errors (an answer that is not valid MCP): say where.
        text = f"{err.title}: {_first_problem(err.errors())}"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _first_problem(errors: list[Any]) -> str:
    """Where and what the first problem is; in a union told apart by ``type`` (content blocks),
    that the ``type`` is none of them, or what the one kind taking it lacks."""
    first = errors[0]
    loc: tuple[Any, ...] = tuple(first["loc"])
    at = next((i for i, p in enumerate(loc) if isinstance(p, str) and p[:1].isupper()), None)
    if at is not None:
        prefix = loc[:at]
        same = [e for e in errors if tuple(e["loc"][:at]) == prefix and len(e["loc"]) > at + 1]
        kinds = list(dict.fromkeys(e["loc"][at] for e in same))
        refused = [e for e in same if e["type"] == "literal_error" and tuple(e["loc"][at + 1 :]) == ("type",)]
        taking = [k for k in kinds if k not in {e["loc"][at] for e in refused}]
        if refused and not taking:
            expected = ", ".join(str(e.get("ctx", {}).get("expected", "?")) for e in refused)
            where = ".".join(str(p)[:40] for p in (*prefix, "type"))
            return f"{where}: {str(refused[0]['input'])[:80]!r} is none of {expected}"[:400]
        if len(taking) == 1:
            first = next(e for e in same if e["loc"][at] == taking[0])
            loc = (*prefix, *first["loc"][at + 1 :])
    return f"{'.'.join(str(p)[:40] for p in loc)[:200]}: {first['msg'][:200]}"


def _cancellation(err: BaseException) -> bool:
    import asyncio

    return isinstance(err, (asyncio.CancelledError, anyio.get_cancelled_exc_class()))


def spawn_detached(fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn`` in a new task outside every cancel scope of the caller (asyncio or trio)."""
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # pragma: no cover - not asyncio: the project runs on asyncio
        import trio

        trio.lowlevel.spawn_system_task(fn)
        return

    async def main() -> None:
        await fn()

    task = loop.create_task(main())
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


class Connection:
    """One attempt to connect, in a task of its own: ``open`` enters the SDK client, ``prepare``
    runs once connected, ``serve`` for the connection's life (its failure ending only itself)."""

    def __init__(
        self,
        open: Callable[[AsyncExitStack], Awaitable[Any]],
        prepare: Callable[[Any], Awaitable[None]] | None = None,
        serve: Callable[[Any], Awaitable[None]] | None = None,
        name: str | None = None,
    ) -> None:
        self.name = name
        if name is not None:
            _attribute_sdk_logs()
        self._open = open
        self._prepare = prepare
        self._serve = serve
        self.client: Any = None
        self.error: BaseException | None = None
        self.answered = False  # the server answered the handshake (what failed after is no start-up)
        self._ready = anyio.Event()
        self._done = anyio.Event()
        self._stop = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._launched = False

    def launch(self) -> None:
        if not self._launched:
            self._launched = True
            spawn_detached(self._main)

    async def _main(self) -> None:
        SERVER.set(self.name)  # this task's own context (and the SDK tasks started from it)
        if self._stop.is_set():
            self._ready.set()
            self._done.set()
            return
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with AsyncExitStack() as stack:
                    client = await self._open(stack)
                    self.answered = True
                    if self._prepare is not None:
                        await self._prepare(client)
                    self.client = client
                    self._ready.set()
                    async with anyio.create_task_group() as tg:
                        if self._serve is not None:
                            tg.start_soon(self._serve_quietly, client)
                        await self._stop.wait()
                        tg.cancel_scope.cancel()
        except (KeyboardInterrupt, SystemExit):  # pragma: no cover
            raise
        except BaseException as err:
            self.error = err
        finally:
            self._ready.set()
            self._done.set()

    async def _serve_quietly(self, client: Any) -> None:
        assert self._serve is not None
        try:
            await self._serve(client)
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException:
            pass

    @property
    def alive(self) -> bool:
        return self.client is not None and not self._done.is_set() and not self._stop.is_set()

    async def ready(self) -> Any:
        """Wait until connected; returns the client. Raises ``ConnectionLost`` if it never was."""
        self.launch()
        await self._ready.wait()
        if not self.alive:
            raise ConnectionLost(self.error)
        return self.client

    async def run(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``fn(client)`` in the caller's task (its cancellation still reaches it);
        ``ConnectionLost`` if the connection ends first."""
        if not self.alive:
            raise ConnectionLost(self.error)
        client = self.client
        box: list[Any] = []

        async def body() -> None:
            SERVER.set(self.name)
            try:
                box.append((True, await fn(client)))
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as err:
                box.append((False, err))
            finally:
                tg.cancel_scope.cancel()

        async def watch() -> None:
            await self._done.wait()
            tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            tg.start_soon(body)
        if not box:
            raise ConnectionLost(self.error)
        ok, value = box[0]
        if ok:
            return value  # type: ignore[no-any-return]
        if self._done.is_set() or not isinstance(value, Exception):
            raise ConnectionLost(self.error or value)
        raise value

    def abort(self) -> None:
        """End the connection now (connecting or connected); returns at once."""
        self._stop.set()
        if self._scope is not None and not self._ready.is_set():
            self._scope.cancel()  # still connecting: nothing to wind down gracefully

    async def close(self, grace_s: float = 6.0) -> None:
        """Wind down and wait (bounded); past the grace period the task is cancelled."""
        self._stop.set()
        if not self._launched:
            return
        with anyio.move_on_after(grace_s):
            await self._done.wait()
        if not self._done.is_set() and self._scope is not None:
            self._scope.cancel()
            with anyio.move_on_after(2.0):
                await self._done.wait()
