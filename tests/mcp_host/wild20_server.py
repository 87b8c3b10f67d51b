"""A stdio MCP server written by hand (no SDK: it starts in milliseconds), for the twentieth round
of wild servers. Its tool ``lookup`` answers ``value-of-<key>``; for the key ``unreadable`` it
answers as JSON-RPC has a server answer a request whose id it could not read: an error of
``"id": null`` (``-32700``, "Parse error: unexpected token at column 12").
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tether_testing.handwritten import stdin_requests

out = sys.stdout.buffer
UNREADABLE = "Parse error: unexpected token at column 12"
TOOLS = [
    {
        "name": "lookup",
        "description": "Looks up a key.",
        "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}},
    }
]


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def answer(ident: Any, method: str, params: dict[str, Any]) -> None:
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "wild20", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        key = (params.get("arguments") or {}).get("key")
        if key == "unreadable":
            send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": UNREADABLE}})
            return
        result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
    elif method == "ping":
        result = {}
    else:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no such method"}})
        return
    send({"jsonrpc": "2.0", "id": ident, "result": result})


def main() -> None:
    for ident, method, params in stdin_requests():
        answer(ident, method, params)


if __name__ == "__main__":
    main()
