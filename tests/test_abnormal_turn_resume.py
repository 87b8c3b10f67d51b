"""A turn the provider ended abnormally (paused, of an unknown end) or that asked for more calls
than ``max_calls_per_turn`` ends the run ``model_error`` with none of its calls run; the run can
be resumed (a transient model failure), and the resumed run must not run those calls either:
the turn is kept in the checkpoint as its text alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field

from tether import Agent, Limits, TrustedContext
from tether.core.messages import AssistantMessage, ToolCall
from tether.core.stop import StopReason
from tether.host import Host
from tether.models._base import ModelRequest, ModelResponse
from tether.policy import Approvals, Policy, SqliteApprovalStore
from tether.testing import tool_results
from tether.tools import Effect, tool

pytestmark = [pytest.mark.anyio, pytest.mark.spec("L2")]


class _Turns:
    """First a turn of calls the provider ended as ``finish`` says; then, once resumed, an answer
    from whatever tool results the model was shown."""

    name = "turns"

    def __init__(self, finish: str, calls: int) -> None:
        self.finish, self.calls, self.asked = finish, calls, 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.asked += 1
        if self.asked == 1:
            calls = tuple(
                ToolCall(id=f"c{i}", name="pay", arguments='{"amount": 5}') for i in range(self.calls)
            )
            meta = {"finish": self.finish, "finish_reason": self.finish}
            return ModelResponse(AssistantMessage(content="Paying.", tool_calls=calls), meta=meta)
        shown = [m.content for m in tool_results(request)]
        return ModelResponse(
            AssistantMessage(content=f"Done; results shown: {len(shown)}."), meta={"finish": "stop"}
        )


@pytest.mark.parametrize(("finish", "calls"), [("paused", 1), ("unknown_reason", 1), ("tool_calls", 3)])
async def test_a_turn_never_acted_on_is_not_acted_on_by_its_resume(
    tmp_path: Path, finish: str, calls: int
) -> None:
    paid: list[int] = []

    @tool(effect=Effect.READ)
    def pay(amount: Annotated[int, Field(description="The amount, e.g. 5.")]) -> str:
        """Record a payment (a read here, so no approval stands in the way)."""
        paid.append(amount)
        return "paid"

    host = Host(policy=Policy(allow={"pay"}), approvals=Approvals(SqliteApprovalStore(tmp_path / "a.db")))
    host.add_tools(pay)
    model = _Turns(finish, calls)
    agent = Agent(instructions="Pay.", model=model, limits=Limits(max_calls_per_turn=2))
    try:
        first = await host.run(agent, "Pay 5.", context=TrustedContext(tenant="t"))
        assert first.stop_reason is StopReason.MODEL_ERROR and paid == []
        resumed = await host.resume(agent, first.run_id)
    finally:
        await host.aclose()
    assert paid == [], "a resumed run ran the calls of a turn that was never to be acted on"
    assert resumed.stop_reason is StopReason.ACCEPTED and resumed.answer == "Done; results shown: 0."
