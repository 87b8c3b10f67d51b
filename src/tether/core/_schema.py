"""The one JSON Schema engine: tool arguments (T3) and MCP structured results are checked here.

Built on ``jsonschema`` (Draft 2020-12 unless a schema names an older draft); for every schema:
types are exact (a boolean is not an integer, ``1.0`` is not an integer, numbers are finite;
nothing is coerced); ``format`` is asserted for the fixed set ``FORMATS`` (standard library
only); ``$ref`` resolves only inside the schema, nothing is ever retrieved; schemas are compiled
once and cached by identity and by canonical JSON (treated as immutable once used).

``check_arguments`` adds the intake rules: exactly the declared parameters, nested objects that
list ``properties`` closed too (not inside ``not``/``if``), no blank strings, nesting capped at
``MAX_DEPTH``. ``validate`` applies the plain rules. Failures are ``SchemaViolation`` (a
``PolicyError`` with the path and a ``reason``) or ``UnusableSchema``.

The work one check does is bounded, whoever wrote the schema (an MCP server's, once pinned):
every keyword applied is counted against a budget that grows with the value
(``tether.core._work``: past it the check is ``UnusableSchema``), ``uniqueItems`` is checked in
linear time, and patterns are matched within ``PATTERN_SECONDS`` (``tether.core._pattern``)."""

from __future__ import annotations

import ipaddress
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
from jsonschema import ValidationError
from jsonschema.protocols import Validator

from tether.core._pattern import check_budget, pattern_keywords, pattern_search
from tether.core._schema_errors import RANK, SchemaViolation, UnusableSchema, path_text, violation
from tether.core._work import (
    WORK_PER_NODE,
    budget,
    counted_keywords,
    size,
    unique_items,
    weight,
    work_budget,
)

__all__ = [
    "FORMATS",
    "MAX_DEPTH",
    "CompiledSchema",
    "SchemaViolation",
    "UnusableSchema",
    "check_arguments",
    "compile_schema",
    "validate",
]

MAX_DEPTH = 16  # nested containers in one value (the parser enforces the same bound)
_CACHE_SIZE = 512


# -- types: exact, no coercion -------------------------------------------------------------------


def _is_integer(_: object, value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(_: object, value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int)


# -- formats: a fixed set, standard library only -------------------------------------------------

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}\Z", re.ASCII)
_TIME = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})\Z", re.ASCII)
_EMAIL = re.compile(r"[^@\s]+@[^@\s.][^@\s]*\Z")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s<>\"{}|\\^`\x00-\x1f\x7f]*\Z")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")


def _parses(parse: Callable[[str], object]) -> Callable[[str], bool]:
    """A predicate: whether ``parse`` takes the text without a ``ValueError``."""

    def check(text: str) -> bool:
        try:
            parse(text)
        except ValueError:
            return False
        return True

    return check


def _date_ok(text: str) -> bool:
    return _DATE.match(text) is not None and _parses(date.fromisoformat)(text)


def _time_ok(text: str) -> bool:
    """RFC 3339 full-time: the offset is required (a time without one is ambiguous)."""
    m = _TIME.match(text)
    if m is None:
        return False
    hour, minute, second = int(m[1]), int(m[2]), int(m[3])
    if m[5] not in ("Z", "z") and (int(m[5][1:3]) > 23 or int(m[5][4:6]) > 59):
        return False
    return hour <= 23 and minute <= 59 and second <= 60  # 60: a leap second


def _datetime_ok(text: str) -> bool:
    if len(text) < 11 or text[10] not in "Tt":
        return False
    return _date_ok(text[:10]) and _time_ok(text[11:])


FORMATS: dict[str, Callable[[str], bool]] = {
    "date": _date_ok,
    "date-time": _datetime_ok,
    "time": _time_ok,
    "email": lambda text: _EMAIL.match(text) is not None,
    "uri": lambda text: _URI.match(text) is not None,
    "uuid": lambda text: _UUID.match(text) is not None,
    "ipv4": _parses(ipaddress.IPv4Address),
    "ipv6": _parses(ipaddress.IPv6Address),
}
"""The formats asserted, each a predicate on a string; any other ``format`` is an annotation."""


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    for name, ok in FORMATS.items():
        checker.checks(name)(lambda value, ok=ok: not isinstance(value, str) or ok(value))
    return checker


_FORMAT_CHECKER = _format_checker()


# -- tether's keywords for arguments: closed objects, per-key errors -----------------------------

