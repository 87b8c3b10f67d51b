"""Pins for perf round 51's per-step cuts. Each cut skips work only where its result was known
not to change anything, so each test checks both: the skipped work is not done on the common
path (a spy that fails if it runs, or Python bytecodes that do not grow with the input), and
the uncommon path still gets it (a NaN, a control character, a learned secret; a repeated call
id; a 50 KB tool name; a rate limit)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether import Host
from tether.chokepoint import _authority
from tether.core.messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from tether.core.ratelimit import TokenBucket
from tether.core.types import Effect, ToolSpec
from tether.models import _base
from tether.models._base import ModelRequest, ModelResponse, shown_call_names, unique_call_ids
from tether.trace._events import EventKind
from tether.trace._payloads import FIELDS
from tether.trace._sanitize import REDACTED, Redactor
from tether.trace._tracer import MemorySink, Tracer


def _opcodes(run: Callable[[], object]) -> int:
    """The Python bytecodes ``run`` executes (deterministic: no clock involved)."""
    count = [0]

    def each(frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            count[0] += 1
        return each

    def calls(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return each

    sys.settrace(calls)
    try:
        run()
    finally:
        sys.settrace(None)
    return count[0]


# -- the tracer: an event of plain scalars is kept as it is ----------------------------------

OBSERVATION = sorted(FIELDS[EventKind.TOOL_OBSERVATION])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["plain", '{"password": "hunter2"}', '{"pass": 1}', "word", '{"key": "k0"}', "[1]"]),
    st.sampled_from(["a\\b", "line\nbreak", "\x00", "hunter2", '[{"db": {"apiKey": "k"}}]']),
)
KEYS = st.one_of(
    st.text(max_size=8), st.sampled_from(["id", "name", "api_key", "apiKey", "pass", "a\nb", "x\\"])
)
FLAT = st.dictionaries(KEYS, SCALARS, max_size=3)
VALUES = st.one_of(
    SCALARS,
    st.lists(FLAT, max_size=3),  # a model answer's tool calls: [{"id": …, "name": …}]
    st.lists(st.one_of(SCALARS, FLAT, st.lists(SCALARS, max_size=2)), max_size=3),
    st.tuples(FLAT),
    FLAT,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from([*OBSERVATION, "api_key", "token"]), VALUES, max_size=8), st.booleans()
)
def test_an_event_holds_what_cleaning_field_by_field_gives(data: dict[str, Any], secret: bool) -> None:
    tracer = Tracer("run", [MemorySink()], strict=False)
    if secret:
        tracer.redactor.add("hunter2")
    declared = {k: v for k, v in data.items() if k in FIELDS[EventKind.TOOL_OBSERVATION]}
    expected = tracer._clean(dict(declared))  # the field-by-field way, every field looked at
    event = tracer.emit(EventKind.TOOL_OBSERVATION, **declared)
    assert _same(event.data, expected)


PRINTABLE = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=10)
PLAIN = st.one_of(st.integers(), st.booleans(), st.none(), st.floats(), PRINTABLE)
PLAIN_KEYS = st.one_of(PRINTABLE, st.sampled_from(["id", "name", "apiKey", "client_secret", "pass", "word"]))


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(OBSERVATION), st.lists(st.dictionaries(PLAIN_KEYS, PLAIN, max_size=3)))
)
def test_lists_of_mappings_of_plain_values_hold_what_cleaning_them_gives(data: dict[str, Any]) -> None:
    tracer = Tracer("run", [MemorySink()], strict=False)
    expected = tracer._clean(dict(data))
    assert _same(tracer.emit(EventKind.TOOL_OBSERVATION, **data).data, expected)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def test_an_event_of_plain_scalars_is_not_cleaned_field_by_field(monkeypatch: pytest.MonkeyPatch) -> None:
    tracer = Tracer("run", [MemorySink()], strict=False)

    def refused(data: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("cleaned field by field")

    monkeypatch.setattr(tracer, "_clean", refused)
    event = tracer.emit(
        EventKind.TOOL_OBSERVATION, call_id="c1", tool="lookup", chars=2048, truncated=False, is_error=False
    )
    assert event.data == {
        "call_id": "c1",
        "tool": "lookup",
        "chars": 2048,
        "truncated": False,
        "is_error": False,
    }
    # A model answer's tool calls: copied, so the event holds what was emitted whatever the
    # caller does with its list afterwards.
    calls = [{"id": "call_1", "name": "lookup"}]
    answer = tracer.emit(EventKind.MODEL_RESPONSE, model="m", text="", tool_calls=calls, cost_usd=0.0)
    calls[0]["name"] = "changed"
    assert answer.data["tool_calls"] == [{"id": "call_1", "name": "lookup"}]
    # A call's arguments as JSON text naming no credential: nothing under them to redact.
    proposed = tracer.emit(EventKind.TOOL_PROPOSED, call_id="c1", tool="lookup", arguments='{"key": "k0"}')
    assert proposed.data == {"call_id": "c1", "tool": "lookup", "arguments": '{"key": "k0"}'}


def test_what_needs_cleaning_is_still_cleaned() -> None:
    tracer = Tracer("run", [MemorySink()], strict=False)
    data = tracer.emit(EventKind.TOOL_OBSERVATION, tool="a\nb", chars=float("nan"), call_id="x\\u2028").data
    assert data == {"tool": "a\\x0ab", "chars": "NaN", "call_id": "x\\\\u2028"}
    tracer.redactor.add("hunter2")
    assert tracer.emit(EventKind.TOOL_OBSERVATION, tool="hunter2 here").data == {"tool": f"{REDACTED} here"}
    tracer = Tracer("run", [MemorySink()], strict=False)  # no secret known: keyed ones still go
    for text in ('{"password": "pw"}', '[{"db": {"apiKey": "pw"}}]'):
        arguments = tracer.emit(EventKind.TOOL_PROPOSED, call_id="c", tool="t", arguments=text).data
        assert "pw" not in arguments["arguments"] and REDACTED in arguments["arguments"]
    keyed = tracer.emit(EventKind.MODEL_RESPONSE, tool_calls=[{"id": "c", "apiKey": "k"}]).data
    assert keyed == {"tool_calls": [{"id": "c", "apiKey": REDACTED}]}
    tracer.redactor.add("hunter2")
    assert tracer.emit(EventKind.TOOL_OBSERVATION, chars=float("inf")).data == {"chars": "Infinity"}
    calls = [{"id": "c\n1", "name": "t"}, {"id": "c2", "apiKey": "k"}, {"id": "c3", "name": "hunter2"}]
    assert tracer.emit(EventKind.MODEL_RESPONSE, tool_calls=calls).data == {
        "tool_calls": [
            {"id": "c\\x0a1", "name": "t"},
            {"id": "c2", "apiKey": REDACTED},
            {"id": "c3", "name": REDACTED},
        ]
    }


class _IdsAreSecret(Redactor):
    def is_secret_key(self, key: str) -> bool:
        return key == "id" or super().is_secret_key(key)


def test_a_redactor_that_reads_keys_its_own_way_is_asked_about_each_key() -> None:
    tracer = Tracer("run", [MemorySink()], redactor=_IdsAreSecret(), strict=False)
    data = tracer.emit(EventKind.MODEL_RESPONSE, tool_calls=[{"id": "call_1", "name": "lookup"}]).data
    assert data == {"tool_calls": [{"id": REDACTED, "name": "lookup"}]}


# -- the backend: call ids and names --------------------------------------------------------


def _history(turns: int) -> tuple[Message, ...]:
    out: list[Message] = [UserMessage("go")]
    for i in range(turns):
        out.append(AssistantMessage("", (ToolCall(f"call_{i}", "lookup", "{}"),)))
        out.append(ToolMessage(f"call_{i}", "r"))
    return tuple(out)


def _answer(call_id: str, name: str = "lookup") -> ModelResponse:
    return ModelResponse(AssistantMessage("", (ToolCall(call_id, name, "{}"),)))


def test_a_fresh_call_id_is_checked_without_a_python_step_per_earlier_message() -> None:
    short, long = _history(5), _history(500)
    response = _answer("call_new")
    assert unique_call_ids(long, response) is response
    assert _opcodes(lambda: unique_call_ids(long, response)) == _opcodes(
        lambda: unique_call_ids(short, response)
    )


def test_a_repeated_call_id_is_still_renamed() -> None:
    renamed = unique_call_ids(_history(500), _answer("call_250"))
    (new,) = renamed.message.tool_calls
    assert new.id != "call_250" and new.id.startswith("call_250_")
    assert renamed.meta["call_ids_renamed"] == [["call_250", new.id]]


def test_short_call_names_are_kept_without_reading_the_offered_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tuple({"type": "function", "function": {"name": f"t{i}"}} for i in range(50))
    request = ModelRequest(_history(1), tools=tools)
    response = _answer("c", "lookup")

    def refused(tools: Any) -> list[str]:
        raise AssertionError("offered names read")

    with monkeypatch.context() as patched:
        patched.setattr(_base, "_offered_names", refused)
        assert shown_call_names(request, response) is response
    huge = shown_call_names(request, _answer("c", "x" * 50_000))
    (call,) = huge.message.tool_calls
    assert len(call.name) < 200 and "50000 characters" in call.name


# -- the chokepoint: rate limits ------------------------------------------------------------

SPEC = ToolSpec(
    "erp__refund", "Refund.", {"type": "object"}, Effect.WRITE, source="erp", remote_name="refund"
)


def test_no_name_is_folded_for_rate_limits_when_none_are_set(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(name: str) -> str:
        raise AssertionError("folded")

    monkeypatch.setattr(_authority, "folded", refused)
    assert Host()._buckets(SPEC, "erp") == []


def test_a_rate_limit_under_any_name_of_the_tool_still_applies() -> None:
    by_remote, by_source = TokenBucket(rate=1.0), TokenBucket(rate=2.0)
    host = Host(rate_limits={"Refund": by_remote, "ERP": by_source})
    assert host._buckets(SPEC, "erp") == [by_remote, by_source]
