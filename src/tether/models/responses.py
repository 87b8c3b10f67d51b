"""A backend for the OpenAI Responses API, on the official ``openai`` SDK
(``pip install 'tether[openai]'``; imported on first use).

The request: the system prompt as ``instructions``; user turns, assistant turns, each tool
call as a ``function_call`` item and each result as a ``function_call_output`` item, in the
order of the trajectory; function tools (``strict`` off: the host validates arguments
itself). ``store`` is off by default — every request carries the whole conversation, nothing
is kept server-side — so reasoning items come back with their ``encrypted_content`` (asked
for with ``include`` when ``reasoning`` is set) and are sent back unchanged before the turn's
other items (``provider_items``), as the API requires for reasoning models across tool calls.
``prompt_cache_key`` defaults to a digest of the stable prefix (instructions and tool
names), so every step of every run of one agent lands on the same cache.

The answer: ``output_text`` parts, ``refusal`` parts (finish ``refusal``), ``function_call``
items (arguments returned raw), ``reasoning`` items (their summaries as the message's
reasoning). ``status`` ``completed`` is a normal end; ``incomplete`` carries its reason
(``max_output_tokens`` → length, ``content_filter`` → refused); any other is unknown: such a
final answer never ends the run ``accepted``. A ``response.failed`` or ``error`` event with a
server error, a stream that ends without a terminal event, 429 (``retry-after``) and 5xx are
retried (``tether.models.retrying``); other errors are final.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
from pydantic_core import to_json

from tether.errors import ConfigError, ModelError
from tether.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, Usage
from tether.models.base import ModelRequest, ModelResponse, finish_of
from tether.models.pricing import DEFAULT_PRICES, Price, price_for
from tether.models.retrying import Retryable, RetryingBackend, RetryPolicy
from tether.models.sdk import (
    LoopClient,
    api_key,
    body_error,
    cache_encoded,
    events,
    httpx2_errors,
    post,
    read_json,
)

if TYPE_CHECKING:
    from tether.ratelimit import TokenBucket

__all__ = ["OpenAIResponses"]

PROVIDER = "openai-responses"
DeltaCallback = Callable[[str, str], None]
_RETRYABLE_CODES = frozenset({"server_error", "rate_limit_exceeded", "timeout", "overloaded"})
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class OpenAIResponses(RetryingBackend):
    """A ``Model`` on the OpenAI Responses API (``POST {base_url}/responses``).

    ``base_url`` defaults to ``$OPENAI_BASE_URL`` or OpenAI's; the key comes from
    ``$<api_key_env>`` (required for api.openai.com only). ``reasoning`` is the API's reasoning
    setting (``{"effort": "low"}`` …); ``store`` keeps responses server-side (off);
    ``prompt_cache_key`` overrides the derived one. The rest as ``OpenAICompatible``.
    """

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        stream: bool | None = None,
        timeout_s: float = 120.0,
        retry: RetryPolicy | None = None,
        prices: Mapping[str, Price] | None = None,
        rate_limit: TokenBucket | None = None,
        on_delta: DeltaCallback | None = None,
        max_tokens: int | None = None,
        reasoning: Mapping[str, Any] | None = None,
        store: bool = False,
        prompt_cache_key: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        import os

        if not model:
            raise ConfigError("model name is required")
        self.name = self.model = model
        url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.base_url = url.rstrip("/")
        self.api_key_env = api_key_env
        self._api_key = api_key(api_key_env, self.base_url, "api.openai.com")
        self.stream = on_delta is not None if stream is None else stream
        if max_tokens is not None and max_tokens < 1:
            raise ConfigError("max_tokens must be at least 1")
        self.max_tokens = max_tokens
        reserved = {"model", "input", "instructions", "tools", "tool_choice", "stream", "max_output_tokens"}
        if clash := sorted(reserved & set(extra_body or {})):
            raise ConfigError(f"extra_body may not set {', '.join(clash)}: the backend writes those")
        self.extra_body = dict(extra_body or {})
        self.reasoning = dict(reasoning) if reasoning else None
        self.store = store
        self.prompt_cache_key = prompt_cache_key
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.prices = DEFAULT_PRICES if prices is None else prices
        self.price = price_for(model, self.prices)
        self.rate_limit = rate_limit
        self.on_delta = on_delta
        self.headers = dict(headers or {})
        self._sleep = sleep
        self._rand = rand
        self._client = LoopClient(self._make_client)
        self._items = cache_encoded(self._message_items)
        self._tools: tuple[Any, list[dict[str, Any]], str] = ((), [], "")
        self.calls = 0
        self.retries: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"OpenAIResponses(model={self.model!r}, base_url={self.base_url!r})"

    def _make_client(self) -> Any:
        try:
            import openai
        except ImportError:  # pragma: no cover - depends on the installation
            raise ConfigError("provider openai-responses needs: pip install 'tether[openai]'") from None
        return openai.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self.base_url,
            max_retries=0,  # retries are tether's: one policy, traced
            timeout=self.timeout_s,
            default_headers=self.headers or None,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, "[REDACTED]") if self._api_key != "no-key" else text

    # -- request ------------------------------------------------------------------------------

    def _tool_defs(self, tools: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
        if self._tools[0] is not tools:
            defs = []
            for t in tools:
                fn = t.get("function", t)
                entry: dict[str, Any] = {"type": "function", "name": fn["name"]}
                if fn.get("description"):
                    entry["description"] = fn["description"]
                entry["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
                entry["strict"] = False
                defs.append(entry)
            self._tools = (tools, defs, ",".join(d["name"] for d in defs))
        return self._tools[1]

    @staticmethod
    def _message_items(message: Message) -> list[dict[str, Any]]:
        """A message as Responses input items; built once per message (``cache_encoded``)."""
        if isinstance(message, ToolMessage):
            return [
                {"type": "function_call_output", "call_id": message.tool_call_id, "output": message.content}
            ]
        if isinstance(message, AssistantMessage):
            items: list[dict[str, Any]] = [
                {k: v for k, v in item.items() if k != "provider"}
                for item in message.provider_items
                if item.get("provider") == PROVIDER
            ]
            if message.content:
                items.append({"role": "assistant", "content": message.content})
            for call in message.tool_calls:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }
                )
            return items
        return [{"role": "user", "content": message.content}]

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The request's body (the Responses API's ``POST /responses``)."""
        instructions = [m.content for m in request.messages if isinstance(m, SystemMessage)]
        items: list[dict[str, Any]] = []
        for m in request.messages:
            if not isinstance(m, SystemMessage):
                items.extend(self._items(m))
        params: dict[str, Any] = {"model": self.model}
        if instructions:
            params["instructions"] = "\n\n".join(instructions)
        if request.tools:
            params["tools"] = self._tool_defs(request.tools)
            params["tool_choice"] = request.tool_choice
        limit = request.max_tokens if request.max_tokens is not None else self.max_tokens
        if limit is not None:
            params["max_output_tokens"] = limit
        params["store"] = self.store
        if self.reasoning is not None:
            params["reasoning"] = self.reasoning
            if not self.store:
                params["include"] = ["reasoning.encrypted_content"]
        key = self.prompt_cache_key
        if key is None:
            stable = (params.get("instructions", "") + "\x00" + self._tools[2]).encode()
            key = "tether-" + hashlib.sha256(stable).hexdigest()[:24]
        params["prompt_cache_key"] = key
        params.update(self.extra_body)
        if self.stream:
            params["stream"] = True
        params["input"] = items  # last: the byte prefix holds across turns
        return params

    # -- call ---------------------------------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One model turn; raises ``ModelError`` when retries are spent or the error is final.
        ``timeout_s`` bounds each attempt whole (see ``tether.models.retrying``)."""
        body = to_json(self.body(request))
        return await self.send(body)

    async def _attempt(self, body: bytes) -> ModelResponse:
        import openai

        response = await post(openai, self._client.get(), "/responses", body, self.model)
        try:
            if self.stream and "json" not in response.headers.get("content-type", ""):
                return await self._read_stream(response)
            data = await read_json(response)
            if "error" in data and "output" not in data:
                raise self._failure(data["error"] or {}, "the server answered an error")
            return self._parse(data, [])
        except httpx2_errors() as err:
            raise body_error(err) from None
        finally:
            await response.aclose()

    def _failure(self, error: Mapping[str, Any], what: str) -> Exception:
        code = str(error.get("code") or error.get("type") or "") if isinstance(error, Mapping) else ""
        message = str(error.get("message", "") if isinstance(error, Mapping) else error)[:300]
        why = f"{what}: {code or 'error'}: {message}"
        if code in _RETRYABLE_CODES or not code:
            return Retryable("server_error", why)
        return ModelError(f"{self.model}: {why}")

    async def _read_stream(self, response: Any) -> ModelResponse:
        done_items: list[dict[str, Any]] = []
        final: dict[str, Any] | None = None
        on_delta = self.on_delta
        async for event in events(response):
            kind = event.get("type")
            if kind == "response.output_text.delta":
                if on_delta is not None:
                    on_delta("text", str(event.get("delta", "")))
            elif kind == "response.reasoning_summary_text.delta":
                if on_delta is not None:
                    on_delta("reasoning", str(event.get("delta", "")))
            elif kind == "response.output_item.added":
                item = event.get("item") or {}
                if on_delta is not None and item.get("type") == "function_call":
                    on_delta("tool_call", str(item.get("name", "")))
            elif kind == "response.output_item.done":
                done_items.append(event.get("item") or {})
            elif kind in _TERMINAL:
                final = event.get("response") or {}
                break
            elif kind == "error":
                raise self._failure(event, "the server reported an error mid-stream")
        if final is None:
            why = f"the stream ended without a terminal event ({len(done_items)} items)"
            raise Retryable("stream_incomplete", why)
        return self._parse(final, done_items)

    def _parse(self, data: dict[str, Any], streamed: list[dict[str, Any]]) -> ModelResponse:
        status = data.get("status")
        if status == "failed":
            raise self._failure(data.get("error") or {}, "the response failed")
        output = data.get("output") or streamed  # a server that sends an empty final output
        text: list[str] = []
        refusal: list[str] = []
        calls: list[ToolCall] = []
        kept: list[dict[str, Any]] = []
        thought: list[str] = []
        for item in output:
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or ():
                    if part.get("type") == "output_text":
                        text.append(part.get("text", ""))
                    elif part.get("type") == "refusal":
                        refusal.append(part.get("refusal", ""))
            elif kind == "function_call":
                call_id = item.get("call_id") or "call_" + uuid.uuid4().hex[:16]
                calls.append(ToolCall(call_id, str(item.get("name") or ""), str(item.get("arguments") or "")))
            elif kind == "reasoning":
                kept.append({"provider": PROVIDER, **{k: v for k, v in item.items() if k != "status"}})
                thought.extend(str(s.get("text", "")) for s in item.get("summary") or ())
        raw: str | None = status
        if status == "incomplete":
            raw = (data.get("incomplete_details") or {}).get("reason") or "incomplete"
        elif refusal and not calls:
            raw = "refusal"
        content = "".join(text) or "".join(refusal) or None
        message = AssistantMessage(
            content=content,
            tool_calls=tuple(calls),
            reasoning="".join(thought) or None,
            provider_items=tuple(kept),
        )
        if not calls and not (content and content.strip()) and finish_of(raw) == "stop":
            raise Retryable("empty_response", f"the response has neither text nor tool calls ({raw!r})")
        usage = _usage(data.get("usage") or {})
        meta: dict[str, Any] = {"finish_reason": raw, "finish": finish_of(raw), "provider": PROVIDER}
        if self.price is None:
            meta["unpriced"] = True
        cost = self.price.cost(usage) if self.price is not None else 0.0
        model = str(data.get("model") or self.model)
        return ModelResponse(message=message, usage=usage, model=model, cost_usd=cost, meta=meta)


def _usage(raw: Mapping[str, Any]) -> Usage:
    cached = (raw.get("input_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (raw.get("output_tokens_details") or {}).get("reasoning_tokens") or 0
    extra = {"reasoning_tokens": reasoning} if reasoning else {}
    return Usage(int(raw.get("input_tokens") or 0), int(raw.get("output_tokens") or 0), int(cached), extra)
