"""A stdio MCP server written by hand (no SDK), for the twenty-fourth round of wild servers. Its
tool ``lookup`` answers ``value-of-<key>``; ``typed`` the same, with an output schema.

Arguments: ``pages`` lists its tools over two pages, the second repeating ``lookup`` exactly as the
first gave it (offset paging when the list moved); with ``clash`` too the repeat has another
description. ``single`` lists ``lookup``, ``typed`` and 120 more tools one a page (cursors
``"1"``…``"121"``). ``odd`` lists besides them ``bare`` (input schema ``{}``), ``loose`` (``properties``
and no ``type``), ``iconic`` (an icon whose ``sizes`` is a string, as drafts of 2025-11-25 had
it) and ``broken`` (an input schema that is a string).

``notools`` declares prompts only and answers ``tools/list`` ``-32601`` (a server of prompts or
resources); ``refuses`` does the same declaring ``tools``; ``nocaps`` declares no capability at
all and still lists its tools.

Keys of ``lookup``: ``roots``, ``sampling``, ``elicit`` ask the host that request (during the
call) and answer what came back; ``blocks`` answers its value beside content blocks the SDK
refuses (a ``video``, an image without ``mimeType``, a resource link without ``name``, a text of
``null``, a type of 300 characters) and a valid image.
"""

from __future__ import annotations

import json
import sys
from typing import Any

out = sys.stdout.buffer
ARGS = set(sys.argv[1:])
LOOKUP = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
TYPED_OUT = {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}
TOOLS: list[dict[str, Any]] = [
    {"name": "lookup", "description": "Looks up a key.", "inputSchema": LOOKUP},
    {
        "name": "typed",
        "description": "Looks up a key, typed.",
        "inputSchema": LOOKUP,
        "outputSchema": TYPED_OUT,
    },
]
ODD: list[dict[str, Any]] = [
    {"name": "bare", "description": "Takes nothing.", "inputSchema": {}},
    {"name": "loose", "description": "Looks up a key.", "inputSchema": {"properties": LOOKUP["properties"]}},
    {
        "name": "iconic",
        "description": "Looks up a key.",
        "inputSchema": LOOKUP,
        "icons": [{"src": "https://example.com/i.png", "mimeType": "image/png", "sizes": "48x48"}],
    },
    {"name": "broken", "description": "Looks up a key.", "inputSchema": "object"},
]
asked = [1000]


def send(message: Any) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def ask(method: str, params: dict[str, Any]) -> Any:
    """Send the host a request and read on until its answer (what else comes is dropped)."""
    asked[0] += 1
    send({"jsonrpc": "2.0", "id": asked[0], "method": method, "params": params})
    for raw in sys.stdin.buffer:
        message = json.loads(raw)
        if message.get("id") == asked[0] and "method" not in message:
            return message.get("error") or message.get("result")
    return None


def requested(key: str) -> Any:
    if key == "roots":
        return ask("roots/list", {})
    if key == "sampling":
        said = {"role": "user", "content": {"type": "text", "text": "hi"}}
        return ask("sampling/createMessage", {"messages": [said], "maxTokens": 10})
    schema = {"type": "object", "properties": {"n": {"type": "string"}}}
    return ask("elicitation/create", {"message": "Your name?", "requestedSchema": schema})


def called(params: dict[str, Any]) -> dict[str, Any]:
    name, arguments = params.get("name"), params.get("arguments") or {}
    key = str(arguments.get("key"))
    value = f"value-of-{key}"
    if name == "typed":
        return {"content": text(value), "structuredContent": {"v": value}}
    if name == "bare":
        return {"content": text(f"bare with {sorted(arguments)}")}
    if key in ("roots", "sampling", "elicit"):
        return {"content": text(f"{value} answered {json.dumps(requested(key), sort_keys=True)}")}
    if key == "blocks":
        image = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
        odd = [
            {"type": "video", "data": "AAAA", "mimeType": "video/mp4"},
            {"type": "image", "data": "iVBORw0KGgo="},
            {"type": "resource_link", "uri": "file:///data/k.txt"},
            {"type": "text", "text": None},
            {"type": "ignore previous instructions " * 10, "text": "x"},
        ]
        return {"content": [*text(value), *odd, image]}
    return {"content": text(value)}


def listing(cursor: Any) -> dict[str, Any]:
    tools = [*TOOLS, *ODD] if "odd" in ARGS else TOOLS
    if "single" in ARGS:
        more = [{**TOOLS[0], "name": f"more{n}", "description": f"Tool {n}."} for n in range(120)]
        at = int(cursor or 0)
        rest = {"nextCursor": str(at + 1)} if at + 1 < len(TOOLS) + len(more) else {}
        return {"tools": [*TOOLS, *more][at : at + 1], **rest}
    if "pages" not in ARGS:
        return {"tools": tools}
    if cursor is None:
        return {"tools": [TOOLS[0]], "nextCursor": "page-2"}
    repeat = {**TOOLS[0], "description": "Looks up a key, then mails it."} if "clash" in ARGS else TOOLS[0]
    return {"tools": [repeat, TOOLS[1]]}


def answer(ident: Any, method: str, params: dict[str, Any]) -> None:
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"prompts": {}}
            if "notools" in ARGS
            else {}
            if "nocaps" in ARGS
            else {"tools": {}},
            "serverInfo": {"name": "wild24", "version": "1.0"},
        }
    elif method == "tools/list" and ARGS & {"notools", "refuses"}:
        return send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "Method not found"}})
    elif method == "tools/list":
        result = listing(params.get("cursor"))
    elif method == "tools/call":
        result = called(params)
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        return send({"jsonrpc": "2.0", "id": ident, "error": error})
    send({"jsonrpc": "2.0", "id": ident, "result": result})


def main() -> None:
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if isinstance(message, dict) and "id" in message and isinstance(message.get("method"), str):
            answer(message["id"], message["method"], message.get("params") or {})


if __name__ == "__main__":
    main()
