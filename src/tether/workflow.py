"""Deterministic workflows (L3): known steps, a fixed tool sequence, fields extracted by schema.

A workflow passes through the same host gate and produces the same kind of trace as an
agent. Free text in a result is never read as an instruction: a step reads only the
fields its ``extract`` schema names. A step may be an agentic node (``AgentNode``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from tether.messages import ToolCall
from tether.policy.trusted import TrustedContext
from tether.run import Agent, RunResult, RunState, record_denial, record_observation
from tether.stop import StopReason
from tether.tools.contract import ToolContext
from tether.trace.events import EventKind

if TYPE_CHECKING:
    from tether.host import Host

__all__ = ["AgentNode", "Step", "Workflow", "run_workflow"]

Arguments = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]]


@dataclass(frozen=True)
class Step:
    """Call ``tool`` with ``arguments`` (fixed, or computed from earlier outputs); keep only the
    fields of ``extract`` under ``name``."""

    name: str
    tool: str
    arguments: Arguments
    extract: type[BaseModel] | None = None


@dataclass(frozen=True)
class AgentNode:
    """An agentic node inside a workflow: its answer is stored under ``name``."""

    name: str
    agent: Agent
    objective: Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Workflow:
    name: str
    steps: Sequence[Step | AgentNode]
    answer: Callable[[dict[str, Any]], str]
    metadata: dict[str, Any] = field(default_factory=dict)


async def run_workflow(
    host: Host,
    workflow: Workflow,
    objective: str,
    context: TrustedContext,
    *,
    rollback_from: dict[str, Any] | None = None,
) -> RunResult:
    run_id = host.new_run_id()
    tracer, path = host.new_tracer(run_id)
    state = RunState(run_id, objective, context, time.monotonic(), host.clock())
    offered = host.offered()
    tracer.emit(
        EventKind.RUN_STARTED,
        design="workflow",
        workflow=workflow.name,
        objective=objective,
        tenant=context.tenant,
        roles=sorted(context.roles),
        tools=[s.name for s in offered],
    )
    if rollback_from is not None:
        tracer.emit(EventKind.ROLLBACK, from_design="agent", to_design="workflow", **rollback_from)
    await host.trace_launches(tracer)
    reason, detail, answer = StopReason.ACCEPTED, "", None
    try:
        for i, step in enumerate(workflow.steps, 1):
            tracer.emit(EventKind.WORKFLOW_STEP, step=step.name, index=i)
            if isinstance(step, AgentNode):
                sub = await host.run(step.agent, step.objective(state.outputs), context=context)
                tracer.emit(
                    EventKind.WORKFLOW_STEP,
                    step=step.name,
                    child_run=sub.run_id,
                    stop_reason=str(sub.stop_reason),
                )
                if not sub.ok:
                    reason, detail = sub.stop_reason, f"agent node {step.name}: {sub.detail}"
                    break
                state.outputs[step.name] = sub.answer
                continue
            stop = await _run_step(host, tracer, state, step, offered)
            if stop is not None:
                reason, detail = stop
                break
        else:
            answer = workflow.answer(state.outputs)
    except (KeyError, TypeError, ValueError) as err:  # a bug in the workflow's own code: loud
        reason, detail = StopReason.INTERNAL_ERROR, f"{type(err).__name__}: {err}"
    tracer.emit(EventKind.STOP, reason=str(reason), detail=detail, design="workflow", steps=state.steps)
    tracer.close()
    return RunResult(
        run_id=run_id,
        stop_reason=reason,
        answer=answer,
        design="workflow",
        detail=detail,
        trace_path=path,
        steps=state.steps,
        calls=state.calls,
        events=tracer.events,
        elapsed_s=time.monotonic() - state.started,
        outputs=state.outputs,
        observations=state.observations,
    )


async def _run_step(
    host: Host, tracer: Any, state: RunState, step: Step, offered: Sequence[Any]
) -> tuple[StopReason, str] | None:
    args = step.arguments(state.outputs) if callable(step.arguments) else step.arguments
    call = ToolCall(id=f"wf_{state.steps + 1}", name=step.tool, arguments=json.dumps(dict(args)))
    tracer.emit(EventKind.TOOL_PROPOSED, call_id=call.id, tool=call.name, arguments=call.arguments)
    outcome = host.gate(call, state.context, offered, state)
    state.steps += 1
    if outcome.status != "allow":
        d = outcome.decision
        reason = d.reason if d else outcome.error
        record_denial(tracer, state, call, d.rule if d else "intake", reason, d.details if d else None)
        return StopReason.POLICY_DENIED, f"{call.name}: {reason}"
    assert outcome.spec is not None and outcome.arguments is not None
    tracer.emit(
        EventKind.POLICY_ALLOWED,
        call_id=call.id,
        tool=call.name,
        rule=outcome.decision.rule if outcome.decision else "",
    )
    ctx = ToolContext(
        state.run_id, state.context.tenant, state.context.roles, state.context.user, call.id, now=host.clock()
    )
    obs, crash = await host.execute(outcome.spec, outcome.arguments, ctx)
    if crash is not None:
        tracer.emit(EventKind.TOOL_CRASHED, tool=call.name, error=f"{type(crash).__name__}: {crash}")
        return StopReason.INTERNAL_ERROR, f"tool {call.name} raised {type(crash).__name__}"
    record_observation(tracer, state, obs, args)
    if obs.is_error:
        # A fixed sequence has no plan B: the dependency did not deliver what the next step needs.
        return StopReason.DEPENDENCY_UNAVAILABLE, f"{call.name} failed: {obs.text[:200]}"
    if step.extract is None:
        state.outputs[step.name] = obs.data
        return None
    try:
        data = obs.data if isinstance(obs.data, dict) else json.loads(obs.text)
        # Only the declared fields survive; free text elsewhere is never looked at.
        state.outputs[step.name] = step.extract.model_validate(data)
    except (ValidationError, ValueError) as err:
        return (
            StopReason.DEPENDENCY_UNAVAILABLE,
            f"{call.name}: result does not match {step.extract.__name__}: {err}",
        )
    return None
