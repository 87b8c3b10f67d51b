"""Stopping the runs of a process from outside: a signal (SIGINT, SIGTERM) to ``tether run`` or
``tether resume`` (``on_signals_stop``, around what they hand ``anyio.run``).

``interruptible()`` opens an ``Interrupt`` for the code under it (a context variable, so the
runs it starts, and their subagents, see it); each run's loop holds its steps' cancel scope
there (``Interrupt.holding``). ``Interrupt.stop(why)`` cancels every scope held, and each loop
ends its run ``interrupted``, as a passed deadline ends it ``deadline``: what its model call was
billed counted, settlement and the checkpoint shielded, the ``stop`` event written, the trace
closed. Without one open (a library caller), nothing is held and a cancellation from outside
cancels the run as it always did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio

__all__ = ["Interrupt", "current_interrupt", "interruptible", "on_signals_stop", "stopped_by_signals"]


class Interrupt:
    """Why the runs under it were stopped (``why``: None until they are), and the cancel scopes
    of the runs under way."""

    def __init__(self) -> None:
        self.why: str | None = None
        self._scopes: set[anyio.CancelScope] = set()

    def stop(self, why: str) -> None:
        """Stop every run under this interrupt (the first reason is kept)."""
        self.why = self.why or why
        for scope in list(self._scopes):
            scope.cancel()

    @contextmanager
    def holding(self, scope: anyio.CancelScope) -> Iterator[anyio.CancelScope]:
        """``scope``, cancelled by ``stop`` while held (at once when a stop came before)."""
        self._scopes.add(scope)
        if self.why is not None:
            scope.cancel()
        try:
            yield scope
        finally:
            self._scopes.discard(scope)


_CURRENT: ContextVar[Interrupt | None] = ContextVar("tether_interrupt", default=None)


def current_interrupt() -> Interrupt | None:
    """The interrupt the code under way runs under; None outside ``interruptible``."""
    return _CURRENT.get()


@contextmanager
def interruptible() -> Iterator[Interrupt]:
    """An ``Interrupt`` for the code under it."""
    interrupt = Interrupt()
    token = _CURRENT.set(interrupt)
    try:
        yield interrupt
    finally:
        _CURRENT.reset(token)


@contextmanager
def stopped_by_signals(interrupt: Interrupt) -> Iterator[None]:
    """SIGINT or SIGTERM stops the run (``interrupted``: its trace and checkpoint written, as a
    deadline's stop writes them); a second one is raised as if none were caught (Ctrl-C twice:
    ``KeyboardInterrupt``; SIGTERM twice: the process ends). Where the loop cannot take signal
    handlers (another thread, Windows), signals act as they always did."""
    import asyncio
    import signal

    loop = asyncio.get_running_loop()  # tether's commands run on asyncio (``anyio.run``'s default)
    numbers = (signal.SIGINT, signal.SIGTERM)

    def received(number: signal.Signals) -> None:
        if interrupt.why is None:
            interrupt.stop(number.name)
            return
        for n in numbers:  # the second: as if none were caught
            loop.remove_signal_handler(n)
        signal.raise_signal(number)

    before = {number: signal.getsignal(number) for number in numbers}  # the caller's, put back after
    taken: list[signal.Signals] = []
    # A loop that cannot take them (Windows; not the main thread) leaves signals as they were.
    with suppress(NotImplementedError, RuntimeError, ValueError):
        for number in numbers:
            loop.add_signal_handler(number, received, number)
            taken.append(number)
    try:
        yield
    finally:
        for number in taken:
            loop.remove_signal_handler(number)
            if before[number] is not None:
                signal.signal(number, before[number])


T = TypeVar("T")


async def on_signals_stop(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)`` with SIGINT and SIGTERM stopping its runs (``stopped_by_signals``):
    what ``tether run`` and ``tether resume`` hand ``anyio.run``."""
    with interruptible() as interrupt, stopped_by_signals(interrupt):
        return await fn(*args)
