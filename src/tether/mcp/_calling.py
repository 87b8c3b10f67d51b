"""One tool call to an MCP server: the pin re-check, its limits (a timeout stretched by progress
up to ``max_call_s``), the send (plain or as a task), the ``-32042`` URL flow, and what a failure
means. A task outliving its call with ``long_tasks: pause`` becomes a durable pause; the call run
again on resume waits on the same task."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from tether.core.ratelimit import TokenBucket
from tether.errors import DependencyUnavailable, ToolError, UpstreamError
from tether.mcp._connection import Connection, ConnectionLost, describe_error
from tether.mcp._elicitation import CallInfo
from tether.mcp._failures import (
    DROPPED,
    REFUSED_AS_ASKED,
    STREAM_CHECK_S,
    Unavailable,
    classify,
    is_modern,
    leaf,
    session_gone,
    session_refused,
    stream_ended,
    transport_failure,
)
from tether.mcp._results import checked_output, convert_result, invalid_output
from tether.mcp._sandbox import write_hint
from tether.mcp._tasks import Parked, run_task, task_required
from tether.tools._contract import ToolContext, ToolOutput, ToolSpec
from tether.trace._events import EventKind

if TYPE_CHECKING:
    from tether.mcp._source import McpServerSource

__all__ = [
    "URL_ELICITATION_REQUIRED",
    "CapabilityBlocked",
    "InputPending",
    "call_tool",
    "cancel_parked",
    "guarded",
    "recheck",
]

URL_ELICITATION_REQUIRED = -32042
T = TypeVar("T")
MIN_CHECK_S, MAX_CHECK_S = 1.0, 3600.0  # how long a parked task is left unasked, at least and at most


class CapabilityBlocked(ToolError):
    """The tool's definition is not approved (new, or changed since approval)."""

    kind = "capability_blocked"


class InputPending(ToolError):
    """The server asked a question nobody could answer now; the call is paused."""

    kind = "input_pending"

    def __init__(self, message: str, *, pause_id: str, awaiting: str | None = None) -> None:
        hint = (
            f"resume the run once the {awaiting} has ended (`tether resume`; a worker resumes it by itself)"
            if awaiting
            else "a person answers with `tether mcp resume`"
        )
        super().__init__(message, hint=hint, details={"pause": pause_id})
        self.meta = {"pause": pause_id, **({"awaiting": awaiting} if awaiting else {})}


async def guarded(
    source: McpServerSource,
    conn: Connection,
    fn: Callable[[Any], Awaitable[Any]],
    timeout_s: float,
    phase: str,
) -> Any:
    """``fn(client)`` with a timeout; a lost connection is handled and raised as unavailable."""
    conns = [conn]
    try:
        with anyio.fail_after(timeout_s):
            return await renewing(source, conns, fn)
    except TimeoutError:
        raise Unavailable(
            f"MCP server {source.name} did not answer in time ({timeout_s:g}s) {phase}", cause="timeout"
        ) from None
    except ToolError:
        raise
    except Exception as err:
        if not transport_failure(err):
            raise classify(source.name, err) from None
        what = f"MCP server {source.name} is not reachable ({phase})"
        raise await _lost(source, conns[-1], err, phase, what) from None


async def renewing(
    source: McpServerSource,
    conns: list[Connection],
    fn: Callable[[Any], Awaitable[T]],
    unsent: str | None = None,
) -> T:
    """``fn(client)`` on the last of ``conns``. An HTTP server's 404 to the session id means it no
    longer knows the session and did not process the request: a new session (a new connection,
    listed and checked again) is appended and the request sent again, once per call. A 400 the
    server's session refused too (``session_refused``) opens the new session the same way, but
    does not say the request went unprocessed: ``unsent`` (a call with effects, named) is then
    not sent again, and fails saying so; anything else (a listing, a read) is."""
    try:
        return await conns[-1].run(fn)
    except Exception as err:
        if source.url is None or len(conns) > 1 or not session_gone(err):
            raise
        why = describe_error(err)
        refused = session_refused(err)
    if source._conn is conns[-1]:  # (else another call on it has begun the new session)
        source.emit(EventKind.MCP_CONNECTION, server=source.name, action="new_session", cause=why)
        for old in source._retired:
            old.abort()
        # Retired, not aborted: a call still on it gets its own 404 and follows to the new one.
        source._conn = None
        source._retired.append(conns[-1])
    if source.unavailable is not None:
        raise Unavailable(source.unavailable, quarantined=True)
    conns.append(await source._connect())
    if refused and unsent is not None:
        said = (
            f"closed the connection without answering {unsent}: it no longer knows the session (a "
            f"new one is open), and whether {unsent} ran is unknown"
            if DROPPED in why
            else f"answered HTTP 400 to {unsent}: it no longer knows the session (a new one is "
            f"open), and a 400 does not say whether {unsent} ran"
        )
        raise Unavailable(
            f"MCP server {source.name} {said}, so it was not sent again: check whether it took "
            "effect before calling it again",
            cause="session_lost",
        )
    return await conns[-1].run(fn)


