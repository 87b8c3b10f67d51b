"""A tiny PNG writer for a grouped bar chart, used when matplotlib (the ``evals`` extra) is absent.

No text is drawn: the groups and colours are explained in the Markdown report beside it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PALETTE", "bar_chart_png"]

PALETTE: tuple[tuple[int, int, int], ...] = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40))
_BG, _AXIS, _GRID = (255, 255, 255), (60, 60, 60), (225, 225, 225)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def bar_chart_png(groups: Sequence[Sequence[float]], path: Path, *, height: int = 240, bar: int = 12) -> Path:
    """Write grouped bars (values in 0..1, one colour per position in a group) as a PNG."""
    series = max((len(g) for g in groups), default=1)
    gap, margin = bar, 20
    width = margin * 2 + len(groups) * (series * bar + gap)
    plot = height - 2 * margin
    rows = [[_BG] * width for _ in range(height)]
    for frac in (0.25, 0.5, 0.75, 1.0):
        y = height - margin - round(frac * plot)
        rows[y][margin : width - margin] = [_GRID] * (width - 2 * margin)
    for gi, group in enumerate(groups):
        x0 = margin + gi * (series * bar + gap) + gap // 2
        for si, value in enumerate(group):
            top = height - margin - round(max(0.0, min(1.0, value)) * plot)
            colour = PALETTE[si % len(PALETTE)]
            for y in range(top, height - margin):
                rows[y][x0 + si * bar : x0 + (si + 1) * bar - 1] = [colour] * (bar - 1)
    for y in range(margin, height - margin + 1):
        rows[y][margin] = _AXIS
    rows[height - margin][margin : width - margin] = [_AXIS] * (width - 2 * margin)
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in rows)
    png = b"\x89PNG\r\n\x1a\n"
    png += _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    png += _chunk(b"IDAT", zlib.compress(raw, 9))
    png += _chunk(b"IEND", b"")
    path.write_bytes(png)
    return path
