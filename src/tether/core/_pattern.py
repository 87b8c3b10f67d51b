"""A schema's ``pattern``, matched in bounded time (``pattern_search``).

Python's ``re`` backtracks: a pattern that repeats a group which itself repeats or alternates
(``^(a+)+$``, ``^(\\w+\\s?)*$``) can take exponential time on a string of forty characters, and
no ``re`` call can be interrupted, so one result of an MCP server's (its output schema pinned)
froze the whole host. Such a pattern is matched here by a linear-time simulation of its automaton
(every way through it at once, one character at a time); any other goes to ``re`` as before. A
repeating pattern that uses what the simulation does not implement (a backreference, a
lookaround, a word boundary, an inline flag, a possessive quantifier) is ``UnusableSchema``.

The simulation matches one character at a time with ``re`` itself (each class, escape or literal
compiled alone), so characters mean what they mean to ``re`` on the same pattern.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jsonschema import ValidationError

from tether.core._schema_errors import UnusableSchema

__all__ = ["MAX_PROGRAM", "pattern_keywords", "pattern_search"]

MAX_PROGRAM = 20_000  # instructions a repeating pattern may compile to ({n,m} copies its group)
_QUANTITY = re.compile(r"\{(\d*)(,(\d*))?\}")
_ESCAPE_LENGTH = {"x": 4, "u": 6, "U": 10}
_UNSUPPORTED_ESCAPES = {"b": "a word boundary", "B": "a word boundary", "A": "an anchor", "Z": "an anchor"}


class _Unsupported(Exception):
    """What the linear matcher does not implement, named."""


class _Parser:
    """A pattern as a tree: ("char", test) | ("bol",) | ("eol",) | ("seq", [...]) |
    ("alt", [...]) | ("rep", node, least, most or None). What the simulation lacks is read as
    a placeholder, named in ``lacks`` (the tree still shows what repeats)."""

    def __init__(self, pattern: str) -> None:
        self.p, self.i = pattern, 0
        self.lacks: str | None = None

    def lack(self, what: str) -> Any:
        self.lacks = self.lacks or what
        return ("char", lambda text: False)

    def parse(self) -> Any:
        node = self.alternation()
        if self.i != len(self.p):
            raise _Unsupported("an unbalanced parenthesis")
        return node

    def alternation(self) -> Any:
        branches = [self.sequence()]
        while self.i < len(self.p) and self.p[self.i] == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def sequence(self) -> Any:
        items = []
        while self.i < len(self.p) and self.p[self.i] not in "|)":
            items.append(self.quantified(self.atom()))
        return ("seq", items)

    def atom(self) -> Any:
        p, i = self.p, self.i
        c = p[i]
        if c == "(":
            return self.group()
        if c in "^$":
            self.i += 1
            return ("bol",) if c == "^" else ("eol",)
        if c == "[":
            j = i + 1 + (p[i + 1 : i + 2] == "^")
            j += p[j : j + 1] == "]"  # (a ] first is a member, to re)
            while j < len(p) and p[j] != "]":
                j += 2 if p[j] == "\\" else 1
            return self.char(p[i : j + 1])
        if c == "\\":
            d = p[i + 1 : i + 2]
            if (d.isdigit() and d != "0") or d in ("k", "g"):
                self.i += 2
                return self.lack("a backreference")
            if d in _UNSUPPORTED_ESCAPES:
                self.i += 2
                return self.lack(_UNSUPPORTED_ESCAPES[d])
            return self.char(p[i : i + _ESCAPE_LENGTH.get(d, 2)])
        if c in "*+?":
            raise _Unsupported("a quantifier with nothing to repeat")
        self.i += 1
        return self.char(re.escape(c) if c != "." else c, width=0)

    def group(self) -> Any:
        p, i = self.p, self.i
        if p.startswith("(?:", i):
            self.i += 3
        elif p.startswith(("(?P<", "(?<"), i) and p[i + 3 : i + 4] not in ("=", "!"):
            self.i = p.index(">", i) + 1 if ">" in p[i:] else len(p)
        elif p.startswith("(?", i):
            self.lack("a lookaround or an inline flag")
            j = i + 2 + (p[i + 2 : i + 3] in ("=", "!")) + 2 * (p[i + 2 : i + 4] in ("<=", "<!"))
            if j == i + 2:  # flags: (?i) or (?i:...)
                while j < len(p) and p[j] not in ":)":
                    j += 1
                if p[j : j + 1] == ")":
                    self.i = j + 1
                    return ("seq", [])
                j += 1
            self.i = j
        else:
            self.i += 1
        node = self.alternation()
        if self.i >= len(p) or p[self.i] != ")":
            raise _Unsupported("an unbalanced parenthesis")
        self.i += 1
        return node

    def char(self, text: str, width: int | None = None) -> Any:
        """One character's test: ``text`` compiled alone (``width`` more of the pattern read)."""
        self.i += len(text) if width is None else width
        try:
            return ("char", re.compile(text).fullmatch)
        except re.error as err:
            raise _Unsupported(f"an invalid part {text!r} ({err})") from None

    def quantified(self, node: Any) -> Any:
        p, i = self.p, self.i
        m = _QUANTITY.match(p, i)
        if i < len(p) and p[i] in "*+?":
            least, most = {"*": (0, None), "+": (1, None), "?": (0, 1)}[p[i]]
            self.i += 1
        elif m is not None and (m[1] or m[2]):  # {n}, {n,}, {n,m}, {,m}, {,}: as re reads them
            least = int(m[1] or 0)
            most = least if m[2] is None else (int(m[3]) if m[3] else None)
            self.i = m.end()
        else:
            return node
        if p[self.i : self.i + 1] == "+":
            self.i += 1
            self.lack("a possessive quantifier")
        self.i += p[self.i : self.i + 1] == "?"  # lazy: the same strings match
        return ("rep", node, least, most)


