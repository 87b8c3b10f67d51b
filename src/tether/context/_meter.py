"""Prefix-stability meter (C7): how much of the previous request is a byte prefix of this one,
the cache-hit potential. A request is read as one JSON line per tool definition, then one per
message (``item_json``), so an append-only request extends the previous one byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.context._incremental import ItemMemo
from tether.models._base import ModelRequest
from tether.models._estimate import item_json

__all__ = ["PrefixMeter", "PrefixSample", "common_prefix_len", "request_bytes"]


def request_bytes(request: ModelRequest) -> bytes:
    """The bytes of a request as the meter reads them: tool definitions, then messages."""
    return b"".join(item_json(item) + b"\n" for item in (*request.tools, *request.messages))


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
    """Measures each request against the previous one's lines (``texts``: the session's memo)."""

    def __init__(self, texts: ItemMemo[bytes] | None = None) -> None:
        # A line is an item's ``item_json`` from the shared memo; its newline is only counted.
        self._texts: ItemMemo[bytes] = texts if texts is not None else ItemMemo(item_json)
        self._previous: list[bytes] | None = None
        self._previous_len = 0
        self.requests = 0
        self._reuse_sum = 0.0
        self._reuse_count = 0

    def measure(self, request: ModelRequest) -> PrefixSample:
        lines = self._texts.values((*request.tools, *request.messages))
        size = sum(map(len, lines)) + len(lines)
        prev, prev_len = self._previous, self._previous_len
        if prev is None:
            sample = PrefixSample(size, 0, None, None)
        else:
            common = _common_bytes(prev, lines)
            sample = PrefixSample(
                size,
                common,
                round(common / prev_len, 6) if prev_len else 1.0,
                round(common / size, 6) if size else 1.0,
            )
        self._previous, self._previous_len = lines, size
        self.requests += 1
        if sample.reuse is not None:
            self._reuse_sum += sample.reuse
            self._reuse_count += 1
        return sample

    @property
    def mean_reuse(self) -> float | None:
        """The mean of the requests' ``reuse`` (the first request has none)."""
        return round(self._reuse_sum / self._reuse_count, 6) if self._reuse_count else None


def _common_bytes(a: list[bytes], b: list[bytes]) -> int:
    """``common_prefix_len`` of two requests' lines (it ends inside their first differing item)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return sum(map(len, a[:n])) + n
    i = n - 1 if a[: n - 1] == b[: n - 1] else next(i for i in range(n) if a[i] != b[i])  # usually the tail
    return sum(map(len, a[:i])) + i + common_prefix_len(a[i], b[i])
