"""Each conversation's last request, kept by a backend so the next step of that conversation
encodes only its new messages: one owner for every HTTP backend (chat completions, Responses,
Anthropic Messages).

An agent's next step repeats the previous request of its session — the same history, new
messages after it, the status line replaced — so each message's encoded piece is reused from
the previous request (``repeated_prefix``) and a step costs O(new messages), not O(history),
however many conversations share the backend. A conversation is found by the identity of its
first message; holding the messages keeps those ids from being reused. What is kept is bounded
by the pieces' sizes, the least recently used conversation dropped first.

``chain`` is the same with each piece built from its message and the piece before it (a fold):
an encoder whose output for a message depends on what came before (Anthropic merges
consecutive same-role messages into one turn) keeps whole body segments, so a step joins the
history's bytes in C instead of walking it in Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from tether.core.messages import Message
from tether.models._base import repeated_prefix

__all__ = ["MEMO_BYTES", "ConversationMemo"]

P = TypeVar("P")


MEMO_BYTES = 8 * 1024 * 1024  # what a backend keeps of its conversations' encoded pieces, by default


class ConversationMemo(Generic[P]):
    """``pieces(messages, encode)`` == ``[encode(m) for m in messages]``, with the pieces of the
    conversation's previous request reused for the messages it repeats. ``encode`` must depend
    only on a message's value (messages are frozen values); ``size`` measures a piece; at most
    ``limit_bytes`` of pieces are kept (0: none). One memo is used with ``pieces`` or with
    ``chain``, never both."""

    def __init__(self, size: Callable[[P], int], limit_bytes: int = MEMO_BYTES) -> None:
        self._size = size
        self.limit_bytes = limit_bytes
        self._last: dict[int, tuple[tuple[Message, ...], list[P], int]] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._last)

    def pieces(
        self,
        messages: tuple[Message, ...],
        encode: Callable[[Message], P],
        on_replaced: Callable[[Message], None] | None = None,
    ) -> list[P]:
        """Each message's piece. ``on_replaced`` hears of the previous request's last message
        when this request replaced it (a status line that will not be asked for again)."""
        if not messages:
            return []
        pieces, p, size = self._reused(messages, on_replaced)
        size_of = self._size
        for m in messages[p:]:
            piece = encode(m)
            pieces.append(piece)
            size += size_of(piece)
        self._keep(messages, pieces, size)
        return pieces

    def chain(self, messages: tuple[Message, ...], encode: Callable[[Message, P | None], P]) -> list[P]:
        """Each message's piece, built by ``encode(message, previous piece or None)``: the same
        as that fold over all the messages, the repeated prefix's pieces reused (a piece depends
        only on its message and the messages before it, which that prefix repeats)."""
        if not messages:
            return []
        pieces, p, size = self._reused(messages, None)
        size_of = self._size
        previous = pieces[-1] if pieces else None
        for m in messages[p:]:
            previous = encode(m, previous)
            pieces.append(previous)
            size += size_of(previous)
        self._keep(messages, pieces, size)
        return pieces

    def _reused(
        self, messages: tuple[Message, ...], on_replaced: Callable[[Message], None] | None
    ) -> tuple[list[P], int, int]:
        """The conversation's pieces for the prefix this request repeats, its length, their size
        (the conversation leaves the memo until ``_keep`` puts it back)."""
        memo = self._last.pop(id(messages[0]), None)
        if memo is None:
            return [], 0, 0
        previous, previous_pieces, size = memo
        self.bytes -= size
        p = repeated_prefix(previous, messages)
        if p and p == len(previous) - 1:
            size -= self._size(previous_pieces[-1])
            if on_replaced is not None:
                on_replaced(previous[-1])
        elif p == 0:
            size = 0
        return previous_pieces[:p], p, size

    def _keep(self, messages: tuple[Message, ...], pieces: list[P], size: int) -> None:
        if size <= self.limit_bytes:
            memos = self._last
            memos[id(messages[0])] = (messages, pieces, size)
            self.bytes += size
            while self.bytes > self.limit_bytes:
                self.bytes -= memos.pop(next(iter(memos)))[2]  # the least recently used first
