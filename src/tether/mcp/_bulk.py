"""A message of more JSON objects and arrays than the host lets the SDK read (``MAX_CONTAINERS``).

The SDK turns each object of a message into a model (a content block, a tool) on the host's
event loop: an answer of 200 000 text blocks of one letter (6 MB, under the message limit) cost
it seconds of CPU and 400 MB, one of a million (27 MB, under the limit of a server whose results
may be long) 15 s and 2 GB, every other server and the console waiting. The bytes are counted
first (each object or array opens with ``{`` or ``[``); only a message with more of them than the
bound is parsed here (in C) and its containers counted, so text full of braces is still read.
A message past the bound is never given to the SDK: an answer fails the request it answers,
named; anything else is dropped.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_CONTAINERS", "counted", "refusal"]

MAX_CONTAINERS = 100_000  # objects and arrays in one message (a listing of 10 000 tools fits)


def counted(raw: bytes) -> tuple[str, Any] | None:
    """Why ``raw`` is not given to the SDK, and what it parsed to; ``None`` when it holds at most
    ``MAX_CONTAINERS`` objects and arrays (or is no JSON Python reads: the SDK names that)."""
    if raw.count(b"{") + raw.count(b"[") <= MAX_CONTAINERS:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not _more_than(value, MAX_CONTAINERS):
        return None
    why = (
        f"the server's message holds more than {MAX_CONTAINERS} JSON objects and arrays, "
        "more than the host reads"
    )
    return why, value


def refusal(value: Any, why: str) -> dict[str, Any] | None:
    """An error answering the request ``value`` answers (``None``: it answers none)."""
    if not isinstance(value, dict) or "method" in value:
        return None
    ident = value.get("id")
    if not isinstance(ident, int | str) or isinstance(ident, bool):
        return None
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32603, "message": why}}


def _more_than(value: Any, limit: int) -> bool:
    """Whether ``value`` holds more than ``limit`` objects and arrays (iteratively, stopping there)."""
    if not isinstance(value, dict | list):
        return False
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend(child for child in children if isinstance(child, dict | list))
    return False
