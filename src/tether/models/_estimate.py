"""How many tokens a request is estimated to hold, with no tokenizer: about four characters a
token over each item's compact JSON. The context engine's accounting and the scripted test
models share it, so their figures agree."""

from __future__ import annotations

from collections.abc import Callable

from pydantic_core import to_json

from tether.models._base import ModelRequest

__all__ = ["TokenEstimator", "chars_estimator", "estimate_request", "item_json"]

TokenEstimator = Callable[[str], int]


def item_json(item: object) -> bytes:
    """An item of a request as compact JSON (UTF-8, non-ASCII kept): a message's wire form, or
    a tool definition (a dict) as it is. pydantic-core's encoder: several times faster than
    ``json.dumps`` on long tool results, the same bytes as ``json.dumps(..., separators=(",",
    ":"), ensure_ascii=False)`` for every string."""
    return to_json(item if isinstance(item, dict) else item.wire())  # type: ignore[attr-defined]


def chars_estimator(text: str) -> int:
    """About four characters a token; at least one token for any text."""
    return max(1, (len(text) + 3) // 4)


def estimate_request(request: ModelRequest, estimator: TokenEstimator = chars_estimator) -> int:
    """Estimated prompt tokens: each message and tool definition as its JSON (``item_json``)."""
    return sum(estimator(item_json(item).decode()) for item in (*request.tools, *request.messages))
