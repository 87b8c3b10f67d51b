"""A Streamable HTTP MCP server written by hand (``http.server``: it sends exactly what it is
told), for the sixteenth round of wild servers. It serves ``lookup`` (``value-of-<key>``) with a
session id; ``mode`` picks what the call of key ``b`` (and, for some modes, everything) does:

``ctype``: the answer's JSON body comes labelled ``text/plain``; ``sse_as_json``: an event stream
body labelled ``application/json``; ``linger``: the answer's event comes on a stream that then
stays open, sending comments; ``delete_hang``: closing the session (``DELETE``) never answers;
``get_flood``: the standalone stream (``GET``) sends log notifications without end;
``blocks``: the answer holds ``BLOCKS`` text blocks of one letter (as a JSON body, or as an
event with ``blocks_sse``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

from tether_testing.loopback import Quiet

BLOCKS = 200_000
LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


def app(mode: str, seen: list[str], stop: threading.Event) -> type[Quiet]:
    """The handler class; ``seen`` gets each request's method; ``stop`` ends open streams."""

    class App(Quiet):
        protocol_version = "HTTP/1.1"

        def _send(
            self, status: int, body: bytes = b"", kind: str = "application/json", **headers: str
        ) -> None:
            self.send_response(status)
            for key, value in {"Content-Type": kind, "Content-Length": str(len(body)), **headers}.items():
                self.send_header(key, value)
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def _stream(self, first: bytes, every: bytes, pause: float) -> None:
            """An event stream with no length: ``first``, then ``every`` until ``stop``."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.wfile.write(first)
                self.wfile.flush()
                while not stop.is_set():
                    self.wfile.write(every)
                    self.wfile.flush()
                    time.sleep(pause)

        def do_GET(self) -> None:
            seen.append("GET")
            if mode != "get_flood":
                return self._send(405)
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "data": "n" * 2000},
            }
            event = b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n"
            self._stream(event, event * 50, 0.001)

        def do_DELETE(self) -> None:
            seen.append("DELETE")
            if mode == "delete_hang":
                stop.wait(600)
            self._send(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            seen.append(str(method))
            if ident is None or method is None:
                return self._send(202)
            if method == "initialize":
                result: dict[str, Any] = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}, "logging": {}},
                    "serverInfo": {"name": f"wild16-{mode}", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [LOOKUP]}
            elif method == "tools/call":
                key = (params.get("arguments") or {}).get("key")
                result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
                body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
                if key == "b" and mode.startswith("blocks"):
                    many = {"content": [{"type": "text", "text": "b"} for _ in range(BLOCKS)]}
                    body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": many}).encode()
                    if mode == "blocks_sse":
                        return self._send(
                            200, b"id: e1\nevent: message\ndata: " + body + b"\n\n", "text/event-stream"
                        )
                    return self._send(200, body)
                if key == "b" and mode == "ctype":
                    return self._send(200, body, "text/plain", **{"Mcp-Session-Id": "s1"})
                if key == "b" and mode == "sse_as_json":
                    return self._send(200, b"event: message\ndata: " + body + b"\n\n")
                if key == "b" and mode == "linger":
                    return self._stream(b"event: message\ndata: " + body + b"\n\n", b": still here\n\n", 0.2)
            else:
                result = {}
            self._send(
                200,
                json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode(),
                **{"Mcp-Session-Id": "s1"},
            )

    return App
