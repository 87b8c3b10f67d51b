"""A stdio MCP server written by hand, for the twenty-seventh round of wild servers. Its tool
``lookup`` answers ``value-of-<key>``; ``typed`` (with an output schema) answers
``{"value": "value-of-<key>"}``; some keys misbehave while answering:

``strid`` answers under the id as a string (``"3"`` for ``3``); ``nan`` has ``NaN`` and
``Infinity`` in its structured content (Python's ``json.dumps`` writes them); ``bignum`` has a
number of 5,000 digits in its structured content; ``errstruct`` (``typed``) fails with
``isError`` and structured content its output schema does not describe; ``pinghost`` asks the
host a ``ping`` and waits for the answer before answering; ``lsp`` frames its answer with a
``Content-Length`` header as language servers do; ``ansi`` writes its answer inside terminal
colour codes; ``hostcall`` asks the host ``tools/call`` and waits; ``progafter`` sends progress
for the call after its answer; ``nullresult`` answers ``"result": null``; ``nocontent`` answers
``{}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}
TYPED = {
    "name": "typed",
    "description": "Looks up a key, typed.",
    "inputSchema": LOOKUP["inputSchema"],
    "outputSchema": {
        "type": "object",
        "properties": {"value": {"type": "string"}},
        "required": ["value"],
        "additionalProperties": False,
    },
}
PENDING: dict[Any, Any] = {}


def write(raw: bytes) -> None:
    sys.stdout.buffer.write(raw)
    sys.stdout.buffer.flush()


def send(message: dict[str, Any]) -> None:
    write(json.dumps(message).encode() + b"\n")


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def result(tool: str, key: str) -> Any:
    value = f"value-of-{key}"
    if key == "nan":
        return {
            **text(value),
            "structuredContent": {"value": value, "ratio": float("nan"), "top": float("inf")},
        }
    if key == "bignum":
        return {**text(value), "structuredContent": {"value": value, "n": "BIGNUM"}}
    if key == "errstruct":
        return {**text("failed: value-of-errstruct"), "isError": True, "structuredContent": {"code": 7}}
    if key == "nullresult":
        return None
    if key == "nocontent":
        return {}
    if tool == "typed":
        return {**text(json.dumps({"value": value})), "structuredContent": {"value": value}}
    return text(value)


def answer(request: dict[str, Any]) -> None:
    ident, params = request["id"], request.get("params") or {}
    key = str(params.get("arguments", {}).get("key"))
    body = {"jsonrpc": "2.0", "id": ident, "result": result(params.get("name", ""), key)}
    if key == "strid":
        body["id"] = str(ident)
    if key == "bignum":
        write(json.dumps(body).replace('"BIGNUM"', "9" * 5000).encode() + b"\n")
    elif key == "nan":
        write(json.dumps(body).encode() + b"\n")  # NaN, Infinity: not JSON, as Python writes them
    elif key == "lsp":
        raw = json.dumps(body).encode()
        write(b"Content-Length: %d\r\n\r\n" % len(raw) + raw)
    elif key == "ansi":
        write(b"\x1b[32m" + json.dumps(body).encode() + b"\x1b[0m\n")
    else:
        send(body)
    if key == "progafter":
        token = (params.get("_meta") or {}).get("progressToken", ident)
        send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 9},
            }
        )


def call(request: dict[str, Any]) -> None:
    params = request.get("params") or {}
    key = str(params.get("arguments", {}).get("key"))
    if key in ("pinghost", "hostcall"):
        mine = f"q-{request['id']}"
        PENDING[mine] = request
        method = "ping" if key == "pinghost" else "tools/call"
        send(
            {
                "jsonrpc": "2.0",
                "id": mine,
                "method": method,
                "params": {"name": "x"} if key == "hostcall" else {},
            }
        )
        return
    answer(request)


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        method, params = request.get("method"), request.get("params") or {}
        if "method" not in request and request.get("id") in PENDING:
            answer(PENDING.pop(request["id"]))
            continue
        if "id" not in request:
            continue
        if method == "tools/call":
            call(request)
            continue
        if method == "initialize":
            info = {"name": "wild27", "version": "1"}
            out: Any = {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": {"tools": {}},
                "serverInfo": info,
            }
        elif method == "tools/list":
            out = {"tools": [LOOKUP, TYPED]}
        else:
            out = {}
        send({"jsonrpc": "2.0", "id": request["id"], "result": out})


if __name__ == "__main__":
    main()
