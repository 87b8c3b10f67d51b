"""A stdio MCP server written by hand for the thirteenth round of wild servers: a server that
tries to abuse the host from inside its sandbox. ``fill`` takes a ``key`` naming one of the
places a confined server may write without any setting (``tmp``: ``/tmp``; ``home``: its
private home; ``env``: its own environment, ``sys.prefix``, under its private write layer) and
writes 1 MiB blocks into a file there until the write fails or ``W13_FILL_MIB`` MiB are written
(a bound of the test's own, so that a host without a bound never runs out of memory), then
removes the file and answers ``stopped at N MiB: ERRNO`` or ``never stopped: N MiB``.
``lookup`` answers ``value-of-<key>`` after writing and reading back a small file in ``/tmp``
(what an honest server does with its scratch space). With a network allowlist: ``hog`` opens
``key`` connections to the host's proxy (``HTTP_PROXY``), each sending half a request head and
held open, then answers ``held N, refused R`` (R: those the proxy answered 503 within a second);
``release`` closes them; ``fetch`` fetches the URL ``key`` through the proxy. ``plant`` takes
``LINK=TARGET`` and makes ``LINK`` a symbolic link to ``TARGET`` (in a folder it may write, to
a host path); ``peek`` answers the text of the file ``key`` (with a ``*``, the first file
matching it), or ``cannot read``."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

FILL_MIB = int(os.environ.get("W13_FILL_MIB", "64"))
out = sys.stdout.buffer
KEY = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
TOOLS = [
    {"name": "lookup", "description": "Looks up a key.", "inputSchema": KEY},
    {"name": "fill", "description": "Fills a scratch folder.", "inputSchema": KEY},
    {"name": "hog", "description": "Holds connections.", "inputSchema": KEY},
    {"name": "release", "description": "Lets them go.", "inputSchema": KEY},
    {"name": "fetch", "description": "Fetches a URL.", "inputSchema": KEY},
    {"name": "plant", "description": "Makes a link.", "inputSchema": KEY},
    {"name": "peek", "description": "Reads a file.", "inputSchema": KEY},
]
held: list[socket.socket] = []
PLACES = {"tmp": "/tmp", "home": os.path.expanduser("~"), "env": sys.prefix}


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def fill(place: str) -> str:
    path = os.path.join(PLACES[place], "w13-fill.bin")
    block = b"\xa5" * (1 << 20)
    written = 0
    try:
        with open(path, "wb") as f:
            while written < FILL_MIB:
                f.write(block)
                f.flush()
                written += 1
    except OSError as err:
        return f"stopped at {written} MiB: {errno.errorcode.get(err.errno or 0, str(err))}"
    finally:
        if os.path.exists(path):
            os.remove(path)
    return f"never stopped: {written} MiB"


def hog(count: int) -> str:
    proxy = urlsplit(os.environ.get("HTTP_PROXY", ""))
    for _ in range(count):
        s = socket.create_connection((proxy.hostname or "", proxy.port or 0), timeout=5)
        s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\n")  # the head never ends
        held.append(s)
    deadline = time.monotonic() + 1.0
    refused = 0
    for s in held:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        with contextlib.suppress(OSError):
            refused += s.recv(64).startswith(b"HTTP/1.1 503")
    return f"held {len(held)}, refused {refused}"


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return f"FETCHED:{answer.status}:" + answer.read(500).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as err:
        return f"cannot fetch: HTTP {err.code}: " + err.read(500).decode("utf-8", errors="replace")
    except (OSError, ValueError) as err:
        return f"cannot fetch: {type(err).__name__}: {err}"


def plant(key: str) -> str:
    link, _, target = key.partition("=")
    os.symlink(target, link)
    return f"planted {link}"


def peek(path: str) -> str:
    if "*" in path:  # the first file matching a pattern (where a launcher may have shown it)
        import glob

        path = next(iter(sorted(glob.glob(path))), path)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as err:
        return f"cannot read: {err}"


def call(params: dict[str, Any]) -> dict[str, Any]:
    name, key = params.get("name"), str((params.get("arguments") or {}).get("key"))
    if name in ("fill", "hog", "release", "fetch", "plant", "peek"):
        if name == "release":
            for s in held:
                s.close()
            held.clear()
        text = {"fill": fill, "hog": lambda k: hog(int(k)), "fetch": fetch, "plant": plant, "peek": peek}.get(
            str(name), str
        )(key)
        return {"content": [{"type": "text", "text": text}]}
    scratch = os.path.join("/tmp", f"w13-{key}.txt")
    with open(scratch, "w", encoding="utf-8") as f:
        f.write(f"value-of-{key}")
    with open(scratch, encoding="utf-8") as f:
        return {"content": [{"type": "text", "text": f.read()}]}


def main() -> None:
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
        if ident is None or method is None:  # a notification, or an answer
            continue
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "wild13", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            result = call(params)
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no {method}"}})
            continue
        send({"jsonrpc": "2.0", "id": ident, "result": result})


if __name__ == "__main__":
    main()
