"""Subagent isolation (C6): a bulky subtask runs in its own context; only its conclusion returns.

The child runs on the same host (same policy, tools and gate) with a fresh trajectory and its
own trace; the parent's ``subagent_finished`` event links to it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tether.errors import ToolError
from tether.trace._events import EventKind

if TYPE_CHECKING:
    from tether.policy._trusted import TrustedContext
    from tether.runs._values import Agent, RunResult

__all__ = ["RunsAgents", "Subagent", "SubtaskPaused", "SubtaskResult", "run_subtask"]


class RunsAgents(Protocol):
    """What a subtask needs of the host: run a child agent through the same chokepoint."""

    async def run(self, agent: Agent, objective: str, *, context: TrustedContext) -> RunResult: ...


@dataclass(frozen=True)
class Subagent:
    """A subagent the model may call as a tool ``name(task)``; ``agent`` builds one per call."""

    name: str
    description: str
    agent: Callable[[], Agent]
    max_chars: int = 2000


MAX_DEPTH = 3  # subagents of subagents: bounded, so a loop of delegation cannot run away (P4)
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("tether_subagent_depth", default=0)

# Runs a subagent on a task for the parent's call of the given id (``ToolContext.call_id``).
SubtaskRunner = Callable[[Subagent, str, str], Awaitable["SubtaskResult"]]


class SubtaskPaused(ToolError):
    """The subagent's run waits for a person (an approval, an answer): so does the call that
    asked for it, and with it the parent's run. Resumed, the parent asks again and the child
    run continues where it stopped (``meta``: ``pause``, the child run's id)."""

    kind = "subtask_paused"

    def __init__(self, run_id: str, pending: list[str]) -> None:
        waiting = f"approval of {', '.join(pending)}" if pending else "a person"
        super().__init__(
            f"the subagent's run {run_id} waits for {waiting}",
            hint="this run is paused with it: resume this run once a person has decided",
            details={"subagent_run": run_id, "pending_proposals": pending},
        )
        self.meta = {"pause": run_id, "awaiting": "the subagent run", "child_run": run_id}


@dataclass(frozen=True, slots=True)
class SubtaskResult:
    conclusion: str
    ok: bool
    stop_reason: str
    run_id: str
    trace_path: Path | None
    tokens: int
    relays: dict[str, str] = field(default_factory=dict)  # what the child read (``_relays``)
    pending: list[str] = field(default_factory=list)  # proposals a paused child waits for

    def as_tool_result(self) -> dict[str, Any]:
        return {
            "conclusion": self.conclusion,
            "ok": self.ok,
            "stop_reason": self.stop_reason,
            "subagent_run": self.run_id,
            **self.relays,
        }


def _relays(result: RunResult) -> dict[str, str]:
    """The least trusted class of what the child read, under the host's key: the parent's
    provenance takes the answer as no more trusted than that (empty when nothing labelled)."""
    from tether.policy._provenance_run import RELAYS_TRUST, least_read

    least = least_read(result.observations)
    return {RELAYS_TRUST: least} if least is not None else {}


async def run_subtask(
    host: RunsAgents,
    agent: Agent,
    task: str,
    *,
    context: TrustedContext,
    parent: Any = None,
    max_chars: int = 2000,
) -> SubtaskResult:
    """Run ``agent`` on the self-contained ``task`` in an isolated context; return at most
    ``max_chars`` of conclusion. ``parent`` (a ``Tracer``) receives the link event. Raises
    ``ToolError`` when subagents are already nested ``MAX_DEPTH`` deep."""
    depth = _depth.get()
    if depth >= MAX_DEPTH:
        raise ToolError(f"subagents may nest at most {MAX_DEPTH} deep", hint="do this step yourself")
    token = _depth.set(depth + 1)
    try:
        result = await host.run(agent, task, context=context)
    finally:
        _depth.reset(token)
    answer = (result.answer or "").strip()
    if len(answer) > max_chars:
        answer = answer[: max_chars - 1].rstrip() + "…"
    out = SubtaskResult(
        conclusion=answer,
        ok=result.ok,
        stop_reason=str(result.stop_reason),
        run_id=result.run_id,
        trace_path=result.trace_path,
        tokens=result.usage.total_tokens,
        relays=_relays(result),
        pending=list(result.pending_proposals),
    )
    if parent is not None:
        parent.emit(
            EventKind.SUBAGENT_FINISHED,
            child_run_id=out.run_id,
            child_trace=str(out.trace_path) if out.trace_path else None,
            stop_reason=out.stop_reason,
            conclusion_chars=len(out.conclusion),
            child_tokens=out.tokens,
        )
    return out
