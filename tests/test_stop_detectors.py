"""The repetition detector against its definition, and the gate's outcome copy."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.core.stop import RepetitionDetector
from tether.core.types import Decision, GateOutcome, ToolCall, ToolSpec
from tether.tools._contract import Effect


def _cycle(turns: list[tuple[str, ...]], repeat_limit: int, max_period: int) -> str | None:
    """The definition: the last period * repeat_limit turns are one block of ``period`` turns
    repeated (a block of one turn repeated counts for period 1 only)."""
    for period in range(1, max_period + 1):
        need = period * repeat_limit
        if len(turns) < need:
            continue
        tail = turns[-need:]
        block = tail[:period]
        if period > 1 and len(set(block)) != period:
            continue
        if all(tail[i] == block[i % period] for i in range(need)):
            return f"cycle of {period} turn(s) repeated {repeat_limit} times"
    return None


@settings(max_examples=300, deadline=None)
@given(
    turns=st.lists(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=2), max_size=14),
    repeat_limit=st.integers(1, 4),
)
def test_the_repetition_detector_finds_exactly_the_cycles_its_definition_names(
    turns: list[list[str]], repeat_limit: int
) -> None:
    detector = RepetitionDetector(repeat_limit=repeat_limit, max_identical_calls=10**6)
    seen: list[tuple[str, ...]] = []
    for signatures in turns:
        seen.append(tuple(sorted(signatures)))
        assert detector.observe(signatures) == _cycle(seen, repeat_limit, detector.max_period)


def test_a_two_turn_cycle_is_caught_and_a_varied_run_is_not() -> None:
    detector = RepetitionDetector(repeat_limit=3, max_identical_calls=100)
    found = [detector.observe([s]) for s in ["a", "b", "a", "b", "a", "b"]]
    assert found[:-1] == [None] * 5 and found[-1] == "cycle of 2 turn(s) repeated 3 times"
    varied = RepetitionDetector(repeat_limit=3, max_identical_calls=100)
    assert all(varied.observe([s]) is None for s in ["a", "b", "c", "a", "c", "b", "a", "b", "c"])


def test_a_decided_outcome_keeps_every_other_field() -> None:
    spec = ToolSpec(name="t", description="d", parameters={}, effect=Effect.READ, source="local")
    outcome = GateOutcome(
        ToolCall("c1", "t", "{}"), "allow", spec, {"k": 1}, None, "an error", "p-1", "duplicate_key"
    )
    decision = Decision("deny", "allowlist", "tool_not_allowed", {"tool": "t"})
    assert outcome.decided("deny", decision) == dataclasses.replace(outcome, status="deny", decision=decision)
