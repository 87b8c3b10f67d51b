"""The invariant every history rewrite keeps: a tool call and its result stay together.

Providers reject a request whose tool calls are not answered by the tool messages right after
them, or a tool message that answers no call. Rewrites work on *units* (an assistant turn with
its results, or a single other message), so they never split a pair.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.core.messages import AssistantMessage, Message, ToolMessage
from tether.errors import TetherError

__all__ = ["ContextIntegrityError", "PairingMemo", "check_pairing", "pairing_problems", "units"]


class ContextIntegrityError(TetherError):
    """A composed request breaks the call/result pairing. ``in_history``: the raw trajectory
    itself is broken (e.g. a reused tool-call id), not a rewrite (a bug in tether)."""

    def __init__(self, message: str, *, in_history: bool = False) -> None:
        super().__init__(message)
        self.in_history = in_history


def pairing_problems(messages: Sequence[Message]) -> list[str]:
    """Every way ``messages`` breaks the pairing rule (empty when the request is valid)."""
    problems: list[str] = []
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        if isinstance(m, ToolMessage):
            problems.append(f"message {i}: tool result {m.tool_call_id!r} without its call")
            i += 1
            continue
        if isinstance(m, AssistantMessage) and m.tool_calls:
            wanted = [c.id for c in m.tool_calls]
            if len(set(wanted)) != len(wanted):
                problems.append(f"message {i}: duplicate tool call ids")
            j, seen = i + 1, set()
            while j < n and isinstance(messages[j], ToolMessage):
                tm = messages[j]
                assert isinstance(tm, ToolMessage)
                if tm.tool_call_id not in wanted or tm.tool_call_id in seen:
                    problems.append(f"message {j}: tool result {tm.tool_call_id!r} answers no open call")
                seen.add(tm.tool_call_id)
                j += 1
            missing = [c for c in wanted if c not in seen]
            if missing:
                problems.append(f"message {i}: tool calls {missing} have no result")
            i = j
            continue
        i += 1
    return problems


class PairingMemo:
    """The last request found valid, so the next check of a session only scans what changed."""

    def __init__(self) -> None:
        self.messages: tuple[Message, ...] = ()

    def known_valid(self, messages: Sequence[Message]) -> int:
        """How many leading messages of ``messages`` need no second look."""
        previous = self.messages
        k = len(previous)
        if not k or len(messages) < k - 1:
            return 0
        current = tuple(messages[:k])
        if current == previous:
            p = k
        elif current[: k - 1] == previous[: k - 1]:  # the dynamic tail was replaced
            p = k - 1
        else:
            return 0
        while 0 < p < k and isinstance(previous[p], ToolMessage):
            p -= 1  # back to a unit start of the valid request
        return p

    def remember(self, messages: Sequence[Message]) -> None:
        self.messages = tuple(messages)


def check_pairing(
    messages: Sequence[Message], *, history: Sequence[Message] | None = None, memo: PairingMemo | None = None
) -> None:
    """Raise ``ContextIntegrityError`` if ``messages`` break the pairing rule; ``history`` (the
    raw trajectory) tells a broken history from a broken rewrite; ``memo`` skips what was checked."""
    if memo is not None:
        start = memo.known_valid(messages)
        if not pairing_problems(messages[start:]):
            memo.remember(messages)
            return
    problems = pairing_problems(messages)
    if problems:
        in_history = history is not None and bool(pairing_problems(history))
        raise ContextIntegrityError("; ".join(problems[:5]), in_history=in_history)


def units(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """Half-open index ranges a rewrite may drop or replace as a whole (a call turn and its results)."""
    out: list[tuple[int, int]] = []
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        j = i + 1
        if isinstance(m, AssistantMessage) and m.tool_calls:
            while j < n and isinstance(messages[j], ToolMessage):
                j += 1
        out.append((i, j))
        i = j
    return out
