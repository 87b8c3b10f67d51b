"""The Responses and Anthropic backends encode a body's head (every field before the history's
items: tools, tool choice, cap, system prompts) once while a run's steps keep it the same, and
anew whenever any of it changes: each body equals a fresh backend's."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tether.core.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from tether.models import _anthropic, _responses
from tether.models._anthropic import AnthropicMessages
from tether.models._base import ModelRequest
from tether.models._responses import OpenAIResponses

URL = "http://127.0.0.1:9"
LOOKUP = ({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},)
FETCH = ({"type": "function", "function": {"name": "fetch", "description": "Fetch one page."}},)
BACKENDS = [AnthropicMessages, OpenAIResponses]


def history(steps: int) -> list[tuple[Message, ...]]:
    """A session's requests: a turn of calls and results appended each step, the status line
    replaced, a second system prompt from step 3 (the head's system blocks change)."""
    messages: list[Message] = [SystemMessage("Look things up."), UserMessage("go")]
    out = []
    for i in range(steps):
        messages += [
            AssistantMessage(tool_calls=(ToolCall(f"c{i}", "lookup", '{"key": "k"}'),)),
            ToolMessage(f"c{i}", f"result {i}"),
        ]
        if i == 3:
            messages.append(SystemMessage("Answer briefly."))
        out.append((*messages, UserMessage(f"status {i}", origin="harness")))
    return out


@pytest.mark.parametrize("backend_type", BACKENDS)
@pytest.mark.parametrize("seed", range(6))
def test_a_changed_head_is_encoded_anew(backend_type: type[Any], seed: int) -> None:
    rng = random.Random(seed)
    options: dict[str, Any] = {"stream": rng.random() < 0.5, "max_tokens": rng.choice([None, 700])}
    if backend_type is AnthropicMessages:
        options["thinking_budget"] = rng.choice([None, 1024])
    kept = backend_type("m", base_url=URL, transport="http", **options)
    for messages in history(12):
        tools = rng.choice([LOOKUP, LOOKUP, FETCH, ()])
        request = ModelRequest(
            messages,
            tools,
            tool_choice=rng.choice(["auto", "auto", "none"]),
            max_tokens=rng.choice([None, None, 300, 2000]),
        )
        fresh = backend_type("m", base_url=URL, transport="http", **options)
        fresh._tools = kept._tools  # a request without tools defines the last ones (Anthropic)
        assert kept.encode(request) == fresh.encode(request)


@pytest.mark.parametrize("backend_type", BACKENDS)
def test_a_steady_head_is_encoded_once(backend_type: type[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # Every ``to_json`` of a step after the first encodes one of its new messages' items: none
    # re-encodes the tools, instructions or settings (before: the head, once a step).
    module = _anthropic if backend_type is AnthropicMessages else _responses
    encoded: list[object] = []
    real = module.to_json
    monkeypatch.setattr(module, "to_json", lambda value, *a: encoded.append(value) or real(value, *a))
    backend = backend_type("m", base_url=URL, transport="http")
    steps = history(6)
    backend.encode(ModelRequest(steps[0], LOOKUP))
    heads = len(encoded)
    for messages in steps[1:3]:
        encoded.clear()
        body = backend.encode(ModelRequest(messages, LOOKUP))
        assert encoded and all(isinstance(value, dict) and "tools" not in value for value in encoded)
        assert len(encoded) <= 3 < heads  # the assistant turn's item, the result's, the status line's
        fresh = backend_type("m", base_url=URL, transport="http")
        assert body == fresh.encode(ModelRequest(messages, LOOKUP))
