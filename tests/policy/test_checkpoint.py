"""Checkpoints of a paused run: the working state round-trips exactly through JSON."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from tether.context._untrusted import Observation
from tether.core.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, Usage, UserMessage
from tether.errors import ApprovalError
from tether.policy import Permissions, TrustedContext
from tether.runs._checkpoint import pending_calls, state_from_json, state_to_json
from tether.runs._values import CallRecord, RunState

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_run_state_round_trips_through_a_checkpoint() -> None:
    ctx = TrustedContext(
        "org-alpha", frozenset({"sales"}), "ana", Permissions(frozenset({"r"}), frozenset({"w"}))
    )
    s = RunState("run-1", "Note it.", ctx, time.monotonic(), T0)
    c1, c2 = ToolCall("c1", "read", '{"id": "1"}'), ToolCall("c2", "write", '{"note": "Olá \\u2028"}')
    s.trajectory = [
        SystemMessage("sys"),
        UserMessage("Note it."),
        UserMessage("<agent_status>x</agent_status>", "harness"),
        AssistantMessage(None, (c1,)),
        ToolMessage("c1", "<untrusted_data>…</untrusted_data>", "read"),
        AssistantMessage("thinking", (c2,), "why"),
    ]
    s.observations = [
        Observation("c1", "read", "local", T0, "text", {"a": [1, 2]}, False, None, meta={"k": 1})
    ]
    s.calls = [CallRecord("c1", "read", {"id": "1"}, "ok")]
    s.evidence = {"erp:order/1"}
    s.steps, s.llm_calls, s.cost_usd, s.malformed_turns = 1, 2, 0.5, 0
    s.usage = Usage(10, 5, 2)
    s.unavailable = {"erp": 1}
    back = state_from_json(state_to_json(s))
    assert back.trajectory == s.trajectory
    assert back.observations == s.observations and back.calls == s.calls
    assert (back.run_id, back.objective, back.context, back.started_at) == ("run-1", "Note it.", ctx, T0)
    assert (back.evidence, back.steps, back.llm_calls, back.cost_usd) == ({"erp:order/1"}, 1, 2, 0.5)
    assert (back.usage.prompt_tokens, back.usage.completion_tokens, back.usage.cached_tokens) == (10, 5, 2)
    assert back.unavailable == {"erp": 1}
    assert pending_calls(back) == [c2]  # the turn the run paused in: c2 has no result yet


def test_a_checkpoint_of_another_version_is_refused() -> None:
    s = RunState("run-1", "x", TrustedContext("t"), time.monotonic(), T0)
    doc = json.loads(state_to_json(s))
    assert doc["version"] == 2
    doc["version"] = 99
    with pytest.raises(ApprovalError) as info:
        state_from_json(json.dumps(doc))
    assert info.value.reason == "bad_checkpoint"
