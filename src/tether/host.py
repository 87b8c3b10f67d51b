"""The host: the one gate every call passes, and the owner of authority.

The model proposes tool calls; the host resolves each name to a known tool, parses the
arguments strictly, validates them against the contract, applies policy (allowlist,
tenant scope, egress, effect) and only then lets the tool source see the call. Results
come back as untrusted observations with source and time.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from tether.context.untrusted import Observation
from tether.errors import (
    ConfigError,
    DependencyUnavailable,
    PolicyError,
    ToolError,
    ToolInputError,
)
from tether.messages import ToolCall
from tether.policy.intake import check_arguments, parse_arguments
from tether.policy.rules import Decision, Policy, ProposedCall
from tether.policy.trusted import TrustedContext
from tether.tools.contract import Tool, ToolContext, ToolOutput, ToolSpec, unwrap_exception_group
from tether.tools.source import LocalTools, ToolSource
from tether.trace.events import EventKind
from tether.trace.sanitize import Redactor
from tether.trace.tracer import FlushMode, JsonlSink, MemorySink, Tracer, TraceSink, flush_mode

if TYPE_CHECKING:
    from tether.memory import MemoryStore
    from tether.policy.approvals import Approvals
    from tether.ratelimit import TokenBucket
    from tether.run import Agent, RunResult
    from tether.workflow import Workflow

__all__ = ["GateOutcome", "Host"]


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """What the gate decided for one proposed call."""

    call: ToolCall
    status: Literal["allow", "deny", "reject", "unknown", "approve"]
    spec: ToolSpec | None = None
    arguments: dict[str, Any] | None = None
    decision: Decision | None = None
    error: str = ""
    proposal_id: str | None = None  # the approved proposal an "allow" executes (its stored arguments)


class Host:
    """Authority for runs: tools, policy, memory, traces. Build it in application code."""

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
        from tether.mcp.source import McpServerSource

        source = McpServerSource(
            name, command=command, url=url, effects=effects or {}, env=env, mode=mode, timeout_s=timeout_s
        )
        self.add_source(source)
        return source

    async def start(self, tracer: Tracer | None = None) -> None:
        """Start sources and index their tools. Duplicate names are a configuration error."""
        specs: dict[str, tuple[ToolSpec, ToolSource]] = {}
        for source in self.sources:
            if source.name in self.disabled_sources:
                continue
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

    async def __aenter__(self) -> Host:
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
        """Decide one proposed call. Never raises for bad model output."""
        spec = self._resolve(call.name)
        if spec is None:
            return GateOutcome(call, "unknown", error=f"unknown tool {call.name!r}")
        if spec.name not in {s.name for s in offered}:
            decision = Decision("deny", "allowlist", "tool_not_allowed", {"tool": spec.name})
            return GateOutcome(call, "deny", spec=spec, decision=decision)
        try:
            # Strict intake (T3) first, against the contract's schema; then the source's own validation.
            arguments = check_arguments(spec.parameters, parse_arguments(call.arguments))
            arguments = self.validate_arguments(spec, arguments)
        except PolicyError as err:
            return GateOutcome(call, "reject", spec=spec, error=f"{err.reason}: {err}")
        except ToolInputError as err:
            return GateOutcome(call, "reject", spec=spec, error=err.message)
        decision = self.policy.check(ProposedCall(call.id, spec, arguments, state), context)
        if decision.verdict == "approve":
            if self.approvals is not None:
                return GateOutcome(call, "approve", spec=spec, arguments=arguments, decision=decision)
            # No approval store in this host: fail closed.
            decision = Decision("deny", decision.rule, "approval_unavailable", dict(decision.details))
        status: Literal["allow", "deny"] = "allow" if decision.allowed else "deny"
        return GateOutcome(call, status, spec=spec, arguments=arguments, decision=decision)

    def validate_arguments(self, spec: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
        source = self._specs[spec.name][1]
        validate = getattr(source, "validate", None)
        if validate is None:
            return arguments
        return validate(spec.remote_name or spec.name, arguments)  # type: ignore[no-any-return]

    async def execute(
        self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext
    ) -> tuple[Observation, BaseException | None]:
        """Run one allowed call. Recoverable failures become error observations; a programming
        error is returned as the second value so the caller can end the run loudly."""
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
        text = output.text
        truncated = output.truncated
        if len(text) > spec.max_result_chars:
            text = text[: spec.max_result_chars] + f"\n[TRUNCATED: {len(output.text)} characters in all]"
            truncated = True
        obs = Observation(
            call_id=context.call_id,
            tool=spec.name,
            source=source.name,
            observed_at=now,
            text=text,
            data=output.data,
            is_error=output.is_error,
            error_kind=output.error_kind,
            meta={**output.meta, "truncated": truncated, **({"rate_wait_s": waited} if waited else {})},
        )
        if self.labeler is not None:
            obs = self.labeler(obs)
        return obs, None

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

    # -- runs -----------------------------------------------------------------------------

    async def run(self, agent: Agent, objective: str, *, context: TrustedContext) -> RunResult:
        """Run an agent to exactly one stop reason. Raises only for host misconfiguration."""
        from tether.loop import AgentLoop

        if not self._started:
            await self.start()
        return await AgentLoop(self, agent, objective, context).run()

    async def resume(self, agent: Agent, run_id: str) -> RunResult:
        """Continue a run paused for approval (its checkpoint is in ``approvals.store``)."""
        from tether.checkpoint import resume_run

        if not self._started:
            await self.start()
        return await resume_run(self, agent, run_id)

    async def run_workflow(self, workflow: Workflow, objective: str, *, context: TrustedContext) -> RunResult:
        from tether.workflow import run_workflow

        if not self._started:
            await self.start()
        return await run_workflow(self, workflow, objective, context)

    async def rollback(
        self,
        failed: RunResult,
        workflow: Workflow,
        objective: str,
        *,
        context: TrustedContext,
        disable_sources: Iterable[str] = (),
        disable_memory: Iterable[str] = (),
    ) -> RunResult:
        """Agent → workflow: keep the failed trace, disable what it implicated, run the workflow."""
        self.disabled_memory.update(disable_memory)
        from tether.workflow import run_workflow

        if not self._started:
            await self.start()
        return await run_workflow(
            self,
            workflow,
            objective,
            context,
            rollback_from={
                "failed_run_id": failed.run_id,
                "stop_reason": str(failed.stop_reason),
                "trace": str(failed.trace_path) if failed.trace_path else None,
                "disabled_sources": sorted(disable_sources),
                "disabled_memory": sorted(self.disabled_memory),
            },
        )

    def run_sync(self, agent: Agent, objective: str, *, context: TrustedContext) -> RunResult:
        """Blocking wrapper for scripts: starts, runs and closes the host in one event loop."""

        async def main() -> RunResult:
            try:
                return await self.run(agent, objective, context=context)
            finally:
                await self.aclose()

        return anyio.run(main)

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
