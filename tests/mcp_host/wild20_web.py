"""A Streamable HTTP MCP server written by hand (``http.server``: it sends exactly what it is
told), for the twentieth round of wild servers. It serves ``lookup`` (``value-of-<key>``) with a
session id; ``mode`` picks what the call of key ``b`` does, or what the whole server is:

``ended``: the answer is an event stream that ends with no event (a server, or a proxy before it,
closing the call's stream early); ``ended_id``: an event stream of one event with an id and no
data, then its end, and the ``GET`` that resumes it is refused (the SDK tries again, then gives
up); ``gone``: the stream ends with no event and from then on the session is unknown (``404``:
the server restarted under it); ``legacy_sse``: a server of the older HTTP+SSE transport
(2024-11-05), as the published reference server's ``sse`` mode and Python SDK servers of that
time are: a ``POST`` is answered ``404``, a ``GET`` with an event stream opening with an
``endpoint`` event that names where to post.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

from tether_testing.loopback import Quiet

LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}
SESSION = "s20"


def app(mode: str, seen: list[str], stop: threading.Event) -> type[Quiet]:
    """The handler class; ``seen`` gets each request's method; ``stop`` ends open streams."""
    forgotten = threading.Event()

    class App(Quiet):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes = b"", kind: str = "application/json") -> None:
            self.send_body(status, body, kind, Mcp_Session_Id=SESSION)

        def do_GET(self) -> None:
            seen.append("GET")
            if mode != "legacy_sse":
                return self._send(405)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.wfile.write(b"event: endpoint\r\ndata: /messages/?session_id=0f3a\r\n\r\n")
                self.wfile.flush()
                stop.wait(30)

        def do_DELETE(self) -> None:
            seen.append("DELETE")
            self._send(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            seen.append(str(method))
            if mode == "legacy_sse":
                return self._send(404, b"Cannot POST /sse", "text/html")
            if forgotten.is_set() and method != "initialize":
                return self._send(404)
            if ident is None or method is None:
                return self._send(202)
            key = (params.get("arguments") or {}).get("key")
            if method == "tools/call" and key == "b":
                if mode == "gone":
                    forgotten.set()
                body = b"id: e1\nretry: 10\ndata: \n\n" if mode == "ended_id" else b""
                return self._send(200, body, "text/event-stream")
            if method == "initialize":
                forgotten.clear()
                result: dict[str, Any] = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": f"wild20-{mode}", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [LOOKUP]}
            elif method == "tools/call":
                result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
            else:
                result = {}
            self._send(200, json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode())

    return App
