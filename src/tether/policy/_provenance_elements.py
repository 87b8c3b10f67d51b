"""The elements of an argument the provenance rules judge one by one (``judged_elements``),
and what a store that joins them keeps before each (``pieces``): the lines of a note given as a
list are read back as one text, so a number or an address they make together is the note's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tether.policy._provenance_declarations import ArgumentRule
from tether.policy._provenance_decoding import decoded_forms
from tether.policy._provenance_labels import split_values

__all__ = ["Pieces", "judged_elements", "outside_keys", "pieces"]

Pieces = tuple[tuple[str, ...], ...]
"""What a store may keep before an element, in each way it may keep it (``pieces``)."""


def judged_elements(value: Any, rule: ArgumentRule, schema: Any = None) -> list[Any]:
    """The elements of one argument its rule judges, one by one: an amount or an option whole,
    an option's choices, the values under a rule's ``keys``, else every leaf (``split_values``)."""
    if rule.role in ("amount", "option") and not isinstance(value, list | dict):
        return [value]
    if rule.role == "option":
        return rule.choices(value, schema)
    if rule.composed(value):  # numbers the tool may multiply (a quantity, a price): none to bound
        return []
    if rule.keys:
        found: list[Any] = []

        def walk(v: Any, above: tuple[object, ...] = ()) -> None:
            if isinstance(v, Mapping):
                for k, item in v.items():
                    if rule.under_key(k, above) and item is not None:
                        found.extend(split_values(item))
                    else:
                        walk(item, (*above, k))
            elif isinstance(v, list | tuple):
                for item in v:
                    walk(item)

        if isinstance(value, Mapping | list | tuple):
            walk(value)
        elif value is not None:
            found.extend(split_values(value, schema))  # not the declared structure: judged whole
        return found
    return list(split_values(value, schema))


def outside_keys(value: Any, rule: ArgumentRule) -> list[str]:
    """Every scalar and mapping key of ``value`` that stands under none of the rule's ``keys``
    (however a server spells them: ``ArgumentRule.under_key``)."""
    found: list[str] = []

    def walk(v: Any, above: tuple[object, ...] = ()) -> None:
        if isinstance(v, Mapping):
            for k, item in v.items():
                if not rule.under_key(k, above):
                    found.append(str(k))
                    walk(item, (*above, k))
        elif isinstance(v, list | tuple):
            for item in v:
                walk(item)
        elif isinstance(v, str | int | float) and not isinstance(v, bool):
            found.append(str(v))

    if isinstance(value, Mapping | list | tuple):
        walk(value)
    return found


def pieces(value: Any, elements: Sequence[Any]) -> list[Pieces]:
    """For each of ``elements`` (``judged_elements`` of ``value``), the text elements before it
    that a store joining them keeps in front of it (``provenance_flow.joined_handles``): as
    given, and, where ``value`` holds a string read decoded as well (``self_decoded``: a list of
    its forms, the given one first), also with each such string as decoded, a store that decodes
    keeping that instead. A form never precedes its own other forms: they are one value."""
    forms: dict[str, list[str]] = {}
    _forms_in(value, forms, 0)
    alternatives = {form for found in forms.values() for form in found}
    out: list[Pieces] = []
    for i, element in enumerate(elements):
        own = {g for g, found in forms.items() if element in found}
        near = elements[max(0, i - _NEAREST) : i]
        kept = [e for e in near if isinstance(e, str) and e not in alternatives and e not in own]
        as_given = tuple(kept)
        as_decoded = tuple(forms[e][0] if e in forms else e for e in kept)
        out.append(tuple(dict.fromkeys((as_given, as_decoded))) if kept else ())
    return out


_DEPTH = 32
_NEAREST = 64  # elements before one that its join is read with: a value's characters, one each


def _forms_in(value: Any, into: dict[str, list[str]], depth: int) -> None:
    """The strings ``value`` holds read decoded too (``self_decoded``'s ``[given, *decoded]``),
    each with its decoded forms."""
    if depth > _DEPTH:
        return
    if isinstance(value, Mapping):
        value = list(value.values())
    if not isinstance(value, list | tuple):
        return
    if len(value) > 1 and isinstance(value[0], str) and list(value[1:]) == decoded_forms(value[0]):
        into[value[0]] = list(value[1:])
        return
    for item in value:
        _forms_in(item, into, depth + 1)
