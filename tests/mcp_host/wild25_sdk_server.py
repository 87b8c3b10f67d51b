"""A server on the official SDK, for the twenty-fifth round of wild servers, over Streamable HTTP
behind a gate that forgets sessions as a restarted server or a balancer's other replica does: the
first request carrying a session id it has not forgotten yet is answered 404 and the session is
forgotten (``forget``: ``first``, the first session only; ``every``, each one). ``seen`` records
each request as (method, whether it carried a session id)."""

from __future__ import annotations

import warnings
from typing import Any

from mcp.server import MCPServer

warnings.simplefilter("ignore")
mcp = MCPServer("Lookups")


@mcp.tool()
def lookup(key: str) -> str:
    """Looks up a key."""
    return f"value-of-{key}"


def forgetful(forget: str, seen: list[tuple[str, bool]]) -> Any:
    """The server's app behind the gate."""
    app = mcp.streamable_http_app()
    forgotten: set[str] = set()
    known: set[str] = set()

    async def gate(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        session = headers.get("mcp-session-id")
        seen.append((scope["method"], session is not None))
        first = forget == "every" or not known
        if session is not None and session not in known and (first or session in forgotten):
            known.add(session)
            forgotten.add(session)
        elif session is not None:
            known.add(session)
        if session in forgotten:
            await send(
                {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]}
            )
            await send({"type": "http.response.body", "body": b"session not found"})
            return None
        return await app(scope, receive, send)

    return gate
