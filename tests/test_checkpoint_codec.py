"""The checkpoint codec: every field of ``RunState`` survives a checkpoint, by schema.

The generator is keyed by the field names of ``RunState`` itself, so a field added to the run
state later fails ``test_the_generator_covers_every_run_state_field`` until it is generated
here, and then the round trip proves the checkpoint carries it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tether.context._untrusted import Observation
from tether.core.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, Usage, UserMessage
from tether.errors import ApprovalError
from tether.memory import MemoryRecord, Source
from tether.policy import Permissions, TrustedContext
from tether.runs._checkpoint import CheckpointError, state_from_json, state_to_json
from tether.runs._values import CallRecord, RunState

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FIELDS = {f.name for f in dataclasses.fields(RunState)}

# Text that can be stored (a lone surrogate cannot: see the refusal test below).
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
names = st.frozensets(text, max_size=3)
aware = st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]))
when = aware | st.datetimes()  # naive datetimes round-trip naive
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(text, json_values, max_size=3)

tool_calls = st.builds(ToolCall, text, text, text)
messages = st.one_of(
    st.builds(SystemMessage, text),
    st.builds(UserMessage, text, st.sampled_from(["user", "harness"])),
    st.builds(AssistantMessage, st.none() | text, st.tuples(tool_calls) | st.just(()), st.none() | text),
    st.builds(ToolMessage, text, text, text),
)
observations = st.builds(
    Observation,
    call_id=text,
    tool=text,
    source=text,
    observed_at=when,
    text=text,
    data=json_values,
    is_error=st.booleans(),
    error_kind=st.none() | text,
    trust=st.sampled_from(["untrusted", "trusted"]),
    meta=json_objects,
)
memory_records = st.builds(
    MemoryRecord,
    id=st.none() | text,
    kind=st.sampled_from(["working", "episodic", "semantic", "procedural"]),
    subject=text,
    claim=text,
    source=st.none()
    | st.builds(Source, system=text.filter(bool), record=text.filter(bool), observed_at=aware),
    scope=text,
    confidence=st.sampled_from(["authoritative", "inferred", "user_stated"]),
    valid_until=aware,
    acl=names,
    retention=text,
    supersedes=st.none() | text,
    purpose=text,
    sensitivity=st.sampled_from(["public", "internal", "confidential", "secret"]),
)
counts = st.integers(min_value=0, max_value=2**40)

# One strategy per RunState field, by name.
FIELD_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "run_id": text,
    "objective": text,
    "context": st.builds(
        TrustedContext,
        tenant=text.filter(str.strip),
        roles=names,
        user=st.none() | text,
        permissions=st.builds(Permissions, names, names),
    ),
    "started": st.floats(allow_nan=False, allow_infinity=False),
    "started_at": when,
    "trajectory": st.lists(messages, max_size=6),
    "observations": st.lists(observations, max_size=3),
    "calls": st.lists(st.builds(CallRecord, text, text, json_values, text, text), max_size=3),
    "evidence": st.sets(text, max_size=3),
    "memory": st.lists(memory_records, max_size=2),
    "steps": counts,
    "llm_calls": counts,
    "usage": st.builds(Usage, counts, counts, counts, json_objects),
    "cost_usd": st.floats(allow_nan=False, allow_infinity=False),
    "malformed_turns": counts,
    "unavailable": st.dictionaries(text, counts, max_size=3),
    "outputs": json_objects,
    "pending": st.lists(text, max_size=3),
    "request": st.none() | text,
    "inherited_observations": st.lists(observations, max_size=2),
    "inherited_calls": st.lists(st.builds(CallRecord, text, text, json_values, text, text), max_size=2),
    "parent_run": st.none() | text,
    "handed_down": st.lists(st.integers(min_value=0, max_value=10**6), max_size=2),
}


def test_the_generator_covers_every_run_state_field() -> None:
    # A field added to RunState must be generated here, or this fails: it cannot drop out of a
    # resume without a test noticing.
    assert set(FIELD_STRATEGIES) == FIELDS


@settings(max_examples=150, deadline=None)
@given(st.fixed_dictionaries(FIELD_STRATEGIES))
def test_every_field_of_the_run_state_survives_a_checkpoint(fields: dict[str, Any]) -> None:
    state = RunState(**fields)
    before = time.monotonic()
    back = state_from_json(state_to_json(state))
    for name in FIELDS - {"started"}:
        assert getattr(back, name) == getattr(state, name), name
    # The deadline clock is per process: it restarts on resume.
    assert back.started >= before
    # Exact types where equality would not tell: roles stay a frozenset, tool calls a tuple.
    assert isinstance(back.context.roles, frozenset) and isinstance(back.evidence, set)
    assert all(isinstance(m.tool_calls, tuple) for m in back.trajectory if isinstance(m, AssistantMessage))


def _state(**changes: Any) -> RunState:
    s = RunState("run-1", "Note it.", TrustedContext("org-alpha"), time.monotonic(), T0)
    for name, value in changes.items():
        setattr(s, name, value)
    return s


def test_a_harness_message_stays_a_harness_message_after_a_resume() -> None:
    s = _state(trajectory=[UserMessage("Note it."), UserMessage("<agent_status>x</agent_status>", "harness")])
    back = state_from_json(state_to_json(s))
    assert [m.origin for m in back.trajectory if isinstance(m, UserMessage)] == ["user", "harness"]


class Plan(BaseModel):
    order: str
    lines: list[int]


@dataclasses.dataclass
class Point:
    x: int


def test_values_without_a_json_type_come_back_in_their_json_form() -> None:
    s = _state(
        outputs={
            "plan": Plan(order="742", lines=[1, 2]),
            "point": Point(3),
            "day": date(2026, 11, 29),
            "pair": (1, "a"),
            "tags": {"x"},
            "by_number": {1: "one"},
            "reading": math.inf,
        },
        usage=Usage(1, 2, 3, {"nan": math.nan}),
    )
    back = state_from_json(state_to_json(s))
    assert back.outputs == {
        "plan": {"order": "742", "lines": [1, 2]},
        "point": {"x": 3},
        "day": "2026-11-29",
        "pair": [1, "a"],
        "tags": ["x"],
        "by_number": {"1": "one"},
        "reading": math.inf,
    }
    assert math.isnan(back.usage.extra["nan"])


def test_a_value_without_a_json_form_is_refused_by_name_and_the_rest_still_checkpoints() -> None:
    s = _state(outputs={"plan": {"ok": 1, "handle": object()}})
    with pytest.raises(CheckpointError) as info:
        state_to_json(s)
    assert info.value.reason == "unserializable_state"
    assert "state.outputs['plan']['handle']" in str(info.value)
    s.outputs["plan"].pop("handle")
    assert state_from_json(state_to_json(s)).outputs == {"plan": {"ok": 1}}


def test_a_lone_surrogate_is_refused_by_name() -> None:
    s = _state(trajectory=[UserMessage("ok"), ToolMessage("c1", "bad \ud800 text", "read")])
    with pytest.raises(CheckpointError) as info:
        state_to_json(s)
    assert info.value.reason == "unserializable_state" and "state.trajectory[1].content" in str(info.value)


# What the version 1 writer produced (field by field, before the schema).
V1 = {
    "calls": [{"arguments": {"id": "1"}, "call_id": "c1", "reason": "", "status": "ok", "tool": "read"}],
    "context": {
        "permissions": {"read": ["r"], "write": ["w"]},
        "roles": ["sales"],
        "tenant": "org-alpha",
        "user": "ana",
    },
    "cost_usd": 0.5,
    "evidence": ["erp:order/1"],
    "llm_calls": 2,
    "malformed_turns": 0,
    "memory": [
        {
            "acl": ["sales"],
            "claim": "c",
            "confidence": "authoritative",
            "id": None,
            "kind": "semantic",
            "purpose": "p",
            "retention": "30d",
            "scope": "tenant:org-alpha",
            "sensitivity": "internal",
            "source": {"observed_at": "2026-11-29T12:00:00Z", "record": "1", "system": "erp"},
            "subject": "order:1",
            "supersedes": None,
            "valid_until": "2026-11-29T12:00:00Z",
        }
    ],
    "objective": "Note it.",
    "observations": [
        {
            "call_id": "c1",
            "data": {"a": [1, 2]},
            "error_kind": None,
            "is_error": False,
            "meta": {"k": 1},
            "observed_at": "2026-11-29T12:00:00+00:00",
            "source": "local",
            "text": "text",
            "tool": "read",
            "trust": "untrusted",
        }
    ],
    "outputs": {"step": {"x": 1}},
    "run_id": "run-1",
    "started_at": "2026-11-29T12:00:00+00:00",
    "steps": 1,
    "trajectory": [
        {"content": "sys", "kind": "system"},
        {"content": "Note it.", "kind": "user", "origin": "user"},
        {"content": "<agent_status>x</agent_status>", "kind": "user", "origin": "harness"},
        {
            "content": None,
            "kind": "assistant",
            "reasoning": "why",
            "tool_calls": [{"arguments": '{"id": "1"}', "id": "c1", "name": "read"}],
        },
        {"content": "result", "kind": "tool", "name": "read", "tool_call_id": "c1"},
    ],
    "unavailable": {"erp": 1},
    "usage": {"cached_tokens": 2, "completion_tokens": 5, "prompt_tokens": 10},
    "version": 1,
}


def test_a_version_1_checkpoint_is_still_read() -> None:
    s = state_from_json(json.dumps(V1))
    ctx = TrustedContext(
        "org-alpha", frozenset({"sales"}), "ana", Permissions(frozenset({"r"}), frozenset({"w"}))
    )
    assert (s.run_id, s.objective, s.context, s.started_at) == ("run-1", "Note it.", ctx, T0)
    assert s.trajectory == [
        SystemMessage("sys"),
        UserMessage("Note it."),
        UserMessage("<agent_status>x</agent_status>", "harness"),
        AssistantMessage(None, (ToolCall("c1", "read", '{"id": "1"}'),), "why"),
        ToolMessage("c1", "result", "read"),
    ]
    assert s.observations == [Observation("c1", "read", "local", T0, "text", {"a": [1, 2]}, meta={"k": 1})]
    assert s.calls == [CallRecord("c1", "read", {"id": "1"}, "ok")]
    assert s.memory[0].source == Source(system="erp", record="1", observed_at=T0)
    assert (s.steps, s.llm_calls, s.cost_usd, s.usage, s.unavailable) == (
        1,
        2,
        0.5,
        Usage(10, 5, 2),
        {"erp": 1},
    )
    assert s.outputs == {"step": {"x": 1}} and s.evidence == {"erp:order/1"}
    # Saved again, it is a version 2 checkpoint that reads back the same.
    again = json.loads(state_to_json(s))
    assert again["version"] == 2 and state_from_json(json.dumps(again)).trajectory == s.trajectory


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: d.update(steps="3"), "steps"),  # no coercion of a wrong type
        (lambda d: d.update(surprise=1), "surprise"),  # no field the schema does not know
        (lambda d: d["trajectory"].append({"kind": "robot", "content": "x"}), "trajectory"),
        (lambda d: d["context"].update(tenant=7), "tenant"),
        (lambda d: d.update(version=99), "version 99"),
    ],
)
def test_a_checkpoint_that_does_not_fit_the_schema_is_refused(change: Any, why: str) -> None:
    doc = json.loads(state_to_json(_state(trajectory=[UserMessage("x")])))
    change(doc)
    with pytest.raises(ApprovalError) as info:
        state_from_json(json.dumps(doc))
    assert info.value.reason == "bad_checkpoint" and why in str(info.value)


def test_text_that_is_not_json_is_refused() -> None:
    with pytest.raises(CheckpointError) as info:
        state_from_json("{not json")
    assert info.value.reason == "bad_checkpoint"


# The run state's fields as the release before ``request`` (b70d6f4) knew them: its reader
# refuses any other field, so a checkpoint that does not use a later field must not hold it.
EARLIER_RELEASE_FIELDS = {
    "calls", "context", "cost_usd", "evidence", "llm_calls", "malformed_turns", "memory", "objective",
    "observations", "outputs", "pending", "run_id", "started", "started_at", "steps", "trajectory",
    "unavailable", "usage",
}  # fmt: skip


def test_a_checkpoint_that_uses_no_later_field_is_one_the_earlier_release_reads() -> None:
    plain = RunState("r", "Pay the rent.", TrustedContext("t"), started=0.0, started_at=T0)
    written = json.loads(state_to_json(plain))
    assert set(written) - {"version"} == EARLIER_RELEASE_FIELDS
    assert state_from_json(json.dumps(written)).request is None
    # A child run that carries its user's request writes it, and reads it back.
    child = RunState("c", "a task", TrustedContext("t"), started=0.0, started_at=T0, request="Pay the rent.")
    written = json.loads(state_to_json(child))
    assert (
        written["request"] == "Pay the rent."
        and state_from_json(json.dumps(written)).request == "Pay the rent."
    )