def _repeats_ambiguously(node: Any, inside: bool = False) -> bool:
    """Whether a repeated part holds a repetition or an alternation (backtracking may explode)."""
    kind = node[0]
    if kind in ("rep", "alt") and inside:
        return True
    if kind == "rep":
        return _repeats_ambiguously(node[1], inside or node[3] is None or node[3] > 1)
    if kind in ("seq", "alt"):
        return any(_repeats_ambiguously(child, inside) for child in node[1])
    return False


def _compile(node: Any, program: list[list[Any]]) -> None:
    """Append ``node``'s instructions: ["c", test] | ["^"] | ["$"] | ["j", to] | ["s", a, b]."""
    if len(program) > MAX_PROGRAM:
        raise _Unsupported(f"more than {MAX_PROGRAM} steps once its repetitions are spelled out")
    kind = node[0]
    if kind == "char":
        program.append(["c", node[1]])
    elif kind in ("bol", "eol"):
        program.append(["^" if kind == "bol" else "$"])
    elif kind == "seq":
        for child in node[1]:
            _compile(child, program)
    elif kind == "alt":
        jumps: list[list[Any]] = []
        for child in node[1][:-1]:
            split: list[Any] = ["s", len(program) + 1, None]
            program.append(split)
            _compile(child, program)
            jumps.append(["j", None])
            program.append(jumps[-1])
            split[2] = len(program)
        _compile(node[1][-1], program)
        for jump in jumps:
            jump[1] = len(program)
    else:
        _, child, least, most = node
        for _ in range(least):
            _compile(child, program)
        if most is None:
            loop: list[Any] = ["s", len(program) + 1, None]
            at = len(program)
            program.append(loop)
            _compile(child, program)
            program.append(["j", at])
            loop[2] = len(program)
            return
        splits: list[list[Any]] = []
        for _ in range(most - least):
            splits.append(["s", len(program) + 1, None])
            program.append(splits[-1])
            _compile(child, program)
        for split in splits:
            split[2] = len(program)


def _simulate(program: list[list[Any]], text: str) -> bool:
    """Whether the program matches anywhere in ``text``: every thread advanced in step."""
    size, end = len(program), len(text)

    def add(threads: list[int], seen: set[int], start: int, at: int) -> bool:
        todo = [start]
        while todo:
            pc = todo.pop()
            if pc in seen:
                continue
            seen.add(pc)
            if pc == size:
                return True  # the end of the program: a match
            op = program[pc]
            if op[0] == "c":
                threads.append(pc)
            elif op[0] == "j":
                todo.append(op[1])
            elif op[0] == "s":
                todo += (op[2], op[1])
            elif (op[0] == "^" and at == 0) or (op[0] == "$" and (at == end or text[at:] == "\n")):
                todo.append(pc + 1)
        return False

    threads: list[int] = []
    if add(threads, set(), 0, 0):
        return True
    for at, char in enumerate(text):
        following: list[int] = []
        seen: set[int] = set()
        for pc in threads:
            if program[pc][1](char) and add(following, seen, pc + 1, at + 1):
                return True
        if add(following, seen, 0, at + 1):  # a match may begin at any position
            return True
        threads = following
    return False


@functools.lru_cache(maxsize=512)
def _matcher(pattern: str) -> Callable[[str], bool]:
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise UnusableSchema(f"the pattern {pattern[:80]!r} is not a regular expression: {err}") from None
    parser = _Parser(pattern)
    try:
        tree = parser.parse()
    except (_Unsupported, ValueError, IndexError):  # (re reads it, this parser not: as before)
        return lambda text: compiled.search(text) is not None
    if not _repeats_ambiguously(tree):
        return lambda text: compiled.search(text) is not None
    program: list[list[Any]] = []
    try:
        if parser.lacks is not None:
            raise _Unsupported(parser.lacks)
        _compile(tree, program)
    except _Unsupported as why:
        raise UnusableSchema(
            f"the pattern {pattern[:80]!r} repeats a part that itself repeats or alternates (its "
            f"matching could take exponential time) and uses {why}, which the host's linear "
            "matcher does not implement"
        ) from None
    return functools.partial(_simulate, program)


def pattern_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text`` (as ``re.search``), in time linear in
    ``text`` for a pattern that repeats a repetition or an alternation. Raises
    ``UnusableSchema`` for a pattern ``re`` refuses, or one of those using what the linear
    matcher lacks."""
    return _matcher(pattern)(text)


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
