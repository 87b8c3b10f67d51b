"""Token accounting: a pluggable estimator (about four characters a token by default),
anchored on the ``prompt_tokens`` a backend reported for the previous request.
"""

from __future__ import annotations

from tether.context._incremental import ItemMemo
from tether.core.messages import Usage
from tether.models._base import ModelRequest
from tether.models._estimate import TokenEstimator, chars_estimator, estimate_request, item_json

__all__ = ["TokenAccount", "TokenEstimator", "chars_estimator", "estimate_request"]


class TokenAccount:
    """Counts the tokens of each request of one session (``texts``: shared with its meter)."""

    def __init__(
        self, estimator: TokenEstimator = chars_estimator, texts: ItemMemo[bytes] | None = None
    ) -> None:
        self.estimator = estimator
        self._anchor: tuple[int, int] | None = None  # (reported prompt tokens, our estimate then)
        self._last_estimate: int | None = None
        self._texts = texts if texts is not None else ItemMemo(item_json)
        self._memo: ItemMemo[int] = ItemMemo(self._estimate_item)

    def _estimate_item(self, item: object) -> int:
        return self.estimator(self._texts.value(item).decode())

    def estimate(self, item: object) -> int:
        """The estimated tokens of one message or tool definition (computed once per object)."""
        return self._memo.value(item)

    def count(self, request: ModelRequest) -> int:
        """Tokens of ``request``: anchored on the last reported usage when there is one."""
        estimate = sum(self._memo.values((*request.tools, *request.messages)))
        self._last_estimate = estimate
        if self._anchor is None:
            return estimate
        reported, estimated_then = self._anchor
        return max(1, reported + (estimate - estimated_then))

    def observe(self, usage: Usage) -> None:
        """Record the usage the provider reported for the request counted last."""
        if usage.prompt_tokens > 0 and self._last_estimate is not None:
            self._anchor = (usage.prompt_tokens, self._last_estimate)
