"""Perf round 26: settling an answer (``HTTPBackend.complete``'s ``settle``) looks its model's
price up only where a count was estimated and must be priced; an answer whose server reported
its counts keeps the cost its backend gave it, with no price table search (an answer that names
another model than the one asked — ``gpt-4o-2024-08-06`` for ``gpt-4o``, every OpenAI answer —
is a search of the whole table)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tether.core.messages import AssistantMessage, Usage
from tether.models._base import ModelRequest, ModelResponse
from tether.models._openai import OpenAICompatible
from tether.models._pricing import DEFAULT_PRICES


def settled(monkeypatch: pytest.MonkeyPatch, response: ModelResponse) -> tuple[ModelResponse, list[str]]:
    """``response`` through ``complete``'s settling (the exchange itself stubbed), and every
    model whose price was looked up meanwhile."""
    model = OpenAICompatible("gpt-4o", base_url="http://127.0.0.1:9/v1")
    looked: list[str] = []
    price_of = model.price_of

    def counted(answered: str) -> Any:
        looked.append(answered)
        return price_of(answered)

    async def send(body: bytes, settle: Any) -> ModelResponse:
        return settle(response)  # type: ignore[no-any-return]

    monkeypatch.setattr(model, "price_of", counted)
    monkeypatch.setattr(model, "send", send)
    request = ModelRequest(messages=(AssistantMessage("hello there"),))
    return anyio.run(model.complete, request), looked


def test_reported_counts_keep_their_cost_and_look_no_price_up(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = ModelResponse(AssistantMessage("hi"), Usage(100, 10), model="gpt-4o-2024-08-06", cost_usd=0.5)
    out, looked = settled(monkeypatch, answer)
    assert (out.usage, out.cost_usd, looked) == (Usage(100, 10), 0.5, [])
    assert "usage_estimated" not in out.meta


def test_estimated_counts_are_priced_as_the_model_that_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = ModelResponse(AssistantMessage("hi"), Usage(0, 0), model="gpt-4o-mini-2024-07-18", cost_usd=0.0)
    out, looked = settled(monkeypatch, answer)
    assert looked == ["gpt-4o-mini-2024-07-18"]
    assert out.meta["usage_estimated"] == ["prompt_tokens", "completion_tokens"]
    assert out.usage.prompt_tokens > 0 and out.usage.completion_tokens > 0
    assert out.cost_usd == pytest.approx(DEFAULT_PRICES["gpt-4o-mini"].cost(out.usage)) and out.cost_usd > 0
