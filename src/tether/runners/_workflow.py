"""Deterministic workflows (L3): known steps, a fixed tool sequence, fields extracted by schema.

A workflow passes the same host gate and writes the same kind of trace as an agent. A step
reads only the fields its ``extract`` schema names; a step may be an agentic node (``AgentNode``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from tether.chokepoint._calls import CallScope
from tether.core.messages import ToolCall
from tether.core.stop import StopReason
from tether.core.types import CallRecord, Observation
from tether.policy._trusted import TrustedContext
from tether.runners._loop import child_run_id, run_child
from tether.runners._scope import RunScope, one_resume_at_a_time
from tether.runs._values import Agent, RunResult
from tether.trace._events import EventKind

if TYPE_CHECKING:
    from tether.chokepoint._authority import HostCore as Host

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
    run_id: str | None = None,
    inherited: tuple[list[Observation], list[CallRecord]] | None = None,
) -> RunResult:
    """Run the steps in order through the host's chokepoint. ``run_id`` continues an earlier run
    of the workflow: the same call ids replay recorded effects and find approved proposals.
    ``inherited``: what a run for the same request did before it (the agent run a rollback
    replaces: what it paid counts towards every bound here). Two continuations of one run at
    once take turns (``one_resume_at_a_time``): the second reads what the first left."""
    if run_id is None:
        return await _run(host, workflow, objective, context, rollback_from, None, inherited)
    async with one_resume_at_a_time(run_id):
        return await _run(host, workflow, objective, context, rollback_from, run_id, inherited)


async def _run(
    host: Host,
    workflow: Workflow,
    objective: str,
    context: TrustedContext,
    rollback_from: dict[str, Any] | None,
    run_id: str | None,
    inherited: tuple[list[Observation], list[CallRecord]] | None,
) -> RunResult:
    run = RunScope(host, design="workflow", objective=objective, context=context, run_id=run_id)
    state = run.state
    if inherited is not None:
        state.inherited_observations, state.inherited_calls = list(inherited[0]), list(inherited[1])
    finished = await _continued(run, workflow)  # before anything is traced under the run id
    scope = run.calls(host.offered(), proposed_by=f"workflow:{workflow.name}")
    await run.start(scope.offered, workflow=workflow.name)
    if rollback_from is not None:
        run.tracer.emit(EventKind.ROLLBACK, from_design="agent", to_design="workflow", **rollback_from)
    if run.taken:
        return await run.finish(StopReason.APPROVAL_DENIED, detail=run.taken)
    reason, detail, answer = StopReason.ACCEPTED, "", None
    try:
        for i, step in enumerate(workflow.steps, 1):
            run.tracer.emit(EventKind.WORKFLOW_STEP, step=step.name, index=i)
            if isinstance(step, AgentNode) and step.name in finished:
                state.outputs[step.name] = finished[step.name]  # its effects happened: not again
                run.tracer.emit(EventKind.WORKFLOW_STEP, step=step.name, replayed=True)
                continue
            if isinstance(step, AgentNode):
                sub = await _run_node(run, step, i, context)
                run.tracer.emit(
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
            stop = await _run_step(run, scope, step)
            if stop is not None:
                reason, detail = stop
                break
        else:
            answer = workflow.answer(state.outputs)
    except (KeyError, TypeError, ValueError) as err:  # a bug in the workflow's own code: loud
        reason, detail = StopReason.INTERNAL_ERROR, f"{type(err).__name__}: {err}"
    return await run.finish(reason, answer=answer, detail=detail)


async def _continued(run: RunScope, workflow: Workflow) -> dict[str, Any]:
    """A workflow continued under an earlier attempt's run id starts from what that attempt did
    (``RunScope.continue_earlier``), and the answers of its agent nodes that finished are kept,
    not asked again: a child run has a new id each time, so its effects would not replay from
    the ledger but happen twice. Its own steps replay from the ledger under the same call ids."""
    earlier = await run.continue_earlier()
    if earlier is None:
        return {}
    nodes = {step.name for step in workflow.steps if isinstance(step, AgentNode)}
    return {name: value for name, value in earlier.outputs.items() if name in nodes}


async def _run_node(run: RunScope, node: AgentNode, index: int, context: TrustedContext) -> RunResult:
    """An agent node's child run, under an id the workflow's run gives it (``child_run_id``): in
    a continued run, one that paused (for a person, or a transient failure) is resumed where it
    stopped (``run_child``). A node that pauses leaves the workflow's own checkpoint, without the
    node's history (its child run's checkpoint has it, and folds it back when it ends)."""
    state = run.state
    objective = node.objective(state.outputs)
    child = child_run_id(state, f"node{index}")
    sub = await run_child(run.host, state, node.agent, objective, context, run_id=child)
    if sub.stop_reason is StopReason.APPROVAL_REQUIRED:
        await run.checkpoint_paused(state)
    return sub


async def _run_step(run: RunScope, scope: CallScope, step: Step) -> tuple[StopReason, str] | None:
    state = scope.state
    args = step.arguments(state.outputs) if callable(step.arguments) else step.arguments
    call = ToolCall(id=f"wf_{state.steps + 1}", name=step.tool, arguments=json.dumps(dict(args)))
    turn = await run.call(call, scope)
    state.steps += 1
    if (stop := turn.stop()) is not None:  # a pause comes back checkpointed by the chokepoint
        return stop
    outcome = turn.outcomes[0]
    if call.id not in turn.observations:  # rejected at intake, or unknown: a fixed sequence cannot go on
        why = outcome.error or (outcome.decision.reason if outcome.decision else outcome.status)
        return StopReason.POLICY_DENIED, f"{call.name}: {why}"
    obs = turn.observations[call.id]
    if obs.is_error:
        return StopReason.DEPENDENCY_UNAVAILABLE, f"{call.name} failed: {obs.text[:200]}"
    if step.extract is None:
        state.outputs[step.name] = obs.data
        return None
    try:
        data = obs.data if isinstance(obs.data, dict) else json.loads(obs.text)
        state.outputs[step.name] = step.extract.model_validate(data)
    except (ValidationError, ValueError) as err:
        why = f"{call.name}: result does not match {step.extract.__name__}: {err}"
        return StopReason.DEPENDENCY_UNAVAILABLE, why
    return None
