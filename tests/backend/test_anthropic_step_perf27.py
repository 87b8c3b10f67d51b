"""Perf round 27: the Anthropic backend's per-step work (issue #24). Each trim keeps the
answer and the request body exactly as before; these tests pin that, and that the work
skipped is skipped: a call's input object is walked for surrogate halves only when its JSON
text could hold one, ``written`` encodes with one encoder kept for the process, and a count
the API sends as an int in range is taken as it is (anything else still read by ``count``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import tether.models._anthropic as anthropic_module
from tether.core.messages import AssistantMessage, ToolCall, UserMessage
from tether.models._anthropic import AnthropicMessages, _input, _Turn
from tether.models._base import ModelRequest, count, halved, may_hold_half
from tether.models._json import Pairs, loads, written

URL = "http://127.0.0.1:9"


def call(arguments: str) -> ToolCall:
    return ToolCall("toolu_1", "lookup", arguments)


@pytest.mark.parametrize(
    "arguments",
    [
        '{"key": "k1"}',
        '{"key": "caf\u00e9 \U0001f600"}',  # non-ASCII as it is: no half
        '{"key": "\\ud83d\\ude00"}',  # a whole pair, escaped
        '{"key": "\\ud83d"}',  # a lone half, escaped
        '{"\\udc00": 1}',  # a half in a key
        '{"key": "\ud83d"}',  # a lone half in the text itself
        '{"a": {"b": ["\\ud800"]}}',  # nested
        '{"key": "\\\\ud83d"}',  # an escaped backslash, then text: no half
        "[1, 2]",
        "not json",
        "   ",
    ],
)
def test_a_calls_input_is_what_a_full_walk_gives(arguments: str) -> None:
    try:
        value: Any = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        value = None
    expected = value if isinstance(value, dict) and not halved(value) else {}
    assert _input(call(arguments)) == expected


def test_may_hold_half_is_true_wherever_the_text_reads_as_a_half() -> None:
    for text in ('"\\ud83d"', '"\ud83d"', '{"\\udfff": 0}', '"\\u0041"'):
        assert may_hold_half(text)
    for text in ('"plain"', '"caf\u00e9"', '"\U0001f600"', "{}"):
        assert not may_hold_half(text)
        assert not halved(json.loads(text))


def test_a_plain_input_is_not_walked_for_halves(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[object] = []

    def counting(value: object) -> bool:
        walked.append(value)
        return halved(value)

    monkeypatch.setattr(anthropic_module, "halved", counting)
    assert _input(call('{"key": "k1", "n": [1, 2, {"x": "y"}]}')) == {"key": "k1", "n": [1, 2, {"x": "y"}]}
    assert walked == []
    assert _input(call('{"key": "\\ud83d"}')) == {}  # an escape: walked, and refused
    assert len(walked) == 1


def test_the_request_body_is_unchanged_for_inputs_with_and_without_escapes() -> None:
    model = AnthropicMessages("claude-x", base_url=URL, transport="http")
    calls = (call('{"key": "\\u00e9\\ud83d\\ude00"}'), ToolCall("toolu_2", "lookup", '{"key": "\\ud83d"}'))
    request = ModelRequest(messages=(UserMessage("q"), AssistantMessage(tool_calls=calls)))
    body = json.loads(model.encode(request))
    inputs = [b["input"] for b in body["messages"][1]["content"] if b["type"] == "tool_use"]
    assert inputs == [{"key": "\u00e9\U0001f600"}, {}]


def test_written_is_json_dumps_and_builds_no_encoder_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    values: list[object] = [{"k": "caf\u00e9", "n": [1, 2.5, None, True]}, "x\u2028y", [], {}]
    expected = [json.dumps(v, ensure_ascii=False) for v in values]
    built: list[object] = []

    class Counting(json.JSONEncoder):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(json, "JSONEncoder", Counting)  # what json.dumps builds per call
    assert [written(v) for v in values] == expected
    assert built == []
    # an object that named a key twice is still written with each pair
    assert written(loads(b'{"input": {"a": 1, "a": 2}}')["input"]) == '{"a": 1, "a": 2}'
    assert isinstance(loads(b'{"input": {"a": 1, "a": 2}}')["input"], Pairs)


@pytest.mark.parametrize(
    ("value", "counted"),
    [(7, 7), ("12", 12), (3.9, 3), (None, None), (2**53 - 1, 2**53 - 1)],
)
def test_a_usage_count_reads_as_count_does(value: object, counted: int | None) -> None:
    turn = _Turn()
    turn.usage({"input_tokens": value})
    assert turn.counts.get("input_tokens") == counted


@pytest.mark.parametrize("value", [-1, 2**53, True, "ten", [1]])
def test_a_usage_count_out_of_range_or_not_a_number_is_still_refused(value: object) -> None:
    with pytest.raises(ValueError, match="token count"):
        _Turn().usage({"output_tokens": value})


def test_a_whole_answer_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    model = AnthropicMessages("claude-x", base_url=URL, transport="http")
    answer = {
        "content": [
            {"type": "text", "text": "looking"},
            {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"key": "k\u00e9"}},
        ],
        "stop_reason": "tool_use",
        "model": "claude-x",
        "usage": {"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 5},
    }
    response = model._whole(answer)
    assert response.message.content == "looking"
    assert response.message.tool_calls == (ToolCall("toolu_9", "lookup", '{"key": "k\u00e9"}'),)
    assert response.message.provider_items == () and response.message.reasoning is None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (105, 10)
    assert response.usage.cached_tokens == 5


def test_an_int_count_in_range_is_taken_without_count(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[object] = []
    original = count

    def counting(value: object) -> int:
        read.append(value)
        return original(value)

    monkeypatch.setattr(anthropic_module, "count", counting)
    turn = _Turn()
    turn.usage({"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": "5"})
    assert read == ["5"]
    assert turn.counts == {"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 5}
