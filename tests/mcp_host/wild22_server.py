"""A stdio MCP server written by hand (no SDK), for the twenty-second round of wild servers. Its
tool ``lookup`` answers ``value-of-<key>``. The key ``unreadable`` is answered with an error of
``"id": null`` (a request it could not read, round twenty's), as is, with the argument ``noted``,
every notification the host sends it (``notifications/initialized`` first, written just before
the host's ``tools/list``): servers that answer each message they read, and take a missing id for
``null``, write that error for a notification (the JSON-RPC spec says no answer is sent to one).
The key ``rows`` is answered with 80 000 rows, each with an ``id`` of its own, past the host's
limit (8 MiB), the answer's result written before its id (``{"jsonrpc", "result", "id"}``, as
hand-written servers order it).
"""

from __future__ import annotations

import json
import sys
from typing import Any

out = sys.stdout.buffer
MODE = sys.argv[1] if len(sys.argv) > 1 else ""
LOOKUP = {"type": "object", "properties": {"key": {"type": "string"}}}
TOOLS: list[dict[str, Any]] = [{"name": "lookup", "description": "Looks up a key.", "inputSchema": LOOKUP}]


def send(message: Any) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def unknown(ident: Any, method: Any) -> None:
    send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"Method not found: {method}"}})


def answer(ident: Any, method: str, params: dict[str, Any]) -> None:
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "wild22", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        key = (params.get("arguments") or {}).get("key")
        if key == "unreadable":
            error = {"code": -32700, "message": "Parse error"}
            return send({"jsonrpc": "2.0", "id": None, "error": error})
        if key == "rows":  # its result written before its id, past the host's limit (8 MiB)
            rows = [{"id": 1000 + i, "name": "x" * 100} for i in range(80_000)]
            content = [{"type": "text", "text": "rows"}]
            result = {"content": content, "structuredContent": {"rows": rows}}
            return send({"jsonrpc": "2.0", "result": result, "id": ident})
        result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
    elif method == "ping":
        result = {}
    else:
        return unknown(ident, method)
    send({"jsonrpc": "2.0", "id": ident, "result": result})


def main() -> None:
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        method = message.get("method")
        if "id" in message and isinstance(method, str):
            answer(message["id"], method, message.get("params") or {})
        elif MODE == "noted":  # a notification "answered" all the same
            unknown(None, method)


if __name__ == "__main__":
    main()
