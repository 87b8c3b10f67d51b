"""Token accounting: the provider's reported usage when present, a pluggable estimator otherwise.

No tokenizer is downloaded at run time. The default estimator counts about four characters
a token (the same rule the scripted models report, so tests are consistent). When a backend
reports ``prompt_tokens`` for a request, the next request is counted as that figure plus the
estimated difference between the two requests, so the provider's own count anchors the total.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tether.context.incremental import ItemMemo
from tether.messages import Usage
from tether.models.base import ModelRequest

__all__ = ["TokenAccount", "TokenEstimator", "chars_estimator", "estimate_request"]

TokenEstimator = Callable[[str], int]


def chars_estimator(text: str) -> int:
    """About four characters a token; at least one token for any text."""
    return max(1, (len(text) + 3) // 4)


def estimate_request(request: ModelRequest, estimator: TokenEstimator = chars_estimator) -> int:
    """Estimated prompt tokens: each message and tool definition as its wire JSON."""
    total = sum(estimator(json.dumps(m.wire(), ensure_ascii=False)) for m in request.messages)
    total += sum(estimator(json.dumps(t)) for t in request.tools)
    return total


class TokenAccount:
    """Counts the tokens of each request of one session."""

    def __init__(self, estimator: TokenEstimator = chars_estimator) -> None:
        self.estimator = estimator
        self._anchor: tuple[int, int] | None = None  # (reported prompt tokens, our estimate then)
        self._last_estimate: int | None = None
        # Each message and tool definition is estimated once per session (as estimate_request does).
        self._memo: ItemMemo[int] = ItemMemo(self._estimate_item)

    def _estimate_item(self, item: object) -> int:
        if isinstance(item, dict):
            return self.estimator(json.dumps(item))
        return self.estimator(json.dumps(item.wire(), ensure_ascii=False))  # type: ignore[attr-defined]

    def count(self, request: ModelRequest) -> int:
        """Tokens of ``request``: anchored on the last reported usage when there is one."""
        estimate = sum(self._memo.values((*request.messages, *request.tools)))
        self._last_estimate = estimate
        if self._anchor is None:
            return estimate
        reported, estimated_then = self._anchor
        return max(1, reported + (estimate - estimated_then))

    def observe(self, usage: Usage) -> None:
        """Record the usage the provider reported for the request counted last."""
        if usage.prompt_tokens > 0 and self._last_estimate is not None:
            self._anchor = (usage.prompt_tokens, self._last_estimate)
