"""Token accounting: the provider's reported usage when present, a pluggable estimator otherwise.

No tokenizer is downloaded at run time. The default estimator counts about four characters
a token (the same rule the scripted models report, so tests are consistent). When a backend
reports ``prompt_tokens`` for a request, the next request is counted as that figure plus the
estimated difference between the two requests, so the provider's own count anchors the total.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tether.messages import Usage
from tether.models.base import ModelRequest

__all__ = ["TokenAccount", "TokenEstimator", "chars_estimator", "estimate_request"]

TokenEstimator = Callable[[str], int]


def chars_estimator(text: str) -> int:
    """About four characters a token; at least one token for any text."""
    return max(1, (len(text) + 3) // 4)


def estimate_request(
    request: ModelRequest,
    estimator: TokenEstimator = chars_estimator,
    cache: dict[int, tuple[object, int]] | None = None,
) -> int:
    """Estimated prompt tokens: each message and tool definition as its wire JSON.

    With ``cache`` (one per session and estimator), each message or tool object is encoded
    once, so counting a request costs O(new messages), not O(history), per step."""
    if cache is None:
        total = sum(estimator(json.dumps(m.wire(), ensure_ascii=False)) for m in request.messages)
        total += sum(estimator(json.dumps(t)) for t in request.tools)
        return total
    total = 0
    for m in request.messages:
        hit = cache.get(id(m))
        if hit is None or hit[0] is not m:  # holding the object keeps its id from being reused
            hit = cache[id(m)] = (m, estimator(json.dumps(m.wire(), ensure_ascii=False)))
        total += hit[1]
    for t in request.tools:
        hit = cache.get(id(t))
        if hit is None or hit[0] is not t:
            hit = cache[id(t)] = (t, estimator(json.dumps(t)))
        total += hit[1]
    return total


class TokenAccount:
    """Counts the tokens of each request of one session."""

    def __init__(self, estimator: TokenEstimator = chars_estimator) -> None:
        self.estimator = estimator
        self._anchor: tuple[int, int] | None = None  # (reported prompt tokens, our estimate then)
        self._last_estimate: int | None = None
        self._cache: dict[int, tuple[object, int]] = {}  # per object: its estimate, for this session

    def count(self, request: ModelRequest) -> int:
        """Tokens of ``request``: anchored on the last reported usage when there is one."""
        estimate = estimate_request(request, self.estimator, self._cache)
        self._last_estimate = estimate
        if self._anchor is None:
            return estimate
        reported, estimated_then = self._anchor
        return max(1, reported + (estimate - estimated_then))

    def observe(self, usage: Usage) -> None:
        """Record the usage the provider reported for the request counted last."""
        if usage.prompt_tokens > 0 and self._last_estimate is not None:
            self._anchor = (usage.prompt_tokens, self._last_estimate)
