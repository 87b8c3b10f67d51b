"""Pins for perf round 52. A step's check for repeated tool-call ids (``unique_call_ids``)
answers from the request's own messages alone: a growing conversation, a replaced last message
(the status line), another conversation in the same task, and conversations side by side in
their own tasks (what any per-run memo of it must keep). Token counts: an integer in range is
taken as it is, anything else as before."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from tether.core.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from tether.models._base import MAX_COUNT, ModelResponse, count, unique_call_ids


def _turn(call_id: str) -> AssistantMessage:
    return AssistantMessage("", (ToolCall(call_id, "lookup", "{}"),))


def _answer(call_id: str) -> ModelResponse:
    return ModelResponse(_turn(call_id))


def _renamed(messages: tuple[Message, ...], call_id: str) -> bool:
    response = unique_call_ids(messages, _answer(call_id))
    return response.message.tool_calls[0].id != call_id and "call_ids_renamed" in response.meta


def _conversation(prefix: str, steps: int) -> list[tuple[Message, ...]]:
    """The requests of a run of ``steps`` tool steps: each repeats the last one's messages."""
    history: list[Message] = [SystemMessage("s"), UserMessage(f"go {prefix}")]
    requests = [tuple(history)]
    for i in range(steps):
        history += [_turn(f"{prefix}{i}"), ToolMessage(f"{prefix}{i}", "r")]
        requests.append(tuple(history))
    return requests


def test_a_repeated_id_is_renamed_on_every_step() -> None:
    # A server that numbers calls per answer: ``toolu_0`` on every turn.
    def run() -> None:
        history: list[Message] = [SystemMessage("s"), UserMessage("go")]
        for step in range(6):
            response = unique_call_ids(tuple(history), _answer("toolu_0"))
            call = response.message.tool_calls[0]
            assert (call.id != "toolu_0") == (step > 0)
            history += [response.message, ToolMessage(call.id, "r")]
        ids = [c.id for m in history if isinstance(m, AssistantMessage) for c in m.tool_calls]
        assert len(set(ids)) == len(ids) == 6

    contextvars.copy_context().run(run)


def test_a_replaced_last_message_no_longer_counts() -> None:
    def run() -> None:
        base: tuple[Message, ...] = (SystemMessage("s"), UserMessage("go"), _turn("a"), ToolMessage("a", "r"))
        assert _renamed((*base, _turn("tail1")), "tail1")
        # The next request replaced that last message (as a status line is): its call is gone.
        assert not _renamed((*base, UserMessage("status")), "tail1")
        assert _renamed((*base, UserMessage("status")), "a")
        # … and an earlier message replaced: read whole again.
        assert not _renamed((SystemMessage("s"), UserMessage("other")), "a")

    contextvars.copy_context().run(run)


def test_another_conversation_in_the_same_task_is_read_whole() -> None:
    def run() -> None:
        first = _conversation("x", 5)
        for request in first:
            unique_call_ids(request, _answer("fresh"))
        assert _renamed(first[-1], "x4")
        second = _conversation("y", 3)
        for request in second:
            assert not _renamed(request, "x1")  # the first run's ids are not this one's
        assert _renamed(second[-1], "y2")
        # The same messages again, built anew (equal, not the same objects): the same answer.
        again = _conversation("y", 3)[-1]
        assert _renamed(again, "y0") and not _renamed(again, "x0")

    contextvars.copy_context().run(run)


def test_conversations_side_by_side_in_their_own_tasks() -> None:
    async def one(prefix: str, other: str) -> list[tuple[bool, bool]]:
        seen = []
        for request in _conversation(prefix, 8):
            await asyncio.sleep(0)  # the other task's step runs in between
            seen.append((_renamed(request, f"{prefix}0"), _renamed(request, f"{other}0")))
        return seen

    async def both() -> Any:
        return await asyncio.gather(one("p", "q"), one("q", "p"))

    for seen in asyncio.run(both()):
        assert seen == [(i > 0, False) for i in range(9)]


def test_token_counts_as_before() -> None:
    assert count(0) == 0 and count(12) == 12 and count(MAX_COUNT) == MAX_COUNT
    assert count(None) == 0 and count(12.7) == 12 and count("12") == 12 and count("12.0") == 12
    for bad in (True, False, -1, MAX_COUNT + 1, 10**30, "-3", "x", [1], float("nan")):
        with pytest.raises(ValueError):
            count(bad)
