"""Schema failures as tether errors (``SchemaViolation``, ``UnusableSchema``) and the reason and
message a ``jsonschema`` error becomes. The engine that finds them is ``tether.core._schema``."""

from __future__ import annotations

from typing import Any

from jsonschema import ValidationError

from tether.errors import PolicyError

__all__ = ["RANK", "SchemaViolation", "UnusableSchema", "json_type", "path_text", "violation"]


class SchemaViolation(PolicyError):
    """A value that does not match its schema.

    ``reason`` is one of ``wrong_type``, ``missing_field``, ``extra_field``, ``blank_string``,
    ``too_short``, ``too_long``, ``out_of_range``, ``not_allowed_value``, ``invalid_format``,
    ``not_unique``, ``too_deep``, ``not_an_object``, ``schema_mismatch``; ``path`` is where
    the value sits (keys and list indexes), also given as text in ``details["field"]``.
    """

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        path: tuple[str | int, ...],
        keyword: str,
        root: str = "(arguments)",
    ) -> None:
        super().__init__(reason, message, field=path_text(path, root), keyword=keyword)
        self.path = path
        self.keyword = keyword


class UnusableSchema(PolicyError):
    """A schema that cannot be used: invalid against its meta-schema, or needing a reference
    that is not inside it (never fetched). ``reason`` is ``unsupported_schema``."""

    def __init__(self, message: str) -> None:
        super().__init__("unsupported_schema", message)


RANK = {"too_deep": 0, "missing_field": 1, "extra_field": 2, "wrong_type": 3, "blank_string": 4}

_RANGES = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_SIZES = ("minItems", "maxItems", "minProperties", "maxProperties")
_REASONS = {
    **dict.fromkeys((*_RANGES, *_SIZES), "out_of_range"),
    **dict.fromkeys(("pattern", "enum", "const"), "not_allowed_value"),
    "type": "wrong_type",
    "required": "missing_field",
    "additionalProperties": "extra_field",
    "minLength": "too_short",
    "maxLength": "too_long",
    "uniqueItems": "not_unique",
    "format": "invalid_format",
}


def json_type(value: Any) -> str:
    """The JSON Schema name of a value's type (``integer``, ``array``, ...), as errors say it."""
    if value is None:
        return "null"
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def path_text(path: tuple[str | int, ...] | Any, root: str) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part[:40]}" if text else part[:40])
    return text or root


def _root_errors(errors: list[ValidationError], keywords: tuple[str, ...]) -> list[ValidationError]:
    return [e for e in errors if e.validator in keywords and not e.relative_path]


def _combined(error: ValidationError, where: str) -> tuple[ValidationError | None, str, str]:
    """An anyOf/oneOf failure: the error of the option whose type matched, or a reason and
    message for the combination when no single option explains it."""
    branches: dict[Any, list[ValidationError]] = {}
    for sub in error.context or ():
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    if not branches:
        return None, "schema_mismatch", f"{where} matches more than one of the {error.validator} options"
    typed = [errs for errs in branches.values() if not _root_errors(errs, ("type",))]
    if not typed:
        kinds: list[str] = []
        for errs in branches.values():
            for e in _root_errors(errs, ("type",)):
                for kind in [e.validator_value] if isinstance(e.validator_value, str) else e.validator_value:
                    if kind not in kinds:
                        kinds.append(kind)
        return None, "wrong_type", f"{where} must be {' or '.join(kinds)}, not {json_type(error.instance)}"
    if all(len(_root_errors(errs, ("const", "enum"))) == len(errs) for errs in typed):
        return None, "not_allowed_value", f"{where} is not one of the allowed values"
    best = sorted(typed[0], key=lambda e: RANK.get(_REASONS.get(str(e.validator), ""), 9))
    return best[0], "", ""


def violation(error: ValidationError, intake: bool) -> SchemaViolation:
    root = "(arguments)" if intake else "(value)"
    leaf: ValidationError | None = error
    while leaf is not None and leaf.validator in ("anyOf", "oneOf"):
        path = tuple(leaf.absolute_path)
        leaf, reason, message = _combined(leaf, path_text(path, root))
        if leaf is None:
            return SchemaViolation(reason, message, path=path, keyword=str(error.validator), root=root)
    assert leaf is not None
    path = tuple(leaf.absolute_path)
    where = path_text(path, root)
    keyword = str(leaf.validator)
    value, bound = leaf.instance, leaf.validator_value
    reason = _REASONS.get(keyword, "schema_mismatch")
    if keyword == "type":
        kinds = [bound] if isinstance(bound, str) else list(bound)
        message = f"{where} must be {' or '.join(kinds)}, not {json_type(value)} (nothing is coerced)"
    elif keyword == "required":
        message = f"missing field {where!r}" if intake else leaf.message
    elif keyword == "additionalProperties":
        message = f"unexpected field {where!r}" if intake else leaf.message
    elif keyword in ("minLength", "maxLength"):
        kind = "minimum" if keyword == "minLength" else "maximum"
        message = f"{where} has {len(value)} characters; {kind} {bound}"
    elif keyword in _SIZES:
        kind = "minimum" if keyword.startswith("min") else "maximum"
        message = f"{where} has {len(value)} {'items' if 'Items' in keyword else 'keys'}; {kind} {bound}"
    elif keyword in _RANGES:
        message = f"{where} = {value!r} violates {keyword} {bound!r}"
    elif keyword == "pattern":
        message = f"{where} does not match {str(bound)[:120]!r}"
    elif keyword == "enum":
        message = f"{where} must be one of {list(bound)[:10]!r}"
    elif keyword == "const":
        message = f"{where} must be {bound!r}"
    elif keyword == "format":
        message = f"{where} is not a valid {bound}"
    elif keyword == "uniqueItems":
        message = f"{where} has duplicate items"
    elif keyword == "None":  # a `false` subschema
        message = f"{where} is not allowed here"
    else:
        message = f"{where} does not satisfy {keyword}: {leaf.message[:160]}"
    return SchemaViolation(reason, message, path=path, keyword=keyword, root=root)
