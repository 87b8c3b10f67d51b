"""A Streamable HTTP MCP server written by hand (``http.server``: it sends exactly what it is
told), for the thirty-second round of wild servers. It serves ``lookup`` (``value-of-<key>``),
described with half an emoji (``"\\ud83d"``, as a JavaScript server cutting a text with
``slice`` writes it). The call's key picks how the answer comes:

``torn``: its text ends in half an emoji, as JSON; ``sse-torn``: so, in an event stream;
``sse-torn-lines``: so, in an event whose JSON is written over several ``data:`` lines;
``bytes``: its text ends in bytes that are not UTF-8 (JSON); ``sse-bytes``: so, in an event;
any other: an ordinary JSON answer.
"""

from __future__ import annotations

import json
from typing import Any

from tether_testing.loopback import Quiet

LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key \ud83d",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}
SESSION = {"Mcp_Session_Id": "s32"}
NOT_UTF8 = b"\xff\xed\xa0\x80"


def app(seen: list[str]) -> type[Quiet]:
    """The handler class; ``seen`` gets each request's method."""

    class App(Quiet):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_body(405)

        def do_DELETE(self) -> None:
            self.send_body(200)

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
            seen.append(str(method))
            if ident is None or method is None:
                return self.send_body(202, **SESSION)
            result: dict[str, Any] = {}
            if method == "tools/call":
                key = str((params.get("arguments") or {}).get("key"))
                return self._call(ident, key)
            if method == "initialize":
                result = {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "wild32-web", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [LOOKUP]}
            body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
            self.send_body(200, body, **SESSION)

        def _call(self, ident: Any, key: str) -> None:
            text = f"value-of-{key}" + ("\ud83d" if "torn" in key else "@@" if "bytes" in key else "")
            answer = {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": text}]}}
            body = json.dumps(answer, indent=1 if key.endswith("lines") else None).encode()
            body = body.replace(b"@@", NOT_UTF8)
            if key.startswith("sse"):
                event = b"id: e1\nevent: message\ndata: " + body.replace(b"\n", b"\ndata: ") + b"\n\n"
                return self.send_body(200, event, "text/event-stream", **SESSION)
            return self.send_body(200, body, **SESSION)

    return App
