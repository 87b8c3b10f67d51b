"""A Streamable HTTP MCP server written by hand (``http.server``: it sends exactly what it is
told), for the twenty-first round of wild servers. It serves ``lookup`` (``value-of-<key>``) with a
session id; ``mode`` picks how the call of key ``b`` is answered:

``float_id``: a JSON answer whose id is written as a float (``3.0``); ``sse_float``: the same as
an event stream; ``json_batch``: a JSON array holding a log notice and the answer.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tether_testing.loopback import Quiet

LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}
SESSION = "s21"
TEXT = {"content": [{"type": "text", "text": "value-of-b"}]}


def app(mode: str, seen: list[str], stop: threading.Event) -> type[Quiet]:
    """The handler class; ``seen`` gets each request's method; ``stop`` ends open streams."""

    class App(Quiet):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes = b"", kind: str = "application/json") -> None:
            self.send_body(status, body, kind, Mcp_Session_Id=SESSION)

        def do_GET(self) -> None:
            seen.append("GET")
            self._send(405)

        def _odd(self, ident: Any) -> None:
            answer = {"jsonrpc": "2.0", "id": float(ident), "result": TEXT}
            if mode == "float_id":
                return self._send(200, json.dumps(answer).encode())
            if mode == "sse_float":
                return self._send(
                    200,
                    b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n",
                    "text/event-stream",
                )
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "data": "hi"},
            }
            return self._send(200, json.dumps([note, {**answer, "id": ident}]).encode())

        def do_DELETE(self) -> None:
            seen.append("DELETE")
            self._send(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            seen.append(str(method))
            if ident is None or method is None:
                return self._send(202)
            key = (params.get("arguments") or {}).get("key")
            if method == "tools/call" and key == "b":
                return self._odd(ident)
            if method == "initialize":
                result: dict[str, Any] = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": f"wild21-{mode}", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [LOOKUP]}
            elif method == "tools/call":
                result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
            else:
                result = {}
            self._send(200, json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode())

    return App
