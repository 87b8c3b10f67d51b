"""A stand-in model's prompt estimate costs O(new messages) a step, and is the context engine's
estimate all the same (``estimate_request``), whatever the conversation does."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import tether.models._estimate as estimate
import tether.testing._models as models
from tether.core.messages import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage
from tether.models._base import ModelRequest
from tether.models._estimate import estimate_request, item_json
from tether.testing import FunctionModel, call, final

TOOLS = ({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    encoded = [0]

    def counted(item: object) -> bytes:
        encoded[0] += 1
        return item_json(item)

    monkeypatch.setattr(models, "item_json", counted, raising=False)
    monkeypatch.setattr(estimate, "item_json", counted)  # the same count where it encodes the request
    return encoded


def _prompt(model: FunctionModel, messages: list[Message], encoded: list[int] | None = None) -> None:
    request = ModelRequest(messages=tuple(messages), tools=TOOLS)
    before = encoded[0] if encoded else 0
    response = anyio.run(model.complete, request)
    if encoded:  # the tools and the new messages only, not the history
        assert encoded[0] - before == len(TOOLS) + 2
    assert response.usage.prompt_tokens == estimate_request(request, models.estimate_tokens)


def test_a_step_encodes_only_its_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = _counting(monkeypatch)
    model = FunctionModel(lambda request: final("done"))
    history: list[Message] = [SystemMessage("sys"), UserMessage("go")]
    _prompt(model, history)
    for step in range(30):
        history += [
            AssistantMessage(tool_calls=(call("lookup", key=f"k{step}"),)),
            ToolMessage(f"c{step}", "r" * 2048),
        ]
        _prompt(model, history, encoded)


def test_the_estimate_follows_a_replaced_tail_a_rewrite_and_other_conversations() -> None:
    model = FunctionModel(lambda request: final("done"))
    system = SystemMessage("sys")
    first: list[Message] = [system, UserMessage("go"), UserMessage("status: 1")]
    _prompt(model, first)
    _prompt(model, [*first[:2], UserMessage("status: 2, a longer line")])  # the dynamic tail replaced
    _prompt(model, [system, UserMessage("a summary"), UserMessage("more")])  # the history rewritten
    other: list[Any] = [SystemMessage("other"), UserMessage("x" * 300)]
    _prompt(model, other)
    _prompt(model, [system, UserMessage("a summary")])  # shorter than the last request
    _prompt(model, [])
