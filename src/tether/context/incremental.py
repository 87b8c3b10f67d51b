"""Per-session memo of one value per request item, reused across the requests of a session.

Composing request N of a session must not cost O(history): requests are append-only (plus
a dynamic tail), so the items of request N-1 are the prefix of request N. ``ItemMemo``
recognises that prefix by object identity with two C-level list comparisons, reuses its
values, and computes only the new items' — falling back to a per-object cache when a
rewrite (compression) changed the prefix.

``tether.models.estimate.item_json`` is the one JSON encoding of an item that the token
estimate and the prefix meter both read; a session encodes each item once for both
(``ItemMemo(item_json)``, shared).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["ItemMemo"]

T = TypeVar("T")


class ItemMemo(Generic[T]):
    """``values(items)`` == ``[compute(i) for i in items]``, computed once per item object.

    ``compute`` must depend only on an item's value (messages are frozen values): the prefix
    is recognised by tuple comparison, which is by identity for the same objects and by value
    for equal ones, and equal items have equal values either way."""

    def __init__(self, compute: Callable[[object], T]) -> None:
        self._compute = compute
        self._items: tuple[object, ...] = ()  # holding them keeps their ids from being reused
        self._values: list[T] = []
        self._cache: dict[int, tuple[object, T]] = {}

    def value(self, item: object) -> T:
        """``compute(item)``, computed once per item object."""
        hit = self._cache.get(id(item))
        if hit is None or hit[0] is not item:
            hit = self._cache[id(item)] = (item, self._compute(item))
        return hit[1]

    def values(self, items: Sequence[object]) -> list[T]:
        items = tuple(items)
        previous = self._items
        k = len(previous)
        if k and items[:k] == previous:
            p = k  # pure append
        elif k > 1 and items[: k - 1] == previous[: k - 1]:
            p = k - 1  # the dynamic tail was replaced
        else:
            p = 0
        values = self._values[:p]
        cache, compute = self._cache, self._compute
        for item in items[p:]:
            hit = cache.get(id(item))
            if hit is None or hit[0] is not item:
                hit = cache[id(item)] = (item, compute(item))
            values.append(hit[1])
        self._items, self._values = items, values
        return values
