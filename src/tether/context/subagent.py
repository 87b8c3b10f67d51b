"""Subagent isolation (C6): a bulky subtask runs in its own context; only its conclusion returns.

``run_subtask`` runs a child agent on the same host (same policy, tools and gate) with a
fresh trajectory and its own trace, and hands back a short conclusion. The parent's trace
records a ``subagent_finished`` event naming the child's run id, trace file and stop reason,
so a reader can follow the link; none of the child's intermediate output enters the parent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.trace.events import EventKind

if TYPE_CHECKING:
    from tether.host import Host
    from tether.policy.trusted import TrustedContext
    from tether.run import Agent

__all__ = ["SubtaskResult", "run_subtask"]


@dataclass(frozen=True, slots=True)
class SubtaskResult:
    conclusion: str
    ok: bool
    stop_reason: str
    run_id: str
    trace_path: Path | None
    tokens: int

    def as_tool_result(self) -> dict[str, Any]:
        return {
            "conclusion": self.conclusion,
            "ok": self.ok,
            "stop_reason": self.stop_reason,
            "subagent_run": self.run_id,
        }


async def run_subtask(
    host: Host,
    agent: Agent,
    task: str,
    *,
    context: TrustedContext,
    parent: Any = None,
    max_chars: int = 2000,
) -> SubtaskResult:
    """Run ``agent`` on ``task`` in an isolated context; return at most ``max_chars`` of conclusion.

    ``task`` must be self-contained: the child sees none of the parent's conversation.
    ``parent`` is the parent's ``Tracer`` (optional): it receives the link event.
    """
    result = await host.run(agent, task, context=context)
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
