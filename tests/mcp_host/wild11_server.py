"""A stdio MCP server written by hand (no SDK: it starts in milliseconds and answers exactly what
it is told), for the eleventh round of wild servers. ``lookup`` answers ``value-of-<key> (call
<n>)``, ``n`` counting the calls this process has served (a restarted server counts from 1
again); some keys make it answer otherwise:

``busy`` a JSON-RPC error of the server's own under ``-32000`` (the first code of the band
JSON-RPC leaves to servers, which many use for their failures: here a rate limit);
``app_session`` an error of its own about a session of its own making ("browser session not
found"), as browser and notebook servers give; ``batch`` the answer inside a JSON-RPC batch (an
array, as 2025-03-26 allowed), after a log notification; ``batch_only`` the answer alone in a
batch; ``method_in_result`` an answer that is not valid JSON-RPC (``"jsonrpc": "1.0"``) whose
structured content has a ``"method"`` key; ``bad_notes`` ``NOTES`` (3 000) log notifications the
SDK refuses (a level MCP does not have) before its answer.

With ``W11_LONG`` set, ``lookup`` is listed as ``LONG`` (a name of 100 characters, as tools made
from an OpenAPI description are named; the spec allows 128). With ``W11_ICONS`` set, ``lookup``
has an icon given as a ``data:`` URI of ``ICON_CHARS`` (96 000) characters, as the spec allows.
With ``W11_BOM`` set, its first line starts with a UTF-8 byte order mark. With ``W11_PAGED`` set,
the listing comes in two pages (``lookup``, then ``stats``), the last naming an empty next cursor
(``"nextCursor": ""``, which clients written in JavaScript read as the end: ``while (cursor)``),
and a page asked with a cursor it never gave is the first again.

``stats`` has an output schema (``{"count": integer}``) and answers its structured content with
no content block at all (``"content": []``, as the spec allows), or also as text for the key
``both``; for the key ``bad`` it answers ``{"count": "three"}``, not matching its schema.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

out = sys.stdout.buffer
state: dict[str, int] = {"calls": 0}
NOTES = 3000
KEY = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
TOOLS = [
    {"name": "lookup", "description": "Looks up a key.", "inputSchema": KEY},
    {
        "name": "stats",
        "description": "Counts the entries of a key.",
        "inputSchema": KEY,
        "outputSchema": {
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        },
    },
]


def send(message: Any) -> None:
    if "W11_BOM" in os.environ and not state["calls"] and not state.get("marked"):
        state["marked"] = 1
        out.write(b"\xef\xbb\xbf")  # a byte order mark before its first line, as some runtimes write
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def result(ident: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": value}


ICON_CHARS = 96_000
ICON = {"src": "data:image/png;base64," + "iVBORw0KGgo"[:8] * (ICON_CHARS // 8), "mimeType": "image/png"}


LONG = "get_api_v1_projects_by_project_id_environments_by_environment_id_variables_by_variable_name_lookup12"


def listing(cursor: Any) -> dict[str, Any]:
    if "W11_LONG" in os.environ:
        return {"tools": [{**TOOLS[0], "name": LONG}]}
    if "W11_ICONS" in os.environ:
        return {"tools": [{**TOOLS[0], "icons": [ICON]}, TOOLS[1]]}
    if "W11_PAGED" not in os.environ:
        return {"tools": TOOLS}
    if cursor == "2":
        return {"tools": TOOLS[1:], "nextCursor": ""}
    return {"tools": TOOLS[:1], "nextCursor": "2"}


def stats(ident: Any, key: str) -> None:
    data: dict[str, Any] = {"count": "three" if key == "bad" else 3}
    content = [{"type": "text", "text": json.dumps(data)}] if key == "both" else []
    send(result(ident, {"content": content, "structuredContent": data}))


def lookup(ident: Any, key: str) -> None:
    state["calls"] += 1
    answer = result(ident, {"content": [{"type": "text", "text": f"value-of-{key} (call {state['calls']})"}]})
    if key == "busy":
        error = {"code": -32000, "message": "rate limited: try again in a minute"}
        send({"jsonrpc": "2.0", "id": ident, "error": error})
    elif key == "app_session":
        error = {"code": -32603, "message": "browser session not found: open a page first"}
        send({"jsonrpc": "2.0", "id": ident, "error": error})
    elif key == "batch":
        note = {"level": "info", "logger": "wild11", "data": "answering in a batch"}
        send([{"jsonrpc": "2.0", "method": "notifications/message", "params": note}, answer])
    elif key == "bad_notes":
        for n in range(NOTES):
            note = {"level": "shouting", "data": f"note {n}"}
            send({"jsonrpc": "2.0", "method": "notifications/message", "params": note})
        send(answer)
    elif key == "batch_only":
        send([answer])
    elif key == "method_in_result":
        value = {"content": [], "structuredContent": {"method": "GET", "path": "/"}}
        send({"jsonrpc": "1.0", "id": ident, "result": value})
    else:
        send(answer)


def main() -> None:
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        method, ident = message.get("method"), message.get("id")
        if ident is None or method is None:  # a notification, or the host's answer to a request
            continue
        params = message.get("params") or {}
        if method == "initialize":
            value = {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "wild11", "version": "1"},
            }
            send(result(ident, value))
        elif method == "tools/list":
            send(result(ident, listing(params.get("cursor"))))
        elif method == "tools/call":
            name, key = params.get("name"), str((params.get("arguments") or {}).get("key"))
            (stats if name == "stats" else lookup)(ident, key)  # (``LONG`` is ``lookup``)
        elif method == "logging/setLevel":
            send(result(ident, {}))
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no {method}"}})


if __name__ == "__main__":
    main()
