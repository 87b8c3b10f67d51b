"""Per-session memo of one value per request item, so composing request N does not cost
O(history): the items of request N-1 are the prefix of request N (recognised by identity),
only new items are computed, with a per-object cache when a rewrite changed the prefix.
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
    """``values(items)`` == ``[compute(i) for i in items]``, computed once per item object (a
    replaced last item is forgotten). ``compute`` must depend only on an item's value. A bound
    method is held weakly: a memo of its owner's method forms no reference cycle."""

    def __init__(self, compute: Callable[[object], T]) -> None:
        self._compute: Callable[..., T] = compute
        self._owner: weakref.ref[object] | None = None
        if isinstance(compute, MethodType):  # held as its function and a weak reference to its owner
            self._compute, self._owner = compute.__func__, weakref.ref(compute.__self__)
        self._items: tuple[object, ...] = ()
        self._values: list[T] = []
        # Two dicts by id (no tuple per item for the GC); holding the item keeps its id unique.
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
