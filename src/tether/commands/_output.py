"""Shared output helpers: human text by default, one JSON object on the last line with --json."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit_json(payload: dict[str, Any]) -> None:
    """The last line of a reporting command: one JSON object."""
    sys.stdout.write(json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines.append("  ".join("-" * widths[c] for c in columns))
    for r in rows:
        lines.append("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))
    return "\n".join(lines)
