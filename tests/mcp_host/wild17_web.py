"""A Streamable HTTP MCP server written by hand (``http.server``: it sends exactly what it is
told), for the seventeenth round of wild servers. It serves ``lookup`` (``value-of-<key>``) with
a session id; ``mode`` picks what its event streams say of ``retry`` (how long a client waits
before reopening one), a number of ``RETRY`` (default 400 digits, a number the event-stream
format allows):

``get_retry``: the session's own stream (``GET``) names it, then ends; ``call_retry``: the
answer's stream of the call of key ``b`` sends a log notification with an event id and the
``retry``, then ends without the answer (the client resumes it after that wait); ``honest``:
each answer comes as an event with ``retry: 3000``; ``v2024``: an ``initialize`` offering any
version but ``2024-11-05`` is refused as the spec's lifecycle shows, naming that one. ``seen``
gets each request's method (an ``initialize`` with the version it offers).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tether_testing.loopback import Quiet

RETRY = "9" * 400
LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}
NOTE = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "n"}}


def app(mode: str, seen: list[str], stop: threading.Event, retry: str = RETRY) -> type[Quiet]:
    """The handler class; ``stop`` is kept for the fixtures' shape (no stream here stays open)."""

    class App(Quiet):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes = b"", kind: str = "application/json") -> None:
            self.send_body(status, body, kind, Mcp_Session_Id="s17")

        def do_GET(self) -> None:
            seen.append("GET")
            if mode != "get_retry":
                return self._send(405)
            self._send(200, b": hello\nretry: " + retry.encode() + b"\n\n", "text/event-stream")

        def do_DELETE(self) -> None:
            seen.append("DELETE")
            self._send(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            offered = params.get("protocolVersion")
            seen.append(f"{method} {offered}" if method == "initialize" else str(method))
            if ident is None or method is None:
                return self._send(202)
            result: dict[str, Any] = {}
            if method == "initialize" and mode == "v2024" and offered != "2024-11-05":
                data = {"supported": ["2024-11-05"], "requested": offered}
                error = {"code": -32602, "message": "Unsupported protocol version", "data": data}
                return self._send(200, json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}).encode())
            if method == "initialize":
                result = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}, "logging": {}},
                    "serverInfo": {"name": f"wild17-{mode}", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [LOOKUP]}
            elif method == "tools/call":
                key = (params.get("arguments") or {}).get("key")
                if key == "b" and mode == "call_retry":
                    event = b"id: e1\nretry: " + retry.encode() + b"\ndata: " + json.dumps(NOTE).encode()
                    return self._send(200, event + b"\n\n", "text/event-stream")
                result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
            body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
            if mode == "honest":
                return self._send(200, b"id: h1\nretry: 3000\ndata: " + body + b"\n\n", "text/event-stream")
            self._send(200, body)

    return App
