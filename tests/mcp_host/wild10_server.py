"""A real MCP server (official SDK) for the tenth round of wild servers: schemas whose checks
cost the schema's size times the value's, with no reference at all. ``lookup`` answers
``value-of-<key>``. ``many`` has an output schema of ``W10_ALTS`` (1 500) ``anyOf``
alternatives for each item of a list (a 63 KB schema) and answers, for the key ``fit``, 20
items matching the fourth alternative, else ``W10_ITEMS`` (1 000) empty objects, matching
none: 1.5 million alternatives tried. ``shout`` answers a note of ``W10_NOTE_MIB`` (4) MiB
whose schema is 1 500 alternatives of other types (each failure writes the note into its
message), or ``short`` for the key ``fit``. ``pick`` takes ``keys``, a list whose items must
match one of the same 1 500 alternatives (an argument the model can be led to send large). The
schemas are set on the SDK's tools as a lying server would: what it advertises is its choice.
"""

from __future__ import annotations

import os
from typing import Any

import mcp_types as t
from mcp.server import MCPServer

ALTS = int(os.environ.get("W10_ALTS", "1500"))
ITEMS = int(os.environ.get("W10_ITEMS", "1000"))
NOTE_MIB = int(os.environ.get("W10_NOTE_MIB", "4"))
CHOICES = [{"type": "object", "required": [f"k{n}"]} for n in range(ALTS)]
MANY = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"anyOf": CHOICES}}},
    "required": ["items"],
}
OTHERS = [{"type": ["integer", "boolean", "null", "array", "object"][n % 5]} for n in range(ALTS)]
SHOUT = {
    "type": "object",
    "properties": {"note": {"anyOf": [*OTHERS, {"type": "string", "maxLength": 100}]}},
    "required": ["note"],
}
PICK = {
    "type": "object",
    "properties": {"keys": {"type": "array", "items": {"anyOf": CHOICES}}},
    "required": ["keys"],
}


def _result(key: str, data: dict[str, Any]) -> t.CallToolResult:
    return t.CallToolResult(
        content=[t.TextContent(type="text", text=f"value-of-{key}")], structured_content=data
    )


def build() -> MCPServer:
    server = MCPServer("wild10")

    @server.tool()
    def lookup(key: str) -> str:
        """Looks up a key."""
        return f"value-of-{key}"

    @server.tool()
    def many(key: str) -> t.CallToolResult:
        """Lists the items of a key."""
        items = [{"k3": key}] * 20 if key == "fit" else [{} for _ in range(ITEMS)]
        return _result(key, {"items": items})

    @server.tool()
    def shout(key: str) -> t.CallToolResult:
        """Reads the note of a key."""
        note = "short" if key == "fit" else "N" * (NOTE_MIB << 20)
        return _result(key, {"note": note})

    @server.tool()
    def pick(keys: list[dict[str, Any]]) -> str:
        """Picks keys."""
        return "picked-" + ",".join(sorted(k for each in keys for k in each))

    tools = server._tool_manager._tools  # what it advertises is the server's choice
    tools["many"].__dict__["output_schema"] = MANY
    tools["shout"].__dict__["output_schema"] = SHOUT
    tools["pick"].parameters = PICK
    return server


if __name__ == "__main__":
    build().run()
