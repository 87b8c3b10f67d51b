"""The agent loop: observe → decide → act → observe, until the host stops it (L1, L2, L4)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import anyio

from tether.chokepoint._calls import CallScope
from tether.context._compression import ContextOverflow
from tether.context._engine import ContextEngine
from tether.context._pairing import ContextIntegrityError
from tether.context._subagent import run_subtask
from tether.core.handoff import HandoffGrants, resolve_from_trace, validate_handoff
from tether.core.messages import AssistantMessage, Usage, UserMessage
from tether.core.stop import Limits, RepetitionDetector, StopReason, cancel_after
from tether.core.types import CallRecord, Observation
from tether.errors import ApprovalError, HandoffError, MemoryPolicyError, ModelError, ToolError
from tether.models._base import ModelResponse, finish_problem
from tether.models._retrying import Unsettled
from tether.policy._trusted import TrustedContext
from tether.runners._child_ids import child_run_id, subagent_run_id
from tether.runners._interrupt import current_interrupt
from tether.runners._scope import ResumePoint, RunScope, one_resume_at_a_time, resume_claim, resume_point
from tether.runners._spend import asked, fold, hand_down, made, signed, within
from tether.runs._checkpoint import checkpoint_parent, checkpoint_tenant, pending_calls
from tether.runs._values import Agent, RunResult, RunState
from tether.trace._events import EventKind

if TYPE_CHECKING:
    from tether.chokepoint._authority import HostCore as Host

__all__ = ["AgentLoop", "LoopSteps", "StopRun", "child_run_id", "run_child"]

# What a run was doing when its deadline passed, as its stop detail says it.
_DEADLINE_DETAIL = {
    "model": "deadline passed while the model was thinking",
    "tools": "deadline passed while tools were running",
}

# What a run was doing when it was interrupted, as its stop detail says it.
_INTERRUPT_DETAIL = {"model": " while the model was answering", "tools": " while tools were running"}

_RESPONSE_FIELDS = frozenset(
    {"kind", "model", "text", "tool_calls", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd"}
)


class StopRun(Exception):
    """Internal control flow: the host has decided to stop the run."""

    def __init__(self, reason: StopReason, detail: str = "", answer: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.answer = answer


class LoopSteps:
    """How the loop asks the model and hands a turn to the chokepoint: in process here; a durable
    runner (``tether.durable``) records each as a workflow step, so a recovered run repeats neither."""

    async def complete(self, loop: AgentLoop, request: Any) -> ModelResponse:
        return await loop.agent.model.complete(request)

    async def turn(self, loop: AgentLoop, calls: list[Any], scope: CallScope) -> Any:
        return await loop.host.call_turn(calls, scope)


class AgentLoop:
    def __init__(
        self,
        host: Host,
        agent: Agent,
        objective: str = "",
        context: TrustedContext | None = None,
        *,
        resume: ResumePoint | None = None,
        run_id: str | None = None,
        steps: LoopSteps | None = None,
        request: str | None = None,
        inherited: tuple[list[Observation], list[CallRecord]] | None = None,
    ) -> None:
        """``resume``: a checkpointed run to continue (``resume_point``); ``run_id``: a new run's id;
        ``steps``: how model calls and tool turns are taken; ``request``: the user's own words when
        ``objective`` is not (a child run), kept for provenance; ``inherited``: what the runs before
        a child run did (``RunState.history``)."""
        self.host = host
        self.agent = agent
        self.limits = agent.limits
        self.resuming = resume is not None
        self.steps = steps or LoopSteps()
        self.lifecycle = RunScope(
            host,
            design="agent",
            objective=objective,
            context=context,
            run_id=run_id,
            resume=resume,
            resumable=True,
        )
        self.state, self.tracer = self.lifecycle.state, self.lifecycle.tracer
        if resume is None and request is not None:
            self.state.request = request
        if resume is None and inherited is not None:
            self.state.inherited_observations, self.state.inherited_calls = inherited
        self.trace_path = self.lifecycle.trace_path
        run_id = self.state.run_id
        self.offered = host.offered(agent.tools)
        # Callbacks close over what they need, not ``self``: no reference cycle outlives the run.
        tracer, state, offered = self.tracer, self.state, tuple(s.name for s in self.offered)
        self.engine = ContextEngine(
            agent.context,
            instructions=agent.instructions,
            tools=self.offered,
            model=agent.model,
            clock=host.clock,
            trace_dir=host.trace_dir,
            run_id=run_id,
            tenant=state.context.tenant,
            emit=lambda kind, **data: tracer.emit(EventKind(kind), **data),
            expected_updates=self.limits.max_steps,
            limits=self.limits,
        )

        readable = self.engine.outputs.readable  # a subagent reads the outputs its parent reads

        async def run_subagent(sub: Any, task: str, call_id: str) -> Any:
            return await run_subtask(
                _ChildRuns(host, state, call_id, offered, agent.limits, sub.name, readable),
                sub.agent(),
                task,
                context=state.context,
                parent=tracer,
                max_chars=sub.max_chars,
            )

        self.engine.runner = run_subagent
        self.repetition = RepetitionDetector(self.limits.repeat_limit, self.limits.max_identical_calls)
        self.repetition.count(made(self.state.inherited_calls, host))  # what the runs before it did
        self.handoff: Any = None
        self._phase: str | None = None  # "model" or "tools" while the loop waits on one

    # -- public ----------------------------------------------------------------------------

    async def run(self) -> RunResult:
        s = self.state
        await self.lifecycle.start(self.offered, agent=self.agent.name, model=self.agent.model.name)
        answer: str | None = None
        try:
            pending = pending_calls(s) if self.resuming else []
            if not self.resuming:
                recalled = await self.host.recall(self.agent.memory_subjects, s, self.tracer)
                if recalled is not None:
                    s.trajectory.append(recalled)
                s.trajectory.extend(self.engine.opening(s.objective))
            # One cancel scope around the run's steps; settlement and checkpoints are shielded.
            # An interrupt (a signal to ``tether run``) cancels it as the deadline does.
            interrupt = current_interrupt()
            with self._deadline() as scope, interrupt.holding(scope) if interrupt else nullcontext():
                if pending:
                    # Finish the turn the run paused in; its calls are settled against the store again.
                    await self._act(pending)
                answer = await self._loop()
            if answer is None and interrupt is not None and interrupt.why is not None:
                where = _INTERRUPT_DETAIL.get(self._phase or "", "")
                raise StopRun(StopReason.INTERRUPTED, f"stopped by {interrupt.why}{where}")
            if answer is None:  # the deadline's scope cancelled the loop
                passed = f"deadline of {self.limits.deadline_s}s passed"
                detail = _DEADLINE_DETAIL.get(self._phase or "", passed)
                raise StopRun(StopReason.DEADLINE, detail, self._host_answer())
            await self._finish(answer)
            reason, detail = StopReason.ACCEPTED, ""
        except StopRun as stop:
            reason, detail = stop.reason, stop.detail
            answer = stop.answer if stop.answer is not None else answer
        return await self.lifecycle.finish(reason, answer=answer, detail=detail, handoff=self.handoff)

    # -- the loop ----------------------------------------------------------------------------

    def _deadline(self) -> anyio.CancelScope:
        left = self._remaining()
        return anyio.CancelScope() if left is None else cancel_after(left)

    def _remaining(self) -> float | None:
        if self.limits.deadline_s is None:
            return None
        return self.limits.deadline_s - (time.monotonic() - self.state.started)

    def _check_budgets(self) -> None:
        s, lim = self.state, self.limits
        if (left := self._remaining()) is not None and left <= 0:
            raise StopRun(StopReason.DEADLINE, f"deadline of {lim.deadline_s}s passed", self._host_answer())
        if s.steps >= lim.max_steps:
            raise StopRun(StopReason.MAX_STEPS, f"{lim.max_steps} steps taken", None)
        if s.llm_calls >= lim.llm_calls:
            raise StopRun(StopReason.BUDGET, f"LLM-call budget of {lim.llm_calls} used", None)
        if lim.max_tokens is not None and s.usage.total_tokens >= lim.max_tokens:
            raise StopRun(StopReason.BUDGET, f"token budget of {lim.max_tokens} used", None)
        if lim.max_cost_usd is not None and s.cost_usd >= lim.max_cost_usd:
            raise StopRun(StopReason.BUDGET, f"cost budget of ${lim.max_cost_usd} used", None)

    async def _loop(self) -> str:
        s = self.state
        while True:
            try:
                self._check_budgets()
            except StopRun as stop:
                if stop.reason in (StopReason.BUDGET, StopReason.MAX_STEPS):
                    stop.answer = await self._graceful_answer(stop)
                raise
            response = await self._ask(tools_enabled=True)
            message = response.message
            if len(message.tool_calls) > self.limits.max_calls_per_turn:
                raise self._too_many_calls(message)
            if (why := self.repetition.before(asked(message, self.host, s))) is not None:
                self.tracer.emit(EventKind.REPETITION_DETECTED, detail=why + ": none ran")
                s.trajectory.append(_text_only(message))
                raise StopRun(StopReason.REPETITION, why + ": none ran", self._host_answer())
            if (cut := finish_problem(response)) is not None:  # never accepted or acted on as if whole
                s.trajectory.append(_text_only(message) if message.tool_calls else message)
                raise StopRun(cut[0], cut[1], message.content)
            s.trajectory.append(message)
            if not message.tool_calls:
                answer = message.content or ""
                problem = self.agent.verify(s, answer) if self.agent.verify else None
                if problem is None:
                    return answer
                self.tracer.emit(EventKind.VERIFICATION_FAILED, problem=problem)
                s.trajectory.append(
                    UserMessage(f"<agent_status>\nanswer rejected: {problem}\n</agent_status>", "harness")
                )
                s.steps += 1
                continue
            await self._act(list(message.tool_calls))

    async def _ask(self, *, tools_enabled: bool, max_tokens: int | None = None) -> ModelResponse:
        s, t = self.state, self.tracer
        # Each step is a cancellation point whatever the model: a stop from outside (an interrupt,
        # the deadline) that came while a tool ran in a thread bites here, not never.
        await anyio.lowlevel.checkpoint()
        if s.llm_calls >= self.limits.llm_calls_hard:
            why = f"hard ceiling of {self.limits.llm_calls_hard} LLM calls"
            raise StopRun(StopReason.BUDGET, why, self._host_answer())
        try:
            request = await self.engine.build(s, tools_enabled=tools_enabled)
        except ContextOverflow as err:
            t.emit(EventKind.CONTEXT_OVERFLOW, tokens=err.tokens, window=err.window)
            raise StopRun(StopReason.BUDGET, str(err), self._host_answer()) from None
        except ContextIntegrityError as err:  # providers reject such a request: stop, never send it
            reason = StopReason.MODEL_ERROR if err.in_history else StopReason.INTERNAL_ERROR
            t.emit(EventKind.MODEL_ERROR, error=f"unpaired tool calls: {err}")
            raise StopRun(reason, f"unpaired tool calls: {err}", self._host_answer()) from None
        if max_tokens is not None:
            request = replace(request, max_tokens=max_tokens)
        composed = self.engine.last
        t.emit(
            EventKind.CONTEXT_COMPOSED,
            messages=len(request.messages),
            tools=len(request.tools),
            tools_enabled=tools_enabled,
            **(composed.trace_fields() if composed else {}),
        )
        s.llm_calls += 1
        self._phase = "model"
        bill = Unsettled()
        try:
            with bill.collecting():
                response = await self.steps.complete(self, request)
        except anyio.get_cancelled_exc_class():  # the deadline cut the call: what it was billed counts
            self._count_unsettled(bill)
            raise
        except Exception as err:  # a backend failure ends the run, recorded, never a crash of the host
            billed = self._count_billed(err) if isinstance(err, ModelError) else {}
            t.emit(EventKind.MODEL_ERROR, error=f"{type(err).__name__}: {err}", **billed)
            raise StopRun(StopReason.MODEL_ERROR, f"{type(err).__name__}: {err}") from None
        self._phase = None
        s.usage = s.usage + response.usage
        self.engine.observe_usage(response.usage)
        s.cost_usd += response.cost_usd
        t.emit(
            EventKind.MODEL_RESPONSE,
            model=response.model,
            text=(response.message.content or "")[:500],
            tool_calls=[{"id": c.id, "name": c.name} for c in response.message.tool_calls],
            prompt_tokens=response.usage.prompt_tokens,
            completion_tokens=response.usage.completion_tokens,
            cached_tokens=response.usage.cached_tokens,
            cost_usd=response.cost_usd,
            # Backend facts (finish reason, retries taken, unpriced); never overriding the above.
            **{k: v for k, v in response.meta.items() if k not in _RESPONSE_FIELDS},
        )
        return response

    def _count_billed(self, err: ModelError) -> dict[str, Any]:
        """What the failed attempts of a model call were billed (``ModelError.usage``), counted
        against the run's budgets all the same; the counts and the retries taken, for the
        ``model_error`` event."""
        taken: dict[str, Any] = {"retries": err.retries} if err.retries else {}  # its waits
        if err.fallback_from:  # a chain whose every model failed: which, and what each met
            taken["fallback_from"] = err.fallback_from
        if not isinstance(err.usage, Usage):
            return taken
        s = self.state
        s.usage, s.cost_usd = s.usage + err.usage, s.cost_usd + err.cost_usd
        usage = err.usage
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cost_usd": err.cost_usd,
            **taken,
        }

    def _count_unsettled(self, bill: Unsettled) -> None:
        """What a call cut from outside (the run's deadline, an interrupt) was billed, counted
        against the run's budgets, and what it met before the cut (its retries, the models of a
        chain that failed), traced: ``model_error`` (``Unsettled.event``)."""
        interrupt = current_interrupt()
        by = f"an interrupt ({interrupt.why})" if interrupt and interrupt.why else "the run's deadline"
        if (said := bill.event(by)) is None:
            return
        s = self.state
        s.usage, s.cost_usd = s.usage + bill.usage, s.cost_usd + bill.cost_usd
        self.tracer.emit(EventKind.MODEL_ERROR, **said)

    def _too_many_calls(self, message: AssistantMessage) -> StopRun:
        """The stop for a turn that asks for more tool calls than ``Limits.max_calls_per_turn``:
        ``model_error``, traced, none of its calls run (``_text_only``)."""
        n, most = len(message.tool_calls), self.limits.max_calls_per_turn
        why = f"the model asked for {n} tool calls in one turn, over max_calls_per_turn ({most}): none ran"
        self.tracer.emit(EventKind.MODEL_ERROR, error=why)
        self.state.trajectory.append(_text_only(message))
        return StopRun(StopReason.MODEL_ERROR, why)

    def _scope(self) -> CallScope:
        return CallScope(self.state, self.tracer, self.offered, self.engine, f"model:{self.agent.model.name}")

    async def _act(self, calls: list[Any]) -> None:
        """Hand the turn's calls to the host's chokepoint; then record results for the model."""
        s, t, handed = self.state, self.tracer, len(self.state.inherited_calls)
        self._phase = "tools"
        turn = await self.steps.turn(self, calls, self._scope())
        self._phase = None
        self.repetition.count(made(s.inherited_calls[handed:], self.host))  # what its child runs did
        if turn.halted or turn.crashes:
            stop = turn.stop()
            assert stop is not None
            raise StopRun(stop[0], stop[1], None)

        malformed = all(o.status in ("reject", "unknown") for o in turn.outcomes)
        s.malformed_turns = s.malformed_turns + 1 if malformed else 0
        if s.malformed_turns >= self.limits.max_malformed_turns:
            raise StopRun(StopReason.MODEL_ERROR, f"{s.malformed_turns} malformed turns in a row")

        s.trajectory.extend(turn.messages())
        observed = (self._observe(turn.observations[o.call.id]) for o in turn.executed)
        unavailable = [stop for stop in observed if stop is not None]
        if (stop := turn.stop()) is not None:  # a question or an unknown outcome: the run is paused
            raise StopRun(stop[0], stop[1], None)
        # The turn is done: a resumed run's next turn is a new step (ledger keys of its own).
        s.steps += 1
        if unavailable:
            raise unavailable[0]

        signatures = [
            signed(self.host, o.spec.name, o.arguments)
            for o in turn.executed
            if o.spec and o.arguments is not None
        ]
        if signatures and (why := self.repetition.observe(signatures)):
            t.emit(EventKind.REPETITION_DETECTED, detail=why)
            raise StopRun(StopReason.REPETITION, why, self._host_answer())

    def _observe(self, obs: Observation) -> StopRun | None:
        """Note a result's evidence and its source's unavailability; returns the stop when too often."""
        s = self.state
        if isinstance(obs.data, dict) and isinstance(obs.data.get("ref"), str):
            s.evidence.add(obs.data["ref"])
        if obs.meta.get("unavailable"):
            count = s.unavailable.get(obs.source, 0) + 1
            s.unavailable[obs.source] = count
            if count >= self.limits.max_unavailable:
                why = f"source {obs.source} unavailable {count} times"
                return StopRun(StopReason.DEPENDENCY_UNAVAILABLE, why, self._host_answer())
        return None

    # -- endings -----------------------------------------------------------------------------

    def _host_answer(self) -> str:
        """The host's own answer when the model cannot be asked: what was observed, what is missing."""
        s = self.state
        seen = sorted({o.tool for o in s.observations if not o.is_error})
        failed = sorted({o.tool for o in s.observations if o.is_error})
        parts = [f"Stopped before a verified answer to: {s.objective}"]
        parts.append("Observed: " + (", ".join(seen) if seen else "nothing") + ".")
        if failed:
            parts.append("Failed: " + ", ".join(failed) + ".")
        return " ".join(parts)

    def _final_turn_refused(self) -> str | None:
        """Why one last model turn is not affordable, or None when it is (see ``Limits``)."""
        s, lim = self.state, self.limits
        if not lim.final_turn_on_budget:
            return "final turn disabled"
        if s.llm_calls >= lim.llm_calls_hard:
            return f"hard ceiling of {lim.llm_calls_hard} LLM calls"
        if lim.max_tokens_hard is not None and s.usage.total_tokens >= lim.max_tokens_hard:
            return f"hard token ceiling of {lim.max_tokens_hard}"
        if lim.max_cost_usd_hard is not None and s.cost_usd >= lim.max_cost_usd_hard:
            return f"hard cost ceiling of ${lim.max_cost_usd_hard}"
        if (left := self._remaining()) is not None and left <= 0:
            return "deadline passed"
        return None

    async def _graceful_answer(self, stop: StopRun) -> str:
        """One last turn without tools when affordable; otherwise the host answers. A last turn
        that ended abnormally (cut, refused, paused) keeps its text; the stop's detail says how."""
        s, t = self.state, self.tracer
        refused = self._final_turn_refused()
        t.emit(
            EventKind.BUDGET_EXHAUSTED,
            reason=str(stop.reason),
            detail=stop.detail,
            answered_by="host" if refused else "model",
            **({"final_turn_refused": refused} if refused else {}),
        )
        if refused:
            return self._host_answer()
        status = f"{stop.detail}. Tools are disabled. Answer now: state what you found, with its source"
        s.trajectory.append(
            UserMessage(f"<agent_status>\n{status}, and what is still missing.\n</agent_status>", "harness")
        )
        try:
            response = await self._ask(tools_enabled=False, max_tokens=self.limits.final_turn_max_tokens)
        except StopRun:
            return self._host_answer()
        if (cut := finish_problem(response)) is not None:
            stop.detail += f"; the final turn: {cut[1]}"
        s.trajectory.append(AssistantMessage(content=response.message.content))
        return response.message.content or self._host_answer()

    async def _finish(self, answer: str) -> None:
        """Validate the handoff, then let the host decide on proposed memories."""
        s, t, agent, host = self.state, self.tracer, self.agent, self.host
        if agent.handoff is not None:
            data = agent.handoff(s, answer)
            if data is not None:
                perms = s.context.permissions
                resolve: Any = agent.resolve_evidence or resolve_from_trace
                try:
                    self.handoff = validate_handoff(
                        data,
                        run_permissions=HandoffGrants(read=sorted(perms.read), write=sorted(perms.write)),
                        resolve=lambda ref: resolve(ref, s),
                        artifact_root=host.trace_dir,
                    )
                except HandoffError as err:
                    t.emit(EventKind.HANDOFF_REJECTED, problems=err.problems)
                    raise StopRun(StopReason.INVALID_HANDOFF, "; ".join(err.problems), answer) from None
                t.emit(EventKind.HANDOFF_VALIDATED, evidence=[str(e) for e in self.handoff.evidence])
        if agent.remember is not None and host.memory is not None:
            await remember(host, t, agent.remember(s), scope=s.context.scope, actor=f"agent:{agent.name}")


