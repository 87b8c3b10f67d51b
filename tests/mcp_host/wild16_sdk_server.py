"""The official SDK's quickstart server (its README's ``add``), written as a user writes it and
run as ``python wild16_sdk_server.py`` (stdio): the well-behaved server of round sixteen."""

from mcp.server import MCPServer

mcp = MCPServer("Demo")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two numbers"""
    return a + b


if __name__ == "__main__":
    mcp.run()
