"""A recorded tool turn replays as the turn that ran, settled: its questions and its pause."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from tether.calls import Turn
from tether.durable.codec import decode_turn, encode_turn
from tether.policy.trusted import TrustedContext
from tether.run import RunState
from tether.types import Decision, Effect, GateOutcome, Observation, ToolCall, ToolSpec

SPEC = ToolSpec(name="h__ask", description="", parameters={}, effect=Effect.READ, source="h")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _turn() -> tuple[Turn, RunState]:
    calls = [ToolCall("c1", "h__ask", "{}"), ToolCall("c2", "h__ask", "{}")]
    allow = Decision("allow", "allowlist", "allowed")
    turn = Turn([GateOutcome(c, "allow", spec=SPEC, arguments={}, decision=allow) for c in calls])
    turn.observations = {
        "c1": Observation("c1", "h__ask", "h", NOW, "plain", meta={}),
        "c2": Observation("c2", "h__ask", "h", NOW, "waiting", is_error=True, meta={"pause": "elic-1"}),
    }
    turn.questions = {"c2": "h__ask: paused for input: elic-1"}
    turn.checkpointed = True
    state = RunState("r1", "o", TrustedContext(tenant="t"), time.monotonic(), NOW)
    return turn, state


def test_a_recorded_turn_that_paused_for_a_question_replays_paused() -> None:
    turn, state = _turn()
    data = json.loads(json.dumps(encode_turn(turn, state, 0, 0)))  # as DBOS stores it
    replayed = decode_turn(data, lambda name: SPEC, [o.call for o in turn.outcomes])
    assert replayed.questions == turn.questions and replayed.checkpointed
    assert replayed.stop() == turn.stop() and replayed.stop() is not None
    assert [m.tool_call_id for m in replayed.messages()] == ["c1"]  # the question's call has no result
    assert [m.content for m in replayed.messages()] == [m.content for m in turn.messages()]


def test_a_turn_recorded_before_turns_were_settled_replays_its_question_as_a_pause() -> None:
    turn, state = _turn()
    data = json.loads(json.dumps(encode_turn(turn, state, 0, 0)))
    del data["questions"], data["checkpointed"]  # what the code before the run scope recorded
    replayed = decode_turn(data, lambda name: SPEC, [o.call for o in turn.outcomes])
    assert replayed.questions == turn.questions and replayed.checkpointed
    plain = Turn(turn.outcomes, observations={"c1": turn.observations["c1"]})
    old = json.loads(json.dumps(encode_turn(plain, state, 0, 0)))
    del old["questions"], old["checkpointed"]
    assert decode_turn(old, lambda name: SPEC, []).stop() is None  # no question: nothing to pause
