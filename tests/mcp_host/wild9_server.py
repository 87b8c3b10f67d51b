"""A stdio MCP server written by hand (no SDK: it starts in milliseconds and answers exactly
what it is told), for the ninth round of wild servers: tools whose schemas cost the host
unbounded work to check. ``lookup`` answers ``value-of-<key>``; ``spread`` takes a ``key``
through a schema whose references multiply (``allOf`` of two references to a definition that
does the same, ``W9_LEVELS`` levels down: 2 ** levels checks of one string); ``report`` answers
structured content checked by such a schema; ``tags`` answers ``W9_TAGS`` distinct objects in
an array whose schema says ``uniqueItems`` (jsonschema compares every pair); ``stats`` has an
ordinary output schema, answering ``{"count": 3}``, or ``{"count": "three"}`` (not matching it)
for the key ``bad``; ``label`` takes a ``key`` matching ``WORDS`` (a pattern that repeats a
repetition: ``re`` backtracks exponentially on a near miss) and answers it as ``label`` in
structured content checked against the same pattern, with ``!`` added to a key starting with
``a``. With ``W9_FAT_PAGES`` set, every listing after the first names a next page,
and gives that many pages more of 100 tools each of 80 000 characters (a page near the host's
message limit; the tools never needed: only ``lookup`` is configured)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

LEVELS = int(os.environ.get("W9_LEVELS", "30"))
TAGS = int(os.environ.get("W9_TAGS", "50000"))
FAT_PAGES = int(os.environ.get("W9_FAT_PAGES", "0"))
listings = [0]
out = sys.stdout.buffer
KEY = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}


def spreading() -> dict[str, Any]:
    """``{"$ref": "#/$defs/d0"}`` with its definitions: each ``dN`` is two references to ``dN+1``."""
    defs: dict[str, Any] = {
        f"d{n}": {"allOf": [{"$ref": f"#/$defs/d{n + 1}"}, {"$ref": f"#/$defs/d{n + 1}"}]}
        for n in range(LEVELS)
    }
    defs[f"d{LEVELS}"] = {"type": "string"}
    return {"$defs": defs}


SPREAD = spreading()
WORDS = r"^(\w+\s?)*$"
WORDY = {"type": "string", "pattern": WORDS}
TOOLS = [
    {"name": "lookup", "description": "Looks up a key.", "inputSchema": KEY},
    {
        "name": "spread",
        "description": "Looks up a key, checked closely.",
        "inputSchema": {**KEY, "properties": {"key": {"$ref": "#/$defs/d0"}}, **SPREAD},
    },
    {
        "name": "report",
        "description": "Reports on a key.",
        "inputSchema": KEY,
        "outputSchema": {"type": "object", "properties": {"value": {"$ref": "#/$defs/d0"}}, **SPREAD},
    },
    {
        "name": "tags",
        "description": "Lists the tags of a key.",
        "inputSchema": KEY,
        "outputSchema": {
            "type": "object",
            "properties": {"tags": {"type": "array", "uniqueItems": True, "items": {"type": "object"}}},
        },
    },
    {
        "name": "label",
        "description": "Labels a key.",
        "inputSchema": {**KEY, "properties": {"key": WORDY}},
        "outputSchema": {"type": "object", "properties": {"label": WORDY}, "required": ["label"]},
    },
    {
        "name": "stats",
        "description": "Counts a key.",
        "inputSchema": KEY,
        "outputSchema": {
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        },
    },
]


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def call(params: dict[str, Any]) -> dict[str, Any]:
    name, key = params.get("name"), (params.get("arguments") or {}).get("key")
    text = {"type": "text", "text": f"value-of-{key}"}
    if name == "report":
        return {"content": [text], "structuredContent": {"value": f"value-of-{key}"}}
    if name == "tags":
        return {"content": [text], "structuredContent": {"tags": [{"tag": n} for n in range(TAGS)]}}
    if name == "label":
        label = f"{key}!" if str(key).startswith("a") else key
        return {"content": [text], "structuredContent": {"label": label}}
    if name == "stats":
        return {"content": [text], "structuredContent": {"count": "three" if key == "bad" else 3}}
    return {"content": [text]}


def listing(cursor: str | None) -> dict[str, Any]:
    """A page of the listing: all of ``TOOLS`` first, then the fat pages (see the docstring)."""
    page = int(cursor or 0)
    if page == 0:
        listings[0] += 1
        more = FAT_PAGES and listings[0] > 1
        return {"tools": TOOLS, **({"nextCursor": "1"} if more else {})}
    fat = {"description": "d" * 80_000, "inputSchema": {"type": "object"}}
    result: dict[str, Any] = {"tools": [{"name": f"t{page}_{n}", **fat} for n in range(100)]}
    if page < FAT_PAGES:
        result["nextCursor"] = str(page + 1)
    return result


def main() -> None:
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
        if ident is None or method is None:  # a notification, or an answer
            continue
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "wild9", "version": "1"},
            }
        elif method == "tools/list":
            result = listing(params.get("cursor"))
        elif method == "tools/call":
            result = call(params)
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no {method}"}})
            continue
        send({"jsonrpc": "2.0", "id": ident, "result": result})


if __name__ == "__main__":
    main()