async def _lost(
    source: McpServerSource, conn: Connection, err: Exception, phase: str, what: str
) -> Unavailable:
    """The connection failed under ``err``: the source records why; the caller raises this."""
    why = await source._lost(conn, err.cause if isinstance(err, ConnectionLost) else err, phase)
    return Unavailable(f"{what}: {why}", cause=why, quarantined=source.unavailable is not None or None)


async def recheck(source: McpServerSource, spec: ToolSpec) -> Connection:
    """The connection to call on, after the pin re-check this call needs (a failure here is
    before the send: one restart, if allowed, is tried)."""
    conn = await source._usable()
    modern_unheard = is_modern(source.protocol_version) and not source._listening
    if source.pins is None or not (source.recheck == "each_call" or source._stale or modern_unheard):
        return conn
    why = "it said its tools changed" if source._stale else "its tools are re-checked before each call"
    try:
        try:
            await guarded(source, conn, source._list, spec.timeout_s, "before the call")
        except Unavailable:
            if source.unavailable is not None or source._conn is not None:
                raise
            conn = await source._usable()
            await guarded(source, conn, source._list, spec.timeout_s, "before the call")
    except DependencyUnavailable:
        raise
    except UpstreamError as err:  # the server's own answer to the listing: the call never went
        raise UpstreamError(  # (the server answers: not a source down, counted to stop the run)
            f"{spec.name} was not sent: {why}, and listing them again to check them against the "
            f"approved pins failed ({err.message}); it is sent once the list can be checked",
            hint="the server could not list its tools; the call may be tried again later",
            details={"cause": "relist_failed", "sent": False},
        ) from None
    source._refuse_unapproved(spec)
    return source._conn or conn  # (a new session's, if the listing needed one)


@dataclass
class _Limits:
    """A call's deadline: its timeout, moved on by progress (when configured) up to its ceiling."""

    source: McpServerSource
    spec: ToolSpec
    scope: anyio.CancelScope = field(init=False)
    ceiling: float = field(init=False)

    def __post_init__(self) -> None:
        now = anyio.current_time()
        self.scope = anyio.CancelScope(deadline=now + self.spec.timeout_s)
        self.ceiling = now + (self.source.max_call_s or self.spec.timeout_s)
        # Progress is traced and shown at a bounded rate; what is held back is counted on the next.
        self.rate, self.held = TokenBucket(5.0, 20), 0

    async def progress(self, done: float, total: float | None, message: str | None) -> None:
        source, spec = self.source, self.spec
        if self.rate.take():
            source.emit(
                EventKind.MCP_PROGRESS,
                server=source.name,
                tool=spec.name,
                progress=done,
                total=total,
                message=(message or "")[:200],
                **({"held_back": self.held} if self.held else {}),
            )
            self.held = 0
            if source.on_progress is not None:
                source.on_progress(source.name, spec.name, done, total, message)
        else:
            self.held += 1
        if source.progress_resets_timeout:
            deadline = min(anyio.current_time() + spec.timeout_s, max(self.ceiling, self.scope.deadline))
            self.scope.deadline = deadline

    def exceeded(self) -> Unavailable:
        source, spec = self.source, self.spec
        stretched = source.progress_resets_timeout and (source.max_call_s or 0) > spec.timeout_s
        if stretched and self.scope.deadline >= self.ceiling:  # kept alive by progress up to max_call_s
            limit = source.max_call_s or spec.timeout_s
            return Unavailable(
                f"{spec.name} reached its ceiling of {limit:g}s (max_call_s), though it kept "
                "reporting progress",
                cause="ceiling",
            )
        return Unavailable(f"{spec.name} timed out after {spec.timeout_s:g}s", cause="timeout")


