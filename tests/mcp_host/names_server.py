"""A real MCP server (official SDK) whose tool names are legal in MCP but not as a provider's
function name once namespaced: a dotted name, and one that the server id makes too long."""

from __future__ import annotations

from mcp.server import MCPServer

LONG = "summarise_the_quarterly_figures_of_every_region_for_the_board"  # 61 characters


def build() -> MCPServer:
    server = MCPServer("names")

    @server.tool(name="read.file")
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    @server.tool(name=LONG)
    def summarise(region: str) -> str:
        """Summarise a region's quarter."""
        return f"summary of {region}"

    @server.tool(name="lookup")
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value-of-{key}"

    return server


if __name__ == "__main__":
    build().run()
