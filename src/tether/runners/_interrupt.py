"""Stopping the runs of a process from outside: a signal (SIGINT, SIGTERM) to ``tether run``.

``interruptible()`` opens an ``Interrupt`` for the code under it (a context variable, so the
runs it starts, and their subagents, see it); each run's loop holds its steps' cancel scope
there (``Interrupt.holding``). ``Interrupt.stop(why)`` cancels every scope held, and each loop
ends its run ``interrupted``, as a passed deadline ends it ``deadline``: what its model call was
billed counted, settlement and the checkpoint shielded, the ``stop`` event written, the trace
closed. Without one open (a library caller), nothing is held and a cancellation from outside
cancels the run as it always did.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import anyio

__all__ = ["Interrupt", "current_interrupt", "interruptible"]


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
