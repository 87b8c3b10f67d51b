"""Stop reasons, limits and the detectors that end a run from outside the model."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass

import anyio

from tether.core.types import StopReason

__all__ = ["Limits", "RepetitionDetector", "StopReason", "call_signature", "cancel_after"]


def cancel_after(seconds: float) -> anyio.CancelScope:
    """A cancel scope whose body is cancelled after ``seconds``; ``cancelled_caught`` says
    whether it was. ``anyio.fail_after`` in one cancel scope, without its two generator
    context managers (a step takes several of these)."""
    try:
        now = asyncio.get_running_loop().time()  # ``anyio.current_time()`` on asyncio, read directly
    except RuntimeError:  # another event loop (trio)
        now = anyio.current_time()
    return anyio.CancelScope(deadline=now + seconds)


@dataclass(frozen=True, slots=True)
class Limits:
    """External stop conditions. ``llm_calls`` is the per-invocation budget; ``llm_calls_hard``
    is the safety net above it (the graceful final turn may use the gap, nothing else may).

    When a budget trips (LLM calls, ``max_tokens``, ``max_cost_usd``, ``max_steps``) the run gets
    one last model turn with tools disabled, its output capped at ``final_turn_max_tokens`` —
    if ``final_turn_on_budget`` and that turn is affordable: under ``llm_calls_hard``, under the
    optional hard ceilings ``max_tokens_hard`` / ``max_cost_usd_hard``, and before the deadline.
    Otherwise the host answers from what was observed. Token and cost figures are cumulative
    over the run's model calls (prompt + completion, as billed: attempts that failed and were
    retried, and models a fallback chain left, count too).

    ``max_calls_per_turn`` bounds the tool calls one model turn may ask for: a turn over it
    (a server that answers with hundreds of parallel calls) ends the run ``model_error``, none
    of its calls run."""

    max_steps: int = 12
    llm_calls: int = 16
    llm_calls_hard: int = 20
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    deadline_s: float | None = 120.0
    repeat_limit: int = 3
    max_identical_calls: int = 3
    max_malformed_turns: int = 3
    max_calls_per_turn: int = 32
    max_unavailable: int = 2
    final_turn_on_budget: bool = True
    final_turn_max_tokens: int | None = 1024
    max_tokens_hard: int | None = None
    max_cost_usd_hard: float | None = None

    def __post_init__(self) -> None:
        if self.llm_calls_hard < self.llm_calls:
            raise ValueError("llm_calls_hard must be >= llm_calls")
        counts = (self.max_steps, self.llm_calls, self.repeat_limit, self.max_identical_calls)
        if min(*counts, self.max_calls_per_turn) < 1:
            raise ValueError("limits must be positive")
        for soft, hard, name in (
            (self.max_tokens, self.max_tokens_hard, "max_tokens"),
            (self.max_cost_usd, self.max_cost_usd_hard, "max_cost_usd"),
        ):
            if soft is not None and hard is not None and hard < soft:
                raise ValueError(f"{name}_hard must be >= {name}")


_SIGNATURE_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)  # built once


def call_signature(name: str, arguments: dict[str, object]) -> str:
    """One call as the repetition detector counts it: a number is its value, whatever its JSON
    spelling (``5`` and ``5.0`` are one amount to the tool, so one call here)."""
    return name + _SIGNATURE_JSON.encode(_as_numbers(arguments))


def _as_numbers(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _as_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_numbers(v) for v in value]
    return value


class RepetitionDetector:
    """Detects the same turn repeated, a short cycle of turns (A,B,A,B,…), or one identical call
    made too often across the run, whatever the model claims about progress."""

    def __init__(self, repeat_limit: int = 3, max_identical_calls: int = 3, max_period: int = 3) -> None:
        self.repeat_limit = repeat_limit
        self.max_identical_calls = max_identical_calls
        self.max_period = max_period
        self.turns: list[tuple[str, ...]] = []
        self.calls: Counter[str] = Counter()

    def count(self, signatures: list[str]) -> None:
        """Count calls made outside this run's own turns (by the run that started it, by its child
        runs) toward ``max_identical_calls``: the bound is the invocation's, not one loop's."""
        self.calls.update(signatures)

    def before(self, signatures: list[str]) -> str | None:
        """Whether a turn's calls, before any runs, would make one identical call more often than
        ``max_identical_calls`` (with the run's earlier ones): a turn of many copies of one call
        (parallel refunds) is refused whole, not stopped after all of them ran."""
        turn = Counter(signatures)
        for sig, n in turn.items():
            if self.calls[sig] + n > self.max_identical_calls:
                return f"identical call asked {self.calls[sig] + n} times: {sig[:200]}"
        return None

    def observe(self, signatures: list[str]) -> str | None:
        """Record one turn's calls; returns a description when a repetition is detected."""
        turn = tuple(sorted(signatures))
        self.turns.append(turn)
        for sig in signatures:
            self.calls[sig] += 1
            if self.calls[sig] > self.max_identical_calls:
                return f"identical call made {self.calls[sig]} times: {sig[:200]}"
        turns = self.turns
        for period in range(1, self.max_period + 1):
            need = period * self.repeat_limit
            if len(turns) < need or (need > period and turns[-1] != turns[-1 - period]):
                continue  # too few turns, or this turn does not repeat the one a period back
            tail = turns[-need:]
            block = tail[:period]
            if len(set(block)) != period and period > 1:
                continue  # a "cycle" of one repeated turn is period 1's business
            if all(tail[i] == block[i % period] for i in range(need)):
                return f"cycle of {period} turn(s) repeated {self.repeat_limit} times"
        return None
