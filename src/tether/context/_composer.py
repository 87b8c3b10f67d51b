"""Request composition: stable prefix + append-only trajectory + dynamic tail (C1).

The prefix (system prompt and tool definitions, in a fixed order) is computed once per
session and reused byte for byte; the trajectory only grows; dynamic facts go at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tether.core.messages import Message, SystemMessage, UserMessage
from tether.models._base import ModelRequest
from tether.tools._contract import ToolSpec

__all__ = ["Composer", "TailProvider"]

TailProvider = Callable[[], Sequence[UserMessage]]


class Composer:
    """Builds model requests for one session."""

    def __init__(self, instructions: str, tools: Sequence[ToolSpec], *, tail: TailProvider | None = None):
        self.system = SystemMessage(instructions)
        # Fixed, deterministic order: sorted by name, whatever order sources listed them in.
        self.tools: tuple[dict[str, Any], ...] = tuple(t.wire() for t in sorted(tools, key=lambda t: t.name))
        self._tail = tail

    def build(self, trajectory: Sequence[Message], *, tools_enabled: bool = True) -> ModelRequest:
        messages: list[Message] = [self.system, *trajectory]
        if self._tail is not None:
            messages.extend(self._tail())
        return ModelRequest(
            messages=tuple(messages),
            tools=self.tools if tools_enabled else (),
            tool_choice="auto" if tools_enabled else "none",
        )
