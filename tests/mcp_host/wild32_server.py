"""A stdio MCP server written by hand, for the thirty-second round of wild servers. Its tool
``lookup`` answers ``value-of-<key>``; some keys answer oddly:

``torn`` ends its text in half an emoji (``"\\ud83d"``: a JavaScript server cutting a text with
``slice``, written so by ``JSON.stringify``); ``bytes`` ends it in bytes that are not UTF-8;
``twice`` answers twice; ``stray`` first answers ids that are no request's (``true``, an
object, one never sent) and writes an empty batch; ``esc`` ends its text in terminal escape
sequences; ``err`` fails as a JSON-RPC error whose message holds them; ``die`` writes them to
stderr and exits 3.

Given a mode (its first argument), the whole server misbehaves: ``torn`` describes ``lookup``
with half an emoji; ``esc`` puts terminal escape sequences (a window title, a screen clear,
colours, a C1 CSI, backspaces, a device control string, a bidi override) in its name, version,
instructions, log notifications and stderr; ``hang`` never answers a call and ignores
``SIGTERM``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

EVIL = "\x1b]0;owned\x07\x1b[2J\x1b[31mRED\x9b1mC1\x08\x08BS\x1bP+q\x1b\\\u202eLTR\x7f"
NOT_UTF8 = b"\xff\xed\xa0\x80"


def write(raw: bytes) -> None:
    sys.stdout.buffer.write(raw + b"\n")
    sys.stdout.buffer.flush()


def send(message: dict[str, Any]) -> None:
    write(json.dumps(message).encode())


def call(ident: Any, key: str, evil: str) -> None:
    send(
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "warning", "data": f"log{evil}"},
        }
    )
    text = f"value-of-{key}" + {"torn": "\ud83d", "bytes": "@@", "esc": EVIL}.get(key, "")
    answer = {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": text}]}}
    if key == "err":
        answer = {"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": f"failed{EVIL}"}}
    elif key == "die":
        sys.stderr.write(f"dying{EVIL}\n" * 3)
        sys.stderr.flush()
        os._exit(3)
    elif key == "twice":
        send(answer)
    elif key == "stray":
        for forged in (True, {"a": ident}, 9999):
            send({**answer, "id": forged, "result": {"content": [{"type": "text", "text": "forged"}]}})
        write(b"[]")
    write(json.dumps(answer, separators=(",", ":")).encode().replace(b"@@", NOT_UTF8))


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    evil = EVIL if mode == "esc" else ""
    if mode == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stderr.write(f"starting{evil}\n")
    sys.stderr.flush()
    lookup = {
        "name": "lookup",
        "description": "Looks up a key." + ("\ud83d" if mode == "torn" else ""),
        "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    }
    for line in sys.stdin:
        request = json.loads(line)
        method, params, ident = request.get("method"), request.get("params") or {}, request.get("id")
        if ident is None or method is None:
            continue
        result: Any = {}
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": f"w32{evil}", "version": f"1{evil}"},
                "instructions": f"Use lookup.{evil}",
            }
        elif method == "tools/list":
            result = {"tools": [lookup]}
        elif method == "tools/call" and mode != "hang":
            call(ident, str((params.get("arguments") or {}).get("key")), evil)
            continue
        elif method == "tools/call":
            continue
        send({"jsonrpc": "2.0", "id": ident, "result": result})


if __name__ == "__main__":
    main()