async def remember(host: Host, tracer: Any, records: Any, *, scope: str, actor: str = "agent") -> None:
    """Submit proposed memories; the store's validation decides, the trace says what happened.
    A run writes only in its own tenant's ``scope``, the one its recall reads: a record for
    another scope would plant this run's data in another tenant's memory. Where the host names
    ``approved_memory_sources``, a record's source system must be one, whatever the store takes."""
    assert host.memory is not None
    approved = host.approved_memory_sources  # the host's, narrowing the store's own list
    for record in records:
        if record.scope != scope:
            message = f"a run of {scope} may not write memory in another scope"
            tracer.emit(EventKind.MEMORY_REFUSED, subject=record.subject, reason="scope", message=message)
            continue
        if approved and (record.source is None or record.source.system not in approved):
            message = "the host's approved_memory_sources do not name this source system"
            tracer.emit(
                EventKind.MEMORY_REFUSED, subject=record.subject, reason="provenance", message=message
            )
            continue
        try:
            written = await host.memory.propose(record, actor=actor)
        except MemoryPolicyError as err:
            tracer.emit(EventKind.MEMORY_REFUSED, subject=record.subject, reason=err.reason, message=str(err))
            continue
        tracer.emit(
            EventKind.MEMORY_WRITTEN,
            subject=record.subject,
            record_id=written.record.id,
            status=str(written.status),
            conflicts_with=list(written.conflicts_with),
            valid_until=record.valid_until.isoformat(),
        )


