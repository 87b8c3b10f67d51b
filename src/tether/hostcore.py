"""The host's authority: the one gate every call passes (the chokepoint is ``tether.calls``).

The model proposes tool calls; the host resolves each name to a known tool, parses the
arguments strictly, validates them against the contract, applies policy (allowlist,
tenant scope, egress, effect) and only then lets the tool source see the call. Results
come back as untrusted observations with source and time.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from tether.calls import CallPipeline, CallScope, Harness, Turn
from tether.errors import (
    ConfigError,
    DependencyUnavailable,
    PolicyError,
    ToolError,
)
from tether.mcp.clean import clean_result_data, clean_result_text
from tether.messages import ToolCall
from tether.policy.intake import check_arguments, parse_arguments
from tether.policy.rules import Decision, Policy, ProposedCall
from tether.policy.trusted import TrustedContext
from tether.tools.contract import Tool, ToolContext, ToolOutput, ToolSpec, unwrap_exception_group
from tether.tools.source import LocalTools, ToolSource
from tether.trace.events import EventKind
from tether.trace.sanitize import Redactor
from tether.trace.tracer import FlushMode, JsonlSink, MemorySink, Tracer, TraceSink, flush_mode
from tether.types import GateOutcome, Observation

if TYPE_CHECKING:
    from tether.memory import MemoryStore
    from tether.policy.approvals import Approvals
    from tether.ratelimit import TokenBucket

__all__ = ["HostCore"]


class HostCore:
    """The authority and its chokepoint: tools, policy, approvals, memory, traces. Knows no runner;
    ``tether.host.Host`` adds the run entry points (agent loop, workflows, resume)."""

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
        self.trace_flush = flush_mode(trace_flush)  # JSONL durability: trace/tracer.py
        self.secrets = frozenset(secrets)
        self.on_denied = on_denied
        self.clock = clock or (lambda: datetime.now(UTC))
        self.approved_memory_sources = frozenset(approved_memory_sources)
        self.approvals = approvals
        # Optional provenance labelling of every observation (policy/provenance_rules.py).
        self.labeler = labeler
        # Shared token buckets by tool name or source (upstream) name: one budget for every
        # concurrent call to that upstream, across turns and runs (L4).
        self.rate_limits = dict(rate_limits or {})
        self.local = LocalTools()
        self.sources: list[ToolSource] = [self.local]
        self.disabled_sources: set[str] = set()
        self.disabled_memory: set[str] = set()
        self._specs: dict[str, tuple[ToolSpec, ToolSource]] = {}
        self._pipeline = CallPipeline(self)
        self._started = False

    # -- wiring ---------------------------------------------------------------------------

    def add_tools(self, *tools: Tool) -> None:
        for t in tools:
            self.local.add(t)
        self._started = False

    def add_source(self, source: ToolSource) -> None:
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
        # Lazy for start-up time: hosts without MCP servers never load the MCP client.
        from tether.mcp.source import McpServerSource

        source = McpServerSource(
            name, command=command, url=url, effects=effects or {}, env=env, mode=mode, timeout_s=timeout_s
        )
        self.add_source(source)
        return source

    async def start(self, tracer: Tracer | None = None) -> None:
        """Start sources and index their tools. Duplicate names are a configuration error."""
        specs: dict[str, tuple[ToolSpec, ToolSource]] = {}
        enabled = [s for s in self.sources if s.name not in self.disabled_sources]
        for source in enabled:
            launch = getattr(source, "launch", None)
            if launch is not None:
                launch()  # servers connect concurrently; each start() below waits for its own
        for source in enabled:
            await source.start()
            for spec in await source.list_tools():
                if spec.name in specs:
                    raise ConfigError(f"tool {spec.name!r} offered by two sources")
                specs[spec.name] = (spec, source)
        self._specs = specs
        self._started = True

    async def aclose(self) -> None:
        for source in reversed(self.sources):
            await source.close()
        self._started = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- tools offered and the gate ---------------------------------------------------------

    def offered(self, names: Sequence[str] | None = None) -> list[ToolSpec]:
        """Tools the model may see: allowed by policy, from enabled sources, optionally narrowed."""
        out = []
        for spec, source in self._specs.values():
            if source.name in self.disabled_sources or not self.policy.permits_tool(spec.name):
                continue
            if names is not None and spec.name not in names:
                continue
            out.append(spec)
        return sorted(out, key=lambda s: s.name)

    def known_tools(self) -> list[ToolSpec]:
        """Every tool the started sources list, offered or not: a call to one not offered is
        still proposed and traced (and resolved by its bare remote name, see ``_resolve``)."""
        return [spec for spec, _ in self._specs.values()]

    def _resolve(self, name: str) -> ToolSpec | None:
        if name in self._specs:
            return self._specs[name][0]
        # A bare remote name ("export_secrets") still names a real, known tool: resolve it so
        # the policy denies it, rather than treating a forbidden tool as a typo.
        matches = [s for s, _ in self._specs.values() if s.remote_name == name]
        return matches[0] if len(matches) == 1 else None

    def gate(
        self, call: ToolCall, context: TrustedContext, offered: Sequence[ToolSpec], state: Any = None
    ) -> GateOutcome:
        """Decide one proposed call, without running or tracing anything. Never raises for bad
        model output. Runners do not call this: ``call_turn`` decides, settles and executes."""
        spec = self._resolve(call.name)
        if spec is None:
            return GateOutcome(call, "unknown", error=self._unknown(call.name))
        if spec.name not in {s.name for s in offered}:
            decision = Decision("deny", "allowlist", "tool_not_allowed", {"tool": spec.name})
            return GateOutcome(call, "deny", spec=spec, decision=decision)
        try:
            # Strict intake (T3): the strict parser, then the one schema check (tether.schema).
            parsed = parse_arguments(call.arguments)
            resolve = getattr(self.policy, "resolve_references", None)  # reference mode: policy/references.py
            if resolve is not None:
                parsed = resolve(call.id, parsed, state)  # the schema and the policy judge resolved values
            arguments = check_arguments(spec.parameters, parsed)
        except PolicyError as err:
            return GateOutcome(
                call, "reject", spec=spec, error=f"{err.reason}: {err}", error_reason=err.reason
            )
        return self.judge(GateOutcome(call, "allow", spec=spec, arguments=arguments), context, state)

    def judge(self, outcome: GateOutcome, context: TrustedContext, state: Any = None) -> GateOutcome:
        """Apply the policy to a call whose arguments passed intake (source and harness tools alike)."""
        assert outcome.spec is not None and outcome.arguments is not None
        spec, call = outcome.spec, outcome.call
        decision = self.policy.check(ProposedCall(call.id, spec, outcome.arguments, state), context)
        if decision.verdict == "approve":
            if self.approvals is not None:
                return outcome.decided("approve", decision)
            # No approval store in this host: fail closed, and say how to proceed.
            decision = Decision(
                "deny",
                decision.rule,
                "approval_unavailable",
                {
                    **decision.details,
                    "hint": "give the host an approval store (Host(approvals=...), --db) or declare "
                    "the tool's effect as read if it has no side effect",
                },
            )
        return outcome.decided("allow" if decision.allowed else "deny", decision)

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

    # -- the chokepoint (tether.calls) ---------------------------------------------------------

    def decide(self, call: ToolCall, scope: CallScope) -> GateOutcome:
        """The chokepoint's decision stage alone (traced and recorded): for proposals that are
        stored before anything runs (the approval desk)."""
        return self._pipeline.decide(call, scope)

    async def call_turn(self, calls: Sequence[ToolCall], scope: CallScope) -> Turn:
        """The one path of tool calls: decide, settle approvals, execute (ledger, rate limit,
        truncation, labels), trace and record. Every runner calls this and nothing else."""
        return await self._pipeline.turn(calls, scope)

    async def call(self, call: ToolCall, scope: CallScope) -> Turn:
        """``call_turn`` for a single call."""
        return await self._pipeline.turn([call], scope)

    async def run_tool(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        context: ToolContext,
        harness: Harness | None = None,
    ) -> tuple[Observation, BaseException | None]:
        """Execution stage of the chokepoint, the one place a tool runs: a harness tool of the
        run (``harness``, which owns ``spec``) or a source's tool (rate limit, source call), then
        cleaning, truncation and labels (``finish_observation``). Recoverable failures become
        error observations; a programming error is returned as the second value so the caller
        can end the run loudly. Only ``tether.calls`` (and the ledger it hands effects to) calls
        this."""
        if harness is not None:
            obs, crash = await harness.execute(spec, arguments, context)
            return self.finish_observation(spec, obs), crash
        source = self._specs[spec.name][1]
        bucket = self.rate_limits.get(spec.name) or self.rate_limits.get(source.name)
        waited = await bucket.acquire() if bucket is not None else 0.0
        now = self.clock()
        try:
            output = await source.call(spec, arguments, context)
        except BaseExceptionGroup as group:
            leaf = unwrap_exception_group(group)
            if isinstance(leaf, ToolError):
                output = _error_output(leaf)
            else:
                return _crash(spec, source, now, leaf), leaf
        except ToolError as err:
            output = _error_output(err)
        except Exception as err:
            return _crash(spec, source, now, err), err
        obs = Observation(
            call_id=context.call_id,
            tool=spec.name,
            source=source.name,
            observed_at=now,
            text=output.text,
            data=output.data,
            is_error=output.is_error,
            error_kind=output.error_kind,
            meta={
                **output.meta,
                "truncated": output.truncated,
                **({"rate_wait_s": waited} if waited else {}),
            },
        )
        return self.finish_observation(spec, obs), None

    def finish_observation(self, spec: ToolSpec, obs: Observation) -> Observation:
        """Cleaning, truncation and labelling: one implementation for every tool, local, MCP or
        harness. Hidden characters (zero-width, bidi, tag characters) are removed and counted,
        HTML comments and markdown image/link targets neutralised (``meta["cleaned"]``)."""
        if "cleaned" not in obs.meta:
            text, found = clean_result_text(obs.text)
            data: Any
            if obs.data is obs.text:  # a text result: its data is the same string, cleaned once
                data, found_in_data = text, found
            else:
                data, found_in_data = clean_result_data(obs.data) if obs.data is not None else (None, {})
            if found or found_in_data:
                obs = replace(obs, text=text, data=data, meta={**obs.meta, "cleaned": found or found_in_data})
        if len(obs.text) > spec.max_result_chars:
            text = obs.text[: spec.max_result_chars] + f"\n[TRUNCATED: {len(obs.text)} characters in all]"
            obs = replace(obs, text=text, meta={**obs.meta, "truncated": True})
        if self.labeler is not None:
            obs = self.labeler(obs)
        return obs

    # -- tracing --------------------------------------------------------------------------

    def new_tracer(self, run_id: str) -> tuple[Tracer, Path | None]:
        sinks: list[TraceSink] = [MemorySink(), *self.extra_sinks]
        path = None
        if self.trace_dir is not None:
            path = self.trace_dir / f"{run_id}.jsonl"
            sinks.append(JsonlSink(path, flush=self.trace_flush))
        return Tracer(run_id, sinks, redactor=Redactor(set(self.secrets))), path

    @staticmethod
    def new_run_id() -> str:
        return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]

    async def trace_launches(self, tracer: Tracer) -> None:
        for source in self.sources:
            bind = getattr(source, "bind_tracer", None)
            if bind is not None:
                bind(tracer)  # the source traces its own launch and decisions (pins, elicitation …)
                continue
            describe = getattr(source, "describe", None)
            if describe is not None:
                tracer.emit(EventKind.SERVER_LAUNCH, source=source.name, **describe())


def _error_output(err: ToolError) -> ToolOutput:
    import json

    return ToolOutput(
        text=json.dumps(err.to_result(), ensure_ascii=False, sort_keys=True),
        data=err.to_result(),
        is_error=True,
        error_kind=err.kind,
        meta={"unavailable": isinstance(err, DependencyUnavailable), **getattr(err, "meta", {})},
    )


def _crash(spec: ToolSpec, source: ToolSource, now: datetime, err: BaseException) -> Observation:
    return Observation(
        call_id="",
        tool=spec.name,
        source=source.name,
        observed_at=now,
        text="internal error",
        is_error=True,
        error_kind="internal_error",
        meta={"exception": f"{type(err).__name__}: {err}"},
    )
