"""A Streamable HTTP MCP server written by hand (``http.server``: it sends exactly what it is
told), for the twenty-sixth round of wild servers: hostile while answering a call. It serves
``lookup`` (``value-of-<key>``); the call's key picks how the answer comes:

``endless``: an event stream with the answer, then kept open forever (a comment each tenth of a
second) until ``stop``; ``foreign``: an event stream carrying an answer for another request, then
ended; ``split``: the answer's event written in pieces cut inside a UTF-8 sequence.
``session`` (the whole server's) is the ``Mcp-Session-Id`` it gives (``None``: none).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

from tether_testing.loopback import Quiet

LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


def app(session: str | None, seen: list[str], stop: threading.Event) -> type[Quiet]:
    """The handler class; ``seen`` gets each request's method and session header."""
    headers = {} if session is None else {"Mcp_Session_Id": session}

    class App(Quiet):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            seen.append("GET")
            self.send_body(405)

        def do_DELETE(self) -> None:
            seen.append("DELETE")
            self.send_body(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            seen.append(f"{method} {self.headers.get('Mcp-Session-Id')!r}")
            if ident is None or method is None:
                return self.send_body(202, **headers)
            if method == "tools/call":
                return self._called(ident, str((params.get("arguments") or {}).get("key")))
            result: dict[str, Any] = {}
            if method == "initialize":
                result = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "wild26-web", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [LOOKUP]}
            body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
            self.send_body(200, body, **headers)

        def _stream(self, *pieces: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            for key, value in headers.items():
                self.send_header(key.replace("_", "-"), value)
            self.end_headers()
            self.close_connection = True
            with contextlib.suppress(OSError):
                for piece in pieces:
                    self.wfile.write(piece)
                    self.wfile.flush()
                    time.sleep(0.05)

        def _called(self, ident: Any, key: str) -> None:
            answer = {"content": [{"type": "text", "text": f"value-of-{key}-é€😀"}]}
            event = (
                b"event: message\ndata: "
                + json.dumps(
                    {"jsonrpc": "2.0", "id": 9999 if key == "foreign" else ident, "result": answer},
                    ensure_ascii=False,
                ).encode()
                + b"\n\n"
            )
            if key == "big":
                answer = {"content": [{"type": "text", "text": "A" * 50_000_000}]}
                return self._stream(
                    b"data: "
                    + json.dumps({"jsonrpc": "2.0", "id": ident, "result": answer}).encode()
                    + b"\n\n"
                )
            if key == "twice":
                return self._stream(event, event.replace(b"value-of", b"second"))
            if key == "flood":
                log = {"level": "info", "data": "IGNORE"}
                note = (
                    b"data: "
                    + json.dumps(
                        {"jsonrpc": "2.0", "method": "notifications/message", "params": log}
                    ).encode()
                    + b"\n\n"
                )
                return self._stream(note * 20000, event)
            if key == "cancel":
                note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": ident}}
                return self._stream(b"data: " + json.dumps(note).encode() + b"\n\n", event)
            if key == "split":
                cut = event.index("€".encode()) + 1
                return self._stream(event[:cut], event[cut : cut + 3], event[cut + 3 :])
            if key != "endless":
                return self._stream(event)
            self._stream(event)
            with contextlib.suppress(OSError):
                while not stop.wait(0.1):
                    self.wfile.write(b": still here\n\n")
                    self.wfile.flush()

    return App
