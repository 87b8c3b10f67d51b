"""The one seam every model backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tether.messages import AssistantMessage, Message, Usage

__all__ = ["Model", "ModelRequest", "ModelResponse", "repeated_prefix"]


def repeated_prefix(previous: tuple[object, ...], items: tuple[object, ...]) -> int:
    """How many leading items of ``items`` the previous request of a session had, as a step
    repeats them: all of them (pure append), all but its last (the dynamic tail, such as the
    status line, was replaced), or none. Compared as tuples: by identity for the same objects,
    by value for equal ones."""
    k = len(previous)
    if k and items[:k] == previous:
        return k
    if k > 1 and items[: k - 1] == previous[: k - 1]:
        return k - 1
    return 0


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What the host sends: structured messages and the tool definitions (wire format)."""

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str = "auto"  # "auto" | "none"
    max_tokens: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    message: AssistantMessage
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    cost_usd: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)  # backend facts for the trace (finish reason …)


@runtime_checkable
class Model(Protocol):
    """A model proposes; it never decides. ``complete`` may raise ``ModelError``."""

    name: str

    async def complete(self, request: ModelRequest) -> ModelResponse: ...
