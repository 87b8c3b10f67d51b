"""X3: what a sampling request's model was billed before it failed counts against the budget."""

from __future__ import annotations

import mcp_types as types
import pytest

from tether.core.messages import AssistantMessage, Usage
from tether.errors import ModelError
from tether.mcp._config import SamplingConfig
from tether.mcp._sampling import SamplingGate
from tether.models._base import ModelRequest, ModelResponse

pytestmark = pytest.mark.anyio


class _Billed:
    """A model whose first call fails after its attempts were billed 80 tokens, then answers
    (10 + 10)."""

    name = "m"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls == 1:
            raise ModelError("m: stream_unreadable: garbled (gave up after 2 attempts)", usage=Usage(70, 10))
        return ModelResponse(AssistantMessage(content="ok"), Usage(10, 10), "m")


def _sample() -> types.CreateMessageRequestParams:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))
    return types.CreateMessageRequestParams(messages=[message], max_tokens=50)


@pytest.mark.spec("X3")
async def test_a_failed_sample_charges_the_budget_what_its_model_was_billed() -> None:
    """The first sample's model failed after 80 billed tokens; under a budget of 100 the second
    is answered (100 used), the third refused (before: the failure counted 0, and the third was
    answered too)."""
    config = SamplingConfig(enabled=True, max_calls=10, max_total_tokens=100)
    gate = SamplingGate("s", config, model=_Billed(), consent=lambda p: True)
    assert isinstance(await gate(None, _sample()), types.ErrorData)
    assert isinstance(await gate(None, _sample()), types.CreateMessageResult)
    refused = await gate(None, _sample())
    assert isinstance(refused, types.ErrorData) and "100/100 tokens" in refused.message, refused
