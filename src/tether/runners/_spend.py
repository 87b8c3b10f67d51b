"""What a child run (a subagent's task, a workflow's agent node) may spend, and what it spent.

A child runs on its own agent's ``Limits``, but its model calls are its parent's invocation's:
a parent held to two LLM calls that asks five helpers in one turn, each on the default sixteen,
made fifty-odd calls, and its result said two. A subagent's child runs on the smaller of its own
limits and what its parent has left (``within``); when any child ends, what it did and its
calls, tokens and cost are the parent's (``fold``): siblings started after it, and the parent's
next turn, see them. What it did counts toward the parent's bound on identical calls too
(``made``), as the parent's calls count toward the child's.
"""

from __future__ import annotations

import json
from dataclasses import replace

from tether.core.messages import AssistantMessage
from tether.core.stop import Limits, call_signature
from tether.core.types import CallRecord
from tether.runs._values import RunResult, RunState

__all__ = ["asked", "fold", "made", "within"]


def _least(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _left(bound: float | None, used: float) -> float | None:
    return None if bound is None else bound - used


def within(own: Limits, parent: RunState, bound: Limits) -> Limits | None:
    """``own`` narrowed to what ``parent`` (held to ``bound``) has left of its LLM calls, tokens
    and cost; ``None`` when it has nothing left (the child must not start)."""
    calls = min(own.llm_calls, bound.llm_calls - parent.llm_calls)
    hard = min(own.llm_calls_hard, bound.llm_calls_hard - parent.llm_calls)
    tokens = parent.usage.total_tokens
    max_tokens = _least(own.max_tokens, _left(bound.max_tokens, tokens))
    tokens_hard = _least(own.max_tokens_hard, _left(bound.max_tokens_hard, tokens))
    cost = _least(own.max_cost_usd, _left(bound.max_cost_usd, parent.cost_usd))
    cost_hard = _least(own.max_cost_usd_hard, _left(bound.max_cost_usd_hard, parent.cost_usd))
    # A soft bound never above its hard ceiling (the child's own hard one may be the smaller).
    max_tokens, cost = _least(max_tokens, tokens_hard), _least(cost, cost_hard)
    if calls < 1 or any(v is not None and v <= 0 for v in (max_tokens, cost)):
        return None
    return replace(
        own,
        llm_calls=calls,
        llm_calls_hard=max(hard, calls),
        max_tokens=None if max_tokens is None else int(max_tokens),
        max_tokens_hard=None if tokens_hard is None else int(tokens_hard),
        max_cost_usd=cost,
        max_cost_usd_hard=cost_hard,
    )


def fold(parent: RunState, child: RunState, result: RunResult) -> None:
    """What an ended child run did and spent is its parent's too, with what its own child runs
    did (folded into its inherited history after what it was handed) and spent: a helper's
    helper's payment counts, and so do its model calls."""
    handed = child.handed_down
    if len(handed) != 2:
        handed = [len(child.inherited_observations), len(child.inherited_calls)]
    parent.inherited_observations += [*child.inherited_observations[handed[0] :], *result.observations]
    parent.inherited_calls += [*child.inherited_calls[handed[1] :], *result.calls]
    parent.llm_calls += result.llm_calls
    parent.usage = parent.usage + result.usage
    parent.cost_usd += result.cost_usd


def made(calls: list[CallRecord]) -> list[str]:
    """The calls of ``calls`` that ran, as the repetition detector signs them: what a run's
    ``max_identical_calls`` counts besides its own turns (its parent's calls for a child, its
    children's for a parent). A resumed run's own calls before the pause are not counted again:
    it retries with a fresh allowance, as before."""
    ran = ("ok", "error")
    return [
        call_signature(c.tool, c.arguments)
        for c in calls
        if c.status in ran and isinstance(c.arguments, dict)
    ]


def asked(message: AssistantMessage) -> list[str]:
    """The turn's calls as ``call_signature`` reads executed ones, from the model's JSON (a call
    whose arguments are not a JSON object is refused at intake and counts for nothing here)."""
    out = []
    for c in message.tool_calls:
        try:
            arguments = json.loads(c.arguments or "{}")
        except ValueError:
            continue
        if isinstance(arguments, dict):
            out.append(call_signature(c.name, arguments))
    return out
