"""Task-augmented tool calls (MCP 2025-11-25 tasks), for a tool pinned with
``execution.taskSupport: required``.

The SDK has no client for tasks, so a ``TaskRelay`` sits between the SDK session and the
transport: it forwards everything and sends the host's own requests (ids ``tether-task-N``),
taking their answers first. ``run_task`` creates the task, polls ``tasks/get`` (interval clamped
to [50 ms, 5 s], however many digits it has: ``poll_wait``; a settling
``notifications/tasks/status`` ends the wait early, any other is dropped), fetches
``tasks/result``, and sends ``tasks/cancel`` when the call ends first. Given ``park_at`` it returns
``Parked`` instead, the task left running for a later call's ``task_id``.

The relay also keeps each tool's ``outputSchema`` from the SDK (``with_output_schemas`` gives
it back to the host's listing): the SDK checked structured results against it itself, in the
event loop and without bounds (a schema whose references multiply froze the host for hours, on
every connection), before the host's own engine (``tether.core._schema``), which checks them
with bounded work.

The relay also bounds what the host has sent but the server has not read: at most ``MAX_UNSENT``
messages wait for it. Past that (a server that stopped reading its input, while it may still
send), an answer or notice of the host's is dropped and a request of the host's fails at once
(``NOT_READING``), so neither the SDK's tasks answering the server's requests nor a call's
courtesy cancel wait on a server that reads nothing. And it asks a server that refuses the
offered protocol version, naming those it speaks, once more at one of them (``_handshake``).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

import anyio

from tether.errors import UpstreamError
from tether.mcp._handshake import asked_again
from tether.mcp._mend import refusal

__all__ = [
    "MAX_POLL_S",
    "MAX_UNSENT",
    "MIN_POLL_S",
    "NOT_READING",
    "Parked",
    "TaskRelay",
    "poll_wait",
    "run_task",
    "task_required",
]

MIN_POLL_S = 0.05
MAX_POLL_S = 5.0


def poll_wait(asked_ms: Any) -> float:
    """The seconds between two polls: what the server asks (ms, 500 when it says nothing), held
    to ``MIN_POLL_S``..``MAX_POLL_S`` before any division: an interval of 400 digits (an integer
    JSON holds) divided by 1000 raised ``OverflowError``, failing a call that should have polled."""
    asked = asked_ms if isinstance(asked_ms, int | float) and asked_ms == asked_ms else 500
    return float(min(max(asked, MIN_POLL_S * 1000), MAX_POLL_S * 1000)) / 1000


_ENDED = frozenset({"completed", "failed", "cancelled"})
_SETTLED = _ENDED | {"input_required"}  # a status that ends the wait (a notification may say it)
_HEARD = 64  # settled statuses kept from notifications not yet waited on (oldest dropped)
_PREFIX = "tether-task-"
_STATUS = "notifications/tasks/status"
MAX_UNSENT = 64  # the host's messages waiting for a server to read them, at most
MAX_CALLS_HELD = 4096  # the ids of calls not yet answered the relay holds (to mend their answers)
# A request of the host's refused because the server is not reading (outside the reserved band).
NOT_READING = -31408


class TaskRequestFailed(Exception):
    """The server answered one of the relay's requests with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code


@dataclass(frozen=True, slots=True)
class Parked:
    """A task still running when its call's wait budget ran out, left running on the server."""

    task_id: str
    status: str
    poll_s: float  # how long the server asked to be left alone between polls (clamped)


def task_required(definition: dict[str, Any]) -> bool:
    execution = definition.get("execution") or {}
    return isinstance(execution, dict) and execution.get("taskSupport") == "required"


def with_content(result: Any) -> Any:
    """A tool result holding ``structuredContent`` and no ``content`` (which the schema requires,
    and the TypeScript SDK's client defaults to ``[]``: servers tried only with it omit it), its
    ``content`` ``[]`` (the SDK refused the answer: the call failed naming a validation error);
    any other as it is. The host then shows the structured content (``_results``)."""
    if isinstance(result, dict) and "structuredContent" in result and "content" not in result:
        return {**result, "content": []}
    return result


