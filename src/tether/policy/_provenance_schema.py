"""A tool's argument schema as the policy reads it: every local ``$ref`` replaced by what it
points to, an object's one branch of an ``anyOf``, and what a server's schema says it decodes
(``declared_received``).

Pydantic writes a nested model as ``{"$ref": "#/$defs/Settings"}`` (an optional one inside an
``anyOf`` beside ``null``), and so do most servers' schemas. A validator follows the reference:
the defaults it fills in, the properties it declares, are the referenced schema's. The policy
reads a property's schema for those (``filled``: an option's defaults; ``split_values``: which
keys are declared and which are data), so it reads the schema with its references inlined.
"""

from __future__ import annotations

import base64
import binascii
import json
import quopri
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

import yaml

from tether.core._bytes import bytes_text
from tether.core._pattern import pattern_search
from tether.core._schema import compile_schema
from tether.policy._provenance_mime import mime_read

__all__ = ["branch_of", "declared_received", "inline_refs", "property_schema"]

_DEPTH = 32  # a value's levels read (a call's value has at most 16 nested containers)
_UNROLLED = 96  # a schema's levels inlined: a recursive model's own, to what a value can nest
_BUDGET = 50_000  # schema nodes built for one schema, past which references are left as they are
_CACHE: dict[int, tuple[Any, Any]] = {}
_CACHED = 256


def inline_refs(parameters: Any) -> Any:
    """``parameters`` with each local ``$ref`` (``#/$defs/X``, ``#/definitions/X``, a pointer
    into any nested ``$defs``, percent-encoded or not) replaced by the schema it points to, the
    keywords beside it (a default, a description) kept over the target's. A recursive model is
    unrolled as deep as a call's value can nest. Each target is expanded once a level and shared
    wherever it is referenced, and the whole is bounded (``_BUDGET``): a hostile server's schema
    that references one definition from many places, many levels deep, costs what it holds, not
    what it would print as a tree. Built once per schema object."""
    if not isinstance(parameters, Mapping):
        return parameters
    hit = _CACHE.get(id(parameters))
    if hit is not None and hit[0] is parameters:
        return hit[1]
    out = _inline(parameters, _Refs(parameters), 0)
    if len(_CACHE) >= _CACHED:
        _CACHE.clear()
    _CACHE[id(parameters)] = (parameters, out)
    return out


