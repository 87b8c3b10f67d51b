"""Shared rate limits: one token bucket per upstream, whoever calls it (L4).

``acquire()`` takes a token, waiting when none is left; waiters reserve their slot (the balance
may go negative) before they sleep, so they are served in arrival order and no lock is held
across an ``await``. ``shared_bucket(key, rate, burst)`` is the process-wide bucket of an
upstream (a base URL, an MCP server id)."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable

import anyio

__all__ = ["TokenBucket", "shared_bucket"]


class TokenBucket:
    """A token bucket. ``clock`` and ``sleep`` are injectable so tests can run on virtual time."""

    def __init__(
        self,
        rate: float,
        burst: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._stamp = clock()
        self._mutex = threading.Lock()  # guards the arithmetic only; never held across an await
        self.acquired = 0
        self.waited = 0  # acquisitions that had to wait
        self.waited_s = 0.0

    def _reserve(self, cost: float) -> float:
        """Take ``cost`` tokens now (possibly into debt); return how long to wait for them."""
        with self._mutex:
            self._refill()
            self._tokens -= cost
            self.acquired += 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def take(self, cost: float = 1.0) -> bool:
        """Take ``cost`` tokens if there are that many now (never waits, never into debt)."""
        with self._mutex:
            self._refill()
            if self._tokens < cost:
                return False
            self._tokens -= cost
            self.acquired += 1
            return True

    def _refund(self, cost: float) -> None:
        with self._mutex:
            self._tokens = min(self.burst, self._tokens + cost)

    async def acquire(self, cost: float = 1.0) -> float:
        """Wait for ``cost`` tokens; returns the seconds waited. Cancelling a wait returns the tokens."""
        if cost > self.burst:
            raise ValueError(f"cost {cost} exceeds the bucket's burst {self.burst}")
        wait = self._reserve(cost)
        if wait <= 0:
            return 0.0
        self.waited += 1
        self.waited_s += wait
        try:
            await self._sleep(wait)
        except BaseException:
            self._refund(cost)
            raise
        return wait

    def __repr__(self) -> str:
        return f"TokenBucket(rate={self.rate:g}/s, burst={self.burst:g})"


_SHARED: dict[str, TokenBucket] = {}
_SHARED_LOCK = threading.Lock()


def shared_bucket(key: str, rate: float, burst: float = 1.0) -> TokenBucket:
    """The process-wide bucket for ``key``, created on first use. Asking again with another rate
    or burst raises ``ValueError`` (one upstream, one budget)."""
    with _SHARED_LOCK:
        bucket = _SHARED.get(key)
        if bucket is None:
            bucket = _SHARED[key] = TokenBucket(rate, burst)
        elif (bucket.rate, bucket.burst) != (float(rate), float(burst)):
            raise ValueError(
                f"upstream {key!r} already limited at {bucket.rate:g}/s burst {bucket.burst:g}; "
                f"asked for {rate:g}/s burst {burst:g}"
            )
        return bucket
