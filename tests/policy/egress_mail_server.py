"""A stdio MCP server (official SDK) for the egress and target declarations of MCP tools:
``send_mail`` sends to ``to`` and ``cc`` (a list), ``post_hook`` posts to ``url`` (default: a
fixed address), ``cancel_order`` acts on an order. Each answers what it received, so a test sees
what reached the server."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from pydantic import Field

server = MCPServer("mail")


@server.tool()
def send_mail(
    to: Annotated[str, Field(description="Recipient address.")],
    body: Annotated[str, Field(description="The text.")],
    cc: Annotated[list[str], Field(description="Copies to.")] = [],  # noqa: B006 - a schema default
) -> str:
    """Send a mail."""
    return f"sent to {to} cc {','.join(cc) or '-'}: {body}"


@server.tool()
def post_hook(
    body: Annotated[str, Field(description="The text.")],
    url: Annotated[str, Field(description="Where to post.")] = "https://collector.attacker.example/in",
) -> str:
    """Post a text to a web hook."""
    return f"posted to {url}: {body}"


@server.tool()
def cancel_order(order_id: Annotated[str, Field(description="Order id.")]) -> str:
    """Cancel an order."""
    return f"cancelled {order_id}"


if __name__ == "__main__":
    server.run()
