"""Policy, round thirty-five: an attacker who has read the policy code and steers the model.

Budgets through helpers: a run's ``Limits`` (LLM calls, tokens, cost) bound its invocation, but
a subagent's child run was held only to its own agent's limits and its spend was never charged
to the parent. A parent held to two LLM calls that a tool result talked into asking five helpers
in one turn made fifty-odd model calls (each helper on the default sixteen), and its result said
two. A child now runs on the smaller of its own limits and what its parent has left, and its
spend is the parent's when it ends."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field

from tether import Agent, Host, Limits, RunResult, StopReason, tool
from tether.context import ContextConfig, Subagent
from tether.core.messages import AssistantMessage
from tether.policy import Policy, TrustedContext
from tether.testing import ScriptedModel, call
from tether.trace import EventKind

pytestmark = pytest.mark.spec("P4", "E5", "C6")

CTX = TrustedContext(tenant="shop", roles=frozenset())


async def _helpers(
    limits: Limits, *, helpers: int, lookups: int
) -> tuple[RunResult, list[ScriptedModel], list[str]]:
    """A parent that asks ``helpers`` subagents in one turn, each scripted to look up ``lookups``
    times before answering."""
    asked: list[str] = []

    @tool
    async def lookup(q: Annotated[str, Field(description="What to look up.")]) -> str:
        """Look something up."""
        asked.append(q)
        return "found"

    host = Host(policy=Policy(allow={"lookup"}))
    host.add_tools(lookup)
    children: list[ScriptedModel] = []

    def child() -> Agent:
        model = ScriptedModel([*(call("lookup", q=f"q{i}") for i in range(lookups)), "done"])
        children.append(model)
        return Agent("child", model)

    helper = Subagent("helper", "Does one task.", child)
    turn = AssistantMessage(tool_calls=[call("helper", task=f"Task {i}.") for i in range(helpers)])
    parent = ScriptedModel([turn, "all done"])
    agent = Agent("parent", parent, context=ContextConfig(subagents=[helper]), limits=limits)
    result = await host.run(agent, "Summarise the shop.", context=CTX)
    return result, [parent, *children], asked


def _model_calls(models: list[ScriptedModel]) -> int:
    return sum(len(m.requests) for m in models)


@pytest.mark.anyio
async def test_helpers_asked_together_spend_only_the_llm_calls_their_parent_has_left() -> None:
    result, models, asked = await _helpers(Limits(llm_calls=2, llm_calls_hard=2), helpers=5, lookups=10)
    assert _model_calls(models) <= 2  # was 57: five helpers of eleven calls each
    assert result.llm_calls == _model_calls(models)
    assert len(asked) <= 1
    assert result.stop_reason is StopReason.BUDGET


@pytest.mark.anyio
async def test_no_helper_starts_once_the_parents_tokens_are_spent() -> None:
    result, models, asked = await _helpers(Limits(max_tokens=1), helpers=3, lookups=5)
    assert _model_calls(models[1:]) == 0 and asked == []
    assert result.stop_reason is StopReason.BUDGET


@pytest.mark.anyio
async def test_a_helper_within_the_budget_runs_and_its_spend_is_the_parents() -> None:
    result, models, asked = await _helpers(Limits(), helpers=2, lookups=2)
    assert result.stop_reason is StopReason.ACCEPTED and result.answer == "all done"
    assert sorted(asked) == ["q0", "q0", "q1", "q1"]
    # Two parent turns and three per helper, all counted as the run's.
    assert result.llm_calls == _model_calls(models) == 8
    own = sum(
        e.data["prompt_tokens"] + e.data["completion_tokens"]
        for e in result.events
        if e.kind is EventKind.MODEL_RESPONSE
    )
    assert result.usage.total_tokens > own > 0  # the helpers' tokens are counted too