class _Refs:
    """The targets of one schema's references, each expanded once at each level (where the
    level bound leaves it cut short, it is so only where it is met that deep)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.done: dict[tuple[str, int], Any] = {}
        self.built = 0

    def target(self, ref: str, depth: int) -> Any:
        key = (ref, depth)
        if key not in self.done:
            pointed = _pointed(self.root, ref)
            self.done[key] = _inline(pointed, self, depth + 1) if isinstance(pointed, Mapping) else None
        return self.done[key]


def _inline(node: Any, refs: _Refs, depth: int) -> Any:
    if depth > _UNROLLED or refs.built > _BUDGET or not isinstance(node, list | Mapping):
        return node
    refs.built += 1
    if isinstance(node, list):
        return [_inline(item, refs, depth + 1) for item in node]
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target = refs.target(ref, depth)
        if isinstance(target, Mapping):
            rest = {k: _inline(v, refs, depth + 1) for k, v in node.items() if k != "$ref"}
            return {**target, **rest}
    return {k: _inline(v, refs, depth + 1) for k, v in node.items()}


def _pointed(root: Mapping[str, Any], ref: str) -> Any:
    target: Any = root
    for part in ref[2:].split("/"):
        part = unquote(part).replace("~1", "/").replace("~0", "~")  # a URI fragment's pointer
        target = target.get(part) if isinstance(target, Mapping) else None
    return target


def branch_of(schema: Any, value: Any) -> Any:
    """``schema`` as a validator applies it to ``value``: an ``allOf``'s branches merged (each
    applies), then, of an ``anyOf``/``oneOf``, the one branch for ``value``'s kind (properties
    for a mapping, items for a list, a string's for a string) whose ``const``/``enum`` properties
    the value meets (a discriminated union's member), with the keywords beside it (an optional
    object's object). Of several strings' branches, one that says it decodes the string is taken
    (``declared_received`` judges what it would decode; the string as given is judged too)."""
    if not isinstance(schema, Mapping):
        return schema
    if isinstance(schema.get("allOf"), list) or _conditions(schema):
        schema = _merged(schema, value)
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if not isinstance(branches, list):
            continue
        fit = [b for b in branches if _fits(b, value)]
        if len(fit) > 1 and isinstance(value, str):
            fit = [b for b in fit if _decodes(b)][:1]
        if len(fit) == 1:
            return branch_of({**fit[0], **{k: v for k, v in schema.items() if k != key}}, value)
    return schema


_MERGES = 64  # schemas an allOf merges, its branches' own allOf's included
_UNKNOWN = object()  # a value not known where a schema is merged: its conditions are kept


def _merged(schema: Mapping[str, Any], value: Any = _UNKNOWN) -> dict[str, Any]:
    """An ``allOf`` schema as one: its branches' keywords and properties (those of an ``allOf``
    inside a branch too) together, a schema's own over its branches'; with ``value``, the
    subschemas each applies to it on a condition (``_conditional``) merged in too."""
    out: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    _merge(schema, out, properties, [_MERGES], value)
    return {**out, "properties": properties} if properties else out


def _merge(schema: Any, out: dict[str, Any], properties: dict[str, Any], left: list[int], value: Any) -> None:
    if not isinstance(schema, Mapping) or left[0] <= 0:
        return
    left[0] -= 1
    if value is not _UNKNOWN and _conditions(schema):
        schema = _conditional(schema, value)
    branches = schema.get("allOf")
    for branch in branches if isinstance(branches, list) else []:
        _merge(branch, out, properties, left, value)
    props = schema.get("properties")
    for key, sub in (props if isinstance(props, Mapping) else {}).items():
        # A property two branches declare takes both schemas (one says its type, the other
        # its encoding or default): each applies to the value, so neither is dropped.
        properties[key] = _both(properties[key], sub) if key in properties else sub
    out.update({k: v for k, v in schema.items() if k not in ("properties", "allOf")})


def _both(one: Any, other: Any) -> Any:
    """Two schemas of one property as one; kept as an ``allOf`` of both where either applies a
    subschema on a condition (told when the property's value is read)."""
    if _conditions(one) or _conditions(other):
        return {"allOf": [one, other]}
    return _merged({"allOf": [one, other]})


def _conditions(schema: Any) -> bool:
    return isinstance(schema, Mapping) and (
        "if" in schema or isinstance(schema.get("dependentSchemas"), Mapping)
    )


def _conditional(schema: Mapping[str, Any], value: Any) -> dict[str, Any]:
    """``schema`` with the subschemas it applies to ``value`` on a condition as ``allOf``
    branches: ``then`` where ``value`` meets ``if``, else ``else``; both where that cannot be
    told (the condition's schema is unusable); and each ``dependentSchemas`` entry whose key an
    object holds."""
    rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else", "dependentSchemas")}
    applied: list[Any] = []
    if "if" in schema:
        met = _meets(schema["if"], value)
        applied += [schema.get("then")] if met else [schema.get("else")] if met is False else []
        applied += [] if met is not None else [schema.get("then"), schema.get("else")]
    dependent = schema.get("dependentSchemas")
    if isinstance(dependent, Mapping) and isinstance(value, Mapping):
        applied += [sub for key, sub in dependent.items() if key in value]
    applied = [sub for sub in applied if isinstance(sub, Mapping)]
    if not applied:
        return rest
    own = rest.get("allOf")
    return {**rest, "allOf": [*(own if isinstance(own, list) else []), *applied]}


def _meets(condition: Any, value: Any) -> bool | None:
    """Whether ``value`` meets the schema ``condition`` (an ``if``); ``None`` where its schema
    cannot be used to tell."""
    if isinstance(condition, bool):
        return condition
    if not isinstance(condition, Mapping):
        return None
    try:
        return not compile_schema(condition).violations(value)
    except Exception:  # an unusable schema (a reference left unresolved, too much work)
        return None


def _fits(schema: Any, value: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else []
    if isinstance(value, list | tuple):
        return "items" in schema or "array" in kinds
    if isinstance(value, str):
        return "string" in kinds or (not kinds and _decodes(schema))
    if not isinstance(value, Mapping) or not ("properties" in schema or "object" in kinds):
        return False
    props = schema.get("properties")
    for key, sub in (props if isinstance(props, Mapping) else {}).items():
        if key in value and isinstance(sub, Mapping):
            if "const" in sub and value[key] != sub["const"]:
                return False
            if isinstance(sub.get("enum"), list) and value[key] not in sub["enum"]:
                return False
    return True


def _decodes(schema: Any) -> bool:
    return isinstance(schema, Mapping) and (
        _encoding(schema) is not None or isinstance(schema.get("contentMediaType"), str)
    )


_BASE64_FORMATS = frozenset({"base64", "base64url", "byte"})  # JSON Schema, pydantic, OpenAPI
# A JSON media type, by any name a server gives it (``application/json; charset=utf-8``,
# ``application/vnd.api+json``, ``application/x-json``, ``text/json``).
_MEDIA_JSON = re.compile(r"(?:application|text)/(?:[\w.-]+[+-])?json\s*(?:;.*)?", re.IGNORECASE | re.DOTALL)
_MEDIA_YAML = re.compile(
    r"(?:application|text)/(?:[\w.-]+\+)?(?:x-)?yaml\s*(?:;.*)?", re.IGNORECASE | re.DOTALL
)
_MEDIA_LINES = re.compile(
    r"(?:application|text)/(?:x-)?(?:ndjson|jsonl|jsonlines|json-seq)\s*(?:;.*)?", re.IGNORECASE | re.DOTALL
)


def declared_received(parameters: Any, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """``arguments`` as a tool whose argument schema declares how it reads a string receives
    them, where that differs: a string of ``contentEncoding`` or ``format`` base64 (``Base64Str``
    on a server, Gmail's ``raw`` message) decoded, and one of ``contentMediaType`` JSON
    (``Json[...]``) parsed, at any depth. For a tool whose own code the host cannot run (a
    server's): the schema is all it says of what it does with a value."""
    schema = inline_refs(parameters)
    out = _read(dict(arguments), schema, 0)
    return None if out == arguments else out


def _read(value: Any, schema: Any, depth: int) -> Any:
    schema = branch_of(schema, value)
    if depth > _DEPTH or not isinstance(schema, Mapping):
        return value
    if isinstance(value, str):
        return _string(value, schema, depth)
    if isinstance(value, list):
        return [_read(item, _item(schema, i), depth + 1) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {k: _read(v, property_schema(schema, k), depth + 1) for k, v in value.items()}
    return value


def property_schema(schema: Mapping[str, Any], key: str) -> Any:
    """The schema a validator applies to an object's ``key``: its ``properties`` entry and every
    ``patternProperties`` entry whose pattern the key matches, together; where neither names
    the key, ``additionalProperties``, else ``unevaluatedProperties``."""
    props = schema.get("properties")
    found = [props[key]] if isinstance(props, Mapping) and key in props else []
    patterns = schema.get("patternProperties")
    for pattern, sub in (patterns if isinstance(patterns, Mapping) else {}).items():
        if _matches(str(pattern), key):
            found.append(sub)
    if not found:
        for other in ("additionalProperties", "unevaluatedProperties"):
            if isinstance(schema.get(other), Mapping):
                return schema[other]
        return None
    return found[0] if len(found) == 1 else {"allOf": found}


def _matches(pattern: str, key: str) -> bool:
    """Whether ``pattern`` matches ``key``; where it cannot be matched (no regular expression,
    too much work) it is taken to: the intake refuses such a value, and a reading too many
    only adds what is judged."""
    try:
        return pattern_search(pattern, key)
    except Exception:  # UnusableSchema: a pattern no regex reads, or one past its time
        return True


def _item(schema: Mapping[str, Any], index: int) -> Any:
    """The schema of a list's item ``index``: a tuple's own (``prefixItems``; ``items`` as a list
    in older drafts, ``additionalItems`` past it), else ``items``, else ``unevaluatedItems``."""
    prefix = schema.get("prefixItems")
    older = schema.get("items")
    for leading, rest in ((prefix, older), (older, schema.get("additionalItems"))):
        if isinstance(leading, list):
            found = leading[index] if index < len(leading) else rest
            return found if found is not None else schema.get("unevaluatedItems")
    return older if older is not None else schema.get("unevaluatedItems")


def _string(value: str, schema: Mapping[str, Any], depth: int) -> Any:
    text: Any = value
    encoding = _encoding(schema)
    if encoding is not None:
        text = _decoded(value, encoding)
    media = schema.get("contentMediaType")
    media = media.strip() if isinstance(media, str) and isinstance(text, str) else ""
    if _MEDIA_JSON.fullmatch(media) or _MEDIA_YAML.fullmatch(media):
        return _document(text, schema, depth, yaml_too=bool(_MEDIA_YAML.fullmatch(media)))
    if _MEDIA_LINES.fullmatch(media):  # a JSON value a line (or a record separator)
        return [_document(line, schema, depth) for line in re.split(r"[\r\n\x1e]+", text) if line.strip()]
    shown = mime_read(text) if isinstance(text, str) else None
    return text if shown is None else [text, *shown]  # a message also as its client shows it


def _document(text: str, schema: Mapping[str, Any], depth: int, yaml_too: bool = False) -> Any:
    """A JSON (or YAML) text as its readers take it, each reading judged: parsed with a repeated
    key's last value (Python, JavaScript) and with its first (a reader that keeps the first);
    a YAML text as YAML reads it (its double-quoted escapes, folds and tags). A text no strict
    reader parses is read as written and with its escapes (``\\xHH``, ``\\uHHHH``) decoded, as
    a lenient (JSON5) reader takes it."""
    inner = schema.get("contentSchema")
    readings: list[Any] = []
    for parse in (_json_last, _json_first, *((_yaml,) if yaml_too else ())):
        try:
            parsed = parse(text)
        except (ValueError, yaml.YAMLError, RecursionError):
            continue
        read = _read(parsed, inner, depth + 1)
        if read not in readings:
            readings.append(read)
    if not readings:
        unescaped = _ESCAPE.sub(_unescape, text)
        readings = [text] if unescaped == text else [text, unescaped]
    return readings[0] if len(readings) == 1 else readings


def _json_last(text: str) -> Any:
    return json.loads(text)


def _json_first(text: str) -> Any:
    return json.loads(text, object_pairs_hook=lambda pairs: dict(reversed(pairs)))


def _yaml(text: str) -> Any:
    """A YAML text as its safe reader takes it; one with an alias is not read (an alias shares
    its anchor's value, and a tree read through shared values costs what it would print as: a
    "billion laughs" document)."""
    if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
        raise ValueError("an alias is not read")
    parsed = yaml.safe_load(text)
    if not isinstance(parsed, Mapping | list | str):
        raise ValueError("no document")
    return json.loads(json.dumps(parsed, default=_yaml_text))


def _yaml_text(value: Any) -> str:
    """A YAML value JSON has no type for, as text: bytes (``!!binary``) decoded, dates printed."""
    return bytes_text(value) if isinstance(value, bytes) else str(value)


_ESCAPE = re.compile(r"\\(?:x([0-9A-Fa-f]{2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8}))")


def _unescape(match: re.Match[str]) -> str:
    code = int(next(g for g in match.groups() if g is not None), 16)
    return chr(code) if code < 0x110000 else match.group(0)


def _encoding(schema: Mapping[str, Any]) -> str | None:
    """The encoding ``schema`` says its string is in (names are case-insensitive, as in MIME)."""
    declared = schema.get("contentEncoding")
    if isinstance(declared, str) and declared.strip().lower() in _DECODERS:
        return declared.strip().lower()
    shape = schema.get("format")
    shape = shape.strip().lower() if isinstance(shape, str) else ""
    return "base64" if shape in _BASE64_FORMATS else shape if shape in _DECODERS else None


def _decoded(value: str, encoding: str) -> str:
    """``value`` decoded from ``encoding`` as text; as it is where it holds nothing so encoded."""
    try:
        raw = _DECODERS[encoding](value)
    except (ValueError, TypeError):
        return value
    return bytes_text(raw)


def _unbase64(value: str) -> bytes:
    """``value`` decoded from base64 as a lenient decoder reads it (Python's ``b64decode``,
    Node's ``Buffer``): either alphabet, mixed too, padding optional, every other character
    (whitespace, a stray ``*``, an ``=`` between whole groups) skipped, up to the padding that
    ends a group. A stricter decoder reads a prefix of that, or refuses it."""
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except ValueError:
        pass
    kept: list[str] = []
    for char in value.replace("-", "+").replace("_", "/"):
        if char == "=" and len(kept) % 4 >= 2:
            break  # padding that ends a group ends the data
        if char in _BASE64_ALPHABET:
            kept.append(char)
    bare = "".join(kept)  # one character past whole groups: no base64 (refused, nothing sent)
    return base64.b64decode(bare + "=" * (-len(bare) % 4), validate=True)


_BASE64_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_DECODERS: dict[str, Callable[[str], bytes]] = {
    "base64": _unbase64,
    "base64url": _unbase64,
    "base32": lambda v: base64.b32decode(_bare(v).upper() + "=" * (-len(_bare(v)) % 8)),
    "base16": lambda v: base64.b16decode(_bare(v).upper()),
    "hex": lambda v: base64.b16decode(_bare(v).upper()),
    "quoted-printable": lambda v: quopri.decodestring(v.encode("utf-8")),
    "base32hex": lambda v: base64.b32hexdecode(_bare(v).upper() + "=" * (-len(_bare(v)) % 8)),
    "base85": lambda v: base64.b85decode("".join(v.split())),
    "ascii85": lambda v: base64.a85decode("".join(v.split()), adobe=v.strip().startswith("<~")),
    "uuencode": lambda v: _unuu(v),
    "x-uuencode": lambda v: _unuu(v),
}


def _unuu(value: str) -> bytes:
    """uuencoded text's bytes: its lines (a ``begin``/``end`` frame left out) decoded."""
    lines = [line for line in value.splitlines() if line.strip() and not line.startswith(("begin ", "end"))]
    return b"".join(binascii.a2b_uu(line) for line in lines)


def _bare(value: str) -> str:
    return "".join(value.split()).rstrip("=")
