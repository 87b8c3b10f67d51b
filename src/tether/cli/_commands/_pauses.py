"""Questions waiting for a person, as ``tether runs pauses`` and ``tether mcp pauses`` both list
them: one shape for one concept."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tether.mcp._pauses import Pause

__all__ = ["pause_listing"]


def pause_listing(pending: Iterable[Pause]) -> dict[str, Any]:
    """``count`` and the questions, each with ``id``, ``run_id``, ``server``, ``tool``, ``asked``,
    ``message`` and ``schema``; ``run`` repeats ``run_id`` and ``pending`` repeats ``pauses`` for
    readers of the older shapes (``runs pauses`` said ``run``, ``mcp pauses`` said ``pending``)."""
    rows = [
        {
            "id": p.id,
            "run_id": p.run_id,
            "run": p.run_id,
            "server": p.server,
            "tool": p.tool,
            "asked": p.created_at,
            "message": p.message,
            "schema": p.schema,
        }
        for p in pending
    ]
    return {"count": len(rows), "pauses": rows, "pending": rows}
