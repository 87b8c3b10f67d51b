"""E5: an LLM-call budget per invocation, a graceful answer, a hard ceiling, a fresh count per run."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field

from tether import Agent, Host, Limits, Policy, StopReason, TrustedContext, tool
from tether.core.messages import AssistantMessage
from tether.models._base import ModelRequest
from tether.testing import FunctionModel, call


@tool
def lookup(n: Annotated[int, Field(description="Any number; each call asks for a new one.")]) -> dict:
    """Look a number up."""
    return {"n": n}


def greedy() -> FunctionModel:
    """Asks for another tool call on every turn it is offered tools; answers when tools are off."""
    counter = iter(range(1_000))

    def turn(request: ModelRequest) -> AssistantMessage:
        if request.tool_choice == "none" or not request.tools:
            return AssistantMessage(content="Partial: looked numbers up, no conclusion yet.")
        return AssistantMessage(tool_calls=(call("lookup", n=next(counter)),))

    return FunctionModel(turn, name="greedy")


async def _run(host: Host, agent: Agent) -> tuple[StopReason, int, str | None]:
    r = await host.run(agent, "Keep looking.", context=TrustedContext(tenant="t"))
    return r.stop_reason, r.llm_calls, r.answer


@pytest.mark.spec("E5", "P4")
@pytest.mark.anyio
async def test_budget_ends_gracefully_and_resets_per_invocation() -> None:
    host = Host(policy=Policy(allow={"lookup"}))
    host.add_tools(lookup)
    limits = Limits(max_steps=50, llm_calls=3, llm_calls_hard=4, repeat_limit=50, max_identical_calls=50)
    agent = Agent(instructions="Look things up.", model=greedy(), limits=limits)
    async with host:
        first = await _run(host, agent)
        second = await _run(host, agent)  # same agent, same model: a fresh budget
    for reason, calls, answer in (first, second):
        assert reason is StopReason.BUDGET
        assert calls == 4  # three budgeted calls, plus the one tool-less final turn the gap allows
        assert answer == "Partial: looked numbers up, no conclusion yet."


@pytest.mark.spec("E5")
@pytest.mark.anyio
async def test_without_a_final_turn_the_host_answers_in_place_of_the_model() -> None:
    host = Host(policy=Policy(allow={"lookup"}))
    host.add_tools(lookup)
    limits = Limits(
        max_steps=50,
        llm_calls=3,
        llm_calls_hard=3,
        repeat_limit=50,
        max_identical_calls=50,
        final_turn_on_budget=False,
    )
    async with host:
        reason, calls, answer = await _run(host, Agent(instructions="Look.", model=greedy(), limits=limits))
    assert reason is StopReason.BUDGET and calls == 3
    assert answer is not None and answer.startswith("Stopped before a verified answer") and "lookup" in answer
