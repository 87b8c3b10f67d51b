"""C3, L2: what a summary's model call was billed before it failed counts against the run."""

from __future__ import annotations

from typing import Any

import pytest
from ctx_helpers import CTX, NOW, clock, fetch
from test_compression import _page, _round

from tether.context import CompressionConfig, ContextConfig, ContextEngine
from tether.core.messages import Usage, UserMessage
from tether.errors import ModelError
from tether.runs._values import RunState


class Billed:
    """A summariser whose model failed after its attempts were billed (``ModelError.usage``),
    or answers (50 + 5 tokens)."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    async def summarize(self, req: Any) -> tuple[str, Usage]:
        if self.fail:
            raise ModelError("m: stream_unreadable: garbled (gave up after 2 attempts)", usage=Usage(200, 20))
        return "page 1: the facts [source: https://site.example/1]", Usage(50, 5)


@pytest.mark.spec("C3", "L2")
@pytest.mark.anyio
@pytest.mark.parametrize(("fail", "tokens"), [(True, 220), (False, 55)])
async def test_a_failed_summary_still_charges_what_its_model_was_billed(fail: bool, tokens: int) -> None:
    """The summary's model failed after its attempts were billed 220 tokens: the run's usage
    counts them (before: 0, the result merely left raw); a summary that succeeds counts its own."""
    config = CompressionConfig(strategy="per_result", summarizer=Billed(fail))
    engine = ContextEngine(
        ContextConfig(compression=config), instructions="rules", tools=[fetch.spec], clock=clock
    )
    state = RunState(run_id="r1", objective="Find the facts.", context=CTX, started=0.0, started_at=NOW)
    state.trajectory.append(UserMessage(state.objective))
    _round(state, 1, _page(1, 3_000))
    await engine.build(state)
    assert state.usage.total_tokens == tokens
    assert engine.compressor.stats.failures == (1 if fail else 0)
