"""A Streamable HTTP MCP server written by hand (``http.server``: it sends exactly what it is
told), for the twenty-seventh round of wild servers. It serves ``lookup`` (``value-of-<key>``);
the call's key picks how the answer comes:

``loop``: a ``307`` back to the same URL, for ever; ``away``: a ``308`` to another path of the
same origin, which serves; ``html``: ``500`` with an HTML page; ``busy``: ``429`` asking to be
retried in an hour; ``empty``: ``200`` JSON with no body; ``reset``: the connection closed with no
answer; ``crash``: the same, the first time, the server then knowing no session it gave before (a
server restarted, answering them ``404``); ``die``: the same, the server then gone (its port
closed); ``newsession``: the answer naming another ``Mcp-Session-Id``.
``hold_delete``: the ``DELETE`` ending the session is held until ``stop``; ``drop_notes``: every
notification POSTed has its connection closed with no answer.
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


def app(
    seen: list[str], stop: threading.Event, *, hold_delete: bool = False, drop_notes: bool = False
) -> type[Quiet]:
    """The handler class; ``seen`` gets each request's method, path and session header."""
    generation = [0]

    class App(Quiet):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            seen.append("GET")
            self.send_body(405)

        def do_DELETE(self) -> None:
            seen.append("DELETE")
            if hold_delete:
                stop.wait(120)
            self.send_body(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            seen.append(f"{method} {self.path} {self.headers.get('Mcp-Session-Id')!r}")
            session = {"Mcp_Session_Id": f"s27-{generation[0]}"}
            if method != "initialize" and self.headers.get("Mcp-Session-Id") != session["Mcp_Session_Id"]:
                return self.send_body(404, b"session not found", "text/plain")
            if ident is None or method is None:
                if drop_notes and method is not None:
                    self.close_connection = True
                    return self.connection.close()
                return self.send_body(202, **session)
            result: dict[str, Any] = {}
            if method == "tools/call":
                key = str((params.get("arguments") or {}).get("key"))
                if key == "crash" and not seen.count("crashed"):
                    seen.append("crashed")
                    generation[0] += 1
                    key = "reset"
                if self.path == "/mcp" and self._odd(key):
                    return None
                if key == "newsession":
                    session = {"Mcp_Session_Id": "other"}
                result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
            elif method == "initialize":
                result = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "wild27-web", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [LOOKUP]}
            body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
            self.send_body(200, body, **session)

        def _odd(self, key: str) -> bool:
            """Answers ``key`` oddly (True), or leaves it to the ordinary answer."""
            if key == "loop":
                self.send_body(307, Location="/mcp")
            elif key == "away":
                self.send_body(308, Location="/elsewhere")
            elif key == "html":
                self.send_body(500, b"<html><body><h1>Internal Server Error</h1></body></html>", "text/html")
            elif key == "busy":
                self.send_body(429, b"slow down", "text/plain", Retry_After="3600")
            elif key == "empty":
                self.send_body(200, b"", Mcp_Session_Id=f"s27-{generation[0]}")
            elif key == "die":
                self.server.shutdown()  # (from this handler's own thread: serving stops)
                self.server.server_close()
                self.close_connection = True
                self.connection.close()
            elif key == "reset":
                self.close_connection = True
                self.connection.close()
            else:
                return False
            return True

    return App
