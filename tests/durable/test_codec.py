"""A recorded tool turn replays as the turn that ran, settled: its questions and its pause."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from tether.chokepoint._calls import Turn
from tether.core.messages import AssistantMessage, Usage
from tether.core.types import Decision, Effect, GateOutcome, Observation, ToolCall, ToolSpec
from tether.durable._codec import decode_response, decode_turn, encode_response, encode_turn
from tether.models._base import ModelResponse
from tether.policy._trusted import TrustedContext
from tether.runs._values import RunState

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


def test_a_recorded_model_response_keeps_what_the_provider_needs_back() -> None:
    # Every durable model step returns the decoded record (live or replayed): a thinking block's
    # signature or a reasoning item's encrypted content lost here is missing from the next turn,
    # which the Anthropic and Responses APIs refuse for a reasoning model using tools.
    thinking = {"provider": "anthropic", "type": "thinking", "thinking": "check 742", "signature": "c2ln"}
    reasoning = {
        "provider": "openai-responses",
        "type": "reasoning",
        "id": "rs_1",
        "encrypted_content": "gAAA",
    }
    response = ModelResponse(
        message=AssistantMessage(
            None,
            (ToolCall("c1", "lookup", '{"key": "k1"}'),),
            "check 742",
            provider_items=(thinking, reasoning),
        ),
        usage=Usage(120, 30, 100, {"cache_write_tokens": 20, "reasoning_tokens": 12}),
        model="m",
        cost_usd=0.25,
        meta={"finish": "tool_calls", "provider": "anthropic"},
    )
    replayed = decode_response(json.loads(json.dumps(encode_response(response))))  # as DBOS stores it
    assert replayed == response
    assert replayed.message.provider_items == (thinking, reasoning)
    assert replayed.usage.extra == {"cache_write_tokens": 20, "reasoning_tokens": 12}
    # a record written before these were kept still decodes, without them
    old = encode_response(response)
    del old["provider_items"], old["usage_extra"]
    assert decode_response(old).message.provider_items == () and decode_response(old).usage.extra == {}


def test_a_provider_item_with_no_json_form_is_refused_not_dropped() -> None:
    message = AssistantMessage("done", provider_items=({"provider": "anthropic", "raw": object()},))
    with pytest.raises(TypeError):
        encode_response(ModelResponse(message=message))
