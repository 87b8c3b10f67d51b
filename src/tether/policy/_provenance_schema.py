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
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["branch_of", "declared_received", "inline_refs"]

_DEPTH = 32
_CACHE: dict[int, tuple[Any, Any]] = {}
_CACHED = 256


def inline_refs(parameters: Any) -> Any:
    """``parameters`` with each local ``$ref`` (``#/$defs/X``, ``#/definitions/X``) replaced by the
    schema it points to, the keywords beside it (a default, a description) kept over the target's.
    A reference inside its own expansion (a recursive model) is left as it is. Built once per
    schema object."""
    if not isinstance(parameters, Mapping):
        return parameters
    hit = _CACHE.get(id(parameters))
    if hit is not None and hit[0] is parameters:
        return hit[1]
    out = _inline(parameters, parameters, (), 0)
    if len(_CACHE) >= _CACHED:
        _CACHE.clear()
    _CACHE[id(parameters)] = (parameters, out)
    return out


def _inline(node: Any, root: Mapping[str, Any], seen: tuple[str, ...], depth: int) -> Any:
    if depth > _DEPTH:
        return node
    if isinstance(node, list):
        return [_inline(item, root, seen, depth + 1) for item in node]
    if not isinstance(node, Mapping):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/") and ref not in seen:
        target = _pointed(root, ref)
        if isinstance(target, Mapping):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return _inline({**target, **rest}, root, (*seen, ref), depth + 1)
    return {k: _inline(v, root, seen, depth + 1) for k, v in node.items()}


def _pointed(root: Mapping[str, Any], ref: str) -> Any:
    target: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        target = target.get(part) if isinstance(target, Mapping) else None
    return target


def branch_of(schema: Any, value: Any) -> Any:
    """``schema``, or where it is an ``anyOf``/``oneOf``/``allOf`` with one branch for ``value``'s
    kind (properties for a mapping, items for a list), that branch with the keywords beside it:
    the schema a validator applies to the value (an optional object's object)."""
    if not isinstance(schema, Mapping):
        return schema
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if not isinstance(branches, list):
            continue
        fit = [b for b in branches if _fits(b, value)]
        if len(fit) == 1:
            return {**fit[0], **{k: v for k, v in schema.items() if k != key}}
    return schema


def _fits(schema: Any, value: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    if isinstance(value, list | tuple):
        return "items" in schema
    return isinstance(value, Mapping) and "properties" in schema


_BASE64_FORMATS = frozenset({"base64", "base64url", "byte"})  # JSON Schema, pydantic, OpenAPI
_MEDIA_JSON = re.compile(r"application/(?:[\w.-]+\+)?json\s*(?:;.*)?", re.IGNORECASE)


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
        items = schema.get("items")
        return [_read(item, items, depth + 1) for item in value]
    if isinstance(value, Mapping):
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        extra = schema.get("additionalProperties")
        return {k: _read(v, props.get(k, extra), depth + 1) for k, v in value.items()}
    return value


def _string(value: str, schema: Mapping[str, Any], depth: int) -> Any:
    text: Any = value
    if schema.get("contentEncoding") in ("base64", "base64url") or schema.get("format") in _BASE64_FORMATS:
        text = _unbase64(value)
    media = schema.get("contentMediaType")
    if isinstance(media, str) and _MEDIA_JSON.fullmatch(media.strip()) and isinstance(text, str):
        try:
            parsed = json.loads(text)
        except ValueError:
            return text
        return _read(parsed, schema.get("contentSchema"), depth + 1)
    return text


def _unbase64(value: str) -> str:
    """``value`` decoded from base64 (either alphabet, padding optional) as UTF-8 text; as it is
    where it is no base64 (the server refuses it, and nothing is sent)."""
    bare = "".join(value.split())
    try:
        raw = base64.b64decode(
            bare + "=" * (-len(bare) % 4),
            altchars=b"-_" if "-" in bare or "_" in bare else None,
            validate=True,
        )
    except ValueError:
        return value
    return raw.decode("utf-8", "replace")
