"""A stdio MCP server written by hand (no SDK: it starts in milliseconds and breaks the protocol
at will), for the eighth round of wild servers. It serves ``lookup`` (which answers
``value-of-<key>``); ``W8_MODE`` picks what it does wrong on the second and later
``tools/call``; ``honest`` (the default) does nothing wrong.

Modes: ``storm`` sends ``W8_STORM`` (default 5 000) pings of its own (ids of 1 000 characters)
and never reads again (it neither answers the call nor reads the host's answers, which fill its
stdin: the host's writes to it block), sleeping a minute. ``sample_burst`` sends ``W8_SAMPLES``
(default 5) sampling requests at once as soon as it is initialized (no call in flight: no call's
cap applies) and answers each call only once every one of them is answered, with how many the
host sampled and refused; ``ask_burst`` does the same with questions (``elicitation/create``),
answering with how many were accepted, declined or cancelled.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

MODE = os.environ.get("W8_MODE", "honest")
out = sys.stdout.buffer
state: dict[str, Any] = {"calls": 0, "answers": {}}
lines = iter(sys.stdin.buffer)
SAMPLES = int(os.environ.get("W8_SAMPLES", "5"))
LOOKUP = {
    "name": "lookup",
    "description": "Looks up a key.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def call(ident: Any, params: dict[str, Any]) -> None:
    state["calls"] += 1
    key = (params.get("arguments") or {}).get("key")
    if state["calls"] > 1 and MODE == "storm":
        pad = b"x" * 1000  # long ids: each answer of the host's is as long, its stdin fills at once
        pings = b"".join(
            b'{"jsonrpc": "2.0", "id": "p%d-%s", "method": "ping"}\n' % (n, pad)
            for n in range(int(os.environ.get("W8_STORM", "5000")))
        )
        out.write(pings)
        out.flush()
        time.sleep(60)
    if MODE == "sample_burst":
        while len(state["answers"]) < SAMPLES:  # the host's answers, read as they come
            handle(json.loads(next(lines)))
        sampled = sum("result" in a for a in state["answers"].values())
        text = f"value-of-{key} sampled={sampled} refused={SAMPLES - sampled}"
        send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": text}]}})
        return
    if MODE == "ask_burst":
        while len(state["answers"]) < SAMPLES:
            handle(json.loads(next(lines)))
        actions = [(a.get("result") or {}).get("action") for a in state["answers"].values()]
        text = f"value-of-{key} " + " ".join(
            f"{n}={actions.count(n)}" for n in sorted(set(map(str, actions)))
        )
        send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": text}]}})
        return
    send(
        {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": f"value-of-{key}"}]}}
    )


def burst() -> None:
    question = {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Summarise: hi"}}],
        "maxTokens": 5,
    }
    for n in range(SAMPLES):
        send({"jsonrpc": "2.0", "id": f"s{n}", "method": "sampling/createMessage", "params": question})


def ask_burst() -> None:
    form = {"type": "object", "properties": {"city": {"type": "string"}}}
    for n in range(SAMPLES):
        question = {"mode": "form", "message": f"Question {n}: which city?", "requestedSchema": form}
        send({"jsonrpc": "2.0", "id": f"q{n}", "method": "elicitation/create", "params": question})


def handle(message: dict[str, Any]) -> None:
    method, ident = message.get("method"), message.get("id")
    if method is None and ident is not None:  # the host's answer to a request of the server's
        state["answers"][ident] = message
        return
    if ident is None:  # a notification
        if method == "notifications/initialized" and MODE == "sample_burst":
            burst()
        if method == "notifications/initialized" and MODE == "ask_burst":
            ask_burst()
        return
    params = message.get("params") or {}
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": f"wild8-{MODE}", "version": "1"},
        }
        send({"jsonrpc": "2.0", "id": ident, "result": result})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": [LOOKUP]}})
    elif method == "tools/call":
        call(ident, params)
    else:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no {method}"}})


def main() -> None:
    for raw in lines:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        handle(message)


if __name__ == "__main__":
    main()
