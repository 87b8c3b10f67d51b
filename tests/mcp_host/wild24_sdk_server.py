"""A server on the official SDK, for the twenty-fourth round of wild servers, written as a user
writes one that uses the client's roots when it has them: ``where`` asks the client for its roots
and, when the client has no such method (``-32601``), falls back to its own folder; any other
refusal is an error. Run as ``python wild24_sdk_server.py`` (stdio) or built over HTTP
(``mcp.streamable_http_app()``)."""

import warnings

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError

warnings.simplefilter("ignore")  # (roots are deprecated as of 2026-07-28; this is a 2025 server)
mcp = MCPServer("Places")


@mcp.tool()
async def where(ctx: Context) -> str:
    """Names the folders this server works in."""
    try:
        roots = await ctx.session.list_roots()
    except MCPError as err:
        if err.error.code != -32601:
            raise RuntimeError(f"roots failed: {err.error.message} ({err.error.code})") from None
        return "working in its own folder (the client has no roots)"
    return "working in " + ", ".join(str(root.uri) for root in roots.roots)


if __name__ == "__main__":
    mcp.run()
