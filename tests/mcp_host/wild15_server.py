"""A stdio MCP server written by hand (no SDK: it starts in milliseconds and sends exactly what
it is told), for the fifteenth round of wild servers. ``lookup`` answers ``value-of-<key>``; some
keys make it do otherwise first:

``sample:<n>`` asks the host's model to write something (``sampling/createMessage``) about a text
of ``n`` characters, waits for the host's answer and answers ``sampled: <text>`` or
``refused: <message>``; ``progress:<done>/<total>`` reports progress on the call, the numbers
written as given (``1e999`` is read as infinity by JSON parsers that allow it, ``NaN`` as not a
number), then answers; ``junk:<n>`` first writes a line of ``n`` MiB that is no JSON.

With ``W15_PAGES`` set, the tool listing comes in that many pages: ``lookup`` on the first,
``stats`` on the last, none between; every page but the last names a new next cursor of
``W15_CURSOR_BYTES`` characters (default 32). ``W15_LOG`` names a file that gets one line for
each page asked.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

out = sys.stdout.buffer
KEY = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
TOOLS = [
    {"name": "lookup", "description": "Looks up a key.", "inputSchema": KEY},
    {"name": "stats", "description": "Counts the entries of a key.", "inputSchema": KEY},
]


def send(message: Any) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def send_raw(line: str) -> None:
    out.write(line.encode() + b"\n")
    out.flush()


def result(ident: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": value}


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def listing(cursor: str | None) -> dict[str, Any]:
    if log := os.environ.get("W15_LOG"):
        with open(log, "a", encoding="utf-8") as file:
            file.write(f"page {cursor[:8] if cursor else 'first'}\n")
    if "W15_PAGES" not in os.environ:
        return {"tools": TOOLS}
    pages, size = int(os.environ["W15_PAGES"]), int(os.environ.get("W15_CURSOR_BYTES", "32"))
    page = int(cursor[:6]) if cursor else 0
    if page + 1 >= pages:
        return {"tools": TOOLS[1:]}
    following = f"{page + 1:06d}" + "c" * max(0, size - 6)
    return {"tools": TOOLS[:1] if page == 0 else [], "nextCursor": following}


def ask_the_model(chars: int) -> str:
    """A sampling request of ``chars`` characters; what the host answered."""
    message = {"role": "user", "content": {"type": "text", "text": "s" * chars}}
    params = {"messages": [message], "maxTokens": 10}
    send({"jsonrpc": "2.0", "id": "w15-sample", "method": "sampling/createMessage", "params": params})
    for raw in sys.stdin.buffer:
        answer = json.loads(raw)
        if answer.get("id") != "w15-sample" or "method" in answer:
            continue
        if "error" in answer:
            return f"refused: {answer['error'].get('message')}"
        return f"sampled: {answer['result']['content']['text']}"
    return "refused: the host went away"


def call(ident: Any, params: dict[str, Any]) -> None:
    key = str((params.get("arguments") or {}).get("key"))
    token = (params.get("_meta") or {}).get("progressToken")
    if key.startswith("sample:"):
        return send(result(ident, text(ask_the_model(int(key.split(":", 1)[1])))))
    if key.startswith("junk:"):
        for _ in range(int(key.split(":", 1)[1]) * 16):
            out.write(b"j" * 65536)
        send_raw("")
    if key.startswith("progress:"):
        done, total = key.split(":", 1)[1].split("/")
        note = f'"progressToken": {json.dumps(token)}, "progress": {done}, "total": {total}'
        send_raw('{"jsonrpc": "2.0", "method": "notifications/progress", "params": {' + note + "}}")
    send(result(ident, text(f"value-of-{key}")))


def main() -> None:
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        method, ident = message.get("method"), message.get("id")
        if ident is None or method is None:  # a notification, or an answer nobody waits for
            continue
        params = message.get("params") or {}
        if method == "initialize":
            value = {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "wild15", "version": "1"},
            }
            send(result(ident, value))
        elif method == "tools/list":
            send(result(ident, listing(params.get("cursor"))))
        elif method == "tools/call":
            call(ident, params)
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no {method}"}})


if __name__ == "__main__":
    main()
