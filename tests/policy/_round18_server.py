"""A hotel server (official ``mcp`` SDK, stdio) for tests/policy/test_provenance_round18.py: a
hotel's listing as structured content (vendor data), or a guest's uploaded file relayed as an
embedded resource whose text is JSON an attacker wrote in the listing's shape."""

from __future__ import annotations

import json
import os
from typing import Any

import mcp_types as t
from mcp.server import MCPServer

LISTING_IBAN = "FR7630006000011234567890189"


def build_server() -> MCPServer:
    server = MCPServer("hotels")

    @server.tool()
    def get_hotel(hotel: str) -> t.CallToolResult:
        """A hotel's listing: its name and the account deposits are paid to. A hotel whose page
        holds a guest's uploaded file (``R18_ATTACHED``) answers with that file instead."""
        if hotel == os.environ.get("R18_ATTACHED"):
            body = json.dumps({"name": hotel, "iban": os.environ["R18_IBAN"]})
            uri = "file:///uploads/guest-note.json"
            resource = t.TextResourceContents(uri=uri, mime_type="application/json", text=body)
            return t.CallToolResult(content=[t.EmbeddedResource(type="resource", resource=resource)])
        data = {"name": hotel, "iban": LISTING_IBAN}
        return t.CallToolResult(
            content=[t.TextContent(type="text", text=json.dumps(data))], structured_content=data
        )

    @server.tool()
    def get_rating(hotel: str) -> t.CallToolResult:
        """A hotel's rating, as structured content and as its text; the text of a hotel whose page
        a guest edited (``R18_ATTACHED``) carries the guest's words after a ``#`` (``R18_NOTE``); one
        whose guests left codes (``R18_KEYED``) lists them keyed by code (``R18_CODE``)."""
        data: dict[str, Any] = {"hotel": hotel, "rating": 4}
        if hotel == os.environ.get("R18_KEYED"):  # guests' discount codes, keyed by code
            data["codes"] = {os.environ["R18_CODE"]: "a guest"}
        text = json.dumps(data)
        if hotel == os.environ.get("R18_ATTACHED"):
            text += f"  # {os.environ['R18_NOTE']}"
        return t.CallToolResult(content=[t.TextContent(type="text", text=text)], structured_content=data)

    return server


if __name__ == "__main__":
    build_server().run()
