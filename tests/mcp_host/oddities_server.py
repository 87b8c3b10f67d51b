"""A stdio MCP server written by hand (no SDK) with what real servers list and answer: schemas
with ``$ref``/``$defs``, ``anyOf``, no ``type``, a huge enum; results with images, audio,
resource links and embedded resources; an output schema answered without (or with other)
structured content; progress notifications after the answer; with ``ODD_NO_TYPE``, a tool whose
input schema has no ``type`` (which the SDK refuses). ``ODD_START_S`` delays the start
(a slow server); ``ODD_FILE`` (a path, maybe relative) is read at start and its text is what
``lookup`` answers (a server that needs its working folder).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

out = sys.stdout.buffer
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


SCHEMAS: dict[str, dict[str, Any]] = {
    "refs": {
        "type": "object",
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
        "properties": {
            "at": {"$ref": "#/$defs/point"},
            "id": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        },
        "required": ["at"],
    },
    "untyped": {"type": "object", "properties": {"key": {"description": "anything"}}},
    "enum": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": [f"city-{i:05d}" for i in range(5000)]}},
        "required": ["city"],
    },
    "nullable": {"type": "object", "properties": {"note": {"type": ["string", "null"]}}},
}


def tools() -> list[dict[str, Any]]:
    listed = [
        {"name": name, "description": f"Takes {name}.", "inputSchema": s} for name, s in SCHEMAS.items()
    ]
    if os.environ.get("ODD_NO_TYPE"):  # an input schema without its "type": "object" (invalid MCP)
        listed.append({"name": "notype", "description": "Takes anything.", "inputSchema": {"properties": {}}})
    listed += [
        {"name": "lookup", "description": "Looks up a key.", "inputSchema": {"type": "object"}},
        {"name": "media", "description": "Returns media.", "inputSchema": {"type": "object"}},
        {"name": "late", "description": "Reports progress late.", "inputSchema": {"type": "object"}},
    ]
    counted = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    listed.append(
        {
            "name": "typed",
            "description": "Counts.",
            "inputSchema": {"type": "object"},
            "outputSchema": counted,
        }
    )
    listed.append({"name": "loose", "description": "Counts loosely.", "inputSchema": {"type": "object"}})
    return listed


def call(name: str, arguments: dict[str, Any], token: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The result, and notifications sent after it."""
    after: list[dict[str, Any]] = []
    if name == "lookup":
        return {"content": [text(os.environ.get("ODD_TEXT", "plain"))]}, after
    if name == "media":
        content = [
            text("media follows"),
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "audio", "data": "UklGRiQAAABXQVZF", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "https://example.com/doc", "name": "doc"},
            {"type": "resource", "resource": {"uri": "file:///notes.txt", "text": "embedded words"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": PNG, "mimeType": "image/png"}},
        ]
        return {"content": content}, after
    if name == "late":
        if token is not None:
            after = [
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": i},
                }
                for i in range(3)
            ]
        return {"content": [text("done early")]}, after
    if name == "typed":
        return {"content": [text('{"n": 3}')]}, after  # no structuredContent, though it has a schema
    if name == "loose":
        return {"content": [text("three")], "structuredContent": {"n": 3}}, after
    return {"content": [text(f"{name} got {json.dumps(arguments, sort_keys=True)}")]}, after


def main() -> None:
    time.sleep(float(os.environ.get("ODD_START_S", "0")))
    if path := os.environ.get("ODD_FILE"):
        with open(path, encoding="utf-8") as f:
            os.environ["ODD_TEXT"] = f.read().strip()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        method, rid = request.get("method"), request.get("id")
        if rid is None or method is None:
            continue
        after: list[dict[str, Any]] = []
        params = request.get("params") or {}
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "oddities", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": tools()}
        elif method == "tools/call":
            token = (params.get("_meta") or {}).get("progressToken")
            result, after = call(params["name"], params.get("arguments") or {}, token)
        elif method == "ping":
            result = {}
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})
            continue
        send({"jsonrpc": "2.0", "id": rid, "result": result})
        for note in after:
            send(note)


if __name__ == "__main__":
    main()
