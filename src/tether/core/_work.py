"""The work one schema check may do, bounded whoever wrote the schema (an MCP server's, pinned).

Checking costs the schema's size times the value's: 1 500 ``anyOf`` alternatives (a 63 KB
output schema) against 1 000 empty objects took 34 s, 200 000 of them hours, and references
that multiply (``allOf`` of two references to a definition that does the same, thirty levels
down) took hours on one string. So every keyword the validator applies is counted
(``counted_keywords``: ``jsonschema``'s own and tether's, each wrapped through
``jsonschema.validators.extend``): one step, plus one for each entry of the keyword's value
(``properties``, ``required``, ``enum``, ``anyOf``: what it loops over), plus what it does to
the value without descending into it (a step per member of an array or object for the keywords
that walk their members, per node compared for ``enum``/``const`` of a container, per KiB of a
string whose ``format`` is checked), and each error it finds as many as its message costs (a
step per node of the value, or per KiB of a string: jsonschema writes the value into most
messages, so 1 500 alternatives that each fail on a string of 4 MiB built gigabytes). One check
may take ``WORK_STEPS`` steps and ``WORK_PER_NODE`` more for each node of the value (each KiB
of its strings a node too: a large value honestly costs more), never more than ``MAX_WORK``;
past that the check fails as ``UnusableSchema``, named.

A check is left uncounted (the hot path of argument checks stays as it was) when that bound
holds by itself: the schema has no references and no ``unevaluated*`` (which evaluate their
siblings again at every level), and its ``weight`` (each keyword once, counted as above, its
walk of a node's members as one more) times the value's nodes is within the budget. Without
references and ``unevaluated*`` each keyword applies at most once to each node of the value,
so such a check costs at most that product.

``uniqueItems`` is checked in linear time here too (jsonschema compares every pair of items:
minutes for 100 000 objects).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from jsonschema import ValidationError

from tether.core._schema_errors import UnusableSchema

__all__ = [
    "MAX_WORK",
    "WORK_PER_NODE",
    "WORK_STEPS",
    "budget",
    "counted_keywords",
    "size",
    "unique_items",
    "weight",
    "work_budget",
]

WORK_STEPS = 200_000  # steps any check may take (a second or two at jsonschema's pace), besides ...
WORK_PER_NODE = 16  # ... as many for each node (container or scalar) of the value checked, ...
MAX_WORK = 4_000_000  # ... never more in all (honest schemas take 2 to 5 steps a node)
_STRING_STEP = 1024  # characters of a string read (a format check) or written (an error) in a step

_LEFT: ContextVar[list[int] | None] = ContextVar("tether_schema_work_left", default=None)

_WALKS = frozenset(
    {
        "items",
        "additionalItems",
        "contains",
        "propertyNames",
        "additionalProperties",
        "unevaluatedItems",
        "unevaluatedProperties",
        "uniqueItems",
    }
)
_SIBLINGS_AGAIN = ("unevaluatedItems", "unevaluatedProperties")
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")


def size(value: Any) -> int:
    """How many containers and scalars ``value`` holds, itself included, and one more for each
    ``_STRING_STEP`` characters of its strings (what reading or writing it out costs)."""
    count, chars, todo = 0, 0, [value]
    while todo:
        item = todo.pop()
        count += 1
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, str):
            chars += len(item)
    return count + chars // _STRING_STEP


def _members(value: Any, instance: Any) -> int:
    return len(instance) if isinstance(instance, list | dict) else 0


def _patterns(value: Any, instance: Any) -> int:
    if isinstance(value, Mapping) and isinstance(instance, dict):
        return len(value) * len(instance)
    return 0


def _compared(value: Any, instance: Any) -> int:
    """``enum``/``const``: comparing a container reads at most its nodes, once per candidate."""
    if not isinstance(instance, list | dict):
        return 0
    return size(instance) * (len(value) if isinstance(value, list) else 1)


def _read(value: Any, instance: Any) -> int:
    return len(instance) // _STRING_STEP if isinstance(instance, str) else 0


_EXTRA: dict[str, Callable[[Any, Any], int]] = {
    **dict.fromkeys(_WALKS, _members),
    "patternProperties": _patterns,
    "enum": _compared,
    "const": _compared,
    "format": _read,
}


def _too_much(limit: int) -> UnusableSchema:
    return UnusableSchema(
        f"checking this value against the schema takes more than {limit} steps of work (alternatives "
        "or references that multiply with the value): too much work, refused"
    )


def _spend(left: list[int], cost: int) -> None:
    left[0] -= cost
    if left[0] < 0:
        raise _too_much(left[1])


def _shown(instance: Any) -> int:
    """What an error's message costs: jsonschema writes the value into most of them."""
    if isinstance(instance, str):
        return 1 + len(instance) // _STRING_STEP
    return size(instance) if isinstance(instance, list | dict) else 1


def _charged(errors: Iterable[Any], instance: Any, left: list[int]) -> Iterator[Any]:
    for error in errors:
        _spend(left, _shown(instance))
        yield error


def _counted(name: str, keyword: Callable[..., Any]) -> Callable[..., Any]:
    extra = _EXTRA.get(name)

    def apply(validator: Any, value: Any, instance: Any, schema: Mapping[str, Any]) -> Any:
        left = _LEFT.get()
        if left is None:
            return keyword(validator, value, instance, schema)
        cost = 1 + len(value) if isinstance(value, list | dict) else 1
        if extra is not None:
            cost += extra(value, instance)
        _spend(left, cost)
        errors = keyword(validator, value, instance, schema)
        return None if errors is None else _charged(errors, instance, left)

    return apply


def counted_keywords(keywords: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """Every keyword of ``keywords``, each application counted against the current check's
    budget (``work_budget``)."""
    return {name: _counted(name, keyword) for name, keyword in keywords.items()}


def weight(schema: Any, keywords: Mapping[str, Any]) -> int | None:
    """How many steps checking one node of a value against ``schema`` may take at most (each
    keyword once, counted as ``counted_keywords`` counts it, its walk of the node's members as
    one more), or ``None`` where no such bound holds (references, ``unevaluated*``);
    ``keywords`` are the validator's."""
    total, todo = 0, [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
            continue
        if not isinstance(node, Mapping):
            continue
        for key, value in node.items():
            if key in _REFERENCES or key in _SIBLINGS_AGAIN:
                return None
            if key in keywords:
                total += 2 + (len(value) if isinstance(value, list | dict) else 0)
            todo.append(value)
    return total


def budget(nodes: int) -> int:
    """The steps one check of a value of ``nodes`` (its ``size``) may take."""
    return min(MAX_WORK, WORK_STEPS + WORK_PER_NODE * nodes)


@contextlib.contextmanager
def work_budget(nodes: int) -> Iterator[None]:
    """The counted keywords inside share the budget of one check of a value of ``nodes``."""
    limit = budget(nodes)
    token = _LEFT.set([limit, limit])
    try:
        yield
    finally:
        _LEFT.reset(token)


def _unique_key(value: Any) -> Any:
    """A hashable key equal for JSON values jsonschema's ``uniqueItems`` takes as equal (numbers
    by value, ``true`` not ``1``, objects whatever their key order)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, dict):
        return ("object", frozenset((k, _unique_key(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_unique_key(v) for v in value))
    return ("number", value) if isinstance(value, int | float) else (type(value).__name__, value)


def unique_items(
    validator: Any, unique: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """``uniqueItems`` in linear time."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _unique_key(item)
        if key in seen:
            yield ValidationError("the array has non-unique elements")
            return
        seen.add(key)
