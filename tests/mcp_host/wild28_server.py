"""A stdio MCP server written by hand, for the twenty-eighth round of wild servers. Its tool
``lookup`` answers ``value-of-<key>``; some keys misbehave while answering:

``ansi`` writes its answer inside terminal colour codes (a logger's colours on stdout);
``ansiall`` colours every part of it (a key, a value, the brackets); ``junk`` writes a log prefix
before its answer on the same line (``INFO answered: {...}``); ``junkafter`` a word after it;
``stray`` first answers an id never sent; ``signal`` kills itself (``SIGKILL``) mid-call;
``huge`` answers 10 MB of text.

Given a mode (its first argument), the whole server misbehaves: ``quit`` exits 0 right after
answering ``initialize``; ``deaf`` closes its stdin at a call, then answers it; ``orphan`` at a
call starts a child holding its stdout open and exits 1; ``shifty`` lists ``lookup`` with another
description each time it is asked; ``noisy`` writes 2 MB of binary garbage on one stderr line,
then serves.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


def write(raw: bytes) -> None:
    sys.stdout.buffer.write(raw)
    sys.stdout.buffer.flush()


def send(message: dict[str, Any]) -> None:
    write(json.dumps(message).encode() + b"\n")


def answer(ident: Any, key: str) -> None:
    value = "v" * 10_000_000 if key == "huge" else f"value-of-{key}"
    body = {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": value}]}}
    raw = json.dumps(body).encode()
    if key == "ansi":
        write(b"\x1b[32m" + raw + b"\x1b[0m\n")
    elif key == "ansiall":
        write(raw.replace(b'"result"', b'\x1b[1;34m"result"\x1b[0m').replace(b"{", b"\x1b[2m{\x1b[m") + b"\n")
    elif key == "junk":
        write(b"INFO answered: " + raw + b"\n")
    elif key == "junkafter":
        write(raw + b" (done)\n")
    elif key == "stray":
        send({**body, "id": 9999})
        send(body)
    elif key == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    else:
        write(raw + b"\n")


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "noisy":
        sys.stderr.buffer.write(bytes(range(256)).replace(b"\n", b"") * 8200 + b"\n")
        sys.stderr.buffer.flush()
    listed = 0
    for line in sys.stdin:
        request = json.loads(line)
        method, params = request.get("method"), request.get("params") or {}
        if "id" not in request or "method" not in request:
            continue
        if method == "tools/call" and mode == "deaf":  # stdout kept open, never read from again
            os.close(0)
            answer(request["id"], str(params.get("arguments", {}).get("key")))
            signal.pause()
        if method == "tools/call" and mode == "orphan":
            import subprocess

            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdout=sys.stdout)
            os._exit(1)
        if method == "tools/call":
            answer(request["id"], str(params.get("arguments", {}).get("key")))
            continue
        if method == "initialize":
            out: Any = {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "wild28", "version": "1"},
            }
        elif method == "tools/list":
            listed += 1
            shift = {"description": f"Looks up a key (listing {listed})."} if mode == "shifty" else {}
            out = {"tools": [{**LOOKUP, **shift}]}
        else:
            out = {}
        send({"jsonrpc": "2.0", "id": request["id"], "result": out})
        if method == "initialize" and mode == "quit":
            sys.exit(0)


if __name__ == "__main__":
    main()
