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
    out_of_range       a number outside ``minimum``/``maximum``/``multipleOf``, an array or object
                       outside its item or key counts
    not_allowed_value  a value not in the parameter's ``enum``/``const``, or not matching ``pattern``
    invalid_format     a string that is not the ``format`` it declares (date, date-time, email, …)
    not_unique         an array with ``uniqueItems`` that repeats an item
    schema_mismatch    any other keyword (``not``, ``oneOf`` matching twice, ``if``/``then`` …)
    unsupported_schema the contract's schema is unusable (invalid, or a reference from outside it)
    unknown_tool       the envelope names a tool the host does not offer

Per-parameter limits come from the tool contract's JSON Schema (pydantic ``Field`` constraints
on local tools, ``inputSchema`` on MCP tools), checked by the one schema engine in
``tether.core._schema``; this module is the strict parser in front of it. Nothing is coerced and
nothing is trimmed.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.core._schema import MAX_DEPTH
from tether.core._schema import check_arguments as _check_against_schema
from tether.core._schema_errors import json_type
from tether.errors import PolicyError
from tether.policy._provenance_schema import declared_received
from tether.policy._rules import Decision, Policy, ProposedCall, judged_as_received
from tether.policy._trusted import TrustedContext
from tether.tools._contract import Tool, ToolSpec

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


_DECODERS = threading.local()


def _decoder() -> json.JSONDecoder:
    """This thread's strict decoder. One per thread, not one per call (building one costs more
    than parsing a tool call's arguments) and not one per process: the hooks are Python code,
    so a shared scanner could be re-entered from another thread mid-parse."""
    decoder: json.JSONDecoder | None = getattr(_DECODERS, "decoder", None)
    if decoder is None:
        decoder = _DECODERS.decoder = json.JSONDecoder(
            object_pairs_hook=_pairs,
            parse_constant=_reject_constant,
            parse_float=_finite,
            parse_int=_bounded_int,
        )
    return decoder


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
        value = _decoder().decode(text)
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


# -- the contract: one schema engine (tether.core._schema) --------------------------------------------


def check_arguments(parameters: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Check parsed arguments against a tool's parameter schema: exactly its keys, exact types,
    per-parameter limits, no blank strings. Returns a copy; raises ``PolicyError`` (a
    ``tether.core._schema.SchemaViolation`` naming the argument, or ``UnusableSchema``)."""
    if not isinstance(arguments, Mapping):
        raise PolicyError("not_an_object", "arguments must be a JSON object")
    return _check_against_schema(parameters, dict(arguments))


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
        raise PolicyError("wrong_type", f"tool must be a string, not {json_type(tool)}", field="tool")
    if not tool.strip():
        raise PolicyError("blank_string", "tool is empty or whitespace only", field="tool")
    if not isinstance(arguments, dict):
        raise PolicyError(
            "not_an_object", f"arguments must be an object, not {json_type(arguments)}", field="arguments"
        )
    return tool, arguments


def _offered(tools: Iterable[Tool | ToolSpec] | Mapping[str, Tool | ToolSpec]) -> dict[str, Tool | ToolSpec]:
    """The tools by the name each is offered as."""
    items = tools.values() if isinstance(tools, Mapping) else tools
    return {(t if isinstance(t, ToolSpec) else t.spec).name: t for t in items}


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
    name, arguments = parse_envelope(raw_json)
    local = _offered(tools).get(name)
    spec = local.spec if isinstance(local, Tool) else local
    if spec is None:
        raise PolicyError("unknown_tool", f"no tool named {name[:80]!r} is offered", tool=name[:80])
    args = check_arguments(spec.parameters, arguments)
    needs = False
    if policy is not None:
        # As its validators leave it; a bare spec's, as its schema says it decodes it.
        received = (
            local.received(args) if isinstance(local, Tool) else declared_received(spec.parameters, args)
        )
        call = ProposedCall(f"proposal:{name}", spec, args)
        decision: Decision = judged_as_received(policy, call, context, received)
        if decision.verdict == "deny":
            raise PolicyError(decision.reason, f"{decision.rule}: {decision.reason}", **decision.details)
        needs = decision.verdict == "approve"
    return Proposal.of(spec.name, args, context.tenant, effect=str(spec.effect), needs_approval=needs)
