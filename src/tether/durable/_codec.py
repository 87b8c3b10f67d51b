"""What a durable step records, as plain JSON: a model response, and a tool turn with what it
appended to the run state; replaying a turn re-applies exactly that, so a recovered run reaches
the lost process's state without running any tool again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tether.chokepoint._calls import Turn
from tether.core.messages import AssistantMessage, ToolCall, Usage
from tether.core.types import Decision, GateOutcome, Observation
from tether.errors import ApprovalError
from tether.models._base import ModelResponse
from tether.runs._checkpoint import state_from_json, state_to_json
from tether.runs._values import RunState

# The keys of each record this release writes, and those an earlier one wrote that it no longer
# reads (``timed_out``: f71ff92's turns). A key beyond them is a later release's, whose meaning
# this one cannot know (its text moved elsewhere, a result withheld from the model): replayed
# without it, the run would go on from another state than the one recorded, silently. Such a
# record is refused (``UnreadableStep``: the run waits for a worker that reads it), as a run
# checkpoint holding a field this release lacks is. A later release adds a key only where its
# value is not the default, so that what it records otherwise still replays here.
_RESPONSE_KEYS = frozenset(
    {
        "content",
        "reasoning",
        "tool_calls",
        "provider_items",
        "usage",
        "usage_extra",
        "model",
        "cost_usd",
        "meta",
    }
)
_TURN_KEYS = frozenset(
    {
        "outcomes",
        "observations",
        "denied",
        "waiting",
        "refused",
        "unsettled",
        "unsettled_errors",
        "crashes",
        "halted",
        "questions",
        "checkpointed",
        "appended",
        "pending",
    }
)
_RETIRED_TURN_KEYS = frozenset({"timed_out"})
_OUTCOME_KEYS = frozenset(
    {"call", "status", "spec", "arguments", "decision", "error", "proposal_id", "error_reason"}
)


def _known(record: Any, keys: frozenset[str], what: str) -> None:
    """Raise ``ValueError`` (read as ``UnreadableStep``) for a record holding a key not in ``keys``."""
    if not isinstance(record, dict):
        raise TypeError(f"a recorded {what} is {type(record).__name__}, not an object")
    unknown = sorted(str(k) for k in record if k not in keys)
    if unknown:
        raise ValueError(f"a recorded {what} holds {', '.join(unknown)}, which this release does not know")


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


# -- model responses ----------------------------------------------------------------------------


def encode_response(r: ModelResponse) -> dict[str, Any]:
    """A model response as plain JSON, provider items (signed thinking, encrypted reasoning) and
    usage extras included. Raises ``TypeError`` for a provider item with no JSON form: a recovered
    run must not send back less than the lost process would have."""
    m = r.message
    items = list(m.provider_items)
    json.dumps(items)  # a TypeError here, by name, rather than a silently shorter history
    return {
        "content": m.content,
        "reasoning": m.reasoning,
        "tool_calls": [[c.id, c.name, c.arguments] for c in m.tool_calls],
        "provider_items": items,
        "usage": [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.cached_tokens],
        "usage_extra": {k: v for k, v in r.usage.extra.items() if _jsonable(v) is not None},
        "model": r.model,
        "cost_usd": r.cost_usd,
        "meta": {k: v for k, v in r.meta.items() if _jsonable(v) is not None},
    }


def decode_response(d: dict[str, Any]) -> ModelResponse:
    """The response ``encode_response`` recorded (an older one without items and extras too)."""
    _known(d, _RESPONSE_KEYS, "model response")
    calls = tuple(ToolCall(i, n, a) for i, n, a in d["tool_calls"])
    prompt, completion, cached = d["usage"]
    items = tuple(dict(item) for item in d.get("provider_items", ()))
    return ModelResponse(
        message=AssistantMessage(d["content"], calls, d.get("reasoning"), provider_items=items),
        usage=Usage(prompt, completion, cached, dict(d.get("usage_extra", {}))),
        model=d["model"],
        cost_usd=d["cost_usd"],
        meta=dict(d["meta"]),
    )


# -- tool turns -----------------------------------------------------------------------------------


def _obs(o: Observation) -> dict[str, Any]:
    return {**dataclasses.asdict(o), "observed_at": o.observed_at.isoformat(), "data": _jsonable(o.data)}


def _obs_from(d: dict[str, Any]) -> Observation:
    return Observation(**{**d, "observed_at": datetime.fromisoformat(d["observed_at"])})


def _outcome(o: GateOutcome) -> dict[str, Any]:
    d = o.decision
    return {
        "call": [o.call.id, o.call.name, o.call.arguments],
        "status": o.status,
        "spec": o.spec.name if o.spec is not None else None,
        "arguments": _jsonable(o.arguments),
        "decision": [d.verdict, d.rule, d.reason, _jsonable(d.details) or {}] if d is not None else None,
        "error": o.error,
        "proposal_id": o.proposal_id,
        "error_reason": o.error_reason,
    }


def encode_turn(turn: Turn, state: RunState, observations_before: int, calls_before: int) -> dict[str, Any]:
    """A turn as it ran, with what it appended to the state (observations and calls from the
    given positions on) and the proposals the run now waits for."""
    appended = dataclasses.replace(
        state,
        observations=state.observations[observations_before:],
        calls=state.calls[calls_before:],
        trajectory=[],
    )
    return {
        "outcomes": [_outcome(o) for o in turn.outcomes],
        "observations": {k: _obs(v) for k, v in turn.observations.items()},
        "denied": [turn.outcomes.index(o) for o in turn.denied],
        "waiting": list(turn.waiting),
        "refused": list(turn.refused),
        "unsettled": list(turn.unsettled),
        "unsettled_errors": [[e.reason, str(e)] for e in turn.unsettled_errors],
        "crashes": [[name, type(c).__name__, str(c)] for name, c in turn.crashes],
        "halted": turn.halted,
        "questions": dict(turn.questions),
        "checkpointed": turn.checkpointed,
        "appended": state_to_json(appended),
        "pending": list(state.pending),
    }


def apply_turn(data: dict[str, Any], state: RunState) -> None:
    """Re-apply what a recorded turn appended to the run state (replay after recovery), and the
    inherited history as the turn left it: what its child runs (a subagent's) did is folded
    into it (``run_child``), and a bound after the recovery counts it."""
    _known_turn(data)
    appended = state_from_json(data["appended"])
    state.observations.extend(appended.observations)
    state.calls.extend(appended.calls)
    # It only grows during an agent run; a record with less of it (none: a release before it)
    # leaves what the run holds.
    if len(appended.inherited_calls) >= len(state.inherited_calls):
        state.inherited_calls = list(appended.inherited_calls)
    if len(appended.inherited_observations) >= len(state.inherited_observations):
        state.inherited_observations = list(appended.inherited_observations)
    # What its child runs recalled is the run's recall too (``fold``): kept beside what it recalls again.
    state.memory += [record for record in appended.memory if record not in state.memory]
    state.pending = list(data["pending"])


def decode_turn(data: dict[str, Any], resolve: Any, calls: Sequence[ToolCall]) -> Turn:
    """The ``Turn`` a recorded step returned; ``resolve`` maps a tool name to its ``ToolSpec``."""
    _known_turn(data)
    outcomes = []
    for o in data["outcomes"]:
        d = o["decision"]
        outcomes.append(
            GateOutcome(
                call=ToolCall(*o["call"]),
                status=o["status"],
                spec=resolve(o["spec"]) if o["spec"] is not None else None,
                arguments=o["arguments"],
                decision=Decision(d[0], d[1], d[2], d[3]) if d is not None else None,
                error=o["error"],
                proposal_id=o["proposal_id"],
                error_reason=o["error_reason"],
            )
        )
    turn = Turn(outcomes)
    turn.observations = {k: _obs_from(v) for k, v in data["observations"].items()}
    turn.denied = [outcomes[i] for i in data["denied"]]
    turn.waiting = list(data["waiting"])
    turn.refused = list(data["refused"])
    turn.unsettled = list(data["unsettled"])
    turn.unsettled_errors = [ApprovalError(r, m) for r, m in data["unsettled_errors"]]
    # A tool's programming error, as it was: the same type name and message (the run ends on it).
    turn.crashes = [(name, type(kind, (Exception,), {})(message)) for name, kind, message in data["crashes"]]
    turn.halted = bool(data["halted"])
    if "questions" in data:
        turn.questions, turn.checkpointed = dict(data["questions"]), bool(data["checkpointed"])
    else:  # recorded before turns were settled by the chokepoint: a question paused the run then too
        turn.questions = {
            k: f"{o.tool}: paused for input: {o.meta['pause']}"
            for k, o in turn.observations.items()
            if o.meta.get("pause")
        }
        turn.checkpointed = bool(turn.questions)
    return turn


def _known_turn(data: Any) -> None:
    _known(data, _TURN_KEYS | _RETIRED_TURN_KEYS, "tool turn")
    for outcome in data["outcomes"]:
        _known(outcome, _OUTCOME_KEYS, "call outcome")
