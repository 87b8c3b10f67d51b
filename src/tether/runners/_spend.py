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

import contextlib
import json
from dataclasses import replace
from typing import Any

from tether.core.messages import AssistantMessage
from tether.core.stop import Limits, call_signature
from tether.core.types import CallRecord
from tether.errors import PolicyError
from tether.runs._values import RunResult, RunState

__all__ = ["asked", "fold", "made", "signed", "within"]


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


def hand_down(parent: RunState, child: RunState) -> None:
    """What a new child run starts with beside the history it was handed: how much of it was
    handed (``RunState.handed_down``), and what its parent recalled from memory, which the task
    it was given may carry (``recalled_segments``)."""
    child.handed_down = [len(child.inherited_observations), len(child.inherited_calls)]
    child.memory = [*parent.memory, *child.memory]


def fold(parent: RunState, child: RunState, result: RunResult) -> None:
    """What an ended child run did and spent is its parent's too, with what its own child runs
    did (folded into its inherited history after what it was handed) and spent: a helper's
    helper's payment counts, and so do its model calls. What it recalled from memory the parent
    read through its answer: it is the parent's recall too (``recalled_segments``)."""
    handed = child.handed_down
    if len(handed) != 2:
        handed = [len(child.inherited_observations), len(child.inherited_calls)]
    parent.inherited_observations += [*child.inherited_observations[handed[0] :], *result.observations]
    parent.inherited_calls += [*child.inherited_calls[handed[1] :], *result.calls]
    parent.memory += [record for record in child.memory if record not in parent.memory]
    parent.llm_calls += result.llm_calls
    parent.usage = parent.usage + result.usage
    parent.cost_usd += result.cost_usd


def signed(host: Any, name: str, arguments: dict[str, Any]) -> str:
    """One call as ``max_identical_calls`` counts it: as its tool takes it, whatever the model
    wrote. The tool under the name the host resolves (``refund`` is ``erp__refund``), its arguments
    as the tool's own validators leave them (``"ab"`` upper-cased to ``"AB"`` is ``"AB"``), with the
    schema's top-level defaults filled in, and a number by its value (``call_signature``): a model
    that spells one call several ways makes it no more often than the bound."""
    spec = host.spec_of(name) if host is not None else None
    if spec is None:  # a harness tool, or a name no source knows: counted as written
        return call_signature(name, arguments)
    received = host.received_of(spec.name, arguments) or arguments
    props = spec.parameters.get("properties") if isinstance(spec.parameters, dict) else None
    defaults = {
        k: p["default"]
        for k, p in (props.items() if isinstance(props, dict) else ())
        if isinstance(p, dict) and "default" in p
    }
    return call_signature(spec.name, {**defaults, **received})


def made(calls: list[CallRecord], host: Any = None) -> list[str]:
    """The calls of ``calls`` that ran, as the repetition detector signs them (``signed``): what
    a run's ``max_identical_calls`` counts besides its own turns (its parent's calls for a child,
    its children's for a parent). A resumed run's own calls before the pause are not counted
    again: it retries with a fresh allowance, as before."""
    ran = ("ok", "error")
    return [
        signed(host, c.tool, c.arguments) for c in calls if c.status in ran and isinstance(c.arguments, dict)
    ]


def asked(message: AssistantMessage, host: Any = None, state: RunState | None = None) -> list[str]:
    """The turn's calls as ``signed`` reads executed ones, from the model's JSON with its
    references resolved as the host will (reference mode: ``{"$ref": …}`` is the value it names);
    a call whose arguments are not a JSON object is refused at intake and counts for nothing here."""
    resolve = getattr(getattr(host, "policy", None), "resolve_references", None)
    out = []
    for c in message.tool_calls:
        try:
            arguments = json.loads(c.arguments or "{}")
        except (ValueError, RecursionError):  # not JSON, or nested past reading: refused at intake
            continue
        if not isinstance(arguments, dict):
            continue
        if resolve is not None and state is not None:
            with contextlib.suppress(PolicyError):  # refused at intake: nothing of it runs
                arguments = resolve(c.id, arguments, state)
        out.append(signed(host, c.name, arguments))
    return out