def _with_content(item: Any, version: str | None) -> Any:
    """An answer to a ``tools/call``, its result ``with_content`` and its content readable
    (``tether.mcp._mend``)."""
    from mcp.shared.message import SessionMessage

    from tether.mcp._mend import readable_content

    result = getattr(item.message, "result", None)
    if (mended := readable_content(with_content(result), version)) is result:
        return item
    return SessionMessage(item.message.model_copy(update={"result": mended}), metadata=item.metadata)


class TaskRelay:
    """One connection's message relay (see the module's docstring)."""

    def __init__(
        self,
        version: Callable[[], str | None] = lambda: None,
        on_unsent: Callable[[int], None] | None = None,
        unsupported: frozenset[str] = frozenset(),
    ) -> None:
        self._version = version  # the connection's negotiated protocol version, once known
        self._on_unsent = on_unsent  # told the count dropped so far, once as each overflow begins
        self._unsupported = unsupported  # the server's requests answered here (``_mend.refusal``)
        self.unsent_dropped = 0  # the host's answers and notices dropped, the server not reading
        self._overflowing = False
        self._listings: set[Any] = set()  # ids of the SDK's tools/list requests not yet answered
        self._calls: set[Any] = set()  # ids of its tools/call requests not yet answered
        self.dropped: dict[str, str] = {}  # tools the last listing left out (usable_listing)
        self.output_schemas: dict[str, Any] = {}  # the last listing's, kept from the SDK (_listing)
        self._ids = itertools.count(1)
        self._waiting: dict[str, list[Any]] = {}  # id -> [event, answer]
        self._send: Any = None
        self._initialize: Any = None  # the SDK's ``initialize`` until its first answer
        self.closed = False  # the connection's read stream ended (the server process or stream gone)
        self._heard: OrderedDict[str, Any] = OrderedDict()  # task id -> its settled status
        self._listening: dict[str, anyio.Event] = {}  # task id -> set when a settled status is heard

    @asynccontextmanager
    async def wrap(self, transport: Any) -> AsyncIterator[Any]:
        """The transport's streams, relayed: what the SDK's ``Client`` enters instead."""
        async with transport as streams:
            inner_read, inner_write = streams[0], streams[1]
            to_sdk, sdk_read = anyio.create_memory_object_stream[Any](0)
            sdk_write, from_sdk = anyio.create_memory_object_stream[Any](0)
            unsent, unsent_read = anyio.create_memory_object_stream[Any](MAX_UNSENT)
            self._send = unsent

            async def inbound() -> None:
                try:
                    async with to_sdk:
                        async for item in inner_read:
                            message = getattr(item, "message", None)
                            ident = getattr(message, "id", None)
                            if ident is None and getattr(message, "method", None) == _STATUS:
                                self._status(getattr(message, "params", None))
                                continue
                            answers = not hasattr(message, "method")
                            if (refused := refusal(message, self._unsupported)) is not None:
                                with suppress(anyio.WouldBlock):  # (full: the server reads nothing)
                                    self._send.send_nowait(refused)
                                continue
                            if answers and isinstance(ident, str) and ident in self._waiting:
                                box = self._waiting.pop(ident)
                                box[1] = message
                                box[0].set()
                                continue
                            if (
                                answers
                                and self._initialize is not None
                                and ident == self._initialize.message.id
                            ):
                                again, self._initialize = asked_again(self._initialize, message), None
                                if again is not None:  # refused with the versions it speaks
                                    self._send.send_nowait(again)
                                    continue
                            if ident is not None and answers:
                                item = self._answered(ident, item)
                            await to_sdk.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                    pass
                finally:
                    self._close()

            async def outbound() -> None:
                try:
                    async with from_sdk, unsent:
                        async for item in from_sdk:
                            sent: Any = getattr(item, "message", None)
                            self._asked(item, sent)
                            try:
                                unsent.send_nowait(item)
                            except anyio.WouldBlock:
                                self._unread(sent, tg, to_sdk)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass

            async def pump() -> None:
                """The host's messages to the server, in order, as fast as it reads them."""
                try:
                    async with unsent_read:
                        async for item in unsent_read:
                            await inner_write.send(item)
                            if not unsent_read.statistics().current_buffer_used:
                                self._overflowing = False
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass

            async with anyio.create_task_group() as tg:
                tg.start_soon(inbound)
                tg.start_soon(outbound)
                tg.start_soon(pump)
                try:
                    yield (sdk_read, sdk_write, *streams[2:])
                finally:
                    self._close()
                    tg.cancel_scope.cancel()

    def _asked(self, item: Any, sent: Any) -> None:
        """Note the SDK's request ``sent`` whose answer the relay reads (or asks again)."""
        method = getattr(sent, "method", None)
        if method is None or not hasattr(sent, "id"):
            return
        if method == "initialize":
            self._initialize = item  # asked once more if refused (``_handshake``)
        elif method == "tools/call":
            if len(self._calls) >= MAX_CALLS_HELD:  # (answers that never came)
                self._calls.clear()
            self._calls.add(sent.id)
        elif method == "tools/list":
            self._listings.add(sent.id)
            if not (sent.params or {}).get("cursor"):  # a new listing begins
                self.dropped, self.output_schemas = {}, {}

    def _answered(self, ident: Any, item: Any) -> Any:
        """An answer to the SDK's request ``ident``, as the SDK takes it (a listing's or a call's)."""
        if ident in self._listings:
            self._listings.discard(ident)
            return self._listing(item)
        if ident in self._calls:
            self._calls.discard(ident)
            return _with_content(item, self._version())
        return item

    def _listing(self, item: Any) -> Any:
        """A ``tools/list`` answer without the tools the SDK would refuse it for."""
        from mcp.shared.message import SessionMessage

        from tether.mcp._listing import usable_listing

        result = getattr(item.message, "result", None)
        if not isinstance(result, dict):
            return item
        usable, dropped = usable_listing(result, self._version())
        self.dropped.update(dropped)
        listed = usable.get("tools")
        tools: list[Any] = listed if isinstance(listed, list) else []
        schemas = {
            tool["name"]: tool["outputSchema"]
            for tool in tools
            if isinstance(tool, dict)
            and isinstance(tool.get("name"), str)
            and tool.get("outputSchema") is not None
        }
        if usable is result and not schemas:
            return item
        if schemas:  # checked by the host's engine (bounded), never by the SDK's own (unbounded)
            self.output_schemas.update(schemas)
            bare = [
                {k: v for k, v in t.items() if k != "outputSchema"} if isinstance(t, dict) else t
                for t in tools
            ]
            usable = {**usable, "tools": bare}
        answer = item.message.model_copy(update={"result": usable})
        return SessionMessage(answer, metadata=item.metadata)

    def with_output_schemas(self, tools: list[Any]) -> list[Any]:
        """Tools the SDK listed, each with the output schema ``_listing`` kept from it."""
        schemas = self.output_schemas
        return [
            t.model_copy(update={"output_schema": schemas[t.name]}) if t.name in schemas else t for t in tools
        ]

    def _unread(self, message: Any, tg: Any, to_sdk: Any) -> None:
        """``MAX_UNSENT`` of the host's messages wait for a server not reading them: a request of
        the host's fails at once (its answer made here); an answer or notice is dropped."""
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        ident = getattr(message, "id", None)
        if ident is not None and hasattr(message, "method"):
            self._listings.discard(ident)
            why = f"the server is not reading what the host sends ({MAX_UNSENT} messages wait for it)"
            error = types.JSONRPCError(
                jsonrpc="2.0", id=ident, error=types.ErrorData(code=NOT_READING, message=why)
            )

            async def refuse() -> None:
                with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    await to_sdk.send(SessionMessage(error))

            tg.start_soon(refuse)
            return
        self.unsent_dropped += 1
        if not self._overflowing:
            self._overflowing = True
            if self._on_unsent is not None:
                self._on_unsent(self.unsent_dropped)

    def _close(self) -> None:
        self.closed = True
        for box in self._waiting.values():
            box[0].set()
        self._waiting.clear()
        for heard in self._listening.values():
            heard.set()

    def _status(self, params: Any) -> None:
        """A status notification, kept only when it settles a task (anything else is dropped)."""
        import mcp_types as types

        try:
            task = types.TaskStatusNotificationParams.model_validate(params)
        except ValueError:
            return
        if task.status not in _SETTLED:
            return
        self._heard[task.task_id] = task
        self._heard.move_to_end(task.task_id)
        while len(self._heard) > _HEARD:
            self._heard.popitem(last=False)
        if (heard := self._listening.get(task.task_id)) is not None:
            heard.set()

    async def settled(self, task_id: str, within_s: float) -> Any:
        """The task's state if a notification settles it within ``within_s``, else ``None``."""
        if task_id not in self._heard and not self.closed:
            heard = self._listening.setdefault(task_id, anyio.Event())
            try:
                with anyio.move_on_after(within_s):
                    await heard.wait()
            finally:
                self._listening.pop(task_id, None)
        return self._heard.pop(task_id, None)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request of the host's own; its result. Raises ``TaskRequestFailed``, or
        ``anyio.ClosedResourceError`` when the connection ended."""
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        if self.closed or self._send is None:
            raise anyio.ClosedResourceError
        ident = f"{_PREFIX}{next(self._ids)}"
        box: list[Any] = [anyio.Event(), None]
        self._waiting[ident] = box
        try:
            message = types.JSONRPCRequest(jsonrpc="2.0", id=ident, method=method, params=params)
            await self._send.send(SessionMessage(message))
            await box[0].wait()
        finally:
            self._waiting.pop(ident, None)
        answer = box[1]
        if answer is None:
            raise anyio.ClosedResourceError
        if (error := getattr(answer, "error", None)) is not None:
            raise TaskRequestFailed(int(error.code), str(error.message))
        return dict(getattr(answer, "result", None) or {})


async def run_task(
    relay: TaskRelay,
    name: str,
    arguments: dict[str, Any],
    *,
    ttl_s: float,
    emit: Callable[..., None],
    on_status: Callable[[int, str | None], Awaitable[None]] | None = None,
    task_id: str | None = None,
    park_at: Callable[[], float] | None = None,
) -> Any:
    """One task-augmented call to its end: its ``CallToolResult``, or ``Parked`` when ``park_at()``
    comes first; ``task_id`` waits on an earlier call's task. Raises ``UpstreamError``."""
    import mcp_types as types

    if task_id is None:
        params = {"name": name, "arguments": arguments, "task": {"ttl": int(ttl_s * 1000)}}
        created = types.CreateTaskResult.model_validate(await relay.request("tools/call", params))
        task: Any = created.task
        task_id = task.task_id
        emit(action="created", task_id=task_id, status=task.status)
    else:
        try:
            task = types.GetTaskResult.model_validate(await relay.request("tasks/get", {"taskId": task_id}))
        except TaskRequestFailed as err:
            emit(action="lost", task_id=task_id, error=str(err)[:200])
            raise UpstreamError(
                f"the server no longer knows the task {task_id} of {name} ({err}); the tool is not "
                "called again"
            ) from None
        emit(action="resumed", task_id=task_id, status=task.status)
    polls = 0
    shown: str | None = None
    try:
        while task.status not in _ENDED and task.status != "input_required":
            interval = poll_wait(task.poll_interval)
            if park_at is not None and anyio.current_time() + interval >= park_at():
                emit(action="parked", task_id=task_id, status=task.status, polls=polls)
                return Parked(task_id, str(task.status), interval)
            if (reported := await relay.settled(task_id, interval)) is not None:
                task = reported
                emit(action="notified", task_id=task_id, status=task.status)
            else:
                task = types.GetTaskResult.model_validate(
                    await relay.request("tasks/get", {"taskId": task_id})
                )
                polls += 1
            if on_status is not None and task.status_message != shown:
                shown = task.status_message
                await on_status(polls, shown)
        if task.status == "cancelled":
            raise UpstreamError(f"the server cancelled the task of {name}")
        result = types.CallToolResult.model_validate(
            with_content(await relay.request("tasks/result", {"taskId": task_id}))
        )
    except BaseException:
        if task.status not in _ENDED:  # the call ended first: tell the server (bounded)
            await cancel_task(relay, task_id)
            emit(action="cancel_sent", task_id=task_id, status=task.status, polls=polls)
        else:
            emit(action="finished", task_id=task_id, status=task.status, polls=polls)
        raise
    emit(action="finished", task_id=task_id, status=task.status, polls=polls)
    return result


async def cancel_task(relay: TaskRelay, task_id: str) -> bool:
    """Send ``tasks/cancel`` within a bounded, shielded wait; whether the server accepted it."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(2.0), suppress(Exception):
        await relay.request("tasks/cancel", {"taskId": task_id})
        return True
    return False
