"""A stdio MCP server written by hand (no SDK: it starts in milliseconds), for the nineteenth
round of wild servers. Its tool ``lookup`` answers ``value-of-<key>``; its tool ``crash`` writes
a few lines to stderr, then dies mid-call without answering: ``W19_DEATH`` says how (``exit``:
exit status 3, the default; ``signal``: killed by SIGKILL; ``late``: closes its stdout, then
writes its last stderr line and exits with status 4 a moment later, as a process tearing down
does).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from tether_testing.handwritten import stdin_requests

DEATH = os.environ.get("W19_DEATH", "exit")
out = sys.stdout.buffer
TOOLS = [
    {
        "name": name,
        "description": text,
        "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}},
    }
    for name, text in (("lookup", "Looks up a key."), ("crash", "Looks up a key, slowly."))
]


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def die() -> None:
    for line in ("loading index shard 7", "Traceback (most recent call last):", "MemoryError: shard 7"):
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    if DEATH == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    if DEATH == "late":
        os.close(1)
        time.sleep(0.3)
        sys.stderr.write("fatal: giving up after shard 7\n")
        sys.stderr.flush()
        os._exit(4)
    os._exit(3)


def answer(ident: Any, method: str, params: dict[str, Any]) -> None:
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "wild19", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        if params.get("name") == "crash":
            die()
        key = (params.get("arguments") or {}).get("key")
        result = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
    elif method == "ping":
        result = {}
    else:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no such method"}})
        return
    send({"jsonrpc": "2.0", "id": ident, "result": result})


for ident, method, params in stdin_requests():
    answer(ident, method, params)
