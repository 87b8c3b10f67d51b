"""A schema's ``pattern``, matched in bounded time (``pattern_search``).

Python's ``re`` backtracks: a pattern that repeats a group which itself repeats or alternates
(``^(a+)+$``, ``^(\\w+\\s?)*$``) can take exponential time on a string of forty characters, and
no ``re`` call can be interrupted, so one result of an MCP server's (its output schema pinned)
froze the whole host. Patterns are matched here with the ``regex`` package instead: it reads
what ``re`` reads (its ``VERSION0`` syntax), cuts most such backtracking short by itself, and
takes a time limit. All the matching one check does (``check_budget``) may take
``PATTERN_SECONDS`` together; past that the check fails as ``UnusableSchema``, named, so a
pattern that still costs too much refuses its value instead of freezing the host. Only the time
spent matching counts: the rest of a long check (or a busy machine between two matches) never
uses up the budget of the patterns after it.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import regex
from jsonschema import ValidationError

from tether.core._schema_errors import UnusableSchema

__all__ = ["PATTERN_SECONDS", "check_budget", "pattern_keywords", "pattern_search"]

PATTERN_SECONDS = 1.0  # what all the pattern matches of one check may take together

# The seconds of matching the current check has left (one cell, spent by each match).
_LEFT: ContextVar[list[float] | None] = ContextVar("tether_pattern_left", default=None)


@contextlib.contextmanager
def check_budget() -> Iterator[None]:
    """The matches inside share one ``PATTERN_SECONDS`` (an enclosing budget is kept)."""
    if _LEFT.get() is not None:
        yield
        return
    token = _LEFT.set([PATTERN_SECONDS])
    try:
        yield
    finally:
        _LEFT.reset(token)


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> regex.Pattern[str]:
    try:
        return regex.compile(pattern, regex.VERSION0)
    except (regex.error, ValueError, OverflowError) as err:
        raise UnusableSchema(f"the pattern {pattern[:80]!r} is not a regular expression: {err}") from None


def pattern_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text`` (as ``re.search``). Raises
    ``UnusableSchema`` for a pattern that is no regular expression, or when the matching of the
    current check (or of this call alone, outside one) takes past ``PATTERN_SECONDS``."""
    compiled = _compiled(pattern)
    cell = _LEFT.get()
    left = PATTERN_SECONDS if cell is None else cell[0]
    started = time.monotonic()
    try:
        return compiled.search(text, timeout=max(left, 0.0)) is not None
    except TimeoutError:
        raise UnusableSchema(
            f"matching the pattern {pattern[:80]!r} took more than {PATTERN_SECONDS} s for this "
            "value (a pattern that backtracks without end): too much work, refused"
        ) from None
    finally:
        if cell is not None:
            cell[0] -= time.monotonic() - started


def pattern_keywords(base: Any) -> dict[str, Callable[..., Any]]:
    """The keywords that match patterns (``pattern``, ``patternProperties``, and
    ``additionalProperties`` beside ``patternProperties``), as ``base``'s but through
    ``pattern_search``."""
    plain_additional = base.VALIDATORS["additionalProperties"]

    def pattern(
        validator: Any, patrn: str, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        if validator.is_type(instance, "string") and not pattern_search(patrn, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(
        validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, value in instance.items():
                if pattern_search(patrn, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    def additional(validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any]) -> Any:
        patterns = schema.get("patternProperties")
        if not isinstance(patterns, Mapping) or not validator.is_type(instance, "object"):
            return plain_additional(validator, allowed, instance, schema)
        return _additional(validator, allowed, instance, schema, patterns)

    return {"pattern": pattern, "patternProperties": pattern_properties, "additionalProperties": additional}


def _additional(
    validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any], patterns: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """``additionalProperties`` beside ``patternProperties``, as jsonschema words it."""
    properties = schema.get("properties") or {}
    extras = [k for k in instance if k not in properties and not any(pattern_search(p, k) for p in patterns)]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        verb = "does" if len(extras) == 1 else "do"
        joined = ", ".join(repr(each) for each in sorted(extras))
        listed = ", ".join(repr(each) for each in sorted(patterns))
        yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")
