"""A plain (sync) tool's call in a worker thread, bounded by the tool's ``timeout_s``.

A thread cannot be stopped. At ``timeout_s`` (or when the run is cancelled: Ctrl-C, its deadline)
the caller stops waiting for it: the call ends as a ``TimedOut`` error at once, the thread goes on
in the background, and what it returns later is thrown away — only its ending is told, to whoever
asked ``Late.when_done`` (the chokepoint traces it). Threads left running this way are counted per
tool function: past ``LATE_LIMIT`` of them, a new call of that tool is refused before it starts,
so a tool that hangs cannot pile up threads without bound (nor hold the worker pool: an abandoned
call gives its place in anyio's thread limiter back when its caller stops waiting)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

from tether.core.stop import cancel_after
from tether.errors import UpstreamError

__all__ = ["LATE_LIMIT", "Late", "TimedOut", "run_in_thread"]

# The most calls of one tool function whose threads run on past their timeout at one time.
LATE_LIMIT = 8

_late_lock = threading.Lock()
_late: dict[object, int] = {}  # a tool's function -> its calls' threads running past their timeout


class Late:
    """A call whose caller stopped waiting while its thread still runs. ``when_done(fn)``: call
    ``fn(outcome)`` (``"returned"`` or ``"raised KeyError"``) on the registering event loop once
    the thread ends; dropped if that loop has closed by then. Its result is never given out."""

    def __init__(self, key: object) -> None:
        self._key = key
        self._lock = threading.Lock()
        self._outcome: str | None = None
        self._waiting: list[Callable[[], None]] = []
        self.abandoned = False

    def when_done(self, fn: Callable[[str], None]) -> None:
        schedule = _loop_scheduler()
        with self._lock:
            if self._outcome is None:
                self._waiting.append(lambda: schedule(lambda: fn(self._outcome or "returned")))
                return
        fn(self._outcome)

    def abandon(self) -> bool:
        """Mark the call abandoned (counted until its thread ends); ``False`` if it already ended."""
        with self._lock:  # (counted before ``finished`` can read ``abandoned``)
            if self._outcome is not None:
                return False
            self.abandoned = True
            with _late_lock:
                _late[self._key] = _late.get(self._key, 0) + 1
        return True

    def finished(self, outcome: str) -> None:
        """In the worker thread: the function ended with ``outcome``."""
        with self._lock:
            self._outcome = outcome
            waiting, self._waiting = self._waiting, []
            abandoned = self.abandoned
        for tell in waiting:  # (told before it stops counting: whoever sees it gone, is told)
            tell()
        if abandoned:
            with _late_lock:
                left = _late.get(self._key, 1) - 1
                if left > 0:
                    _late[self._key] = left
                else:
                    _late.pop(self._key, None)


class TimedOut(UpstreamError):
    """A tool call that ran past its ``timeout_s``. ``late`` is set when its thread still runs
    (a plain function's): its effect may still happen, so its outcome is unknown."""

    def __init__(self, name: str, timeout_s: float, late: Late | None = None) -> None:
        super().__init__(f"{name} timed out after {timeout_s:g}s", hint="try again later")
        self.late = late
        self.meta: dict[str, Any] = {"timed_out": True, **({"outcome_unknown": True} if late else {})}


def running_late(function: object) -> int:
    """How many calls of ``function`` run on past their timeout now."""
    with _late_lock:
        return _late.get(function, 0)


async def run_in_thread(name: str, function: object, call: Callable[[], Any], timeout_s: float) -> Any:
    """``call()`` in a worker thread, waited for at most ``timeout_s``. Raises ``TimedOut`` (with
    its ``Late``) past it, ``UpstreamError`` when ``LATE_LIMIT`` calls of ``function`` still run
    late; a cancelled caller stops waiting at once (the thread runs on, its result dropped)."""
    if (late_now := running_late(function)) >= LATE_LIMIT:
        raise UpstreamError(
            f"{name} was not started: {late_now} earlier calls of it still run past their "
            f"{timeout_s:g}s timeout",
            hint="try again later, or go on without this tool",
        )
    late = Late(function)

    def body() -> Any:
        outcome = "returned"
        try:
            return call()
        except BaseException as err:
            outcome = f"raised {type(err).__name__}"
            raise
        finally:
            late.finished(outcome)

    try:
        with cancel_after(timeout_s) as deadline:
            value = await anyio.to_thread.run_sync(body, abandon_on_cancel=True)
    except BaseException:
        late.abandon()  # cancelled from outside (Ctrl-C, the run's deadline): the thread runs on
        raise
    if deadline.cancelled_caught:
        late.abandon()  # (a thread that ended just now is told as late too: its result is dropped)
        raise TimedOut(name, timeout_s, late)
    return value


def _loop_scheduler() -> Callable[[Callable[[], None]], None]:
    """A thread-safe ``soon(fn)`` that runs ``fn`` on the current event loop, and does nothing
    once that loop has closed."""
    post: Callable[[Callable[[], None]], object]
    closed: type[Exception] = RuntimeError  # the loop has closed
    try:
        post = asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # another event loop (trio): its token
        native: Any = getattr(anyio.lowlevel.current_token(), "native_token", None)
        post, closed = lambda fn: native.run_sync_soon(fn), Exception  # the loop has ended

    def soon(fn: Callable[[], None]) -> None:
        try:
            post(fn)
        except closed:  # nobody is left to tell
            return

    return soon
