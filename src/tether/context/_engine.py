"""The context engine: one object per run that composes every model request: the stable prefix
(system prompt, tools in a fixed order), the trajectory as rewritten by the compression layers
(frozen: byte-stable and resumable) and the dynamic tail (the status bar). It owns the harness
tools it adds, parsed with the same strict intake as any proposal.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import Field

from tether.context._compression import CompressionConfig, Compressor, ModelSummarizer
from tether.context._incremental import ItemMemo
from tether.context._meter import PrefixMeter, PrefixSample
from tether.context._pairing import PairingMemo, check_pairing
from tether.context._skills import SkillLibrary
from tether.context._status import StatusBar, StatusConfig, choose_status_strategy, over_limit
from tether.context._store import FrozenStore, LargeOutputStore
from tether.context._subagent import Subagent, SubtaskPaused, SubtaskRunner
from tether.context._todo import TodoList
from tether.context._tokens import TokenAccount, TokenEstimator, chars_estimator
from tether.context._toolsearch import ToolSearch, ToolSearchConfig
from tether.core.messages import Message, SystemMessage, ToolCall, Usage, UserMessage
from tether.core.stop import Limits, StopReason
from tether.core.types import Decision, GateOutcome, Observation, Trust
from tether.errors import ConfigError, PolicyError, ToolError
from tether.models._base import Model, ModelRequest
from tether.models._estimate import item_json
from tether.policy._intake import check_arguments, parse_arguments
from tether.tools._contract import Effect, Tool, ToolContext, ToolSpec, tool

if TYPE_CHECKING:
    from tether.runs._values import RunState

__all__ = ["Composed", "ContextConfig", "ContextEngine"]

HARNESS: Final = "harness"
Emit = Callable[..., object]


@dataclass(frozen=True)
class ContextConfig:
    """How an agent's context is composed. The default only measures (no status, no rewrites)."""

    status: StatusConfig | None = None
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    skills: SkillLibrary | None = None
    tool_search: ToolSearchConfig | None = None
    estimator: TokenEstimator = chars_estimator
    summary_model: Model | None = None  # writes summaries; default: the agent's model
    store_path: str | Path | None = None  # frozen rewrites; default: <trace_dir>/<run_id>.context.json
    outputs_dir: str | Path | None = None  # large outputs; default: <trace_dir>/outputs
    subagents: Sequence[Subagent] = ()  # offered as tools name(task); each runs in its own context


@dataclass(frozen=True, slots=True)
class Composed:
    """What one build produced, for the trace (``context_composed``)."""

    tokens: int
    prefix: PrefixSample
    status_strategy: str | None
    messages: int
    tools: int

    def trace_fields(self) -> dict[str, Any]:
        return {
            "request_tokens": self.tokens,
            "request_bytes": self.prefix.request_bytes,
            "common_prefix_bytes": self.prefix.common_bytes,
            "prefix_reuse": self.prefix.reuse,
            "cached_share": self.prefix.cached_share,
            "status_strategy": self.status_strategy,
        }