async def call_tool(
    source: McpServerSource, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext
) -> ToolOutput:
    """Send one call and convert its result. Raises ``ToolError`` subclasses only."""
    source._refuse_unapproved(spec)
    conns = [await recheck(source, spec)]
    info = CallInfo(context.run_id, context.call_id, spec.name, dict(arguments))
    source._inflight.append(info)
    limits = _Limits(source, spec)
    result: Any = None
    try:
        with limits.scope:
            result = await _send(source, conns, spec, arguments, info, limits)
    except Exception as err:
        return await _failed(source, conns[-1], spec, err)
    finally:
        source._inflight.remove(info)
    if isinstance(result, Parked) and info.pause_id is not None:
        raise InputPending(
            f"{spec.name} is still running as task {result.task_id} on server {source.name} "
            f"(pause {info.pause_id}): the run resumes when it ends",
            pause_id=info.pause_id,
            awaiting=f"task {result.task_id} of server {source.name}",
        )
    if limits.scope.cancelled_caught or result is None:
        raise limits.exceeded()
    if info.pause_id is not None:
        raise InputPending(
            f"{spec.name} is waiting for a person to answer a question from server {source.name} "
            f"(pause {info.pause_id})",
            pause_id=info.pause_id,
        )
    why = await checked_output(result, source.listing.pinned.get(spec.remote_name, {}))
    output = convert_result(source.name, spec, result, why, source.emit, roots=source._root_paths())
    if output.is_error and (hint := write_hint(source.sandbox_plan, output.text)) is not None:
        source.emit(
            EventKind.MCP_SANDBOX, server=source.name, action="write_refused", tool=spec.name, hint=hint
        )
        if hint not in source.warnings:  # shown to the person with the run, not to the model
            source.warnings.append(hint)
    if info.elicitations:  # what became of the server's questions, in the call's own outcome
        output.meta["elicitation"] = list(info.elicitations)
    if info.samples:
        output.meta["sampling_requests"] = info.samples
    return output


async def _send(
    source: McpServerSource,
    conns: list[Connection],
    spec: ToolSpec,
    arguments: dict[str, Any],
    info: CallInfo,
    limits: _Limits,
) -> Any:
    async def send(client: Any) -> Any:
        source._refuse_unapproved(spec)  # (again on a new session: its listing was checked anew)
        definition = source.listing.pinned.get(spec.remote_name, {})
        if task_required(definition):
            return await run_as_task(source, client, spec, arguments, info, limits)
        return await client.call_tool(
            spec.remote_name,
            arguments,
            progress_callback=limits.progress,
            read_timeout_seconds=max(spec.timeout_s, source.max_call_s or 0),
        )

    once = spec.effect.side_effecting and not spec.idempotent  # (not sent twice on a doubt)
    try:
        return await renewing(source, conns, send, spec.name if once else None)
    except Exception as err:
        # -32042: the person must open a URL first (a URL elicitation); accepted, the call is resent.
        if not await _url_flow(source, err, info):
            raise
        return await conns[-1].run(send)


async def _failed(source: McpServerSource, conn: Connection, spec: ToolSpec, err: Exception) -> ToolOutput:
    """A failed send: invalid output becomes a result the model reads; anything else raises."""
    if isinstance(err, RuntimeError) and ("structured content" in str(err) or "schema" in str(err)):
        return invalid_output(source.name, spec, str(err), source.emit)
    if transport_failure(err):
        if source.url is not None and stream_ended(err) and await _still_there(source, conn):
            source.emit(
                EventKind.MCP_CONNECTION,
                server=source.name,
                action="stream_ended",
                tool=spec.name,
                cause=describe_error(err),
            )
            raise UpstreamError(
                f"server {source.name} ended its answer to {spec.name} without the answer (the "
                f"call's event stream closed; the session still answers): whether {spec.name} "
                "took effect is unknown"
            ) from None
        what = f"MCP server {source.name} went away during {spec.name}"
        raise await _lost(source, conn, err, "during the call", what) from None
    raise classify(source.name, err) from None


async def _still_there(source: McpServerSource, conn: Connection) -> bool:
    """Whether the session answers a ping within ``STREAM_CHECK_S`` (a call's event stream ended
    without its answer: a live server closing that stream early, or a server gone). A server
    implementing no ``ping`` answers it as a method it does not know, which is an answer all the
    same (``_refused_as_unknown``). A 2026-07-28 server keeps no session to lose: a server gone
    fails the next request on its own."""
    if is_modern(source.protocol_version):
        return True

    async def ping(client: Any) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (deprecated as of 2026-07-28; this session is older)
            await client.send_ping()

    with anyio.move_on_after(STREAM_CHECK_S):
        try:
            await conn.run(ping)
        except Exception as err:
            return _refused_as_unknown(err)
        return True
    return False


def _refused_as_unknown(err: Exception) -> bool:
    """Whether a ping failed as the server's own answer that it serves no such method or params
    (``REFUSED_AS_ASKED``, as hand-written servers answer a method they lack): the session read
    it and answered. A session gone is a transport failure (its 404, or 400 confirmed)."""
    inner = leaf(err)
    return (
        type(inner).__name__ == "MCPError"
        and getattr(inner, "code", None) in REFUSED_AS_ASKED
        and not transport_failure(err)
    )


