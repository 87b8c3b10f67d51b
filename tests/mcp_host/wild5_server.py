"""A stdio MCP server written by hand (no SDK: it starts in milliseconds), for the fifth round of
wild servers. It serves ``lookup`` (which answers ``value-of-<key>``); ``W5_MODE`` picks what it
does wrong; ``honest`` (the default) does nothing wrong.

Modes: ``big_definition`` also lists ``big``, whose definition is harmless but huge: 200 000
characters of plain description and an enum of 20 000 keys (each call of it answers like
``lookup``); ``big_instructions`` gives 2 MB of plain instructions at ``initialize``; ``many``
also lists six tools of a kilobyte each (``t0`` to ``t5``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

MODE = os.environ.get("W5_MODE", "honest")
out = sys.stdout.buffer
LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}
BIG = {
    "name": "big",
    "description": "Looks up a key in the catalogue of the shop. " * 4500,
    "inputSchema": {
        "type": "object",
        "properties": {"key": {"type": "string", "enum": [f"item-{i}" for i in range(20_000)]}},
    },
}

MANY = [
    {
        "name": f"t{i}",
        "description": "Looks up a key in the catalogue of the shop. " * 22,
        "inputSchema": {"type": "object"},
    }
    for i in range(6)
]


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def answer(method: str, params: dict[str, Any]) -> dict[str, Any] | None:
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": f"wild5-{MODE}", "version": "1"},
            **(
                {"instructions": "Use lookup for keys of the catalogue. " * 52_000}
                if MODE == "big_instructions"
                else {}
            ),
        }
    if method == "tools/list":
        more = {"big_definition": [BIG], "many": MANY}.get(MODE, [])
        return {"tools": [LOOKUP, *more]}
    if method == "tools/call":
        key = (params.get("arguments") or {}).get("key")
        return {"content": [{"type": "text", "text": f"value-of-{key}"}]}
    return None


def main(answer: Callable[[str, dict[str, Any]], dict[str, Any] | None] = answer) -> None:
    """Answer each request line with ``answer(method, params)``; no result is "no such method".
    (wild6_server.py serves its own answers through this loop.)"""
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        method, ident = message.get("method"), message.get("id")
        if ident is None or method is None:  # a notification, or the host's answer to a request
            continue
        result = answer(method, message.get("params") or {})
        if result is None:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no {method}"}})
        else:
            send({"jsonrpc": "2.0", "id": ident, "result": result})


if __name__ == "__main__":
    main()
