"""What every backend does around one model call: draw from the rate limit, bound the attempt
as a whole, retry what may succeed next time, give up with one ``ModelError``.

A backend's attempt raises ``Retryable`` for what may pass on another try (a timeout, 429,
5xx and 529, a dropped connection, an answer that is not usable) and ``ModelError`` for what
will not (401, 400, …). ``RetryingBackend.send`` owns the rest, once for every backend:

- ``timeout_s`` bounds each attempt *whole*: connecting, the headers and every byte of the
  body or stream. A server that trickles one byte a second is cut at ``timeout_s``, however
  long it keeps the connection busy (an HTTP client's own timeout bounds each read only).
- Capped exponential backoff with jitter between attempts, or the server's ``Retry-After``
  (``retry-after-ms`` too) unless that is longer than ``RetryPolicy.max_retry_after_s``, in
  which case the call fails at once rather than stall the run; and a wait that would pass the
  deadline of the scope the call runs in (the run's ``deadline_s``) fails it at once too, naming
  the error it would have retried, rather than sleep until the deadline ends the run unexplained.
- Every retry taken is listed (kind, attempt, delay) for the trace.
- What the provider billed for an attempt that then failed (a stream cut after it reported its
  usage, a whole answer refused as garbled) is counted: a reader reports each usage it reads
  (``billed``), and ``send`` adds the failed attempts' to the answer's usage and cost
  (``meta["failed_attempts_billed"]`` says how much), or hands them on with the ``ModelError``
  (``usage``, ``cost_usd``) when no attempt succeeds, so budgets count every token paid for.
  An attempt cut before its server reported any usage, after it streamed answer (readers count
  each piece, ``streamed``), is counted by estimate (flagged ``estimated``).
  A call cancelled from outside (the run's deadline, a cancelled task) raises neither: what its
  attempts were billed, and the retries they took, go to the caller's ``Unsettled``
  (``Unsettled.collecting``), if any, which the run traces.
- An attempt that streamed pieces of its answer to ``on_delta`` and then failed is followed by
  ``on_delta("discard", why)``: the pieces since were no answer (the next attempt's, or the next
  model's, begin again).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import anyio

from tether.core.messages import Usage
from tether.core.stop import cancel_after
from tether.errors import ModelError
from tether.models._base import larger_usage

if TYPE_CHECKING:
    from tether.core.ratelimit import TokenBucket
    from tether.models._base import ModelResponse
    from tether.models._pricing import Price

__all__ = ["RetryPolicy", "Retryable", "RetryingBackend", "Unsettled", "billed", "streamed", "unsettled"]


class _Tally:
    """The usage the provider reported for the attempt under way (a running total), and how many
    characters of answer it streamed (``streamed``)."""

    __slots__ = ("body", "said", "usage")

    def __init__(self, body: bytes = b"") -> None:
        self.usage: Usage | None = None
        self.said = 0
        self.body = body

    def billed(self) -> Usage | None:
        """What the attempt was billed: the usage its server reported; when it reported none but
        streamed answer (a stream cut before its usage chunk: the server read the request and
        wrote that much, and bills it), both counts estimated as a whole answer without usage is
        (``tether.models._estimate``: about four characters a token); else None. A usage reported
        before the answer it counts (Anthropic's ``message_start``: ``output_tokens`` 1, the
        final count due in ``message_delta``), the stream then cut, counts no fewer output tokens
        than the answer it streamed (estimated): the server wrote them, and bills them."""
        if not self.said:
            return self.usage
        said = max(1, (self.said + 3) // 4)
        if self.usage is not None:
            if self.usage.completion_tokens >= said:
                return self.usage
            return replace(self.usage, completion_tokens=said, extra={**self.usage.extra, "estimated": True})
        from tether.models._estimate import chars_estimator

        prompt = chars_estimator(self.body.decode("utf-8", "replace"))
        return Usage(prompt, said, extra={"estimated": True})


_ATTEMPT: ContextVar[_Tally | None] = ContextVar("tether_model_attempt", default=None)


def _so_far(spent: list[Usage], tally: _Tally | None) -> Usage:
    """What the failed attempts (``spent``) and the one under way (``tally``) were billed."""
    now = tally.billed() if tally is not None else None
    return sum((*spent, *([now] if now else [])), Usage())


class Unsettled:
    """What model calls were billed that no answer and no ``ModelError`` carried: a call
    cancelled from outside (the run's deadline passed mid-stream, its task cancelled) after its
    server reported usage, and the failed attempts or fallback models before it. A caller that
    counts budgets collects it around a call (``collecting``) and counts it when the call was
    cancelled; the models report into it (``unsettled``)."""

    __slots__ = ("cost_usd", "fallback_from", "retries", "usage")

    def __init__(self) -> None:
        self.usage = Usage()
        self.cost_usd = 0.0
        # What the cut call had already met, for the trace: the retries its attempts took (each
        # with its model) and the models of a chain that failed before it.
        self.retries: list[dict[str, Any]] = []
        self.fallback_from: list[dict[str, Any]] = []

    def event(self, by: str) -> dict[str, Any] | None:
        """The ``model_error`` event's fields for a call cut by ``by``: what it was billed, the
        retries it took and the models it left; None when it met none of them. Before, only
        what was billed was traced: a call that retried 429s until the deadline cut it left no
        trace of them, the run ending ``deadline`` as if the model had been slow."""
        billed = bool(self.usage.total_tokens or self.cost_usd)
        met = [f"{len(self.retries)} retries ({', '.join(dict.fromkeys(r['kind'] for r in self.retries))})"]
        met = met if self.retries else []
        met += [f"{len(self.fallback_from)} failed model(s)"] if self.fallback_from else []
        met += ["the provider billed it"] if billed else []
        if not met:
            return None
        said: dict[str, Any] = {"error": f"the model call was cut by {by} after {' and '.join(met)}"}
        if self.retries:
            said["retries"] = self.retries
        if self.fallback_from:
            said["fallback_from"] = self.fallback_from
        if billed:
            u = self.usage
            said.update(
                prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens, cost_usd=self.cost_usd
            )
        return said

    def collecting(self) -> _Collecting:
        """Collect what the calls made inside (in this task and the tasks it starts) leave
        unsettled (a context manager)."""
        return _Collecting(self)


class _Collecting:
    """``Unsettled.collecting``: a plain context manager, not a generator one (one a model call)."""

    __slots__ = ("_bill", "_held")

    def __init__(self, bill: Unsettled) -> None:
        self._bill = bill

    def __enter__(self) -> Unsettled:
        self._held = _UNSETTLED.set(self._bill)
        return self._bill

    def __exit__(self, *exc: object) -> None:
        _UNSETTLED.reset(self._held)


_UNSETTLED: ContextVar[Unsettled | None] = ContextVar("tether_model_unsettled", default=None)


def unsettled(
    usage: Usage,
    cost_usd: float,
    retries: Sequence[dict[str, Any]] = (),
    fallback_from: Sequence[dict[str, Any]] = (),
) -> None:
    """A call cancelled from outside was billed ``usage`` (costing ``cost_usd``), after taking
    ``retries`` and leaving the models ``fallback_from``: handed to the caller's ``Unsettled``;
    with none collecting, nothing."""
    sink = _UNSETTLED.get()
    if sink is None:
        return
    if usage.total_tokens or cost_usd:
        sink.usage, sink.cost_usd = sink.usage + usage, sink.cost_usd + cost_usd
    sink.retries.extend(retries)
    sink.fallback_from.extend(fallback_from)


def streamed(piece: object) -> None:
    """A reader read ``piece`` of the answer (text, reasoning, a call's name or arguments) from
    the stream of the attempt under way: counted, so an attempt cut before its server reported
    usage is still counted (``_Tally.billed``). Outside ``RetryingBackend.send``, nothing."""
    tally = _ATTEMPT.get()
    if tally is not None and isinstance(piece, str):
        tally.said += len(piece)


def billed(usage: Usage) -> None:
    """A reader read ``usage`` for the attempt under way (a running total: each count the
    larger of those reported so far): kept, so an attempt that then fails is still counted.
    Outside ``RetryingBackend.send``, nothing."""
    tally = _ATTEMPT.get()
    if tally is not None:
        tally.usage = larger_usage(tally.usage, usage)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Capped exponential backoff with jitter.

    Attempt ``n`` (0-based) waits ``min(max_delay_s, base_delay_s * 2**n)`` reduced by up to
    ``jitter`` (a fraction) at random, or the server's ``Retry-After`` when it sends one — unless
    that exceeds ``max_retry_after_s``, in which case the call fails rather than stall the run.
    """

    max_retries: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    jitter: float = 0.25
    max_retry_after_s: float = 60.0

    def delay(self, attempt: int, retry_after: float | None, rand: float) -> float:
        if retry_after is not None:
            return retry_after
        backoff = min(self.max_delay_s, self.base_delay_s * (2.0**attempt))
        return backoff * (1.0 - self.jitter * rand)


class Retryable(Exception):
    """One attempt failed in a way another attempt may not: ``kind`` names it for the trace."""

    def __init__(self, kind: str, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.retry_after = retry_after


class RetryingBackend(ABC):
    """What every HTTP backend's ``complete`` does with its encoded request, in one place:
    ``send`` runs ``_attempt`` under the policy, counts each attempt in ``calls``,
    lists every retry in ``retries`` and on the response (``meta["retries"]``)."""

    model: str
    timeout_s: float
    retry: RetryPolicy
    rate_limit: TokenBucket | None
    price: Price | None
    calls: int
    retries: list[dict[str, Any]]
    _sleep: Callable[[float], Awaitable[None]]
    _rand: Callable[[], float]

    def _scrub(self, text: str) -> str:
        return text

    @abstractmethod
    async def _attempt(self, body: bytes) -> ModelResponse:
        """One try: post ``body`` and read the answer (a backend's own protocol)."""

    async def send(
        self, body: bytes, settle: Callable[[ModelResponse], ModelResponse] | None = None
    ) -> ModelResponse:
        """Run ``_attempt(body)`` until it returns, each try bounded whole by ``timeout_s``.
        Raises ``ModelError`` once retries are spent or the error is final (its text passed
        through ``_scrub``, so no key leaks; the failed attempts' billed usage with it).
        ``settle``: applied to the answer of the attempt that succeeded, before the failed
        attempts' billed usage is added to it (the estimate of counts its server left out)."""
        taken: list[dict[str, Any]] = []
        spent: list[Usage] = []  # what each failed attempt was billed, as its server reported it
        retry = self.retry
        tally: _Tally | None = None  # the attempt under way (None once its usage is in ``spent``)
        try:
            while True:
                if self.rate_limit is not None:
                    await self.rate_limit.acquire()
                self.calls += 1
                tally = _Tally(body)
                held = _ATTEMPT.set(tally)
                try:
                    # ``anyio.fail_after`` as one cancel scope, without its two generator
                    # context managers (one attempt a model call): the same TimeoutError.
                    deadline = cancel_after(self.timeout_s)
                    with deadline:
                        response = await self._attempt(body)
                    if not (deadline.cancelled_caught and anyio.current_time() >= deadline.deadline):
                        break
                    raise TimeoutError
                except TimeoutError:
                    err = Retryable("timeout", f"the call did not complete within {self.timeout_s:g}s")
                except Retryable as caught:
                    err = caught
                except ModelError as final:
                    self._discard(tally, "the call failed")
                    raise self._failed(self._scrub(str(final)), spent, tally, taken) from None
                finally:
                    _ATTEMPT.reset(held)
                said = f"{self.model}: {err.kind}: {self._scrub(str(err))}"
                too_long = err.retry_after is not None and err.retry_after > retry.max_retry_after_s
                if len(taken) >= retry.max_retries or too_long:
                    why = "Retry-After too long" if too_long else f"gave up after {len(taken) + 1} attempts"
                    self._discard(tally, f"{err.kind}: the call failed")
                    raise self._failed(f"{said} ({why})", spent, tally, taken) from None
                delay = retry.delay(len(taken), err.retry_after, self._rand())
                if (left := anyio.current_effective_deadline() - anyio.current_time()) <= delay:
                    # Sleeping would only end the run at its deadline, the cause unsaid.
                    wait = "Retry-After" if err.retry_after is not None else "backoff"
                    why = f"{wait} of {delay:g}s would pass the deadline, {max(left, 0):.3g}s away"
                    self._discard(tally, f"{err.kind}: the call failed")
                    raise self._failed(f"{said} ({why})", spent, tally, taken) from None
                self._discard(tally, f"{err.kind}: asked again")
                if (now := tally.billed()) is not None:
                    spent.append(now)
                tally = None
                taken.append({"kind": err.kind, "attempt": len(taken) + 1, "delay_s": round(delay, 3)})
                await self._sleep(delay)
        except anyio.get_cancelled_exc_class():  # cut from outside: no answer, no ModelError
            cut = _so_far(spent, tally)
            unsettled(cut, self._spent_cost(cut), [{**r, "model": self.model} for r in taken])
            raise
        finally:
            self.retries.extend(taken)
        if taken:
            response.meta["retries"] = taken
        if settle is not None:
            response = settle(response)
        return self._with_spent(response, spent)

    def _discard(self, tally: _Tally, why: str) -> None:
        """An attempt that streamed pieces of its answer to ``on_delta`` (shown as they came)
        failed: ``on_delta("discard", why)`` says they are no answer, so a reader that shows them
        can say so before the next attempt's (or the next model's) pieces come. Before, nothing
        did: a stream cut after ``Order`` and answered again showed ``Order Order 742 is open``,
        the lost attempt's words read as the answer's."""
        on_delta = getattr(self, "on_delta", None)
        if tally.said and on_delta is not None:
            on_delta("discard", why)

    def _spent_cost(self, usage: Usage) -> float:
        return self.price.cost(usage) if self.price is not None else 0.0

    def _failed(
        self, message: str, spent: list[Usage], tally: _Tally | None, taken: list[dict[str, Any]]
    ) -> ModelError:
        """The ``ModelError`` that ends the call, with what every failed attempt was billed and
        the retries taken before it (``retries``: their kinds and waits, for the trace)."""
        usage = _so_far(spent, tally)
        if not usage.total_tokens:
            return ModelError(message, retries=taken)
        return ModelError(message, usage=usage, cost_usd=self._spent_cost(usage), retries=taken)

    def _with_spent(self, response: ModelResponse, spent: list[Usage]) -> ModelResponse:
        """The answer with what the failed attempts before it were billed added to its usage and
        cost (``meta["failed_attempts_billed"]``: how much); as it is when they reported none."""
        if not spent:  # the usual case: the first attempt answered
            return response
        failed = sum(spent, Usage())
        if not failed.total_tokens:
            return response
        own = response.usage
        usage = Usage(
            own.prompt_tokens + failed.prompt_tokens,
            own.completion_tokens + failed.completion_tokens,
            own.cached_tokens + failed.cached_tokens,
            dict(own.extra),
        )
        cost = self._spent_cost(failed)
        said = {
            "prompt_tokens": failed.prompt_tokens,
            "completion_tokens": failed.completion_tokens,
            "cost_usd": cost,
        }
        if any(u.extra.get("estimated") for u in spent):
            said["estimated"] = True  # an attempt cut before its server reported usage
        meta = {**response.meta, "failed_attempts_billed": said}
        return replace(response, usage=usage, cost_usd=response.cost_usd + cost, meta=meta)
