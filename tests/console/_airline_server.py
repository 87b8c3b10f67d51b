"""A real MCP server (official SDK, stdio) whose tool declares a secret parameter the way an MCP
server can: ``api_token`` has ``format: password`` in its input schema. The tool
fails with the token in its error message, as a careless upstream does.

Run as ``python _airline_server.py`` (stdio)."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field


def build_server() -> MCPServer:
    server = MCPServer("airline")

    @server.tool(description="Book a seat with the airline.")
    def book_seat(
        passenger_name: Annotated[str, Field(description="Passenger as on the ticket.")],
        seat: Annotated[str, Field(description="Seat, e.g. 4A.")],
        api_token: Annotated[
            str,
            Field(description="The airline API token.", json_schema_extra={"format": "password"}),
        ],
    ) -> str:
        raise ToolError(f"airline refused token {api_token} for {passenger_name}: quota exceeded")

    return server


if __name__ == "__main__":
    build_server().run()
