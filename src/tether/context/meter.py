"""Prefix-stability meter (C7): how much of the previous request is a byte prefix of this one.

Providers cache the longest byte-identical prefix of a request; the share of the previous
request that the current one repeats verbatim at its start is the cache-hit potential. A
request is serialised as one canonical JSON line per tool definition, then one per message,
so an append-only request extends the previous one byte for byte.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tether.context.incremental import ItemMemo
from tether.models.base import ModelRequest

__all__ = ["PrefixMeter", "PrefixSample", "common_prefix_len", "request_bytes"]


def _line(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def request_bytes(request: ModelRequest) -> bytes:
    """Canonical bytes of a request: tool definitions first (they are part of the prefix), then messages."""
    parts = [_line(t) for t in request.tools]
    parts.extend(_line(m.wire()) for m in request.messages)
    return b"".join(parts)


def _item_line(item: object) -> bytes:
    return _line(item if isinstance(item, dict) else item.wire())  # type: ignore[attr-defined]


def common_prefix_len(a: bytes, b: bytes, *, chunk: int = 4096) -> int:
    """Length of the longest common prefix: chunked compares (memcmp) then one byte scan."""
    if b.startswith(a) or a.startswith(b):  # the append-only case: one memcmp, no copies
        return min(len(a), len(b))
    n = min(len(a), len(b))
    i = 0
    while i < n:
        j = min(i + chunk, n)
        if a[i:j] == b[i:j]:
            i = j
            continue
        while a[i] == b[i]:
            i += 1
        return i
    return n


@dataclass(frozen=True, slots=True)
class PrefixSample:
    """One request's figures. ``reuse`` is None for the first request of a session."""

    request_bytes: int
    common_bytes: int
    reuse: float | None  # common / len(previous): share of the previous request reused
    cached_share: float | None  # common / len(this): share of this request a cache could serve


class PrefixMeter:
    """Keeps the previous request's bytes and measures each new one against them."""

    def __init__(self) -> None:
        self._previous: bytes | None = None
        self._lines: ItemMemo[bytes] = ItemMemo(_item_line)  # each line encoded once per session
        self.samples: list[PrefixSample] = []

    def measure(self, request: ModelRequest) -> PrefixSample:
        data = b"".join(self._lines.values((*request.tools, *request.messages)))
        prev = self._previous
        if prev is None:
            sample = PrefixSample(len(data), 0, None, None)
        else:
            common = common_prefix_len(prev, data)
            sample = PrefixSample(
                len(data),
                common,
                round(common / len(prev), 6) if prev else 1.0,
                round(common / len(data), 6) if data else 1.0,
            )
        self._previous = data
        self.samples.append(sample)
        return sample

    @property
    def mean_reuse(self) -> float | None:
        values = [s.reuse for s in self.samples if s.reuse is not None]
        return round(sum(values) / len(values), 6) if values else None
