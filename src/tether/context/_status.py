"""The status bar (C2): an ``<agent_status>`` user-role message written by the harness, with
what the model would otherwise count or remember (call counts against limits, checks, the TODO
list, time, last error with a fix hint), every figure computed by code from the run state.

*replace* keeps only the newest status at the end of the request; *append* leaves every status
in the trajectory (stable prefix); ``auto`` decides each update by ``choose_status_strategy``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tether.context._todo import TodoList

if TYPE_CHECKING:
    from tether.runs._values import RunState

__all__ = [
    "CallLimit",
    "StatusBar",
    "StatusConfig",
    "StatusSection",
    "StatusStrategy",
    "choose_status_strategy",
    "over_limit",
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
    """The seed's break-even rule: append when ``alpha*S*N/2 < (1-alpha)*R`` (S status tokens,
    R tokens appended since the last status, N expected updates, alpha the cached-input price
    ratio), else replace."""
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


def over_limit(
    limits: Sequence[CallLimit], tool: str, arguments: Any, made: Sequence[tuple[str, Any]]
) -> str | None:
    """Why a call of ``tool`` with ``arguments`` would pass a ``CallLimit`` the model is shown,
    given the calls ``made`` before it (``(tool, arguments)``: the run's executed calls and the
    turn's earlier ones), or None. A limit is held, not only shown: a model told "limit reached"
    that calls again anyway (an injection told it to) is refused. Values of ``per`` are compared
    with case and spacing folded (``Xfinity`` and ``XFINITY `` are one company)."""
    for lim in limits:
        if lim.tool != tool:
            continue
        if lim.per is None:
            n = sum(1 for t, _ in made if t == tool)
            if n >= lim.max_calls:
                return f"{tool}: limit of {lim.max_calls} calls reached"
            continue
        if not isinstance(arguments, dict) or lim.per not in arguments:
            continue
        key = _folded(arguments[lim.per])
        n = sum(1 for t, a in made if t == tool and isinstance(a, dict) and _folded(a.get(lim.per)) == key)
        if n >= lim.max_calls:
            shown = str(arguments[lim.per])[:80]
            return f"{tool}: limit of {lim.max_calls} calls per {lim.per} reached for {shown}"
    return None


def _folded(value: Any) -> str:
    return " ".join(str(value).split()).casefold()


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


class _CallTally:
    """Counts over a run's calls, updated with those appended since the last render."""

    def __init__(self, pairs: frozenset[tuple[str, str]]) -> None:
        self.pairs = pairs
        self.calls: list[Any] | None = None
        self.seen = 0
        self.last_seen: Any = None
        self.any = False  # whether any call was recorded
        self.executed: Counter[str] = Counter()  # ok or error, per tool
        self.refused: Counter[str] = Counter()  # denied or rejected, per tool
        self.targets: dict[tuple[str, str], Counter[str]] = {p: Counter() for p in pairs}
        self.last_failed: Any = None

    def fresh(self, calls: list[Any]) -> bool:
        """Whether ``calls`` only grew since the last update (else the tally starts over)."""
        return (
            calls is self.calls
            and len(calls) >= self.seen
            and (not self.seen or calls[self.seen - 1] is self.last_seen)
        )

    def update(self, calls: list[Any]) -> None:
        by_tool: dict[str, list[str]] = {}
        for tool_name, argument in self.pairs:
            by_tool.setdefault(tool_name, []).append(argument)
        for c in calls[self.seen :]:
            status = c.status
            if status in ("ok", "error"):
                self.executed[c.tool] += 1
                if c.tool in by_tool and isinstance(c.arguments, dict):
                    for argument in by_tool[c.tool]:
                        if argument in c.arguments:
                            self.targets[(c.tool, argument)][str(c.arguments[argument])] += 1
            elif status in ("denied", "rejected"):
                self.refused[c.tool] += 1
            if status in ("error", "rejected", "denied", "crashed"):
                self.last_failed = c
        self.any = self.any or bool(calls)
        self.calls, self.seen = calls, len(calls)
        self.last_seen = calls[-1] if calls else None


@dataclass
class StatusBar:
    """Renders the status of one run."""

    config: StatusConfig
    todo: TodoList | None = None
    clock: Callable[[], Any] | None = None
    targets: dict[str, str] = field(default_factory=dict)  # tool → argument naming its target
    _tally: _CallTally | None = field(default=None, init=False, repr=False, compare=False)

    def render(self, state: RunState) -> str:
        lines: list[str] = []
        cfg = self.config
        tally = self._count(state.calls)
        if cfg.show_time and self.clock is not None:
            lines.append(f"time: {self.clock().isoformat(timespec='seconds')}")
        if cfg.working_dir:
            lines.append(f"working_directory: {cfg.working_dir}")
        lines.append(self._counts(tally))
        checks = [c for c in (check(state) for check in cfg.checks) if c]
        limit_lines = self._limit_checks(tally)
        if limit_lines or checks:
            lines.append("constraints:")
            lines.extend(f"- {c}" for c in [*limit_lines, *checks])
        if self.todo is not None:
            items = self.todo.render()
            lines.append("todo:" if items else "todo: (empty; plan with rewrite_todo_list)")
            lines.extend(f"- {i}" for i in items)
        if cfg.show_last_error and (err := self._last_error(state, tally.last_failed)):
            lines.append(err)
        for section in cfg.sections:
            text = section(state)
            if text:
                lines.append(text)
        return "<agent_status>\n" + "\n".join(lines) + "\n</agent_status>"

    def _count(self, calls: list[Any]) -> _CallTally:
        pairs = frozenset(
            [(lim.tool, lim.per) for lim in self.config.limits if lim.per is not None]
            + [(name, argument) for name, argument in self.targets.items()]
        )
        tally = self._tally
        if tally is None or tally.pairs != pairs or not tally.fresh(calls):
            tally = self._tally = _CallTally(pairs)
        tally.update(calls)
        return tally

    def _counts(self, tally: _CallTally) -> str:
        if not tally.executed and not tally.any:
            return "tool calls: none yet"
        per_tool, refused = tally.executed, tally.refused
        parts = []
        for name in sorted(set(per_tool) | set(refused)):
            text = f"{name} {per_tool[name]}"
            targets = self._per_target(tally, name)
            if targets:
                text += " (" + ", ".join(targets) + ")"
            if refused[name]:
                text += f" [{refused[name]} refused]"
            parts.append(text)
        return "tool calls: " + "; ".join(parts)

    def _per_target(self, tally: _CallTally, tool_name: str) -> list[str]:
        out: list[str] = []
        limited = False
        for lim in self.config.limits:
            if lim.tool != tool_name or lim.per is None:
                continue
            limited = True
            counts = tally.targets[(tool_name, lim.per)]
            out.extend(f"{target}: {n}/{lim.max_calls}" for target, n in sorted(counts.items()))
        if not limited and tool_name in self.targets:  # no limit configured: plain counts per target
            counts = tally.targets[(tool_name, self.targets[tool_name])]
            out.extend(f"{target}: {n}" for target, n in sorted(counts.items()))
        return out

    def _limit_checks(self, tally: _CallTally) -> list[str]:
        out = []
        for lim in self.config.limits:
            if lim.per is None:
                n = tally.executed[lim.tool]
                out.append(_limit_line(f"{lim.tool} {n}/{lim.max_calls}", n, lim.max_calls))
                continue
            counts = tally.targets[(lim.tool, lim.per)]
            if not counts:
                out.append(f"{lim.tool}: at most {lim.max_calls} per {lim.per}")
            for target, n in sorted(counts.items()):
                out.append(_limit_line(f"{lim.tool} {n}/{lim.max_calls} for {target}", n, lim.max_calls))
        return out

    @staticmethod
    def _last_error(state: RunState, rec: Any) -> str | None:
        if rec is None:
            return None
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


def _limit_line(text: str, n: int, limit: int) -> str:
    if n >= limit:
        return f"{text} — limit reached, do not call again"
    return f"{text} — {limit - n} left"
