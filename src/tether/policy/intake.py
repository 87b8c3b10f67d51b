"""Strict intake of the model's proposals (T3): untrusted JSON in, a checked value or ``PolicyError`` out.

Every refusal is a ``PolicyError`` whose ``reason`` is machine-readable:

    too_large          over ``MAX_PROPOSAL_BYTES`` of UTF-8, measured before parsing
    not_utf8           bytes that are not UTF-8, or text with lone surrogates
    bom                a leading byte-order mark
    invalid_json       not one JSON document
    duplicate_key      the same key twice in one object, at any depth
    non_standard_json  NaN, Infinity, -Infinity
    number_overflow    a float that is not finite, an integer outside the signed 64-bit range
    too_deep           more than ``MAX_DEPTH`` nested containers
    not_an_object      the envelope or the arguments are not a JSON object
    missing_field      a required key is absent (``details["field"]``)
    extra_field        a key the contract does not name (``details["field"]``)
    wrong_type         no coercion: "1" is not 1, true is not 1, 1.0 is not an integer
    blank_string       an empty or whitespace-only string
    too_short/too_long a string outside the parameter's ``minLength``/``maxLength`` (code points)
    out_of_range       a number outside ``minimum``/``maximum``, an array outside its item counts
    not_allowed_value  a value not in the parameter's ``enum``/``const``, or not matching ``pattern``
    unknown_tool       the envelope names a tool the host does not offer

Per-parameter limits come from the tool contract's JSON Schema (pydantic ``Field`` constraints
on local tools, ``inputSchema`` on MCP tools). Nothing is coerced and nothing is trimmed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import PolicyError

if TYPE_CHECKING:
    from tether.policy.rules import Decision, Policy
    from tether.policy.trusted import TrustedContext
    from tether.tools.contract import Tool, ToolSpec

__all__ = [
    "MAX_DEPTH",
    "MAX_PROPOSAL_BYTES",
    "Proposal",
    "canonical_json",
    "check_arguments",
    "content_hash",
    "parse_arguments",
    "parse_envelope",
    "parse_json",
    "propose",
]

MAX_PROPOSAL_BYTES = 4096
MAX_DEPTH = 16
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_BOM = "\ufeff"


def _reject_constant(name: str) -> Any:
    raise PolicyError("non_standard_json", f"non-standard JSON constant {name}")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise PolicyError("duplicate_key", f"duplicate key {key[:80]!r}", key=key[:80])
        out[key] = value
    return out


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise PolicyError("number_overflow", f"number {text[:40]} is not finite")
    return value


def _bounded_int(text: str) -> int:
    value = int(text)
    if not _INT_MIN <= value <= _INT_MAX:
        raise PolicyError("number_overflow", f"integer {text[:40]}… does not fit in 64 bits")
    return value


def _check_text(value: str, where: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # JSON escapes can spell a lone surrogate ("\ud800") inside perfectly valid UTF-8.
        raise PolicyError("not_utf8", f"{where} is not encodable as UTF-8 (lone surrogate)") from None


def _walk(value: Any, depth: int, where: str) -> None:
    if isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            raise PolicyError("too_deep", f"more than {MAX_DEPTH} nested containers")
        if isinstance(value, dict):
            for k, v in value.items():
                _check_text(k, f"a key in {where}")
                _walk(v, depth + 1, f"{where}.{k[:40]}")
        else:
            for i, v in enumerate(value):
                _walk(v, depth + 1, f"{where}[{i}]")
    elif isinstance(value, str):
        _check_text(value, where)


def parse_json(raw: str | bytes) -> Any:
    """Parse one untrusted JSON document strictly; raises ``PolicyError`` and nothing else."""
    if isinstance(raw, bytes | bytearray):
        if len(raw) > MAX_PROPOSAL_BYTES:
            raise PolicyError("too_large", f"{len(raw)} bytes; the limit is {MAX_PROPOSAL_BYTES}")
        if raw.startswith(b"\xef\xbb\xbf"):
            raise PolicyError("bom", "a byte-order mark is not allowed")
        try:
            text = bytes(raw).decode("utf-8")  # strict: json.loads(bytes) would guess UTF-16/32
        except UnicodeDecodeError:
            raise PolicyError("not_utf8", "input is not valid UTF-8") from None
    elif isinstance(raw, str):
        try:
            size = len(raw.encode("utf-8"))
        except UnicodeEncodeError:
            raise PolicyError("not_utf8", "input is not encodable as UTF-8 (lone surrogate)") from None
        if size > MAX_PROPOSAL_BYTES:
            raise PolicyError("too_large", f"{size} bytes; the limit is {MAX_PROPOSAL_BYTES}")
        text = raw
    else:
        raise PolicyError("invalid_json", f"expected JSON text, got {type(raw).__name__}")
    if text.startswith(_BOM):
        raise PolicyError("bom", "a byte-order mark is not allowed")
    try:
        # A decoder per call: the hooks are Python code, so a shared scanner could be re-entered
        # from another thread mid-parse.
        value = json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_constant=_reject_constant,
            parse_float=_finite,
            parse_int=_bounded_int,
        )
    except PolicyError:
        raise
    except RecursionError:
        raise PolicyError("too_deep", f"more than {MAX_DEPTH} nested containers") from None
    except ValueError as err:  # JSONDecodeError, and int() limits
        raise PolicyError("invalid_json", f"not valid JSON: {str(err)[:120]}") from None
    # The walk finds lone surrogates (only a \u escape can make one: the text itself encoded)
    # and excessive nesting (only possible with more brackets than the limit).
    if "\\u" in text or text.count("[") + text.count("{") > MAX_DEPTH:
        _walk(value, 0, "(root)")
    return value


def parse_arguments(raw: str | bytes) -> dict[str, Any]:
    """Parse a tool call's raw arguments (a JSON object); an empty string means ``{}``.

    Raises ``PolicyError``. The contract check (``check_arguments``) comes after this.
    """
    if isinstance(raw, str | bytes | bytearray) and len(raw) == 0:
        return {}
    value = parse_json(raw)
    if not isinstance(value, dict):
        raise PolicyError("not_an_object", "arguments must be a JSON object")
    return value


# -- the contract: exact keys, types without coercion, per-parameter limits ----------------------


def _type_ok(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return False


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema
    if not ref.startswith("#/"):
        raise PolicyError("unsupported_schema", f"external $ref {ref!r} is not followed")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(part) if isinstance(node, Mapping) else None
    if not isinstance(node, Mapping):
        raise PolicyError("unsupported_schema", f"$ref {ref!r} does not resolve")
    return node


def _check(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise PolicyError("too_deep", f"schema nesting beyond {MAX_DEPTH} at {where}")
    schema = _resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            errors: list[PolicyError] = []
            for option in options:
                try:
                    _check(value, option, root, where, depth + 1)
                    break
                except PolicyError as err:
                    errors.append(err)
            else:
                # The most telling error is the one from the option whose type matched.
                typed = [e for e in errors if e.reason != "wrong_type"]
                raise (typed or errors)[0]
    for option in schema.get("allOf") or ():
        _check(value, option, root, where, depth + 1)

    kinds = schema.get("type")
    if kinds is not None:
        kinds_list = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_type_ok(value, k) for k in kinds_list):
            raise PolicyError(
                "wrong_type",
                f"{where} must be {' or '.join(kinds_list)}, not {_json_type(value)} (nothing is coerced)",
                field=where,
            )
    if "const" in schema and not _same(value, schema["const"]):
        raise PolicyError("not_allowed_value", f"{where} must be {schema['const']!r}", field=where)
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_same(value, e) for e in enum):
        raise PolicyError("not_allowed_value", f"{where} must be one of {enum[:10]!r}", field=where)

    if isinstance(value, str):
        _check_string(value, schema, where)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, schema, where)
    elif isinstance(value, list):
        lo, hi = schema.get("minItems"), schema.get("maxItems")
        if (isinstance(lo, int) and len(value) < lo) or (isinstance(hi, int) and len(value) > hi):
            raise PolicyError("out_of_range", f"{where} has {len(value)} items ({lo}–{hi})", field=where)
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _check(item, items, root, f"{where}[{i}]", depth + 1)
    elif isinstance(value, dict):
        _check_object(value, schema, root, where, depth, strict_keys=False)


def _check_string(value: str, schema: Mapping[str, Any], where: str) -> None:
    if not value.strip():
        raise PolicyError("blank_string", f"{where} is empty or whitespace only", field=where)
    lo, hi = schema.get("minLength"), schema.get("maxLength")
    if isinstance(lo, int) and len(value) < lo:
        raise PolicyError("too_short", f"{where} has {len(value)} characters; minimum {lo}", field=where)
    if isinstance(hi, int) and len(value) > hi:
        raise PolicyError("too_long", f"{where} has {len(value)} characters; maximum {hi}", field=where)
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and re.search(pattern, value) is None:
        raise PolicyError("not_allowed_value", f"{where} does not match {pattern!r}", field=where)


def _check_number(value: float, schema: Mapping[str, Any], where: str) -> None:
    bounds = (
        ("minimum", lambda v, b: v >= b),
        ("maximum", lambda v, b: v <= b),
        ("exclusiveMinimum", lambda v, b: v > b),
        ("exclusiveMaximum", lambda v, b: v < b),
    )
    for key, ok in bounds:
        bound = schema.get(key)
        if isinstance(bound, int | float) and not isinstance(bound, bool) and not ok(value, bound):
            raise PolicyError("out_of_range", f"{where} = {value} violates {key} {bound}", field=where)


def _check_object(
    value: dict[str, Any],
    schema: Mapping[str, Any],
    root: Mapping[str, Any],
    where: str,
    depth: int,
    *,
    strict_keys: bool,
) -> None:
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = [r for r in schema.get("required") or () if isinstance(r, str)]
    for name in required:
        if name not in value:
            raise PolicyError("missing_field", f"missing field {name!r}", field=name)
    closed = strict_keys or schema.get("additionalProperties") is False or bool(props)
    for name, item in value.items():
        sub = props.get(name)
        if sub is None:
            if closed:
                raise PolicyError("extra_field", f"unexpected field {name[:80]!r}", field=name[:80])
            extra = schema.get("additionalProperties")
            if isinstance(extra, Mapping):
                _check(item, extra, root, f"{where}.{name[:40]}", depth + 1)
            continue
        label = name if where == "(arguments)" else f"{where}.{name}"
        _check(item, sub, root, label, depth + 1)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _json_type(value: Any) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), "null" if value is None else type(value).__name__)


def check_arguments(parameters: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Check parsed arguments against a tool's parameter schema: exactly its keys, exact types,
    per-parameter limits, no blank strings. Returns a copy; raises ``PolicyError``."""
    if not isinstance(arguments, Mapping):
        raise PolicyError("not_an_object", "arguments must be a JSON object")
    args = dict(arguments)
    _check_object(args, parameters, parameters, "(arguments)", 0, strict_keys=True)
    return args


