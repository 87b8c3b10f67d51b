"""A stdio MCP server written by hand (no SDK: it starts in milliseconds), for the sixth round of
wild servers. It serves ``lookup`` (which answers ``value-of-<key>``); ``W6_MODE`` picks what it
does wrong; ``honest`` (the default) does nothing wrong.

Modes: ``deep`` also lists ``deep``, whose input schema nests 400 levels deep (past the depth the
SDK's JSON parser reads, so that the whole listing was refused).
"""

from __future__ import annotations

import os
from typing import Any

MODE = os.environ.get("W6_MODE", "honest")
LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


def nested(levels: int) -> dict[str, Any]:
    """An object schema whose one property nests ``levels`` objects deep (two JSON levels each)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


DEEP = {"name": "deep", "description": "Takes a nested value.", "inputSchema": nested(200)}


def answer(method: str, params: dict[str, Any]) -> dict[str, Any] | None:
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": f"wild6-{MODE}", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": [LOOKUP, DEEP] if MODE == "deep" else [LOOKUP]}
    if method == "tools/call":
        key = (params.get("arguments") or {}).get("key")
        return {"content": [{"type": "text", "text": f"value-of-{key}"}]}
    return None


if __name__ == "__main__":
    import wild5_server  # beside this file (run as a script): the same request loop

    wild5_server.main(answer)
