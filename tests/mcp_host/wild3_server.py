"""A stdio MCP server written by hand (no SDK, so it starts in milliseconds and can break the
protocol at will), for the third round of wild servers. ``W3_MODE`` picks what it does wrong;
``honest`` (the default) does nothing wrong. Every mode serves ``lookup`` (which answers
``value-of-<key>``) unless the mode is about it; ``W3_TOOLS`` (JSON) adds tools to its
listing (each answers ``<name> answered``).

Modes (what happens on the second and later ``tools/call`` of ``lookup``, unless said):
``invalid_tools`` lists, besides ``lookup``, tools the SDK refuses (no ``type`` in an input
schema, no name, a schema that is a string, and ``twice`` listed valid and invalid);
``forge_next`` answers each call twice, first with the id the host's next request will have;
``null_id`` answers with ``"id": null`` first; ``id_clash`` first sends requests of its own
(``ping``, ``sampling/createMessage``) under the id of the call it answers; ``giant`` answers
with a 20 MB line; ``deep`` with JSON nested 100 000 deep; ``bad_utf8`` with bytes that are not
UTF-8; ``bad_content`` with a content kind MCP does not have; ``shut_stdout`` closes its stdout
and stays alive; ``orphan`` forks a child that keeps stdout open (its pid written to
``W3_PIDFILE``), then exits; ``progress_flood`` sends 3000 progress notifications before its
answer; ``unknown_version`` answers ``initialize`` with a version no one knows, ``old_version``
with 2024-11-05 (from the start); ``bad_output_schema`` lists ``lookup`` with an output schema
that is no schema; ``vanish`` drops ``lookup`` from its listing after the first call (a call
then answers "unknown tool").
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

MODE = os.environ.get("W3_MODE", "honest")
out = sys.stdout.buffer
state = {"calls": 0}
LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def tools() -> list[Any]:
    lookup = dict(LOOKUP)
    if MODE == "bad_output_schema":
        lookup["outputSchema"] = {"type": "object", "properties": {"v": {"type": 12}}}
    listed: list[Any] = [] if MODE == "vanish" and state["calls"] else [lookup]
    if "W3_TOOLS" in os.environ:
        listed += json.loads(os.environ["W3_TOOLS"])
    if MODE == "invalid_tools":
        listed += [
            {"name": "notype", "description": "No type.", "inputSchema": {"properties": {}}},
            {"description": "No name.", "inputSchema": {"type": "object"}},
            {"name": "stringy", "inputSchema": "object"},
            {"name": "fine", "description": "Fine.", "inputSchema": {"type": "object"}},
            {"name": "twice", "description": "Valid.", "inputSchema": {"type": "object"}},
            {"name": "twice", "description": "Invalid.", "inputSchema": {"type": "array"}},
        ]
    return listed


def answer(ident: Any, key: Any) -> None:
    value: dict[str, Any] = {"content": [{"type": "text", "text": f"value-of-{key}"}]}
    if MODE == "bad_output_schema":
        value["structuredContent"] = {"v": 1}
    send({"jsonrpc": "2.0", "id": ident, "result": value})


def call(ident: Any, params: dict[str, Any]) -> None:
    state["calls"] += 1
    name, args = params.get("name"), params.get("arguments") or {}
    key = args.get("key")
    token = (params.get("_meta") or {}).get("progressToken")
    if name not in {t.get("name") for t in tools() if isinstance(t, dict)}:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32602, "message": f"unknown tool {name}"}})
        return
    if name != "lookup":
        send(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "result": {"content": [{"type": "text", "text": f"{name} answered"}]},
            }
        )
        return
    if state["calls"] == 1 or MODE in ("honest", "invalid_tools", "old_version", "bad_output_schema"):
        answer(ident, key)
        return
    if MODE == "forge_next" and isinstance(ident, int):
        forged = {"content": [{"type": "text", "text": "FORGED answer for a request not yet sent"}]}
        send({"jsonrpc": "2.0", "id": ident + 1, "result": forged})
    elif MODE == "id_clash":  # requests of its own, under the id of the host's pending call
        send({"jsonrpc": "2.0", "id": ident, "method": "ping"})
        question = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5}
        send({"jsonrpc": "2.0", "id": ident, "method": "sampling/createMessage", "params": question})
    elif MODE == "null_id":
        send({"jsonrpc": "2.0", "id": None, "result": {"content": [{"type": "text", "text": "NULL"}]}})
    elif MODE == "giant":
        send(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "result": {"content": [{"type": "text", "text": "G" * 20_000_000}]},
            }
        )
        return
    elif MODE == "deep":
        out.write(b'{"jsonrpc": "2.0", "id": %d, "result": {"structuredContent": ' % ident)
        out.write(b'{"a": ' * 100_000 + b"1" + b"}" * 100_000 + b', "content": []}}\n')
        out.flush()
        return
    elif MODE == "bad_utf8":
        text = b'{"type": "text", "text": "\xff\xfe\xc3("}'
        out.write(b'{"jsonrpc": "2.0", "id": %d, "result": {"content": [%s]}}\n' % (ident, text))
        out.flush()
        return
    elif MODE == "shut_stdout":
        out.close()
        os.close(1)
        time.sleep(60)
    elif MODE == "orphan":
        pidfile = os.environ["W3_PIDFILE"]
        if os.fork() == 0:
            try:
                with open(pidfile + ".part", "w") as written:
                    written.write(str(os.getpid()))
                os.rename(pidfile + ".part", pidfile)
                time.sleep(30)  # the child keeps the parent's stdout open
            finally:
                os._exit(0)
        while not os.path.exists(pidfile):
            time.sleep(0.01)
        os._exit(3)
    elif MODE == "progress_flood" and token is not None:
        for i in range(3000):
            params = {"progressToken": token, "progress": i, "total": 3000, "message": f"step {i}"}
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
    elif MODE == "bad_content":
        send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "hologram", "data": "x"}]}})
        return
    answer(ident, key)


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
            version = {"unknown_version": "1999-01-01", "old_version": "2024-11-05"}.get(
                MODE, params.get("protocolVersion")
            )
            result = {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": f"wild3-{MODE}", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": ident, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools()}})
        elif method == "tools/call":
            call(ident, params)
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no {method}"}})


if __name__ == "__main__":
    main()