async def resume_run(host: Host, agent: Agent, run_id: str) -> RunResult:
    """Continue a run that paused or stopped on a transient failure, from its checkpoint in the
    host's approval store. Raises ``ApprovalError`` (``no_store``, ``unknown_run``, ``run_finished``)."""
    approvals = host.approvals
    if approvals is None:
        raise ApprovalError("no_store", "this host has no approval store to resume from")
    async with resume_claim(approvals.store, run_id, host.clock) as checkpoint:  # read once it is ours
        point = resume_point(checkpoint, run_id)
        return await AgentLoop(host, agent, resume=point).run()


async def run_child(
    host: Host,
    parent: RunState,
    agent: Agent,
    objective: str,
    context: TrustedContext,
    *,
    run_id: str,
    shared: Iterable[str] = (),
) -> RunResult:
    """A child run (a subagent's task, a workflow's agent node) on the same host and chokepoint,
    under ``run_id``, an id its parent derives from its own (``child_run_id``). Its objective is
    nobody's request: the user's request is the parent's, handed down (``RunState.request``),
    with what the parent did so far; what it does is the parent's too.

    A child that paused earlier under ``run_id`` is resumed where it stopped, never started
    again (its payments would happen twice, its approved call never be found). A child that
    pauses for a person makes its parent wait too (the parent stops, or its call pauses): the
    child is continued only through the parent (``resume_point``), so what it does next is
    bounded by one history, not by a snapshot its parent went on from. Until it ends, its
    history stays in its own checkpoint; when it ends, it is folded into the parent's. It reads
    the large outputs the runs in ``shared`` stored (its parent's and their ancestors')."""
    async with one_resume_at_a_time(run_id):
        saved = await host.approvals.store.load_checkpoint(run_id) if host.approvals is not None else None
        live = saved if saved is not None and saved.status != "finished" else None
        ours = (
            live is not None
            and checkpoint_tenant(live.state) == context.tenant
            and checkpoint_parent(live.state) == parent.run_id
        )
        if (
            live is not None and not ours
        ):  # another run's (a top-level run, another tenant's, another parent's)
            why = f"run id {run_id} is taken by a run that is not a step of run {parent.run_id}"
            raise ApprovalError("run_id_taken", why)
        if ours:
            loop = AgentLoop(host, agent, resume=resume_point(saved, run_id, parent=parent.run_id))
        else:
            request, inherited = parent.users_request, parent.history()
            loop = AgentLoop(
                host, agent, objective, context, run_id=run_id, request=request, inherited=inherited
            )
            loop.state.parent_run = parent.run_id
            hand_down(parent, loop.state)
        loop.engine.outputs.share(shared)
        result = await loop.run()
    if result.stop_reason is StopReason.APPROVAL_REQUIRED:
        # What the parent waits for: its own turn had nothing waiting, or the child had not run.
        parent.pending = list(result.pending_proposals)
        return result
    fold(parent, loop.state, result)  # what the child did and spent is the parent's too
    return result


