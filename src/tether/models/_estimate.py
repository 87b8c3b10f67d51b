"""How many tokens a request is estimated to hold, with no tokenizer: about four characters a
token over each item's compact JSON. The context engine's accounting and the scripted test
models share it, so their figures agree; a backend fills in with it the counts a server left
out of its answer (``unreported``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pydantic_core import to_json

from tether.core.messages import AssistantMessage
from tether.models._base import ModelRequest, ModelResponse

__all__ = ["TokenEstimator", "chars_estimator", "estimate_request", "item_json", "unreported"]

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


def _answer_text(message: AssistantMessage) -> str:
    calls = "".join(c.name + c.arguments for c in message.tool_calls)
    return (message.content or "") + (message.reasoning or "") + calls


def unreported(request: ModelRequest, response: ModelResponse) -> tuple[ModelResponse, list[str]]:
    """The response with each token count its server left out (none, or zero: no request is
    read, and no answer written, for nothing) estimated from the request and the answer as the
    context engine estimates them, and the names of the counts estimated (none: the response as
    it is). A server that reports no usage (a proxy that drops it, an old local server) would
    otherwise cost the run nothing: its token and cost budgets would never trip."""
    usage = response.usage
    prompt, completion = usage.prompt_tokens, usage.completion_tokens
    if prompt and completion:  # the usual case: both reported
        return response, []
    filled: list[str] = []
    if not prompt:
        prompt = estimate_request(request)
        filled.append("prompt_tokens")
    if not completion and (said := _answer_text(response.message)):
        completion = chars_estimator(said)
        filled.append("completion_tokens")
    if not filled:
        return response, []
    usage = replace(usage, prompt_tokens=prompt, completion_tokens=completion)
    return replace(response, usage=usage, meta={**response.meta, "usage_estimated": filled}), filled
