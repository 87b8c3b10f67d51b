"""A stdio MCP server written by hand (no SDK: it starts in milliseconds and sends exactly what
it is told), for the seventeenth round of wild servers. ``lookup`` answers ``value-of-<key>``.

``W17_SPEAKS`` (comma-separated protocol versions; default: any) is what it accepts at
``initialize``; any other is refused as the spec's lifecycle shows (``-32602`` "Unsupported
protocol version"), naming ``W17_NAMES`` (default: ``W17_SPEAKS``) as ``data.supported``.
``W17_APP`` lists, besides ``lookup``, tools whose ``_meta`` says who may call them (MCP Apps):
``poll`` (``ui.visibility: ["app"]``), ``both`` (``["model", "app"]``), ``flat`` (the early
drafts' flat ``ui/visibility: ["app"]``) and ``odd`` (a visibility that is no list: the default).
``W17_LOG`` names a file where each request's method (and offered version) is written.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

out = sys.stdout.buffer
KEY = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
SPEAKS = [v for v in os.environ.get("W17_SPEAKS", "").split(",") if v]
NAMES = [v for v in os.environ.get("W17_NAMES", ",".join(SPEAKS)).split(",") if v]
LOG = os.environ.get("W17_LOG")
APP = {
    "poll": {"ui": {"visibility": ["app"], "resourceUri": "ui://w17/app.html"}},
    "both": {"ui": {"visibility": ["model", "app"], "resourceUri": "ui://w17/app.html"}},
    "flat": {"ui/visibility": ["app"]},
    "odd": {"ui": {"visibility": "app"}},
}


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def tools() -> list[dict[str, Any]]:
    listed = [{"name": "lookup", "description": "Looks up a key.", "inputSchema": KEY}]
    if os.environ.get("W17_APP"):
        for name, meta in APP.items():
            listed.append({"name": name, "description": "Looks up a key.", "inputSchema": KEY, "_meta": meta})
    return listed


def initialize(ident: Any, params: dict[str, Any]) -> None:
    offered = params.get("protocolVersion")
    if SPEAKS and offered not in SPEAKS:
        data = {"supported": NAMES, "requested": offered}
        error = {"code": -32602, "message": "Unsupported protocol version", "data": data}
        send({"jsonrpc": "2.0", "id": ident, "error": error})
        return
    result = {
        "protocolVersion": offered,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "wild17", "version": "1"},
    }
    send({"jsonrpc": "2.0", "id": ident, "result": result})


def main() -> None:
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        method, ident = message.get("method"), message.get("id")
        if ident is None or method is None:
            continue
        params = message.get("params") or {}
        if LOG:
            with open(LOG, "a", encoding="utf-8") as log:
                log.write(f"{method} {params.get('protocolVersion') or ''}".strip() + "\n")
        if method == "initialize":
            initialize(ident, params)
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools()}})
        elif method == "tools/call":
            key = (params.get("arguments") or {}).get("key")
            text = f"{params.get('name')}-value-of-{key}"
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": text}]}})
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no {method}"}})


if __name__ == "__main__":
    main()