class ContextEngine:
    """Composes the requests of one run. Build it once per run (``AgentLoop`` does)."""

    def __init__(
        self,
        config: ContextConfig | None = None,
        *,
        instructions: str,
        tools: Sequence[ToolSpec],
        model: Model | None = None,
        clock: Callable[[], datetime] | None = None,
        store: FrozenStore | None = None,
        outputs: LargeOutputStore | None = None,
        trace_dir: str | Path | None = None,
        run_id: str = "run",
        tenant: str = "",
        emit: Emit | None = None,
        expected_updates: int = 12,
        limits: Limits | None = None,
    ) -> None:
        self.config = cfg = config or ContextConfig()
        self.limits = limits  # the run's: what its summaries may spend
        self.clock = clock or (lambda: datetime.now(UTC))
        self._emit = emit or (lambda *a, **k: None)
        base = Path(trace_dir) if trace_dir is not None else None
        if store is None:
            path = cfg.store_path or (base / f"{run_id}.context.json" if base is not None else None)
            store = FrozenStore(path)
        if outputs is None:
            root = cfg.outputs_dir or (base / "outputs" if base is not None else None)
            outputs = LargeOutputStore(root, run=run_id, tenant=tenant)
        self.store, self.outputs = store, outputs
        summary_model = cfg.summary_model or model
        self.compressor = Compressor(
            cfg.compression,
            store=store,
            outputs=outputs,
            summarizer=ModelSummarizer(summary_model) if summary_model is not None else None,
            emit=self._emit,
        )
        texts = ItemMemo(item_json)  # each message is encoded once for the token count and the meter
        self.tokens = TokenAccount(cfg.estimator, texts)
        self.meter = PrefixMeter(texts)
        self._pairing = PairingMemo()
        self.expected_updates = max(
            1, (cfg.status.expected_updates if cfg.status else None) or expected_updates
        )

        self._add_harness_tools(cfg, tools, store)
        self._stable_prefix(cfg, instructions, tools)
        self.last: Composed | None = None
        self._status_mark = 0
        self._usage_charged = Usage()
        self._calls_charged, self._cost_charged = 0, 0.0
        self._state: RunState | None = None  # the run, as of the last request (``_limited``)
        self._turn: list[tuple[str, Any]] = []
        self._tools = tuple(tools)

    def _add_harness_tools(self, cfg: ContextConfig, tools: Sequence[ToolSpec], store: FrozenStore) -> None:
        """The harness tools, part of the stable prefix. Raises ``ConfigError`` on a name clash."""
        self.todo = TodoList(self.clock) if cfg.status is not None and cfg.status.todo else None
        self.status = StatusBar(cfg.status, self.todo, self.clock) if cfg.status is not None else None
        if self.status is not None:
            self.status.targets = {s.name: s.target.argument for s in tools if s.target is not None}
        harness: list[Tool] = []
        if self.todo is not None:
            harness.extend(self.todo.tools())
        if cfg.skills is not None and cfg.skills.skills:
            harness.extend(cfg.skills.tools())
        self.search = ToolSearch(cfg.tool_search, tools, store) if cfg.tool_search is not None else None
        if self.search is not None and self.search.active:
            harness.append(self.search.tool())
        if cfg.compression.result_budget_chars is not None:
            harness.append(_OutputReader(self.outputs).read_output)
        self.runner: SubtaskRunner | None = None  # set by the loop: runs a subagent on the run's host
        self._subagents = {s.name: s for s in cfg.subagents}
        harness.extend(self._subagent_tool(s) for s in cfg.subagents)
        self._harness: dict[str, Tool] = {}
        offered = {s.name for s in tools}
        for t in harness:
            if t.name in offered or t.name in self._harness:
                raise ConfigError(f"tool name {t.name!r} is reserved by the context engine")
            self._harness[t.name] = t
        self._harness_specs = {
            name: replace(t.spec, source=HARNESS, effect=Effect.READ) for name, t in self._harness.items()
        }

    def _stable_prefix(self, cfg: ContextConfig, instructions: str, tools: Sequence[ToolSpec]) -> None:
        """The system message and the tool list every request of the run starts with."""
        system = instructions
        if cfg.skills is not None and (catalog := cfg.skills.catalog()):
            system += "\n\n" + catalog
        self.system = SystemMessage(system)
        tool_wire = self.search.wire_tools() if self.search is not None else [s.wire() for s in tools]
        tool_wire.extend(s.wire() for s in self._harness_specs.values())
        self.tools: tuple[dict[str, Any], ...] = tuple(sorted(tool_wire, key=lambda t: t["function"]["name"]))

    def opening(self, objective: str) -> list[UserMessage]:
        """The first user messages of a run: ``/skill rest`` is expanded by the host."""
        skills = self.config.skills
        for refusal in skills.refused if skills is not None else ():
            self._emit("skill_refused", path=refusal.path, reason=refusal.reason, digest=refusal.digest)
        found = skills.expand_command(objective) if skills is not None else None
        if found is None:
            return [UserMessage(objective)]
        skill, rest = found
        self._emit("skill_loaded", skill=skill.name, digest=skill.digest, via="command")
        block = f'<skill name="{skill.name}">\n{skills.body(skill.name)}\n</skill>'  # type: ignore[union-attr]
        return [UserMessage(block, HARNESS), *([UserMessage(rest)] if rest else [])]

    def _request(
        self, messages: Sequence[Message], tail: Sequence[Message], tools_enabled: bool
    ) -> ModelRequest:
        return ModelRequest(
            messages=(self.system, *messages, *tail),
            tools=self.tools if tools_enabled else (),
            tool_choice="auto" if tools_enabled else "none",
        )

    async def build(
        self, state: RunState, *, tools_enabled: bool = True, tail: Sequence[UserMessage] = ()
    ) -> ModelRequest:
        """The next request for ``state`` (may append a status, freeze rewrites; ``ContextOverflow``)."""
        tail_msgs: list[Message] = []
        strategy: str | None = None
        self._state, self._turn = state, []  # the calls of the turn this request asks for
        if self.status is not None:
            text = self.status.render(state)
            strategy = self._status_strategy(state, text)
            message = UserMessage(text, HARNESS)
            if strategy == "append":
                state.trajectory.append(message)
            else:
                tail_msgs.append(message)
            self._status_mark = len(state.trajectory)
        tail_msgs.extend(tail)

        def count(messages: list[Message]) -> int:
            return self.tokens.count(self._request(messages, tail_msgs, tools_enabled))

        self.compressor.allowance = self._allowance(state)
        try:
            view = await self.compressor.prepare(state.trajectory, state.objective, count)
        finally:
            self.compressor.allowance = None  # it holds the run's state: no cycle outlives the build
            self._charge(state)  # summaries are model calls: the run pays for them, overflow or not
        request = self._request(view, tail_msgs, tools_enabled)
        check_pairing(request.messages, history=state.trajectory, memo=self._pairing)
        tokens = self.tokens.count(request)
        sample = self.meter.measure(request)
        self.last = Composed(tokens, sample, strategy, len(request.messages), len(request.tools))
        return request

    def _charge(self, state: RunState) -> None:
        """Charge ``state`` with the summaries made since the last charge: their model calls,
        tokens and cost count against the run's budgets like its own turns."""
        stats = self.compressor.stats
        spent = stats.usage
        if spent != self._usage_charged:
            delta = Usage(
                spent.prompt_tokens - self._usage_charged.prompt_tokens,
                spent.completion_tokens - self._usage_charged.completion_tokens,
            )
            state.usage = state.usage + delta
            self._usage_charged = spent
        state.llm_calls += stats.calls - self._calls_charged
        state.cost_usd += stats.cost_usd - self._cost_charged
        self._calls_charged, self._cost_charged = stats.calls, stats.cost_usd

    def _allowance(self, state: RunState) -> Callable[[], bool] | None:
        """Whether the run can pay for one more summary now: a model call left beside the one
        being composed, and tokens and cost left (``limits``); ``None`` without limits."""
        lim = self.limits
        if lim is None:
            return None
        stats = self.compressor.stats

        def left() -> bool:
            calls = state.llm_calls + stats.calls - self._calls_charged
            tokens = state.usage.total_tokens + stats.usage.total_tokens - self._usage_charged.total_tokens
            cost = state.cost_usd + stats.cost_usd - self._cost_charged
            return (
                calls + 1 < lim.llm_calls
                and (lim.max_tokens is None or tokens < lim.max_tokens)
                and (lim.max_cost_usd is None or cost < lim.max_cost_usd)
            )

        return left

    def _status_strategy(self, state: RunState, text: str) -> Literal["replace", "append"]:
        assert self.config.status is not None
        chosen = self.config.status.strategy
        if chosen != "auto":
            return chosen
        appended = sum(map(self.tokens.estimate, state.trajectory[self._status_mark :]))
        status = self.config.estimator(text)
        return choose_status_strategy(status, appended, self.expected_updates, self.config.status.alpha)

    def observe_usage(self, usage: Usage) -> None:
        """Anchor token counting on what the provider reported for the last request."""
        self.tokens.observe(usage)

    def stats(self) -> dict[str, Any]:
        s = self.compressor.stats
        return {
            "requests": self.meter.requests,
            "prefix_reuse_mean": self.meter.mean_reuse,
            "compressions": s.compressions,
            "results_compressed": s.results_compressed,
            "results_stored": s.results_stored,
            "compactions": s.compactions,
            "compression_failures": s.failures,
            "circuit_open": s.circuit_open,
            "compression_tokens": s.usage.total_tokens,
        }

    def owns(self, name: str) -> bool:
        return name in self._harness

    def intercept(self, call: ToolCall) -> GateOutcome | None:
        """The gate's answer for harness tools and not-yet-loaded deferred tools; None otherwise."""
        if call.name in self._harness:
            spec = self._harness_specs[call.name]
            try:
                # Strict intake (T3), as for any proposal.
                arguments = check_arguments(spec.parameters, parse_arguments(call.arguments))
            except PolicyError as err:
                return GateOutcome(call, "reject", spec=spec, error=f"{err.reason}: {err}")
            decision = Decision("allow", "harness_tool", "context tool run by the host", {"tool": call.name})
            return GateOutcome(call, "allow", spec=spec, arguments=arguments, decision=decision)
        if self.search is not None and (why := self.search.refusal(call.name)):
            return GateOutcome(call, "reject", error=why)
        return self._limited(call)

    def _limited(self, call: ToolCall) -> GateOutcome | None:
        """A call past a ``CallLimit`` of the status bar, denied: with the run's executed calls,
        and the turn's earlier calls this let through, counted (a turn of parallel calls too)."""
        limits = self.config.status.limits if self.config.status is not None else ()
        state = self._state
        if not limits or state is None:
            return None
        name = next((s.name for s in self._tools if call.name in (s.name, s.remote_name)), call.name)
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            return None  # refused at intake
        ran = [(c.tool, c.arguments) for c in state.calls if c.status in ("ok", "error")]
        if (why := over_limit(limits, name, arguments, [*ran, *self._turn])) is not None:
            decision = Decision("deny", "call_limit", "call_limit_reached", {"tool": name, "limit": why})
            return GateOutcome(call, "deny", decision=decision, error=why)
        self._turn.append((name, arguments))
        return None

    def trust(self, name: str) -> Trust:
        """Untrusted for results derived from tool sources; the rest is the host's own text."""
        if name in ("tool_search", "read_output") or name in self._subagents:
            return "untrusted"
        return "trusted"

    async def execute(
        self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext
    ) -> tuple[Observation, BaseException | None]:
        """Run one harness tool; recoverable errors become error observations."""
        now = self.clock()
        source = HARNESS
        if spec.name in ("load_skill", "read_skill_file"):
            source = f"skill:{arguments.get('name', '')}"
        meta: dict[str, Any] = {}
        try:
            out = await self._harness[spec.name].invoke(arguments, context)
            text, data, is_error, kind = out.text, out.data, False, None
        except ToolError as err:
            result = err.to_result()
            text, data, is_error, kind = json.dumps(result, sort_keys=True), result, True, err.kind
            meta = dict(getattr(err, "meta", None) or {})  # a paused subagent's pause
        except Exception as err:  # a bug in a harness tool ends the run loudly, as any tool's would
            obs = Observation(
                context.call_id, spec.name, source, now, "internal error", None, True, "internal_error"
            )
            return obs, err
        if not is_error and spec.name == "load_skill":
            skill = self.config.skills.get(arguments["name"])  # type: ignore[union-attr]
            self._emit("skill_loaded", skill=skill.name, digest=skill.digest, via="tool")
        if not is_error and spec.name == "tool_search":
            self._emit("tool_schemas_loaded", tools=[t["name"] for t in json.loads(text)["tools"]])
        return Observation(
            context.call_id, spec.name, source, now, text, data, is_error, kind, meta=meta
        ), None

    def _subagent_tool(self, sub: Subagent) -> Tool:
        engine = self

        async def delegate(
            task: Annotated[
                str, Field(min_length=1, max_length=4000, description="A self-contained task description.")
            ],
            ctx: ToolContext,
        ) -> dict[str, Any]:
            if engine.runner is None:
                raise ToolError("subagents are not available in this run", hint="do the task yourself")
            done = await engine.runner(sub, task, ctx.call_id)
            if done.stop_reason == str(StopReason.APPROVAL_REQUIRED):
                raise SubtaskPaused(done.run_id, done.pending)  # the parent waits with its child
            return done.as_tool_result()

        delegate.__doc__ = sub.description
        # Never cut: a cut result loses its data, and with it the class of what the child read.
        limit = 6 * sub.max_chars + 1_000  # each character at most 6 in JSON, and the other fields
        return tool(delegate, name=sub.name, timeout_s=3600.0, max_result_chars=max(limit, 20_000))


class _OutputReader:
    """The ``read_output`` tool, declared once for the class and bound to one run's outputs."""

    def __init__(self, outputs: LargeOutputStore) -> None:
        self.outputs = outputs

    # A page (4000 characters, at most 6 each in JSON) is never cut: its ``relays`` stay.
    @tool(name="read_output", max_result_chars=32_000)
    def read_output(
        self,
        ref: Annotated[str, Field(min_length=1, max_length=40, description="The ref shown in a preview.")],
        offset: Annotated[int, Field(ge=0, description="Character offset to start from (0 first).")] = 0,
    ) -> dict[str, Any]:
        """Read part of a large tool output that was kept outside the context (4000 characters a page)."""
        return self.outputs.read(ref, offset)
