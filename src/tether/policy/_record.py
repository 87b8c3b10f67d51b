"""The policy's record of why a call needs approval, as the proposal's history keeps it: JSON
that is always whole, however long the reasons; and its reader, which also reads the records of
releases before 3f3bce6 (text cut at 8000 characters, no JSON)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["RECORD_CHARS", "policy_record", "read_policy_record"]

RECORD_CHARS = 8000
# What a reader must always find (the declared secrets above all: a page masks only what it names).
_KEPT = ("rule", "reason", "tool", "masked_arguments")


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _first(value: Any, k: int) -> Any:
    """``value`` with every list in it (but the declared secrets) cut to its first ``k`` items."""
    if isinstance(value, Mapping):
        return {key: v if key == "masked_arguments" else _first(v, k) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_first(v, k) for v in list(value)[:k]]
    return value


def _longest(value: Any) -> int:
    if isinstance(value, Mapping):
        return max((_longest(v) for v in value.values()), default=0)
    if isinstance(value, list | tuple):
        return max(len(value), *(_longest(v) for v in value)) if value else 0
    return 0


def policy_record(why: Mapping[str, Any], limit: int = RECORD_CHARS) -> str:
    """``why`` as JSON of at most ``limit`` characters, never cut mid-way (a reader could parse
    nothing of it, and a page that finds no declared secret shows it): a longer record keeps
    its rule, reason, tool and declared secrets whole and the first items of each list that fit
    (the provenance of many values, many problems), marked ``"cut": true``."""
    text = _dump(why)
    k = _longest(why)
    while len(text) > limit and k > 0:
        k //= 2
        text = _dump({**_first(why, k), "cut": True})
    if len(text) > limit:  # long text outside any list: only what a reader must find
        text = _dump({**{key: why[key] for key in _KEPT if key in why}, "cut": True})
    return text


def read_policy_record(detail: str) -> dict[str, Any] | None:
    """The record ``policy_record`` wrote (None: not a JSON object). A record an earlier release
    cut mid-way (a proposal it made, reviewed after the upgrade) gives the entries written whole
    before the cut, marked ``"cut": true``: its keys were sorted, so the declared secrets
    (``masked_arguments``) come before the long provenance and are read (they were not, and the
    console showed the secret arguments to every viewer of the tenant)."""
    try:
        whole = json.loads(detail)
    except ValueError:
        return _leading_entries(detail)
    return whole if isinstance(whole, dict) else None


def _leading_entries(text: str) -> dict[str, Any] | None:
    """The ``key: value`` pairs of a JSON object's text that are whole before it was cut."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] = {}
    try:
        at = _after(text, 0, "{")
        while True:
            key, at = decoder.raw_decode(text, _after(text, at, ""))
            value, at = decoder.raw_decode(text, _after(text, at, ":"))
            if not isinstance(key, str):
                break
            found[key] = value
            at = _after(text, at, ",")
    except ValueError:
        pass  # the cut (or the object's end): what follows is not whole
    return {**found, "cut": True} if found else None


def _after(text: str, at: int, mark: str) -> int:
    """The index past the blanks at ``at``, then ``mark`` (``ValueError`` if it is not there) and
    the blanks after it."""
    at += len(text[at:]) - len(text[at:].lstrip())
    if mark:
        if not text.startswith(mark, at):
            raise ValueError(f"{mark!r} expected at {at}")
        at += len(mark)
        at += len(text[at:]) - len(text[at:].lstrip())
    return at
