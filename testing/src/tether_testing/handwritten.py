"""Pieces of the MCP servers tests write by hand (no SDK), to misbehave in ways the SDK cannot."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["stdin_requests"]


def stdin_requests() -> Iterator[tuple[Any, str, dict[str, Any]]]:
    """Each request a stdio server reads on its standard input, as ``(id, method, params)``: a
    line that is not JSON, a notification and an answer to the server's own request are skipped."""
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if isinstance(message, dict) and "id" in message and "method" in message:
            yield message["id"], message["method"], message.get("params") or {}
