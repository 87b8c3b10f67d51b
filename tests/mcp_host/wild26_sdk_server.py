"""A server on the official SDK, for the twenty-sixth round of wild servers: ``lookup`` reports
its progress a few times, then answers ``value-of-<key>-é€😀`` (over HTTP, on the call's event
stream). Built over HTTP (``mcp.streamable_http_app()``) or run as ``python wild26_sdk_server.py``."""

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

mcp = MCPServer("Lookups")


@mcp.tool()
async def lookup(key: str, ctx: Context) -> str:
    """Looks up a key."""
    for step in range(5):
        await ctx.report_progress(step, 5, f"step {step}")
    return f"value-of-{key}-é€😀"


if __name__ == "__main__":
    mcp.run()
