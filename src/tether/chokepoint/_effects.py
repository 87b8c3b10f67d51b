"""Side-effecting calls through the effect ledger (``Approvals``): at most once per idempotency
key, whatever retries, resumes or concurrent processes do."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tether.core.types import Observation
from tether.policy._approvals import idempotency_key
from tether.tools._contract import ToolContext, ToolSpec

if TYPE_CHECKING:
    from tether.policy._approvals import Approvals

__all__ = [
    "OutcomeUnknown",
    "ToolCrashed",
    "observation_from_result",
    "result_from_observation",
    "run_effect",
]


class ToolCrashed(Exception):
    """A programming error inside a side-effecting tool: the outcome is unknown."""

    def __init__(self, observation: Observation, error: BaseException) -> None:
        super().__init__(str(error))
        self.observation = observation
        self.error = error


class OutcomeUnknown(Exception):
    """A side-effecting call that ended before its tool did (``outcome_unknown`` in its
    observation's meta: a plain function past its ``timeout_s``, its thread still running): the
    effect may yet happen. The ledger leaves it to be reconciled, as for a call that raised; the
    model reads the observation."""

    def __init__(self, observation: Observation) -> None:
        super().__init__(observation.text)
        self.observation = observation


def result_from_observation(obs: Observation) -> dict[str, Any]:
    return {
        "tool": obs.tool,
        "source": obs.source,
        "observed_at": obs.observed_at.isoformat(),
        "text": obs.text,
        "data": obs.data,
        "is_error": obs.is_error,
        "error_kind": obs.error_kind,
        "meta": {k: v for k, v in obs.meta.items() if isinstance(v, str | int | float | bool)},
    }


def observation_from_result(
    result: dict[str, Any], *, call_id: str, spec: ToolSpec, now: datetime
) -> Observation:
    observed = result.get("observed_at")
    return Observation(
        call_id=call_id,
        tool=spec.name,
        source=str(result.get("source") or spec.source),
        observed_at=datetime.fromisoformat(observed) if isinstance(observed, str) else now,
        text=str(result.get("text", "")),
        data=result.get("data"),
        is_error=bool(result.get("is_error")),
        error_kind=result.get("error_kind"),
        meta=dict(result.get("meta") or {}),
    )


async def run_effect(
    approvals: Approvals,
    spec: ToolSpec,
    arguments: dict[str, Any],
    context: ToolContext,
    run: Callable[[ToolContext], Awaitable[tuple[Observation, BaseException | None]]],
    *,
    step: int,
    proposal_id: str | None = None,
    key: str | None = None,
    emit: Any = None,
    now: Callable[[], datetime],
    finish: Callable[[Observation], Observation] = lambda obs: obs,
) -> tuple[Observation, BaseException | None]:
    """Execute one side-effecting call at most once: ``run`` runs only if the ledger has no
    outcome for its key. Returns the observation (replayed or reconciled ones passed through
    ``finish``) and a programming error if the tool crashed. A call whose tool runs on past its
    end (``OutcomeUnknown``) returns its observation, its ledger entry left to be reconciled.
    Raises ``ApprovalError`` when the outcome is unknown or another process holds the call too long."""
    key = key or idempotency_key(context.run_id, step, context.call_id, spec.name, arguments)
    ctx = replace(context, idempotency_key=key)

    fresh: list[Observation] = []

    async def call() -> dict[str, Any]:
        obs, crash = await run(ctx)
        if crash is not None:
            raise ToolCrashed(obs, crash)
        if obs.meta.get("outcome_unknown"):
            raise OutcomeUnknown(obs)
        fresh.append(obs)
        return result_from_observation(obs)

    def on_event(kind: str, **data: Any) -> None:
        if emit is not None:
            emit(kind, proposal_id=proposal_id, **data)

    try:
        outcome = await approvals.perform(
            key,
            tool=spec.name,
            arguments=arguments,
            call=call,
            timeout_s=spec.timeout_s,
            proposal_id=proposal_id,
            run_id=context.run_id,
            tenant=context.tenant,
            on_event=on_event,
        )
    except ToolCrashed as crashed:
        return replace(crashed.observation, call_id=context.call_id), crashed.error
    except OutcomeUnknown as unknown:  # the ledger holds it as reconciling: never claimed done
        obs = unknown.observation
        return replace(obs, call_id=context.call_id, meta={**obs.meta, "idempotency_key": key}), None
    if fresh and not outcome.replayed:
        obs = fresh[0]  # this call ran now: keep the host's own observation (labels, truncation)
    else:
        obs = finish(observation_from_result(outcome.result, call_id=context.call_id, spec=spec, now=now()))
    meta = {"idempotency_key": key, "replayed": outcome.replayed, "reconciled": outcome.reconciled}
    return replace(obs, meta={**obs.meta, **meta}), None
