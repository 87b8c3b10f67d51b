"""A stdio MCP server written by hand (no SDK), for the twenty-first round of wild servers. Its tool
``lookup`` answers ``value-of-<key>``; some keys answer the way hand-written servers in the wild
do: ``pretty`` (the answer pretty-printed over lines), ``unended`` (no newline after it),
``joined`` (a log notice and the answer on one line), ``float_id`` (the id written ``3.0``).
Started with the argument ``pretty``, every message it writes is pretty-printed; with
``schemas``, it lists tools whose input schemas are not object schemas.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tether_testing.handwritten import stdin_requests

out = sys.stdout.buffer
MODE = sys.argv[1] if len(sys.argv) > 1 else ""
LOOKUP = {"type": "object", "properties": {"key": {"type": "string"}}}
TOOLS: list[dict[str, Any]] = [{"name": "lookup", "description": "Looks up a key.", "inputSchema": LOOKUP}]
if MODE == "schemas":
    TOOLS += [
        {"name": "as_string", "description": "d", "inputSchema": {"type": "string"}},
        {"name": "as_true", "description": "d", "inputSchema": True},
        {"name": "missing", "description": "d"},
        {"name": "props_list", "description": "d", "inputSchema": {"type": "object", "properties": []}},
        {"name": "req_str", "description": "d", "inputSchema": {"type": "object", "required": "key"}},
        {"name": "nulls", "description": None, "inputSchema": {"type": "object", "properties": None}},
    ]


def send(message: Any) -> None:
    out.write(json.dumps(message, indent=2 if MODE == "pretty" else None).encode() + b"\n")
    out.flush()


def called(ident: Any, key: Any) -> None:
    text = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
    if key == "string_id":
        send({"jsonrpc": "2.0", "id": str(ident), "result": text})
    elif key == "both":
        send({"jsonrpc": "2.0", "id": ident, "result": text, "error": {"code": 1, "message": "m"}})
    elif key == "null_result":
        send({"jsonrpc": "2.0", "id": ident, "result": None})
    elif key == "content_text":
        send({"jsonrpc": "2.0", "id": ident, "result": {"content": "plain words"}})
    elif key == "is_error_text":
        send({"jsonrpc": "2.0", "id": ident, "result": {**text, "isError": "true"}})
    elif key == "no_content":
        send({"jsonrpc": "2.0", "id": ident, "result": {}})
    elif key == "error_no_code":
        send({"jsonrpc": "2.0", "id": ident, "error": {"message": "no code here"}})
    elif key == "error_text":
        send({"jsonrpc": "2.0", "id": ident, "error": "plain failure"})
    elif key == "pretty":
        out.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": text}, indent=2).encode() + b"\n")
        out.flush()
    elif key == "unended":
        out.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": text}).encode())
        out.flush()
    elif key == "joined":
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": "hi"},
        }
        out.write(
            json.dumps(note).encode()
            + json.dumps({"jsonrpc": "2.0", "id": ident, "result": text}).encode()
            + b"\n"
        )
        out.flush()
    elif key == "float_id":
        send({"jsonrpc": "2.0", "id": float(ident), "result": text})
    else:
        send({"jsonrpc": "2.0", "id": ident, "result": text})


def answer(ident: Any, method: str, params: dict[str, Any]) -> None:
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "wild21", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        called(ident, (params.get("arguments") or {}).get("key"))
        return
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
