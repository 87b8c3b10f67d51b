"""A Streamable HTTP MCP server written by hand (``http.server``: it sends exactly what it is
told), for the twenty-second round of wild servers. It serves ``lookup`` (``value-of-<key>``) with
a session id; ``mode`` picks what the whole server does:

``noping``: it implements no ``ping`` (answered as any method it does not know, ``-32601`` at
HTTP 200, as hand-written servers do); ``mapped``: the same, and it answers each error at the HTTP
status its code maps to, as the 2026-07-28 revision has servers do (``-32601`` at 404, ``-32602``
at 400), in its sessions too: the call of key ``bad`` is refused ``-32602`` (400), that of key
``nomethod`` ``-32601`` (404). In both, the event stream of the answer to the call of key ``cut``
ends with no event (a proxy before it closing that stream early).
``held``: the first call of key ``held`` is answered 404 with a JSON body that never ends (a
server holding it until ``stop``), as the session gone; the next session serves it.
``bom``: every JSON body starts with a UTF-8 byte order mark (as .NET writers given
``Encoding.UTF8`` write one); ``null_id``: the call of key ``bad`` is answered, at HTTP 200, with
an error naming no request (``"id": null``, as JSON-RPC has a server answer a request whose id it
could not read).
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
SESSION = "s22"
BOM = b"\xef\xbb\xbf"
STATUS = {-32601: 404, -32602: 400}  # (the 2026-07-28 revision's, for these codes)


def app(mode: str, seen: list[str], stop: threading.Event | None = None) -> type[Quiet]:
    """The handler class; ``seen`` gets each request's method; ``stop`` ends a body held."""
    held = threading.Event()

    class App(Quiet):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes = b"", kind: str = "application/json") -> None:
            if mode == "bom" and kind == "application/json" and body:
                body = BOM + body
            self.send_body(status, body, kind, Mcp_Session_Id=SESSION)

        def _error(self, ident: Any, code: int, message: str) -> None:
            status = STATUS.get(code, 200) if mode == "mapped" else 200
            error = {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
            self._send(status, json.dumps(error).encode())

        def do_GET(self) -> None:
            seen.append("GET")
            self._send(405)

        def do_DELETE(self) -> None:
            seen.append("DELETE")
            self._send(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            seen.append(str(method))
            if ident is None or method is None:
                return self._send(202)
            if method == "tools/call":
                return self._called(ident, (params.get("arguments") or {}).get("key"))
            if method == "initialize":
                result: dict[str, Any] = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": f"wild22-{mode}", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [LOOKUP]}
            elif method == "ping" and mode not in ("noping", "mapped"):
                result = {}
            else:
                return self._error(ident, -32601, f"Method not found: {method}")
            self._send(200, json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode())

        def _called(self, ident: Any, key: Any) -> None:
            if key == "held" and mode == "held" and not held.is_set():
                held.set()
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(b'{"jsonrpc": "2.0", "id": ')
                    self.wfile.flush()
                    assert stop is not None
                    stop.wait(30)
                self.close_connection = True
                return None
            if key == "cut":
                return self._send(200, b"", "text/event-stream")
            if key == "bad" and mode == "null_id":
                ident = None
            if key == "bad":
                return self._error(ident, -32602, f"Invalid params: no such key as {key}")
            if key == "nomethod":
                return self._error(ident, -32601, "Method not found: lookup/nomethod")
            result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
            self._send(200, json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode())

    return App