_OPENERS = ("additionalProperties", "patternProperties", "unevaluatedProperties")


def _extras(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[str]:
    properties = schema.get("properties") or {}
    patterns = schema.get("patternProperties") or {}
    for key in instance:
        if key not in properties and not any(pattern_search(p, key) for p in patterns):
            yield key


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for key in _extras(instance, schema):
        if validator.is_type(allowed, "object"):
            yield from validator.descend(instance[key], allowed, path=key)
        elif not allowed:
            yield ValidationError(f"unexpected field {key[:80]!r}", path=(key,))


_VALUE_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_VALUE_LISTS = ("prefixItems", "anyOf", "oneOf", "allOf")


def _closed(node: Any) -> Any:
    """A copy where every object schema that lists ``properties`` and says nothing of other keys
    is closed, only where a schema describes the value itself: never inside ``not``, ``if``,
    ``then``, ``else`` or ``contains``, where closing would change the condition's meaning."""
    if not isinstance(node, Mapping):
        return node
    out = dict(node)
    for key in _VALUE_MAPS:
        if isinstance(out.get(key), Mapping):
            out[key] = {name: _closed(sub) for name, sub in out[key].items()}
    for key in _VALUE_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_closed(sub) for sub in out[key]]
    for key in ("additionalProperties", "items"):
        sub = out.get(key)
        if isinstance(sub, Mapping):
            out[key] = _closed(sub)
        elif key == "items" and isinstance(sub, list):  # drafts before 2020-12
            out[key] = [_closed(x) for x in sub]
    if "properties" in out and not any(k in out for k in _OPENERS):
        out["additionalProperties"] = False
    return out


def _same(a: Any, b: Any) -> bool:
    """JSON equality with exact types: ``true`` is not ``1`` and ``1.0`` is not ``1``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _enum(validator: Any, enums: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not any(_same(instance, e) for e in enums):
        yield ValidationError(f"{instance!r} is not one of {enums!r}")


def _const(validator: Any, const: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not _same(instance, const):
        yield ValidationError(f"{const!r} was expected")


def _required(
    validator: Any, required: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for name in required:
        if name not in instance:
            yield ValidationError(f"missing field {name!r}", path=(name,))


# -- compiling ----------------------------------------------------------------------------------

_CLASSES: dict[tuple[type, bool, bool], type[Validator]] = {}


def _validator_class(schema: Mapping[str, Any], intake: bool, counted: bool = False) -> type[Validator]:
    """The validator for ``schema``'s dialect with tether's keywords (``intake``: the arguments
    rules); ``counted``: every keyword application counted against the check's work budget."""
    dialect = schema.get("$schema")
    base: type[Validator] = jsonschema.Draft202012Validator
    if isinstance(dialect, str):
        # An unknown dialect is read as 2020-12; its meta-schema is never fetched.
        base = jsonschema.validators.validator_for({"$schema": dialect}, default=base)
    key = (base, intake, counted)
    cls = _CLASSES.get(key)
    if cls is None:
        checker = base.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})
        keywords: dict[str, Any] = {"enum": _enum, "const": _const, "uniqueItems": unique_items}
        keywords |= pattern_keywords(base)
        if intake:
            keywords |= {"additionalProperties": _additional_properties, "required": _required}
        if counted:
            keywords = counted_keywords({**base.VALIDATORS, **keywords})
        cls = jsonschema.validators.extend(base, keywords, type_checker=checker)
        _CLASSES[key] = cls
    return cls