@dataclass
class _ChildRuns:
    """A subagent's run for the parent's call ``call_id``: a child agent loop on the same host
    (``run_child``), under an id derived from the parent's run, step and call, and the subagent."""

    host: Host
    parent: RunState
    call_id: str
    offered: tuple[str, ...] = ()  # the parent's tools: what a subagent that names none gets
    limits: Limits | None = None  # the parent's: the child spends at most what the parent has left
    name: str = ""  # the subagent's: its child run is bound to it (``child_run_id``)
    readable: Iterable[str] = ()  # the runs whose large outputs the parent reads

    async def run(self, agent: Agent, objective: str, *, context: TrustedContext) -> RunResult:
        child = await subagent_run_id(
            self.host, self.parent, f"sub{self.parent.steps}", self.call_id, self.name
        )
        if agent.tools is None:  # names none: its parent's, never every tool the host has
            agent = replace(agent, tools=list(self.offered))
        if self.limits is not None:
            if (narrowed := within(agent.limits, self.parent, self.limits)) is None:
                raise ToolError("this run's model budget is used up", hint="answer with what you have")
            agent = replace(agent, limits=narrowed)
        # A subagent that names its tools (a deployer's specialist) has those: the policy holds.
        return await run_child(
            self.host, self.parent, agent, objective, context, run_id=child, shared=self.readable
        )


def _text_only(message: AssistantMessage) -> AssistantMessage:
    """A turn whose calls must never run (over the cap, or ended abnormally: cut, paused, of an
    unknown end) as it is kept in the trajectory: its text alone, so a resumed run finds none of
    its calls pending (a checkpoint holding them would run them on ``tether resume``)."""
    return AssistantMessage(content=message.content)
