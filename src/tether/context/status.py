"""The status bar (C2): an ``<agent_status>`` user-role message written by the harness.

It states what the model would otherwise have to count or remember from a long trajectory:
tool-call counts per tool and per target with their configured limits, constraint checks,
the TODO list, the time, the working directory and the last error with a fix hint. Every
figure is computed by code from the run state.

Two update strategies (seed 002): *replace* keeps only the newest status at the end of the
request (the old one is dropped, invalidating the cache after it); *append* leaves every
status in the trajectory (the prefix stays stable, stale states accumulate). With
``strategy="auto"`` each update is decided by the cost model: append when
``alpha * S * N / 2 < (1 - alpha) * R`` (S status tokens, R tokens appended since the last
status, N expected updates, alpha the price of cached input relative to fresh input).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tether.context.todo import TodoList

if TYPE_CHECKING:
    from tether.run import RunState

__all__ = [
    "CallLimit",
    "StatusBar",
    "StatusConfig",
    "StatusSection",
    "StatusStrategy",
    "choose_status_strategy",
]

StatusStrategy = Literal["replace", "append", "auto"]
StatusSection = Callable[["RunState"], str | None]

_HINTS = {
    "invalid_arguments": "call again with arguments that match the tool's schema exactly",
    "rejected": "the proposal was malformed: send valid JSON with exactly the schema's keys",
    "not_found": "check the identifier; search or list before reading",
    "upstream_error": "the system behind the tool failed: retry once later or use another source",
    "dependency_unavailable": "the source is down: do not retry now, report what is missing",
    "policy_denied": "this call is not permitted: do not retry it; choose another way or report it",
    "internal_error": "the tool failed internally: do not retry the same call",
}


def choose_status_strategy(
    status_tokens: int, appended_tokens: int, expected_updates: int, alpha: float
) -> Literal["replace", "append"]:
    """The seed's break-even rule: append when ``alpha*S*N/2 < (1-alpha)*R``, else replace."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha (cached-input price ratio) must be within [0, 1]")
    append_cost = alpha * status_tokens * expected_updates / 2
    replace_saving = (1 - alpha) * appended_tokens
    return "append" if append_cost < replace_saving else "replace"


@dataclass(frozen=True, slots=True)
class CallLimit:
    """A configured ceiling shown in the status bar: ``max_calls`` of ``tool`` in all, or per
    value of the argument ``per`` (e.g. ``CallLimit("phone_call", 3, per="company")``)."""

    tool: str
    max_calls: int
    per: str | None = None

    def __post_init__(self) -> None:
        if self.max_calls < 1:
            raise ValueError("max_calls must be at least 1")


@dataclass(frozen=True)
class StatusConfig:
    """What the status bar shows and how it is updated."""

    strategy: StatusStrategy = "auto"
    limits: Sequence[CallLimit] = ()
    checks: Sequence[StatusSection] = ()  # constraint checks: a line, or None when nothing to say
    sections: Sequence[StatusSection] = ()  # extra blocks (e.g. budgets), rendered last
    todo: bool = True
    show_time: bool = True
    working_dir: str | None = None
    alpha: float = 0.1  # cached input costs alpha x fresh input (about a tenth at most providers)
    expected_updates: int | None = None  # N; defaults to the agent's max_steps
    show_last_error: bool = True


