"""Values shared by the agent loop and the workflow runner: the agent's configuration,
the state of one run, and its result."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.core.messages import Message, Usage
from tether.core.stop import Limits, StopReason
from tether.core.types import CallRecord, Observation
from tether.policy._trusted import TrustedContext

if TYPE_CHECKING:
    from tether.context._engine import ContextConfig
    from tether.core.handoff import EvidenceRef, Handoff
    from tether.memory import MemoryRecord
    from tether.models._base import Model
    from tether.trace._events import TraceEvent

__all__ = ["Agent", "CallRecord", "RunResult", "RunState"]


@dataclass
class RunState:
    """The working memory of one run (checkpointable; never persisted as a conversation)."""

    run_id: str
    objective: str
    context: TrustedContext
    started: float
    started_at: datetime
    trajectory: list[Message] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    evidence: set[str] = field(default_factory=set)
    memory: list[MemoryRecord] = field(default_factory=list)
    steps: int = 0
    llm_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    malformed_turns: int = 0
    unavailable: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)  # workflow step outputs by name
    pending: list[str] = field(default_factory=list)  # proposal ids the run is waiting for
    # The words of the person who asked, when this run's objective was written by someone else
    # (a subagent's task, a workflow node's objective built from earlier outputs): provenance
    # traces values to these, never to an objective a model or earlier data wrote.
    request: str | None = None
    # What the runs before this one did, for provenance: a parent's observations and calls when
    # it started this child run (its own inherited first), a workflow's earlier agent nodes'. A
    # value the parent wrote into a store and this child reads back is still the parent's write.
    inherited_observations: list[Observation] = field(default_factory=list)
    inherited_calls: list[CallRecord] = field(default_factory=list)
    # The run that started this one (a subagent's, a workflow node's): it is continued only
    # through that run's resume, which reads every bound from one history (``run_child``).
    parent_run: str | None = None
    # How many of ``inherited_observations`` and ``inherited_calls`` the parent handed down when
    # this child run started; what follows them its own child runs did (its parent's too).
    handed_down: list[int] = field(default_factory=list)

    def history(self) -> tuple[list[Observation], list[CallRecord]]:
        """What a child run of this one inherits: its inherited history, then its own."""
        return [*self.inherited_observations, *self.observations], [*self.inherited_calls, *self.calls]

    @property
    def users_request(self) -> str:
        """What the user asked: ``request`` when a parent run set it, else the objective."""
        return self.objective if self.request is None else self.request

    def observed(self, tool: str) -> list[Observation]:
        return [o for o in self.observations if o.tool == tool]

    def last_data(self, tool: str) -> Any:
        found = [o.data for o in self.observed(tool) if not o.is_error]
        return found[-1] if found else None


@dataclass
class Agent:
    """Configuration of an agent: a model, its instructions, and host-side hooks.

    The hooks are host code, not model output: ``verify`` accepts or rejects a final answer,
    ``handoff`` builds the handoff that is validated before the run may be accepted,
    ``remember`` proposes memory records the host then validates.
    """

    instructions: str
    model: Model
    name: str = "agent"
    limits: Limits = field(default_factory=Limits)
    tools: Sequence[str] | None = None
    memory_subjects: Sequence[str] = ()
    verify: Callable[[RunState, str], str | None] | None = None
    handoff: Callable[[RunState, str], Mapping[str, Any] | None] | None = None
    resolve_evidence: Callable[[EvidenceRef, RunState], bool] | None = None
    remember: Callable[[RunState], Sequence[MemoryRecord]] | None = None
    context: ContextConfig | None = None  # status bar, compression, skills, tool search (C1-C7)

    def __post_init__(self) -> None:
        # Other frameworks take a model's name ("openai:gpt-4o"); here a run would fail deep in the loop.
        if not callable(getattr(self.model, "complete", None)):
            from tether.errors import ConfigError

            raise ConfigError(
                f"Agent(model={self.model!r:.60}): model is a model object, not a name: "
                "tether.models.OpenAICompatible('gpt-4o', base_url=...), OpenAIResponses, "
                "AnthropicMessages, or tether.testing.ScriptedModel([...]) (an agent file names its "
                "model as model: {provider, name})"
            )


@dataclass
class RunResult:
    """How a run ended; built in one place, ``tether.runners._scope.RunScope.finish``, for every runner."""

    run_id: str
    stop_reason: StopReason
    answer: str | None
    design: str = "agent"
    detail: str = ""
    handoff: Handoff | None = None
    trace_path: Path | None = None
    steps: int = 0
    llm_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    calls: list[CallRecord] = field(default_factory=list)
    events: list[TraceEvent] = field(default_factory=list)
    elapsed_s: float = 0.0
    outputs: dict[str, Any] = field(default_factory=dict)
    observations: list[Observation] = field(default_factory=list)  # what the tools returned (evals)
    pending_proposals: list[str] = field(default_factory=list)  # what an approval_required run waits for
    # The run's history before its own calls: what it was handed (a child's parent's, a rollback's
    # failed run's) and what its child runs did (a subagent's payment). It happened too.
    inherited_observations: list[Observation] = field(default_factory=list)
    inherited_calls: list[CallRecord] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.stop_reason is StopReason.ACCEPTED

    def history(self) -> tuple[list[Observation], list[CallRecord]]:
        """Everything the run's effects and reads were, its child runs' included: what a run that
        takes over from it (``Host.rollback``) must count as done."""
        return [*self.inherited_observations, *self.observations], [*self.inherited_calls, *self.calls]

    def kinds(self) -> list[str]:
        return [str(e.kind) for e in self.events]

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary (no raw tool output)."""
        return {
            "run_id": self.run_id,
            "design": self.design,
            "stop_reason": str(self.stop_reason),
            "answer": self.answer,
            "detail": self.detail,
            "steps": self.steps,
            "llm_calls": self.llm_calls,
            "tool_calls": len(self.calls),
            "tokens": self.usage.total_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "elapsed_s": round(self.elapsed_s, 4),
            "trace": str(self.trace_path) if self.trace_path else None,
            "handoff": self.handoff.model_dump(mode="json") if self.handoff else None,
            "pending_proposals": self.pending_proposals,
        }