async def run_as_task(
    source: McpServerSource,
    client: Any,
    spec: ToolSpec,
    arguments: dict[str, Any],
    info: CallInfo,
    limits: _Limits,
) -> Any:
    """A task-only tool, polled within this call's limits (a status message is progress); its
    result is used only if the definition is still approved when it ends. With ``long_tasks:
    pause`` a task outliving the limits is parked (``Parked``, its pause id in ``info``)."""

    def emit(**data: Any) -> None:
        source.emit(EventKind.MCP_TASK, server=source.name, tool=spec.name, **data)

    async def status(polls: int, message: str | None) -> None:
        await limits.progress(float(polls), None, message)

    limit = max(spec.timeout_s, source.max_call_s or 0)
    pauses = source.pauses if source.long_tasks == "pause" else None
    earlier = None
    park_at = None
    if pauses is not None:
        earlier = await pauses.parked(info.run_id, source.name, spec.name, arguments)
        # Parked before the call's deadline (which would cancel the task), with room to record it.
        margin = min(2.0, spec.timeout_s / 4)

        def park_at() -> float:
            return float(limits.scope.deadline) - margin

    try:
        result = await run_task(
            source._relays[id(client)],
            spec.remote_name,
            arguments,
            emit=emit,
            on_status=status,
            ttl_s=source.task_ttl_s if pauses is not None else limit,
            task_id=earlier.task_id if earlier is not None else None,
            park_at=park_at,
        )
    except UpstreamError:  # over for good (a lost connection leaves the pause open instead)
        if earlier is not None:
            with anyio.CancelScope(shield=True):
                await earlier_done(source, earlier.id, "failed")
        raise
    if isinstance(result, Parked):
        assert pauses is not None
        # Nobody need look again before the poll interval, nor before half the task's age again.
        now = datetime.now(UTC)
        age = (now - datetime.fromisoformat(earlier.created_at)).total_seconds() if earlier else 0.0
        check_after = now + timedelta(seconds=min(max(result.poll_s, age / 2, MIN_CHECK_S), MAX_CHECK_S))
        with anyio.CancelScope(shield=True):
            pause = await pauses.park(
                run_id=info.run_id,
                server=source.name,
                tool=spec.name,
                arguments=arguments,
                task_id=result.task_id,
                check_after=check_after.isoformat(timespec="seconds"),
            )
        if pause.status != "task":
            raise UpstreamError(
                f"the task {result.task_id} of {spec.name} was closed ({pause.outcome}) while this "
                "call waited on it"
            )
        info.pause_id = pause.id
        return result
    if earlier is not None:
        with anyio.CancelScope(shield=True):
            await earlier_done(source, earlier.id, "completed")
    if source.pins is not None:
        await source._list(client)
        if spec.remote_name in source.blocked:
            raise CapabilityBlocked(
                f"{spec.name} changed while its task ran ({source.blocked[spec.remote_name]}): its "
                "result is not used",
                hint=f"a person must review and approve it again (tether mcp approve {source.name})",
            )
    return result


async def earlier_done(source: McpServerSource, pause_id: str, outcome: str) -> None:
    """A parked task's pause, closed: its task ended (or was lost), so no call waits on it."""
    if source.pauses is not None:
        await source.pauses.complete(pause_id, outcome)


async def cancel_parked(source: McpServerSource, run_id: str) -> list[str]:
    """Cancel on the server the tasks ``run_id`` left parked, closing their pauses; the task ids
    it accepted to cancel. Raises ``Unavailable`` (the pauses then left as they were)."""
    from tether.mcp._tasks import cancel_task

    if source.pauses is None:
        return []
    mine = await source.pauses.for_run(run_id)
    if not (parked := [p for p in mine if p.status == "task" and p.server == source.name]):
        return []
    conn = await source._usable()
    cancelled: list[str] = []

    async def cancel(client: Any) -> None:
        for pause in parked:
            assert pause.task_id is not None
            accepted = await cancel_task(source._relays[id(client)], pause.task_id)
            source.emit(
                EventKind.MCP_TASK,
                server=source.name,
                tool=pause.tool,
                action="cancel_sent",
                task_id=pause.task_id,
                status="parked",
                accepted=accepted,
            )
            if accepted:
                cancelled.append(pause.task_id)

    await guarded(source, conn, cancel, source.timeout_s, "cancelling parked tasks")
    for pause in parked:
        await source.pauses.complete(pause.id, "run cancelled")
    return cancelled


async def _url_flow(source: McpServerSource, err: BaseException, info: CallInfo) -> bool:
    """Whether ``err`` was a URL-required error whose URLs the person all accepted."""
    inner = leaf(err)
    if getattr(inner, "code", None) != URL_ELICITATION_REQUIRED or source.elicitation is None:
        return False
    return bool(await source.elicitation.url_required(getattr(inner, "data", None), info.tool))
