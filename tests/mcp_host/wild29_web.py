"""A Streamable HTTP MCP server written by hand (``http.server``: it sends exactly what it is
told), for the twenty-ninth round of wild servers. It serves ``lookup`` (``value-of-<key>``);
the call's key picks how the answer comes:

``sse``: an event stream (other answers are JSON); ``split``: an event whose JSON is written over
several ``data:`` lines, after a comment and an event id; ``casing``: JSON under
``Application/JSON; Charset=UTF-8``; ``untyped``: JSON with no ``Content-Type``; ``away``: a
``302`` to another origin; ``page``: ``200`` with an HTML page; ``scalar``: ``200`` JSON holding a
string, not a message; ``notjson``: a body typed JSON that is not; ``nojsonrpc``: the answer
without its ``"jsonrpc": "2.0"``.
"""

from __future__ import annotations

import json
from typing import Any

from tether_testing.loopback import Quiet

LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}
SESSION = {"Mcp_Session_Id": "s29"}


def app(seen: list[str], elsewhere: str = "http://127.0.0.2:9/mcp") -> type[Quiet]:
    """The handler class; ``seen`` gets each request's method and what it carried."""

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
            seen.append(f"{method} {self.headers.get('X-Api-Key')!r}")
            if ident is None or method is None:
                return self.send_body(202, **SESSION)
            result: dict[str, Any] = {}
            if method == "tools/call":
                key = str((params.get("arguments") or {}).get("key"))
                result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
                body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
                if self._odd(key, body):
                    return None
            elif method == "initialize":
                result = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "wild29-web", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [LOOKUP]}
            body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
            self.send_body(200, body, **SESSION)

        def _odd(self, key: str, body: bytes) -> bool:
            """Answers ``key`` oddly (True), or leaves it to the ordinary answer."""
            if key == "sse":
                self.send_body(
                    200, b"event: message\ndata: " + body + b"\n\n", "text/event-stream", **SESSION
                )
            elif key == "split":
                pretty = json.dumps(json.loads(body), indent=1).encode().replace(b"\n", b"\ndata: ")
                event = b": keep-alive\n\nid: e1\nevent: message\ndata: " + pretty + b"\n\n"
                self.send_body(200, event, "text/event-stream", **SESSION)
            elif key == "casing":
                self.send_body(200, body, "Application/JSON; Charset=UTF-8", **SESSION)
            elif key == "untyped":
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Mcp-Session-Id", "s29")
                self.end_headers()
                self.wfile.write(body)
            elif key == "away":
                self.send_body(302, Location=elsewhere, **SESSION)
            elif key == "page":
                self.send_body(200, b"<html><body>Sign in</body></html>", "text/html", **SESSION)
            elif key == "scalar":
                self.send_body(200, b'"ok"', **SESSION)
            elif key == "notjson":
                self.send_body(200, b"<html>" + b"x" * 5000, **SESSION)
            elif key == "nojsonrpc":
                self.send_body(200, body.replace(b'"jsonrpc": "2.0", ', b""), **SESSION)
            else:
                return False
            return True

    return App
