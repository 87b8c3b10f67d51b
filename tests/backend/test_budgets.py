"""Budgets end a run gracefully: one last turn without tools, or the host's answer (SPEC E5, L2, P4).

The model stand-in asks for a tool forever — the denial-of-wallet case — and writes a summary
only when the host offers no tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from backend_support import CONTEXT, make_host

from tether import Agent, Limits, StopReason
from tether.core.messages import AssistantMessage
from tether.models._base import ModelRequest
from tether.testing import FunctionModel, call

pytestmark = pytest.mark.anyio

SUMMARY = "Found: order 742 is open. Missing: why the part is late."


def insatiable(request: ModelRequest) -> AssistantMessage:
    if not request.tools:
        return AssistantMessage(content=SUMMARY)
    n = sum(1 for m in request.messages if m.kind == "tool")
    return AssistantMessage(tool_calls=(call("read_order", order_id=str(700 + n)),))


async def run(tmp_path: Path, **limits: Any) -> tuple[Any, FunctionModel]:
    model = FunctionModel(insatiable)
    agent = Agent(instructions="i", model=model, limits=Limits(**{"max_steps": 50, **limits}))
    return await make_host(tmp_path).run(agent, "Why is 742 open?", context=CONTEXT), model


def budget_event(result: Any) -> dict[str, Any]:
    [event] = [e.to_json() for e in result.events if str(e.kind) == "budget_exhausted"]
    return event


@pytest.mark.spec("E5")
async def test_llm_call_budget_gives_one_last_turn_without_tools(tmp_path: Path) -> None:
    result, model = await run(tmp_path, llm_calls=3, llm_calls_hard=5)

    assert result.stop_reason is StopReason.BUDGET
    assert result.answer == SUMMARY and result.llm_calls == 4
    last = model.requests[-1]
    assert last.tools == () and last.tool_choice == "none" and last.max_tokens == 1024
    status = last.messages[-1]
    assert status.kind == "user" and status.origin == "harness"  # type: ignore[union-attr]
    assert status.content.startswith("<agent_status>\nLLM-call budget of 3 used")  # type: ignore[union-attr]
    assert budget_event(result)["answered_by"] == "model"


@pytest.mark.spec("E5")
async def test_without_the_final_turn_the_host_answers_at_exactly_the_budget(tmp_path: Path) -> None:
    result, model = await run(tmp_path, llm_calls=3, llm_calls_hard=5, final_turn_on_budget=False)

    assert result.stop_reason is StopReason.BUDGET and result.llm_calls == 3 == len(model.requests)
    assert result.answer == "Stopped before a verified answer to: Why is 742 open? Observed: read_order."
    assert budget_event(result) | {"run_id": "", "seq": 0, "ts": ""} == {
        "run_id": "",
        "seq": 0,
        "ts": "",
        "kind": "budget_exhausted",
        "reason": "budget",
        "detail": "LLM-call budget of 3 used",
        "answered_by": "host",
        "final_turn_refused": "final turn disabled",
    }


@pytest.mark.spec("E5")
async def test_the_llm_call_counter_resets_per_invocation(tmp_path: Path) -> None:
    model = FunctionModel(insatiable)
    agent = Agent(instructions="i", model=model, limits=Limits(llm_calls=3, final_turn_on_budget=False))
    host = make_host(tmp_path)
    first = await host.run(agent, "q", context=CONTEXT)
    second = await host.run(agent, "q", context=CONTEXT)
    assert (first.llm_calls, second.llm_calls) == (3, 3)
    assert len(model.requests) == 6 and second.stop_reason is StopReason.BUDGET


@pytest.mark.spec("E5")
async def test_no_gap_under_the_hard_ceiling_means_the_host_answers(tmp_path: Path) -> None:
    result, _ = await run(tmp_path, llm_calls=3, llm_calls_hard=3)
    assert result.stop_reason is StopReason.BUDGET and result.llm_calls == 3
    assert result.answer.startswith("Stopped before a verified answer")
    assert budget_event(result)["final_turn_refused"] == "hard ceiling of 3 LLM calls"


@pytest.mark.spec("E5")
async def test_token_budget_trips_and_a_hard_token_ceiling_refuses_the_last_turn(tmp_path: Path) -> None:
    soft, _ = await run(tmp_path, max_tokens=200)
    assert soft.stop_reason is StopReason.BUDGET and soft.answer == SUMMARY
    assert "token budget of 200 used" in soft.detail
    assert budget_event(soft)["answered_by"] == "model"

    hard, _ = await run(tmp_path, max_tokens=200, max_tokens_hard=200)
    assert hard.stop_reason is StopReason.BUDGET and hard.answer.startswith("Stopped before")
    assert hard.llm_calls == soft.llm_calls - 1


@pytest.mark.spec("E5")
async def test_cost_budget_trips_on_reported_cost(tmp_path: Path) -> None:
    from tether.models._base import ModelResponse

    class Priced(FunctionModel):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            response = await super().complete(request)
            return ModelResponse(response.message, response.usage, self.name, cost_usd=0.01)

    model = Priced(insatiable)
    agent = Agent(instructions="i", model=model, limits=Limits(max_cost_usd=0.03, max_cost_usd_hard=0.05))
    result = await make_host(tmp_path).run(agent, "q", context=CONTEXT)
    assert result.stop_reason is StopReason.BUDGET and result.answer == SUMMARY
    assert result.llm_calls == 4 and result.cost_usd == pytest.approx(0.04)


@pytest.mark.spec("L2")
async def test_max_steps_also_ends_with_a_last_turn(tmp_path: Path) -> None:
    result, _ = await run(tmp_path, max_steps=2)
    assert result.stop_reason is StopReason.MAX_STEPS and result.answer == SUMMARY
    assert result.steps == 2 and result.llm_calls == 3


@pytest.mark.spec("L2")
async def test_deadline_while_the_model_thinks_ends_with_the_hosts_answer(tmp_path: Path) -> None:
    never = anyio.Event()

    async def stuck(request: ModelRequest) -> AssistantMessage:
        if any(m.kind == "tool" for m in request.messages):
            await never.wait()  # a model that never answers; the deadline must end the run
        return AssistantMessage(tool_calls=(call("read_order", order_id="742"),))

    agent = Agent(instructions="i", model=FunctionModel(stuck), limits=Limits(deadline_s=0.2))
    result = await make_host(tmp_path).run(agent, "Why is 742 open?", context=CONTEXT)
    assert result.stop_reason is StopReason.DEADLINE
    assert result.detail == "deadline passed while the model was thinking"
    assert result.answer == "Stopped before a verified answer to: Why is 742 open? Observed: read_order."


def test_hard_ceilings_below_their_budgets_are_refused() -> None:
    with pytest.raises(ValueError, match="max_tokens_hard"):
        Limits(max_tokens=100, max_tokens_hard=50)
    with pytest.raises(ValueError, match="max_cost_usd_hard"):
        Limits(max_cost_usd=1.0, max_cost_usd_hard=0.5)
    with pytest.raises(ValueError, match="llm_calls_hard"):
        Limits(llm_calls=5, llm_calls_hard=4)
