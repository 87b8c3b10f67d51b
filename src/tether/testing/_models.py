"""Deterministic model stand-ins for tests and demos (import them from ``tether.testing``).

Both can be written to *obey* injected text, so controls are tested against a compromised model.
A figure they produce is an upper bound, never a measurement of a real model.
"""

from __future__ import annotations

import inspect
import itertools
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from tether.core.messages import AssistantMessage, ToolCall, ToolMessage, Usage
from tether.errors import ModelError
from tether.models._base import ModelRequest, ModelResponse
from tether.models._estimate import chars_estimator, item_json
from tether.models._memo import ConversationMemo

_ids = itertools.count(1)


def call(name: str, /, **arguments: Any) -> ToolCall:
    """A tool call with JSON-encoded arguments and a fresh id."""
    return ToolCall(id=f"call_{next(_ids)}", name=name, arguments=json.dumps(arguments, ensure_ascii=False))


def final(text: str) -> AssistantMessage:
    return AssistantMessage(content=text)


# A cheap, deterministic estimate (~4 characters a token) for stand-ins: the models' own.
estimate_tokens = chars_estimator


def _estimate_item(item: object) -> int:
    return estimate_tokens(item_json(item).decode())


def _usage(request: ModelRequest, message: AssistantMessage, messages: ConversationMemo[int]) -> Usage:
    # As the context engine estimates it (``estimate_request``): each tool definition and message
    # as its JSON; a message's estimate kept with its conversation's last request, so a step
    # estimates only its new messages, not the whole history again.
    prompt = sum(map(_estimate_item, request.tools)) + sum(messages.pieces(request.messages, _estimate_item))
    out = message.content or ""
    out += "".join(c.name + c.arguments for c in message.tool_calls)
    return Usage(prompt_tokens=prompt, completion_tokens=estimate_tokens(out) if out else 0)


Turn = AssistantMessage | ToolCall | list[ToolCall] | str | Exception


def _as_message(turn: Turn) -> AssistantMessage:
    if isinstance(turn, AssistantMessage):
        return turn
    if isinstance(turn, str):
        return AssistantMessage(content=turn)
    if isinstance(turn, ToolCall):
        return AssistantMessage(tool_calls=(turn,))
    if isinstance(turn, list):
        return AssistantMessage(tool_calls=tuple(turn))
    raise TypeError(f"not a turn: {turn!r}")


class _StandIn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.requests: list[ModelRequest] = []
        # Bounded as a backend's memo is: an estimate of about four bytes a token of JSON held.
        self._estimates: ConversationMemo[int] = ConversationMemo(lambda tokens: 4 * tokens)

    def _respond(self, request: ModelRequest, turn: Turn) -> ModelResponse:
        message = _as_message(turn)
        return ModelResponse(
            message=message, usage=_usage(request, message, self._estimates), model=self.name
        )


class ScriptedModel(_StandIn):
    """Replays turns in order. An ``Exception`` turn is raised (as a backend failure would be);
    running out of turns is a ``ModelError``."""

    def __init__(self, turns: Iterable[Turn], *, name: str = "scripted") -> None:
        super().__init__(name)
        self._turns = list(turns)

    def enqueue(self, *turns: Turn) -> None:
        self._turns.extend(turns)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if not self._turns:
            raise ModelError("scripted model has no turns left")
        turn = self._turns.pop(0)
        if isinstance(turn, Exception):
            raise turn
        return self._respond(request, turn)


ModelFunction = Callable[[ModelRequest], AssistantMessage | Turn | Awaitable[AssistantMessage | Turn]]


class FunctionModel(_StandIn):
    """Calls ``function(request)`` for every turn; the function may be sync or async."""

    def __init__(self, function: ModelFunction, *, name: str = "function") -> None:
        super().__init__(name)
        self._function = function

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        result = self._function(request)
        if inspect.isawaitable(result):
            result = await result
        return self._respond(request, result)


def tool_results(request: ModelRequest) -> list[ToolMessage]:
    """The tool messages of a request, oldest first."""
    return [m for m in request.messages if isinstance(m, ToolMessage)]


_INJECTED = re.compile(r"\bCALL\s+([A-Za-z_][A-Za-z0-9_]*)")


def injected_calls(text: str) -> list[str]:
    """Tool names that text orders the model to call ("… CALL export_secrets")."""
    return _INJECTED.findall(text)
