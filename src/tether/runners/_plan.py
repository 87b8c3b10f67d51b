"""Plan-then-execute: the dual-model pattern, governed by the same gate.

A **planner** sees only the request and the tool signatures and fixes every call up front: each
argument is a literal or an ``Extract``, a typed value a **quarantined extractor** (no tools,
one instruction, the source text) pulls from earlier results. An extracted value is validated
against its type and recorded as an observation with its sources' least trusted class. Every
planned call passes ``Host.call_turn``, provenance rules included. Injected text can never add
a call; it can only try to change extracted values, which the provenance rules judge."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import TypeAdapter, ValidationError

from tether.core.messages import ToolCall
from tether.core.stop import StopReason
from tether.core.types import Observation
from tether.policy._provenance_labels import EXTRACTOR, SourceLabel, least_trusted, normalise
from tether.policy._provenance_labels import Segment as _Segment
from tether.policy._provenance_run import REACHED, least_read
from tether.policy._trusted import TrustedContext
from tether.runners._scope import RunScope
from tether.runs._values import CallRecord, RunResult, RunState
from tether.trace._events import EventKind

__all__ = [
    "Extract",
    "ExtractionRequest",
    "Extractor",
    "Plan",
    "PlannedCall",
    "Planner",
    "run_plan",
]

ValueType = Literal["string", "number", "integer", "boolean", "list[string]", "json"]
_TYPES: dict[str, Any] = {
    "string": str,
    "number": float,
    "integer": int,
    "boolean": bool,
    "list[string]": list[str],
    "json": Any,  # structured values (lists of objects): validated as JSON-like only
}


@dataclass(frozen=True, slots=True)
class Extract:
    """A value the planner cannot know: extract it from the results of ``steps`` (indices of
    earlier planned calls; empty = all earlier results)."""

    instruction: str
    type: ValueType = "string"
    steps: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PlannedCall:
    tool: str
    arguments: dict[str, Any | Extract]


@dataclass(frozen=True, slots=True)
class Plan:
    calls: tuple[PlannedCall, ...]
    answer: Extract | None = None  # the final answer, composed by the extractor from results


@dataclass(frozen=True, slots=True)
class ExtractionRequest:
    """Everything the quarantined extractor sees: no tools, no conversation, no user request."""

    instruction: str
    type: ValueType
    sources: tuple[str, ...]
    step: int
    argument: str


class Planner(Protocol):
    async def plan(self, objective: str, tools: Sequence[dict[str, Any]]) -> Plan: ...


class Extractor(Protocol):
    async def extract(self, request: ExtractionRequest) -> Any: ...


@dataclass
class _Run:
    state: RunState
    results: dict[int, Observation] = field(default_factory=dict)
    # Per planned call that ran with extracted values: their least trusted class. A store it
    # wrote them into may give them back to a later extraction (``_resolve``).
    wrote: dict[int, str] = field(default_factory=dict)
    extracted: dict[int, set[str]] = field(default_factory=dict)  # classes extracted per call


async def run_plan(
    host: Any,
    planner: Planner,
    extractor: Extractor,
    objective: str,
    *,
    context: TrustedContext,
    run_id: str | None = None,
) -> RunResult:
    """Plan once from the request, then execute every planned call through the host's chokepoint
    (``run_id`` continues an earlier run). A denied call or a failed extraction skips its step;
    the run stops ``accepted`` when the plan is done, ``policy_denied`` if nothing was allowed."""
    await host.ensure_started()
    run = RunScope(host, design="plan", objective=objective, context=context, run_id=run_id)
    state, tracer = run.state, run.tracer
    earlier = await run.continue_earlier()  # what an earlier attempt of the run did happened: it counts
    offered = host.offered()
    await run.start(offered)
    if run.taken:
        return await run.finish(StopReason.APPROVAL_DENIED, detail=run.taken)
    plan = await planner.plan(objective, [s.wire() for s in offered])
    tracer.emit(EventKind.WORKFLOW_STEP, step="plan", calls=[c.tool for c in plan.calls])
    scope = run.calls(offered, proposed_by="planner", stop_on_denial=False)
    progress = _Run(state)
    if earlier is not None:  # and what it wrote of the values it extracted may be read back now
        progress.wrote.update(_written_earlier(earlier, state))
    allowed = 0
    for i, planned in enumerate(plan.calls):
        try:
            arguments = {
                name: await _resolve(progress, extractor, v, i, name) if isinstance(v, Extract) else v
                for name, v in planned.arguments.items()
            }
        except _ExtractionFailed as err:
            tracer.emit(EventKind.TOOL_ERROR, tool=planned.tool, error="extraction_failed", message=str(err))
            state.calls.append(CallRecord(f"plan_{i}", planned.tool, None, "rejected", str(err)))
            continue
        call = ToolCall(f"plan_{i}", planned.tool, json.dumps(arguments, ensure_ascii=False, default=str))
        state.steps = i
        turn = await run.call(call, scope)
        if (stop := turn.stop()) is not None:  # a pause comes back checkpointed by the chokepoint
            return await run.finish(stop[0], detail=stop[1], steps=len(state.calls))
        if call.id not in turn.observations:
            continue  # denied or rejected: recorded by the host; the plan goes on
        allowed += 1
        progress.results[i] = turn.observations[call.id]
        if progress.extracted.get(i):
            progress.wrote[i] = least_trusted(progress.extracted[i])
    answer = None
    if plan.answer is not None:
        try:
            answer = str(
                await _resolve(progress, extractor, plan.answer, len(plan.calls), "answer", may_be_empty=True)
            )
        except _ExtractionFailed as err:
            answer = f"(no answer: {err})"
    reason = StopReason.ACCEPTED if allowed or not plan.calls else StopReason.POLICY_DENIED
    return await run.finish(reason, answer=answer, steps=len(state.calls))


def _written_earlier(earlier: RunState, state: RunState) -> dict[int, str]:
    """The least trusted class of the values the earlier attempts of a continued plan extracted
    for calls that reached their tools (under key -1: before any step of this attempt, whose
    sources may give them back however this attempt's own calls go), and their extractions kept
    in ``state``'s inherited history, so that an attempt after this one counts them too."""
    reached = {c.call_id for c in [*earlier.inherited_calls, *earlier.calls] if c.status in REACHED}
    extracted = [
        obs
        for obs in [*earlier.inherited_observations, *earlier.observations]
        if obs.tool == EXTRACTOR and obs.source == "extractor" and obs.call_id.startswith("extract_")
    ]
    ours = {id(obs) for obs in extracted}
    state.inherited_observations += [obs for obs in earlier.observations if id(obs) in ours]
    trusts = {
        least_read([obs]) or least_trusted(())
        for obs in extracted
        if f"plan_{obs.call_id.split('_')[1]}" in reached
    }
    return {-1: least_trusted(trusts)} if trusts else {}


class _ExtractionFailed(Exception):
    pass


async def _resolve(
    run: _Run, extractor: Extractor, spec: Extract, step: int, argument: str, *, may_be_empty: bool = False
) -> Any:
    steps = spec.steps or tuple(sorted(run.results))
    sources = [run.results[s] for s in steps if s in run.results and not run.results[s].is_error]
    if not sources and not may_be_empty:
        raise _ExtractionFailed(f"no result to extract {argument!r} from")
    request = ExtractionRequest(spec.instruction, spec.type, tuple(o.text for o in sources), step, argument)
    try:
        raw = await extractor.extract(request)
        value = TypeAdapter(_TYPES[spec.type]).validate_python(raw, strict=True)
    except ValidationError as err:
        why = err.errors()[0]["msg"]
        raise _ExtractionFailed(f"extracted {argument!r} is not a {spec.type}: {why}") from None
    except Exception as err:  # the extractor is a model: its failure is a failed step, not a crash
        raise _ExtractionFailed(f"extraction of {argument!r} failed: {type(err).__name__}: {err}") from None
    # Recorded with the least trusted class among every segment of its sources (a page's text as
    # well as a listing's fields), and of the values extracted earlier that a call wrote at or
    # before a source (a store gives back what the run put in it, however the extractor reshapes
    # it, and the write's own answer may be the record as saved): extraction never launders
    # untrusted data, not even through the run's own writes.
    last = max((s for s in steps if s in run.results), default=-1)
    written = {t for j, t in run.wrote.items() if j <= last}
    trust = least_trusted({least_read(sources) or least_trusted(()), *written})
    run.extracted.setdefault(step, set()).add(trust)
    label = SourceLabel(EXTRACTOR, "extractor", trust, argument)
    scalars = value if isinstance(value, list) else [value]
    segments = [_Segment(str(v), normalise(str(v)), label, True) for v in scalars]
    run.state.observations.append(
        Observation(
            call_id=f"extract_{step}_{argument}",
            tool=EXTRACTOR,
            source="extractor",
            observed_at=run.state.started_at,
            text=json.dumps(value, ensure_ascii=False),
            data={"value": value},
            meta={"provenance": segments, "sources": [{"record_id": None, "author": None, "trust": trust}]},
        )
    )
    return value