@dataclass
class StatusBar:
    """Renders the status of one run."""

    config: StatusConfig
    todo: TodoList | None = None
    clock: Callable[[], Any] | None = None
    extra_sections: list[StatusSection] = field(default_factory=list)
    targets: dict[str, str] = field(default_factory=dict)  # tool → argument naming its target

    def add_section(self, section: StatusSection) -> None:
        """Add a block rendered after the built-in ones (e.g. a budget summary)."""
        self.extra_sections.append(section)

    def render(self, state: RunState) -> str:
        lines: list[str] = []
        cfg = self.config
        if cfg.show_time and self.clock is not None:
            lines.append(f"time: {self.clock().isoformat(timespec='seconds')}")
        if cfg.working_dir:
            lines.append(f"working_directory: {cfg.working_dir}")
        lines.extend(self._counts(state))
        checks = [c for c in (check(state) for check in cfg.checks) if c]
        limit_lines = self._limit_checks(state)
        if limit_lines or checks:
            lines.append("constraints:")
            lines.extend(f"- {c}" for c in [*limit_lines, *checks])
        if self.todo is not None:
            items = self.todo.render()
            lines.append("todo:" if items else "todo: (empty; plan with rewrite_todo_list)")
            lines.extend(f"- {i}" for i in items)
        if cfg.show_last_error and (err := self._last_error(state)):
            lines.append(err)
        for section in [*cfg.sections, *self.extra_sections]:
            text = section(state)
            if text:
                lines.append(text)
        return "<agent_status>\n" + "\n".join(lines) + "\n</agent_status>"

    # -- parts --------------------------------------------------------------------------------

    @staticmethod
    def _executed(state: RunState) -> list[Any]:
        return [c for c in state.calls if c.status in ("ok", "error")]

    def _counts(self, state: RunState) -> list[str]:
        executed = self._executed(state)
        if not executed and not state.calls:
            return ["tool calls: none yet"]
        per_tool = Counter(c.tool for c in executed)
        refused = Counter(c.tool for c in state.calls if c.status in ("denied", "rejected"))
        parts = []
        for name in sorted(set(per_tool) | set(refused)):
            text = f"{name} {per_tool[name]}"
            targets = self._per_target(state, name)
            if targets:
                text += " (" + ", ".join(targets) + ")"
            if refused[name]:
                text += f" [{refused[name]} refused]"
            parts.append(text)
        return ["tool calls: " + "; ".join(parts)]

    def _per_target(self, state: RunState, tool_name: str) -> list[str]:
        out: list[str] = []
        limited = False
        for lim in self.config.limits:
            if lim.tool != tool_name or lim.per is None:
                continue
            limited = True
            counts = _target_counts(self._executed(state), tool_name, lim.per)
            out.extend(f"{target}: {n}/{lim.max_calls}" for target, n in sorted(counts.items()))
        if not limited and tool_name in self.targets:  # no limit configured: plain counts per target
            counts = _target_counts(self._executed(state), tool_name, self.targets[tool_name])
            out.extend(f"{target}: {n}" for target, n in sorted(counts.items()))
        return out

    def _limit_checks(self, state: RunState) -> list[str]:
        executed = self._executed(state)
        out = []
        for lim in self.config.limits:
            if lim.per is None:
                n = sum(1 for c in executed if c.tool == lim.tool)
                out.append(_limit_line(f"{lim.tool} {n}/{lim.max_calls}", n, lim.max_calls))
                continue
            counts = _target_counts(executed, lim.tool, lim.per)
            if not counts:
                out.append(f"{lim.tool}: at most {lim.max_calls} per {lim.per}")
            for target, n in sorted(counts.items()):
                out.append(_limit_line(f"{lim.tool} {n}/{lim.max_calls} for {target}", n, lim.max_calls))
        return out

    @staticmethod
    def _last_error(state: RunState) -> str | None:
        failed = [c for c in state.calls if c.status in ("error", "rejected", "denied", "crashed")]
        if not failed:
            return None
        rec = failed[-1]
        kind = {"rejected": "rejected", "denied": "policy_denied"}.get(rec.status, rec.reason or "error")
        message, hint = rec.reason, None
        for obs in reversed(state.observations):
            if obs.call_id == rec.call_id and isinstance(obs.data, dict):
                message = str(obs.data.get("message") or message)
                hint = obs.data.get("hint")
                break
        hint = hint or _HINTS.get(kind, "read the error, change the call or the approach before retrying")
        args = rec.arguments if isinstance(rec.arguments, str) else json.dumps(rec.arguments, default=str)
        return f"last error: {rec.tool} {kind}: {message}\n  arguments: {args[:500]}\n  fix: {hint}"


def _target_counts(executed: list[Any], tool_name: str, argument: str) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for c in executed:
        if c.tool == tool_name and isinstance(c.arguments, dict) and argument in c.arguments:
            counts[str(c.arguments[argument])] += 1
    return dict(counts)


def _limit_line(text: str, n: int, limit: int) -> str:
    if n >= limit:
        return f"{text} — limit reached, do not call again"
    return f"{text} — {limit - n} left"
