"""A stdio MCP server written by hand, for the twenty-fifth round of wild servers: launched as
people launch servers. Its one tool ``lookup`` answers ``value-of-<key>``; the key ``hang`` writes
``<W25_PIDS>.hang`` and never answers. Each process it is writes its pid to ``W25_PIDS`` (a line).

Launch flags (before the server starts): ``--hand-off`` forks the server and exits 0 at once (a
launcher); ``--daemonise`` does so with the server in a session of its own (fork, setsid, fork);
``--mute`` with either: the server it leaves holds the output and never answers.
Modes (``W25``, comma-separated): ``stubborn`` ignores SIGTERM, SIGHUP and SIGINT and outlives the
end of its stdin; ``daemon`` starts a daemon (a session of its own, SIGTERM ignored, its stdio
closed) that sleeps forever; ``slow`` takes a second and a half to start (sleeps before reading).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

MODES = set(filter(None, os.environ.get("W25", "").split(",")))
PIDS = os.environ.get("W25_PIDS")
LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


def noted(suffix: str = "") -> None:
    if PIDS:
        with open(PIDS + suffix, "a", encoding="utf-8") as file:
            file.write(f"{os.getpid()}\n")


def send(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        info = {"name": "wild25", "version": "1"}
        version = params.get("protocolVersion")
        return {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
    if method == "tools/list":
        return {"tools": [LOOKUP]}
    if method == "tools/call":
        key = str(params.get("arguments", {}).get("key"))
        if key == "hang":
            noted(".hang")
            while True:
                time.sleep(1)
        return {"content": [{"type": "text", "text": f"value-of-{key}"}]}
    return {}


def daemon() -> None:
    if os.fork() != 0:
        return
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for fd in (0, 1, 2):
        os.close(fd)
    noted()
    while True:
        time.sleep(1)


def serve() -> None:
    noted()
    if "stubborn" in MODES:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
    if "daemon" in MODES:
        daemon()
    if "slow" in MODES:
        time.sleep(1.5)
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("id") is not None and request.get("method"):
            send({"jsonrpc": "2.0", "id": request["id"], "result": answer(request)})
    while "stubborn" in MODES:
        time.sleep(1)


def launched(flags: list[str]) -> None:
    """As a launcher: the server started with this process's stdio, then exit 0."""
    if os.fork() != 0:
        os._exit(0)
    if "--daemonise" in flags:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
    if "--mute" in flags:
        noted()
        while True:
            time.sleep(1)
    serve()


if __name__ == "__main__":
    flags = sys.argv[1:]
    if "--hand-off" in flags or "--daemonise" in flags:
        launched(flags)
    else:
        serve()