def _refuse_retrieval(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(uri)  # nothing is ever fetched


_NO_RETRIEVAL: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def _refs(node: Any, depth: int = 0) -> Iterator[tuple[str, str]]:
    if depth > 64:
        raise UnusableSchema("schema nesting is too deep")
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef", "$recursiveRef", "$id") and isinstance(value, str):
                yield key, value
            yield from _refs(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item, depth + 1)


# -- a fast answer for flat argument schemas -----------------------------------------------------

# What a flat schema may say of one argument, and what each primitive type accepts; anything
# else is left to the validator.
_FLAT_ANY = frozenset({"type", "title", "description"})
_FLAT_ROOT = _FLAT_ANY | {"properties", "required", "additionalProperties"}
_FLAT_PROPERTY = _FLAT_ANY | {"default", "examples", "minLength", "maxLength", "minimum", "maximum", "enum"}
_FLAT_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: _is_integer(None, v),
    "number": lambda v: _is_number(None, v),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _flat_check(root: Mapping[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    """For a closed object of primitive arguments (most tools), a predicate that is True only when
    the validator would find nothing; False or None (not covered) leaves it to the validator."""
    properties = root.get("properties")
    required = root.get("required", [])
    if (
        set(root) - _FLAT_ROOT
        or root.get("type") != "object"
        or root.get("additionalProperties") is not False
        or not isinstance(properties, Mapping)
        or not isinstance(required, list)
        or not all(isinstance(name, str) and name in properties for name in required)
    ):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, sub in properties.items():
        kind = sub.get("type") if isinstance(sub, Mapping) else None
        if not isinstance(kind, str) or kind not in _FLAT_TYPES or set(sub) - _FLAT_PROPERTY:
            return None
        checks[name] = _flat_property(sub)
    needed = frozenset(required)

    def valid(arguments: dict[str, Any]) -> bool:
        return needed.issubset(arguments) and all(
            (check := checks.get(key)) is not None and check(value) for key, value in arguments.items()
        )

    return valid


def _flat_property(sub: Mapping[str, Any]) -> Callable[[Any], bool]:
    typed = _FLAT_TYPES[sub["type"]]
    low, high = sub.get("minLength"), sub.get("maxLength")
    least, most = sub.get("minimum"), sub.get("maximum")
    enum = sub.get("enum")

    def ok(value: Any) -> bool:
        if not typed(value):
            return False
        if isinstance(value, str) and (
            (low is not None and len(value) < low) or (high is not None and len(value) > high)
        ):
            return False
        if _is_number(None, value) and (
            (least is not None and value < least) or (most is not None and value > most)
        ):
            return False
        return enum is None or any(_same(value, e) for e in enum)

    return ok


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """A checked schema and its validator (``compile_schema``); ``_valid``, for flat argument
    schemas, answers "valid" without the validator."""

    schema: Mapping[str, Any]
    intake: bool
    _validator: Any
    _valid: Callable[[dict[str, Any]], bool] | None = None
    _counted: Any = None  # the validator counting its steps (``_work``), where they need counting
    _weight: int | None = 0  # the steps a node may take at most (``_work.weight``; None: no bound)
    _patterned: bool = False  # whether it names a pattern (its matches then share one budget)

    def violations(self, instance: Any) -> list[SchemaViolation]:
        """Every violation of ``instance``, most telling first (empty when it is valid). Raises
        ``UnusableSchema`` when checking it takes more work than its budget (``tether.core._work``),
        or the schema's patterns take longer than ``PATTERN_SECONDS`` to match."""
        if not self._patterned:
            return self._bounded(instance)
        with check_budget():
            return self._bounded(instance)

    def _bounded(self, instance: Any) -> list[SchemaViolation]:
        if self._counted is None:  # a node takes at most WORK_PER_NODE steps: within budget
            return self._violations(instance, self._validator)
        nodes = size(instance)
        if self._weight is not None and self._weight * nodes <= budget(nodes):
            return self._violations(instance, self._validator)
        with work_budget(nodes):
            return self._violations(instance, self._counted)

    def _violations(self, instance: Any, validator: Any) -> list[SchemaViolation]:
        found: list[tuple[int, int, SchemaViolation]] = []
        try:
            if self.intake:
                for v in _walk(instance, (), 0):
                    found.append((RANK.get(v.reason, 9), len(found), v))
                    if v.reason == "too_deep":
                        return [v]
            if self._valid is not None and type(instance) is dict and self._valid(instance):
                return [v for _, _, v in found]  # the validator would add nothing
            for error in validator.iter_errors(instance):
                v = violation(error, self.intake)
                found.append((RANK.get(v.reason, 9), len(found), v))
        except referencing.exceptions.Unresolvable as err:
            raise UnusableSchema(f"a reference in the schema does not resolve inside it: {err}") from None
        except RecursionError:
            raise SchemaViolation(
                "too_deep", "the value is nested too deeply for its schema", path=(), keyword="$ref"
            ) from None
        found.sort(key=lambda item: item[:2])
        return [v for _, _, v in found]

    def check(self, instance: Any) -> None:
        """Raise the most telling ``SchemaViolation`` of ``instance``; return when it is valid."""
        problems = self.violations(instance)
        if problems:
            raise problems[0]


def _compile(schema: Mapping[str, Any], intake: bool) -> CompiledSchema:
    if not isinstance(schema, Mapping):
        raise UnusableSchema(f"a schema must be a JSON object, not {type(schema).__name__}")
    found = list(_refs(schema))
    if not any(key == "$id" for key, _ in found):
        # Without an embedded $id, only a fragment ("#/...") can resolve inside the schema.
        for key, value in found:
            if not value.startswith("#"):
                raise UnusableSchema(f"{key} {value[:120]!r} points outside the schema (never fetched)")
    cls = _validator_class(schema, intake)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as err:
        path = "/".join(str(p) for p in err.absolute_path) or "(root)"
        raise UnusableSchema(f"invalid schema at {path}: {err.message[:200]}") from None
    root = schema
    if intake:
        root = {**_closed(schema), "additionalProperties": False}
    validator = cls(root, registry=_NO_RETRIEVAL, format_checker=_FORMAT_CHECKER)
    most = weight(root, cls.VALIDATORS)
    counted = None
    if most is None or most > WORK_PER_NODE:
        counted_cls = _validator_class(schema, intake, counted=True)
        counted = counted_cls(root, registry=_NO_RETRIEVAL, format_checker=_FORMAT_CHECKER)
    flat = _flat_check(root) if intake else None
    return CompiledSchema(schema, intake, validator, flat, counted, most, _names_pattern(root))


def _names_pattern(node: Any) -> bool:
    """Whether ``pattern`` or ``patternProperties`` is a key anywhere in ``node`` (a property
    named so counts too: that only costs a budget that is not needed)."""
    if isinstance(node, Mapping):
        named = "pattern" in node or "patternProperties" in node
        return named or any(_names_pattern(v) for v in node.values())
    if isinstance(node, list):
        return any(_names_pattern(v) for v in node)
    return False


class _Cache:
    """Compiled schemas by identity (the schema is held, so its id is never reused) and by
    canonical JSON (equal schemas share one compilation)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._by_id: OrderedDict[tuple[int, bool], tuple[Mapping[str, Any], CompiledSchema]] = OrderedDict()
        self._by_text: OrderedDict[tuple[str, bool], CompiledSchema] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, schema: Mapping[str, Any], intake: bool) -> CompiledSchema:
        key = (id(schema), intake)
        hit = self._by_id.get(key)
        if hit is not None and hit[0] is schema:
            return hit[1]
        try:
            text = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as err:
            raise UnusableSchema(f"a schema must be JSON: {err}") from None
        with self._lock:
            compiled = self._by_text.get((text, intake))
        if compiled is None:
            compiled = _compile(schema, intake)
        with self._lock:
            self._by_text[(text, intake)] = compiled
            self._by_id[key] = (schema, compiled)
            for table in (self._by_text, self._by_id):
                while len(table) > self.size:
                    table.popitem(last=False)
        return compiled

    def clear(self) -> None:
        with self._lock:
            self._by_id.clear()
            self._by_text.clear()


_CACHE = _Cache(_CACHE_SIZE)


def compile_schema(schema: Mapping[str, Any], *, intake: bool = False) -> CompiledSchema:
    """The compiled form of ``schema`` (cached); ``intake=True`` adds the arguments rules. Raises
    ``UnusableSchema`` for an invalid schema or one that needs an outside reference."""
    return _CACHE.get(schema, intake)


def check_arguments(schema: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    """Check a call's arguments against its parameter schema with the intake rules; returns a
    copy. Raises ``SchemaViolation`` (the most telling one) or ``UnusableSchema``."""
    if not isinstance(arguments, dict):
        raise SchemaViolation("not_an_object", "arguments must be a JSON object", path=(), keyword="type")
    compile_schema(schema, intake=True).check(arguments)
    return dict(arguments)


def validate(schema: Mapping[str, Any], instance: Any) -> None:
    """Check any JSON value against ``schema`` with the plain rules (exact types, formats, no
    remote references). Raises ``SchemaViolation`` or ``UnusableSchema``."""
    compile_schema(schema).check(instance)


def _walk(value: Any, path: tuple[str | int, ...], depth: int) -> Iterator[SchemaViolation]:
    """Intake rules no schema keyword expresses: nesting depth and blank strings anywhere."""
    if isinstance(value, str):
        if not value.strip():
            where = path_text(path, "(arguments)")
            yield SchemaViolation(
                "blank_string", f"{where} is empty or whitespace only", path=path, keyword="blank"
            )
    elif isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            yield SchemaViolation(
                "too_deep", f"more than {MAX_DEPTH} nested containers", path=path, keyword="depth"
            )
            return
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield from _walk(item, (*path, key), depth + 1)
