"""The host's authority and its chokepoint, one component: the one path of every tool call.

Runners see a narrow interface: ``offered``, ``decide`` (the decision alone, for proposals stored
before anything runs), ``call_turn`` / ``call`` and ``recall``. One call goes, in order:

    resolve → harness-tool intercept → strict intake → contract validation → Policy (harness
    tools too; on the arguments as proposed and as the tool's own validators leave them, the
    stricter decision) → approval settlement (``_calls.settle``) → effect ledger (``_effects``) → rate
    limit → the tool runs (``_run_tool``, the one place) → ``labels.finish`` (cleaning,
    truncation, trust and provenance labels) → one trace event per decision and outcome"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

import anyio

from tether.chokepoint._calls import (
    CallScope,
    Harness,
    Turn,
    checkpoint_pause,
    crash_observation,
    crash_text,
    error_output,
    record_denial,
    record_observation,
    record_rejection,
    refuse_shared,
    settle,
    shared_ids,
)
from tether.chokepoint._effects import run_effect
from tether.chokepoint._index import Index, index_offers, listing_version, relisted
from tether.chokepoint._labels import LABEL_KEYS, finish, memory_line, memory_origin
from tether.core._names import folded
from tether.core.messages import ToolCall, UserMessage
from tether.core.types import GateOutcome, Observation
from tether.errors import ApprovalError, ConfigError, PolicyError, ToolError
from tether.policy._approvals import idempotency_key
from tether.policy._intake import check_arguments, parse_arguments
from tether.policy._provenance_schema import declared_received
from tether.policy._rules import (
    HARNESS_SOURCE,
    Decision,
    Policy,
    ProposedCall,
    judged_as_received,
    rule_names,
)
from tether.policy._trusted import TrustedContext
from tether.runs._values import CallRecord, RunState
from tether.tools._contract import Tool, ToolContext, ToolSpec, unwrap_exception_group
from tether.tools._source import LocalTools, ToolSource
from tether.trace._events import EventKind
from tether.trace._sanitize import Redactor
from tether.trace._tracer import FlushMode, JsonlSink, Tracer, TraceSink, flush_mode

if TYPE_CHECKING:
    from tether.core.ratelimit import TokenBucket
    from tether.memory import MemoryStore
    from tether.policy._approvals import Approvals

__all__ = ["HostCore"]

Executed = tuple[Observation, BaseException | None]


_log = logging.getLogger("tether.host")


class HostCore:
    """The authority and its chokepoint: tools, policy, approvals, memory, traces. Knows no
    runner; ``tether.host.Host`` adds the run entry points."""

    def __init__(
        self,
        *,
        policy: Policy | None = None,
        memory: MemoryStore | None = None,
        trace_dir: str | Path | None = None,
        trace_sinks: Sequence[TraceSink] = (),
        secrets: Iterable[str] = (),
        on_denied: Literal["stop", "continue"] = "stop",
        clock: Any = None,
        approved_memory_sources: Iterable[str] = (),
        approvals: Approvals | None = None,
        labeler: Callable[[Observation], Observation] | None = None,
        rate_limits: Mapping[str, TokenBucket] | None = None,
        trace_flush: FlushMode = "batched",
    ) -> None:
        self.policy = policy or Policy()
        self.memory = memory
        self.trace_dir = Path(trace_dir) if trace_dir is not None else None
        self.extra_sinks = list(trace_sinks)
        self.trace_flush = flush_mode(trace_flush)
        self.secrets = frozenset(secrets)
        self.on_denied = on_denied
        self.clock = clock or (lambda: datetime.now(UTC))
        self.approved_memory_sources = frozenset(approved_memory_sources)
        self.approvals = approvals
        self.labeler = labeler  # provenance labelling of every observation
        self.rate_limits = dict(rate_limits or {})
        self.local = LocalTools()
        self.sources: list[ToolSource] = [self.local]
        self.disabled_sources: set[str] = set()
        self.disabled_memory: set[str] = set()
        self._specs: Index = {}
        self._versions: dict[str, int] = {}  # each source's listing version when indexed
        self._started = False

    # -- wiring ---------------------------------------------------------------------------

    def add_tools(self, *tools: Tool) -> None:
        for t in tools:
            self.local.add(t)
        self._started = False

    def add_source(self, source: ToolSource) -> None:
        if source.name == HARNESS_SOURCE:
            # The host's own context tools' source: provenance and the allowlist take what a
            # source of that name returns or offers for the host's own (a subagent's answer).
            raise ConfigError(f"tool source name {HARNESS_SOURCE!r} is reserved for the host's own tools")
        if any(s.name == source.name for s in self.sources):
            raise ConfigError(f"duplicate tool source {source.name!r}")
        self.sources.append(source)
        self._started = False

    def add_mcp_server(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        url: str | None = None,
        effects: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        mode: str = "auto",
        timeout_s: float = 30.0,
    ) -> ToolSource:
        """Connect an MCP server (stdio subprocess or Streamable HTTP). Tools become ``<name>__<tool>``."""
        from tether.mcp._source import McpServerSource

        source = McpServerSource(
            name, command=command, url=url, effects=effects or {}, env=env, mode=mode, timeout_s=timeout_s
        )
        self.add_source(source)
        return source

    async def start(self, tracer: Tracer | None = None) -> None:
        """Start sources and index their tools (``chokepoint._index``)."""
        enabled = [s for s in self.sources if s.name not in self.disabled_sources]
        for source in enabled:
            if (launch := getattr(source, "launch", None)) is not None:
                launch()  # servers connect concurrently; each start() below waits for its own
        offers: list[tuple[ToolSource, Sequence[ToolSpec]]] = []
        for source in enabled:
            await source.start()
            offers.append((source, await source.list_tools()))
        self._specs = index_offers(offers)
        self._versions = {s.name: listing_version(s) for s in enabled}
        self._started = True
        specs = self._specs
        unchecked_targets = getattr(self.policy, "unchecked_targets", None)  # a duck-typed policy: none
        if unchecked_targets is not None and (unchecked := unchecked_targets([s for s, _ in specs.values()])):
            _log.warning(
                "tools %s declare a target but the policy has no catalog: tenant ownership of their "
                "targets is not checked (give Policy(catalog=...) or the agent file's catalog_file)",
                ", ".join(unchecked),
            )

    async def ensure_started(self) -> None:
        """Start the host unless it is started: what every run entry point does first. A started
        host lists again the tools of a source whose listing changed since it indexed them."""
        if not self._started:
            await self.start()
            return
        enabled = [s for s in self.sources if s.name not in self.disabled_sources]
        if any(listing_version(s) != self._versions.get(s.name, 0) for s in enabled):
            self._specs, self._versions = await relisted(self._specs, enabled, self._versions)

    async def aclose(self) -> None:
        for source in reversed(self.sources):
            await source.close()
        self._started = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- tracing --------------------------------------------------------------------------

    def new_tracer(self, run_id: str) -> tuple[Tracer, Path | None]:
        # No ``MemorySink``: the tracer holds every event it emits (``Tracer.events``) already.
        sinks: list[TraceSink] = [*self.extra_sinks]
        path = self.trace_dir / f"{run_id}.jsonl" if self.trace_dir is not None else None
        if path is not None:
            sinks.append(JsonlSink(path, flush=self.trace_flush))
        return Tracer(run_id, sinks, redactor=Redactor(set(self.secrets))), path

    @staticmethod
    def new_run_id() -> str:
        return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]

    async def trace_launches(self, tracer: Tracer) -> None:
        for source in self.sources:
            if (bind := getattr(source, "bind_tracer", None)) is not None:
                bind(tracer)  # the source traces its own launch and decisions (pins, elicitation …)
            elif (describe := getattr(source, "describe", None)) is not None:
                tracer.emit(EventKind.SERVER_LAUNCH, source=source.name, **describe())

    # -- the narrow interface -----------------------------------------------------------------

    def offered(self, names: Sequence[str] | None = None) -> list[ToolSpec]:
        """Tools the model may see: allowed by policy, from enabled sources, optionally narrowed."""
        out = [
            spec
            for spec, source in self._specs.values()
            if source.name not in self.disabled_sources
            and self.policy.permits_tool(spec.name, spec.remote_name)
            and (names is None or spec.name in names)
        ]
        return sorted(out, key=lambda s: s.name)

    def known_tools(self) -> list[ToolSpec]:
        """Every tool the started sources list, offered or not."""
        return [spec for spec, _ in self._specs.values()]

    def decide(self, call: ToolCall, scope: CallScope) -> GateOutcome:
        """The decision stage alone, traced and recorded (for proposals stored before anything runs)."""
        s, t = scope.state, scope.tracer
        if t.redactor.declared(call.name):  # learn secrets from the whole call, not the cut below
            t.redactor.learn(call.name, call.arguments)
        t.emit(EventKind.TOOL_PROPOSED, call_id=call.id, tool=call.name, arguments=call.arguments[:2000])
        outcome = None
        if scope.harness is not None:
            outcome = scope.harness.intercept(call)
            if outcome is not None and outcome.status == "allow" and outcome.spec is not None:
                outcome = self._judge(outcome, s.context, s)
        if outcome is None:
            outcome = self._gate(call, s.context, scope.offered, s)
        if outcome.status == "deny" and outcome.decision is not None:
            d = outcome.decision
            record_denial(t, s, call, d.rule, d.reason, d.details)
        elif outcome.status in ("reject", "unknown"):
            record_rejection(t, s, call, outcome.error)
        elif outcome.status == "allow":
            assert outcome.decision is not None
            t.emit(EventKind.POLICY_ALLOWED, call_id=call.id, tool=call.name, rule=outcome.decision.rule)
        return outcome

    async def call_turn(self, calls: Sequence[ToolCall], scope: CallScope) -> Turn:
        """The one path of tool calls: decide, settle approvals, execute (ledger, rate limit,
        truncation, labels), trace and record."""
        shared = shared_ids(calls)  # a call id two calls of the turn give names neither: none runs
        outcomes = [self.decide(c, scope) if c.id not in shared else refuse_shared(c, scope) for c in calls]
        if scope.proposals:
            outcomes = [
                replace(o, proposal_id=scope.proposals[o.call.id])
                if o.status == "allow" and o.call.id in scope.proposals
                else o
                for o in outcomes
            ]
        turn = Turn(outcomes)
        turn.denied = [o for o in outcomes if o.status == "deny"]
        stop_on_denial = scope.stop_on_denial
        if turn.denied and (self.on_denied == "stop" if stop_on_denial is None else stop_on_denial):
            turn.halted = True
            return turn
        if any(o.status == "approve" for o in outcomes):
            assert self.approvals is not None  # the gate asks for approval only with a store
            # Nothing of this turn runs until every call needing approval has one; settling is
            # shielded from the run's deadline (what runs after it is cancelled at once).
            with anyio.CancelScope(shield=True):
                turn.outcomes = await settle(self.approvals, self.clock, turn, scope)
            if turn.refused or turn.waiting:
                turn.halted = True
                return turn
        await self._execute_allowed(turn, scope)
        return await self._close_turn(turn, scope)

    async def call(self, call: ToolCall, scope: CallScope) -> Turn:
        """``call_turn`` for a single call."""
        return await self.call_turn([call], scope)

    async def recall(self, subjects: Sequence[str], state: RunState, tracer: Tracer) -> UserMessage | None:
        """Memory for a run before any tool runs: expired, foreign and disabled records never enter
        context; each recalled claim is cleaned and labelled."""
        if self.memory is None or not subjects:
            return None
        lines = []
        for subject in subjects:
            if self._memory_disabled(subject):
                tracer.emit(EventKind.MEMORY_REJECTED, subject=subject, reason="disabled")
                continue
            found = await self.memory.read(
                subject, scope=state.context.scope, roles=set(state.context.roles), now=self.clock()
            )
            for rej in found.rejected:
                tracer.emit(
                    EventKind.MEMORY_REJECTED, subject=rej.subject, record_id=rej.record_id, reason=rej.reason
                )
            for rec in found.records:
                record, src = rec.record, rec.record.source
                # Read below a subject: still disabled; from a source the host does not take (a
                # store another host writes with a wider list): not recalled.
                if (why := self._unrecalled(record)) is not None:
                    tracer.emit(
                        EventKind.MEMORY_REJECTED, subject=record.subject, record_id=record.id, reason=why
                    )
                    continue
                state.memory.append(record)
                tracer.emit(
                    EventKind.MEMORY_RETRIEVED,
                    subject=record.subject,
                    record_id=record.id,
                    source=memory_origin(src),
                    confidence=record.confidence,
                    conflict=rec.conflict,
                )
                lines.append(memory_line(record, conflict=rec.conflict))
        if not lines:
            return None
        return UserMessage(
            "Remembered facts (verify before relying on them):\n" + "\n".join(lines), "harness"
        )

    def _unrecalled(self, record: Any) -> str | None:
        if self._memory_disabled(record.subject):
            return "disabled"
        approved, src = self.approved_memory_sources, record.source
        return "provenance" if approved and (src is None or src.system not in approved) else None

    def _memory_disabled(self, subject: str) -> bool:
        """Whether ``subject`` is a disabled subject or below one (``order:742:equipment`` under a
        disabled ``order:742``): a read returns a subject's records and those below it, so what a
        rollback disabled is never read through a wider or a narrower subject."""
        return any(subject == d or subject.startswith(d + ":") for d in self.disabled_memory)

    # -- decision (private) -----------------------------------------------------------------

    def _resolve(self, name: str) -> ToolSpec | None:
        if name in self._specs:
            return self._specs[name][0]
        # A bare remote name still names a known tool: resolved, so the policy denies it.
        matches = [s for s, _ in self._specs.values() if s.remote_name == name]
        return matches[0] if len(matches) == 1 else None

    def _gate(
        self, call: ToolCall, context: TrustedContext, offered: Sequence[ToolSpec], state: Any = None
    ) -> GateOutcome:
        """Decide one proposed call without running or tracing anything; never raises for bad model output."""
        spec = self._resolve(call.name)
        if spec is None:
            return GateOutcome(call, "unknown", error=self._unknown(call.name))
        if spec.name not in {s.name for s in offered}:
            decision = Decision("deny", "allowlist", "tool_not_allowed", {"tool": spec.name})
            return GateOutcome(call, "deny", spec=spec, decision=decision)
        try:
            parsed = parse_arguments(call.arguments)
            resolve = getattr(self.policy, "resolve_references", None)  # reference mode
            if resolve is not None:
                parsed = resolve(call.id, parsed, state)  # the schema and the policy judge resolved values
            arguments = check_arguments(spec.parameters, parsed)
        except PolicyError as err:
            return GateOutcome(
                call, "reject", spec=spec, error=f"{err.reason}: {err}", error_reason=err.reason
            )
        return self._judge(GateOutcome(call, "allow", spec=spec, arguments=arguments), context, state)

    def _judge(self, outcome: GateOutcome, context: TrustedContext, state: Any = None) -> GateOutcome:
        """Apply the policy to a call whose arguments passed intake."""
        assert outcome.spec is not None and outcome.arguments is not None
        spec, call = outcome.spec, outcome.call
        proposed = ProposedCall(call.id, spec, outcome.arguments, state, self)
        decision = judged_as_received(self.policy, proposed, context, self._received(spec, outcome.arguments))
        if decision.verdict == "approve":
            if self.approvals is not None:
                return outcome.decided("approve", decision)
            # No approval store: fail closed, and say how to proceed.
            hint = (
                "this call needs a person's approval: give the host an approval store "
                "(Host(approvals=...), --db) so the run pauses for one"
            )
            decision = Decision(
                "deny", decision.rule, "approval_unavailable", {**decision.details, "hint": hint}
            )
        return outcome.decided("allow" if decision.allowed else "deny", decision)

    def spec_of(self, name: str) -> ToolSpec | None:
        """The spec of the tool the host names ``name`` (``ToolCatalog``: for rules)."""
        return self._resolve(name)

    def received_of(self, name: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """What the tool named ``name`` receives for ``arguments`` where its validators change
        them (``ToolCatalog``: a turn-mate's call as its tool will take it)."""
        spec = self._resolve(name)
        return None if spec is None or not isinstance(arguments, dict) else self._received(spec, arguments)

    def _received(self, spec: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """What the tool's function receives where its own validators change ``arguments`` (its
        source's ``received_arguments``: local tools), or, for a tool whose code the host cannot
        run (a server's), where its schema says it decodes them (``declared_received``), else
        ``None``."""
        found = self._specs.get(spec.name)
        received = getattr(found[1], "received_arguments", None) if found is not None else None
        return (
            received(spec, arguments) if callable(received) else declared_received(spec.parameters, arguments)
        )

    def _unknown(self, name: str) -> str:
        for source in self.sources:
            if name.startswith(f"{source.name}__") and source.name in self.disabled_sources:
                return f"unknown tool {name!r}: its server {source.name!r} is disabled"
        unavailable = [
            s for s in self.sources if getattr(s, "unavailable", None) and name.startswith(f"{s.name}__")
        ]
        if unavailable:
            why = unavailable[0].unavailable  # type: ignore[attr-defined]
            return f"unknown tool {name!r}: its server {unavailable[0].name!r} is unavailable ({why})"
        return f"unknown tool {name!r}"

    # -- execution (private) ----------------------------------------------------------------

    async def _execute_allowed(self, turn: Turn, scope: CallScope) -> None:
        allowed = [o for o in turn.outcomes if o.status == "allow"]
        # The host's own tools run after the turn's other calls, one at a time: a subagent's child
        # run starts from what its parent has done, so it must see its turn-mates' effects (and
        # its sibling child runs'), or two helpers asked together each pay up to the bound.
        harness = scope.harness
        own = [o for o in allowed if harness is not None and o.spec is not None and harness.owns(o.spec.name)]
        allowed = [o for o in allowed if all(o is not h for h in own)]
        if len(allowed) == 1:
            await self._execute_one(allowed[0], turn, scope)  # no task group for a single call
        elif allowed:
            async with anyio.create_task_group() as tg:
                for o in allowed:
                    tg.start_soon(self._execute_one, o, turn, scope)
        for o in own:
            await self._execute_one(o, turn, scope)
            if (obs := turn.observations.get(o.call.id)) is not None and obs.meta.get("pause"):
                break  # a child run waits for a person: the host's tools after it wait with the run

    async def _close_turn(self, turn: Turn, scope: CallScope) -> Turn:
        """Trace crashes, note questions, and checkpoint a turn that must pause."""
        for name, crash in turn.crashes:
            scope.tracer.emit(EventKind.TOOL_CRASHED, tool=name, error=crash_text(crash))
        turn.questions = {
            call_id: f"{obs.tool}: paused for {obs.meta.get('awaiting') or 'input'}: {obs.meta['pause']}"
            for call_id, obs in turn.observations.items()
            if obs.meta.get("pause")
        }
        if (turn.unsettled or turn.questions) and scope.checkpoint and self.approvals is not None:
            with anyio.CancelScope(shield=True):
                await checkpoint_pause(
                    self.approvals, self.clock, turn, scope, [*turn.unsettled, *turn.questions.values()]
                )
        return turn

    async def _execute_one(self, o: GateOutcome, turn: Turn, scope: CallScope) -> None:
        s, t = scope.state, scope.tracer
        assert o.spec is not None and o.arguments is not None
        ctx = ToolContext(
            run_id=s.run_id,
            tenant=s.context.tenant,
            roles=s.context.roles,
            user=s.context.user,
            call_id=o.call.id,
            now=self.clock(),
        )
        harness = scope.harness if scope.harness is not None and scope.harness.owns(o.spec.name) else None
        if o.spec.effect.side_effecting and (flush := getattr(t, "flush", None)) is not None:
            flush()  # every decision before an effect is on disk before the effect happens
        if harness is None and self.approvals is not None and o.spec.effect.side_effecting:
            try:
                obs, crash = await self._effect(o, ctx, scope)
            except ApprovalError as err:  # outcome unknown, or held by another process
                turn.unsettled.append(f"{o.spec.name}: {err.reason}: {err}")
                turn.unsettled_errors.append(err)
                return
        else:
            obs, crash = await self._run_tool(o.spec, o.arguments, ctx, harness, t)
        # What the tool received (it may have acted on it): as its validators left the arguments.
        received = o.arguments if harness is not None else self._received(o.spec, o.arguments) or o.arguments
        if crash is not None:
            turn.crashes.append((o.spec.name, crash))
            s.calls.append(CallRecord(o.call.id, o.call.name, received, "crashed", type(crash).__name__))
            return
        turn.observations[o.call.id] = obs
        record_observation(t, s, obs, received)

    async def _effect(self, o: GateOutcome, ctx: ToolContext, scope: CallScope) -> Executed:
        """A side-effecting call through the effect ledger: at most once per idempotency key."""
        assert o.spec is not None and o.arguments is not None and self.approvals is not None
        s, spec, arguments = scope.state, o.spec, o.arguments
        # After a pause for a person's answer (the server was told "cancel"), a new key: a new effect.
        pauses = sum(1 for x in s.observations if x.call_id == o.call.id and x.meta.get("pause"))
        key = None
        if pauses:
            attempt = f"{o.call.id}#after-pause-{pauses}"
            key = idempotency_key(s.run_id, s.steps, attempt, spec.name, arguments)

        async def run(context: ToolContext) -> Executed:
            return await self._run_tool(spec, arguments, context, tracer=scope.tracer)

        def relabel(obs: Observation) -> Observation:  # a result replayed from the ledger
            return finish(obs, limit=spec.max_result_chars, trust="untrusted", labeler=self.labeler)

        return await run_effect(
            self.approvals,
            spec,
            arguments,
            ctx,
            run,
            step=s.steps,
            proposal_id=o.proposal_id,
            key=key,
            emit=scope.tracer.emit,
            now=self.clock,
            finish=relabel,
        )

    def _buckets(self, spec: ToolSpec, source: str) -> list[TokenBucket]:
        """The rate limits a call of ``spec`` takes: the tool's and its source's both (a server's
        limit is not escaped by a tool with a wider one), found under any name ``deny`` and ``roles``
        know it by (``rule_names``: ``refund`` for ``erp__refund``) in any spelling (``folded``)."""
        if not self.rate_limits:  # none set (the common case): no name folded on each call
            return []
        limits = {folded(k): b for k, b in self.rate_limits.items()}
        names = {folded(n) for n in rule_names(spec.name, spec.remote_name)}
        found = [b for k in (*names, folded(source)) if (b := limits.get(k)) is not None]
        return list({id(b): b for b in found}.values())

    async def _run_tool(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        context: ToolContext,
        harness: Harness | None = None,
        tracer: Tracer | None = None,
    ) -> Executed:
        """The one place a tool runs (a harness tool of the run, or a source's tool), then
        ``labels.finish``. Recoverable failures become error observations (a timed-out call whose
        thread runs on is traced late on ``tracer`` when it ends); a programming error is
        returned as the second value so the caller can end the run loudly."""
        if harness is not None:
            obs, crash = await harness.execute(spec, arguments, context)
            return finish(
                obs, limit=spec.max_result_chars, trust=harness.trust(spec.name), labeler=self.labeler
            ), crash
        source = self._specs[spec.name][1]
        waited = 0.0
        for bucket in self._buckets(spec, source.name):
            waited += await bucket.acquire()
        now = self.clock()
        try:
            output = await source.call(spec, arguments, context)
        except BaseExceptionGroup as group:
            leaf = unwrap_exception_group(group)
            if not isinstance(leaf, ToolError):
                return crash_observation(spec, source.name, now, leaf), leaf
            output = error_output(leaf, tracer, context.call_id, spec.name)
        except ToolError as err:
            output = error_output(err, tracer, context.call_id, spec.name)
        except Exception as err:
            return crash_observation(spec, source.name, now, err), err
        # The labels are the host's alone: a source's output that carries them is not believed.
        meta = {k: v for k, v in output.meta.items() if k not in LABEL_KEYS}
        meta.update(truncated=output.truncated, **({"rate_wait_s": waited} if waited else {}))
        obs = Observation(
            call_id=context.call_id,
            tool=spec.name,
            source=source.name,
            observed_at=now,
            text=output.text,
            data=output.data,
            is_error=output.is_error,
            error_kind=output.error_kind,
            meta=meta,
        )
        return finish(obs, limit=spec.max_result_chars, trust="untrusted", labeler=self.labeler), None
