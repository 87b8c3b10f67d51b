"""Chat messages as pure values, and their chat-completions wire format. Roles are never
flattened into text: a tool result is a ``ToolMessage`` with its call's id."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tether.core.types import ToolCall

__all__ = [
    "AssistantMessage",
    "Message",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "Usage",
    "UserMessage",
]


@dataclass(frozen=True, slots=True)
class SystemMessage:
    content: str
    kind: Literal["system"] = "system"

    def wire(self) -> dict[str, Any]:
        return {"role": "system", "content": self.content}


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A user-role message. ``origin`` says who wrote it: the user, or the harness (status bar)."""

    content: str
    origin: Literal["user", "harness"] = "user"
    kind: Literal["user"] = "user"

    def wire(self) -> dict[str, Any]:
        return {"role": "user", "content": self.content}


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """One model turn. ``provider_items``: what a provider requires back as it sent it (thinking
    blocks, reasoning items), each tagged with its ``provider``."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    kind: Literal["assistant"] = "assistant"
    provider_items: tuple[dict[str, Any], ...] = ()

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.wire() for c in self.tool_calls]
        return out


@dataclass(frozen=True, slots=True)
class ToolMessage:
    """The result of one tool call, as the model reads it (already wrapped as untrusted data)."""

    tool_call_id: str
    content: str
    name: str = ""
    kind: Literal["tool"] = "tool"

    def wire(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.tool_call_id, "content": self.content}


Message = SystemMessage | UserMessage | AssistantMessage | ToolMessage


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
        )
