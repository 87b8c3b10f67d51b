"""Per-session memo of one value per request item, reused across the requests of a session.

Composing request N of a session must not cost O(history): requests are append-only (plus
a dynamic tail), so the items of request N-1 are the prefix of request N. ``ItemMemo``
recognises that prefix by object identity with two C-level list comparisons, reuses its
values, and computes only the new items' — falling back to a per-object cache when a
rewrite (compression) changed the prefix.

``tether.models._estimate.item_json`` is the one JSON encoding of an item that the token
estimate and the prefix meter both read; a session encodes each item once for both
(``ItemMemo(item_json)``, shared).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from types import MethodType
from typing import Generic, TypeVar

from tether.models._base import repeated_prefix

__all__ = ["ItemMemo"]

T = TypeVar("T")


class ItemMemo(Generic[T]):
    """``values(items)`` == ``[compute(i) for i in items]``, computed once per item object
    (a replaced last item, a step's status line, is forgotten: computed again if it is used again).

    ``compute`` must depend only on an item's value (messages are frozen values): the prefix
    is recognised by tuple comparison, which is by identity for the same objects and by value
    for equal ones, and equal items have equal values either way.

    A bound method is held weakly: an owner keeping a memo of its own method forms no
    reference cycle, so a finished run's objects are freed at once, not by a full GC pass."""

    def __init__(self, compute: Callable[[object], T]) -> None:
        self._compute: Callable[..., T] = compute
        self._owner: weakref.ref[object] | None = None
        if isinstance(compute, MethodType):  # held as its function and a weak reference to its owner
            self._compute, self._owner = compute.__func__, weakref.ref(compute.__self__)
        self._items: tuple[object, ...] = ()
        self._values: list[T] = []
        # Two dicts by id, not one of (item, value) pairs: no tuple per item for the garbage
        # collector to walk for the rest of the run. Holding the item keeps its id from being
        # reused while its value is cached.
        self._held: dict[int, object] = {}
        self._cache: dict[int, T] = {}

    def value(self, item: object) -> T:
        """``compute(item)``, computed once per item object."""
        key = id(item)
        if self._held.get(key) is not item:
            owner = self._owner
            value = self._compute(item) if owner is None else self._compute(owner(), item)
            self._cache[key] = value
            self._held[key] = item
        return self._cache[key]

    def values(self, items: Sequence[object]) -> list[T]:
        items = tuple(items)
        previous = self._items
        p = repeated_prefix(previous, items)
        if p and p == len(previous) - 1:  # the dynamic tail was replaced: not held for the run
            tail = previous[-1]
            if self._held.get(id(tail)) is tail:
                del self._held[id(tail)], self._cache[id(tail)]
        values = self._values[:p]
        value = self.value
        values += [value(item) for item in items[p:]]
        self._items, self._values = items, values
        return values