# -- the envelope {"tool": ..., "arguments": {...}} and the Proposal value ------------------------


def canonical_json(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8 kept (the text that is hashed and stored)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def content_hash(tool: str, arguments: Mapping[str, Any]) -> str:
    """``sha256:`` of the canonical envelope: what an approval is bound to."""
    text = canonical_json({"arguments": dict(arguments), "tool": tool})
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Proposal:
    """A proposal that passed intake (and, through ``propose``, the policy). Immutable: the
    arguments are kept as canonical JSON and handed out as fresh copies."""

    tool: str
    canonical_arguments: str
    tenant: str
    content_hash: str
    effect: str = "read"
    needs_approval: bool = False

    @property
    def arguments(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.canonical_arguments)
        return value

    @classmethod
    def of(cls, tool: str, arguments: Mapping[str, Any], tenant: str, **extra: Any) -> Proposal:
        return cls(tool, canonical_json(dict(arguments)), tenant, content_hash(tool, arguments), **extra)


def parse_envelope(raw: str | bytes) -> tuple[str, dict[str, Any]]:
    """Parse ``{"tool": name, "arguments": {...}}`` with exactly those two keys; raises ``PolicyError``."""
    value = parse_json(raw)
    if not isinstance(value, dict):
        raise PolicyError("not_an_object", "a proposal must be a JSON object")
    for key in ("tool", "arguments"):
        if key not in value:
            raise PolicyError("missing_field", f"missing field {key!r}", field=key)
    for key in value:
        if key not in ("tool", "arguments"):
            raise PolicyError("extra_field", f"unexpected field {key[:80]!r}", field=key[:80])
    tool, arguments = value["tool"], value["arguments"]
    if not isinstance(tool, str):
        raise PolicyError("wrong_type", f"tool must be a string, not {_json_type(tool)}", field="tool")
    if not tool.strip():
        raise PolicyError("blank_string", "tool is empty or whitespace only", field="tool")
    if not isinstance(arguments, dict):
        raise PolicyError(
            "not_an_object", f"arguments must be an object, not {_json_type(arguments)}", field="arguments"
        )
    return tool, arguments


def _specs(tools: Iterable[Tool | ToolSpec] | Mapping[str, Tool | ToolSpec]) -> dict[str, ToolSpec]:
    from tether.tools.contract import ToolSpec

    items = tools.values() if isinstance(tools, Mapping) else tools
    out: dict[str, ToolSpec] = {}
    for t in items:
        spec: ToolSpec = t if isinstance(t, ToolSpec) else t.spec
        out[spec.name] = spec
    return out


def propose(
    context: TrustedContext,
    raw_json: str | bytes,
    *,
    tools: Iterable[Tool | ToolSpec] | Mapping[str, Tool | ToolSpec],
    policy: Policy | None = None,
) -> Proposal:
    """Intake of one raw proposal envelope for ``context``: strict parsing, the named tool among
    ``tools``, its exact contract, then ``policy`` (allowlist, tenant ownership, egress).

    Returns a ``Proposal`` (``needs_approval`` set when the policy asks for approval). Raises
    ``PolicyError`` for every refusal, with ``reason`` the failed check (for a policy denial,
    the rule's reason, e.g. ``cross_tenant``); it raises nothing else for any input.
    """
    from tether.policy.rules import ProposedCall

    name, arguments = parse_envelope(raw_json)
    spec = _specs(tools).get(name)
    if spec is None:
        raise PolicyError("unknown_tool", f"no tool named {name[:80]!r} is offered", tool=name[:80])
    args = check_arguments(spec.parameters, arguments)
    needs = False
    if policy is not None:
        decision: Decision = policy.check(ProposedCall(f"proposal:{name}", spec, args), context)
        if decision.verdict == "deny":
            raise PolicyError(decision.reason, f"{decision.rule}: {decision.reason}", **decision.details)
        needs = decision.verdict == "approve"
    return Proposal.of(spec.name, args, context.tenant, effect=str(spec.effect), needs_approval=needs)
