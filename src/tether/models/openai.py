"""A backend for any server that speaks chat completions (OpenAI, vLLM, Ollama, llama.cpp …).

Transport: the official ``openai`` client's HTTP layer, ``httpx2`` (also a dependency of the
MCP SDK, so the default needs no extra): a client built once per backend (headers, timeout,
proxies from the environment) whose transport each POST is handed to directly; or, with
``transport="openai"``, the ``openai`` client itself (``pip install tether[openai]``, imported
on first use) through its low-level ``post``, for its auth hooks and proxy handling. Neither
path uses the typed ``chat.completions.create``: that re-validates and re-serialises the whole
history on every call, so its cost per step grows with the run. Here every message is
encoded to JSON once and its bytes reused, the tool list is encoded once per session, and
the body is joined from those pieces. Fixed fields come first and ``messages`` last, so
consecutive requests of a session share a byte-identical prefix (C1).

Contract of ``complete``: returns one assistant message (text and/or tool calls, several per
turn) with usage and cost, or raises ``ModelError``; never an empty or half-received answer.
Its finish is reported in tether's words (``meta["finish"]``: an answer cut at ``length``, a
``content_filter`` or a ``refusal`` never passes for a whole one, see ``finish_problem``), and
``timeout_s`` bounds each attempt whole, every byte of the body included. Timeouts, 429
(honouring ``Retry-After``), 5xx, connection errors and *unusable responses* are retried with
capped exponential backoff and jitter; other HTTP errors are not. Unusable means:
a stream that ends without ``[DONE]`` or without a finish reason (the server died mid-answer),
a stream event that is not JSON or is an ``error`` event, a whole response that is not a chat
completion, and a response with neither text nor tool calls. Once retries are spent the run
ends ``model_error``. Tool-call arguments are returned raw — malformed JSON and unknown tool
names are the host gate's business, which hands them back to the model as recoverable errors.

``reasoning_content`` (models that think aloud) is stored on the ``AssistantMessage`` and sent
back according to ``reasoning``:

- ``"drop"`` never resend it (the OpenAI protocol has no such field; DeepSeek R1 asked for this),
- ``"keep"`` resend every assistant message's reasoning unchanged (DeepSeek V4, Kimi K2, GLM-5
  return HTTP 400 when reasoning is missing from a tool-using conversation),
- ``"since_last_user"`` resend only the reasoning after the last user-role message (Qwen3's
  chat template keeps exactly that).

``reasoning=None`` picks the rule from the model name (``reasoning_rule``); unknown models drop.

The API key is read from the environment variable named by ``api_key_env``; it is never part
of ``repr``, error messages or traces (error text is scrubbed of it before it is raised).
"""

from __future__ import annotations

import functools
import json
import os
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel
from pydantic_core import to_json

from tether.errors import ConfigError
from tether.messages import AssistantMessage, Message, ToolCall, Usage, UserMessage
from tether.models.base import ModelRequest, ModelResponse, finish_of, repeated_prefix
from tether.models.pricing import DEFAULT_PRICES, Price, price_for
from tether.models.retrying import Retryable, RetryingBackend, RetryPolicy, status_error
from tether.models.sdk import sse_data

if TYPE_CHECKING:
    from tether.ratelimit import TokenBucket

__all__ = ["OpenAICompatible", "ReasoningRule", "RetryPolicy", "reasoning_rule"]

ReasoningRule = Literal["drop", "keep", "since_last_user"]
DeltaCallback = Callable[[str, str], None]  # (kind: "text" | "reasoning" | "tool_call", piece)

# Model-name prefixes -> how their servers want reasoning back (see the module docstring).
_REASONING_RULES: tuple[tuple[str, ReasoningRule], ...] = (
    ("deepseek-reasoner", "drop"),
    ("deepseek-r1", "drop"),
    ("deepseek", "keep"),
    ("kimi", "keep"),
    ("moonshot", "keep"),
    ("glm", "keep"),
    ("qwen3", "since_last_user"),
)


def reasoning_rule(model: str) -> ReasoningRule:
    """The documented default rule for a model name (case-insensitive prefix match)."""
    name = model.lower().rsplit("/", 1)[-1]
    for prefix, rule in _REASONING_RULES:
        if name.startswith(prefix):
            return rule
    return "drop"


def _dumps(value: Any) -> bytes:
    # pydantic-core's encoder: the bytes of json.dumps(value, ensure_ascii=False, separators=(",",
    # ":")) for strings, several times faster on long tool results.
    return to_json(value)


SHARD_CONNECTIONS = 16  # connections per pool shard (see _Lane)


class _Lane:
    """The one request this backend sends, on ``httpx2.AsyncClient`` transports.

    Each client is built once (its default and our headers merged, environment proxies and
    mounts resolved for this URL, its timeout); each POST then goes straight to the transport
    that client would pick, skipping what a chat-completions call never uses on the way: URL
    merging, the auth and redirect loops (no redirects are followed either way), event hooks
    and the cookie jar (cookies a server sets are not sent back). Timeouts, connection reuse,
    proxies and the mapping of transport errors to ``httpx2`` exceptions are the transport's,
    as they were. ``transport="openai"`` keeps the full client (its hooks, cookies, retries off).

    A large pool is split into shards of ``SHARD_CONNECTIONS`` (64 connections: four clients of
    16), each request going to the shard with the fewest requests in flight. httpcore's pool
    walks all of its connections and waiting requests every time a request starts or ends;
    with many concurrent sessions that walk, not the exchange, is what each call costs most,
    and a shard's walk is a quarter as long. The connection limit overall stays the same.
    """

    def __init__(self, clients: list[Any], url: str) -> None:
        import httpx2

        self.clients = clients
        self.url = httpx2.URL(url)
        self.transports = [client._transport_for_url(self.url) for client in clients]
        self.in_flight = [0] * len(clients)
        self.headers = clients[0].headers
        self.extensions = {"timeout": clients[0].timeout.as_dict()}
        self._request = httpx2.Request
        self._counted = _counted_stream()

    async def post(self, body: bytes) -> Any:
        request = self._request(
            "POST", self.url, headers=self.headers, content=body, extensions=self.extensions
        )
        in_flight = self.in_flight
        shard = 0 if len(in_flight) == 1 else min(range(len(in_flight)), key=in_flight.__getitem__)
        in_flight[shard] += 1
        try:
            response = await self.transports[shard].handle_async_request(request)
        except BaseException:
            in_flight[shard] -= 1
            raise
        response.stream = self._counted(response.stream, in_flight, shard)
        return response

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


@functools.cache
def _counted_stream() -> type:
    """A response body that gives its shard's in-flight count back once, when closed (built on
    first use: ``httpx2`` is imported lazily)."""
    import httpx2

    class Counted(httpx2.AsyncByteStream):
        def __init__(self, stream: Any, in_flight: list[int], shard: int) -> None:
            self._stream, self._in_flight, self._shard = stream, in_flight, shard

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._stream:
                yield chunk

        async def aclose(self) -> None:
            if self._in_flight is not None:
                self._in_flight[self._shard] -= 1
                self._in_flight = None  # type: ignore[assignment]
            await self._stream.aclose()

    return Counted


class OpenAICompatible(RetryingBackend):
    """A ``Model`` that talks to a chat-completions endpoint.

    ``model`` is the provider's model name; ``base_url`` defaults to ``$OPENAI_BASE_URL`` or
    OpenAI's; the key comes from ``$<api_key_env>`` (required only for api.openai.com; local
    servers get a placeholder). ``rate_limit`` is a shared ``TokenBucket`` each attempt draws
    from. ``prices`` maps model names to ``Price`` (default: ``DEFAULT_PRICES``). ``max_tokens``
    caps every response unless the request sets its own cap; ``extra_body`` adds fixed request
    fields (``temperature``, …), never those the backend writes itself. ``stream`` asks for a
    server-sent event stream; by default (``None``) only when ``on_delta`` is given, that is
    when someone reads the pieces as they arrive: a whole response costs the client less per
    step (one read, one parse) and gives the run the same message.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        stream: bool | None = None,
        stream_usage: bool = True,
        reasoning: ReasoningRule | None = None,
        timeout_s: float = 120.0,
        retry: RetryPolicy | None = None,
        prices: Mapping[str, Price] | None = None,
        rate_limit: TokenBucket | None = None,
        on_delta: DeltaCallback | None = None,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        rand: Callable[[], float] = random.random,
        cache_bytes: int = 8 * 1024 * 1024,
        transport: Literal["http", "openai"] = "http",
        max_connections: int = 64,
        max_tokens: int | None = None,
    ) -> None:
        if not model:
            raise ConfigError("model name is required")
        self.name = model
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip(
            "/"
        )
        self.api_key_env = api_key_env
        key = os.environ.get(api_key_env, "")
        if not key and urlsplit(self.base_url).hostname == "api.openai.com":
            raise ConfigError(f"set ${api_key_env} to use {self.base_url}")
        self._api_key = key or "no-key"  # local servers ignore it; never printed or traced
        if transport not in ("http", "openai"):
            raise ConfigError(f"unknown transport {transport!r}")
        self.transport = transport
        self.max_connections = max_connections
        if max_tokens is not None and max_tokens < 1:
            raise ConfigError("max_tokens must be at least 1")
        self.max_tokens = max_tokens  # a cap on every response unless the request sets its own
        reserved = {"model", "messages", "tools", "tool_choice", "stream", "stream_options", "max_tokens"}
        if clash := sorted(reserved & set(extra_body or {})):
            raise ConfigError(f"extra_body may not set {', '.join(clash)}: the backend writes those")
        self.stream = stream = on_delta is not None if stream is None else stream
        self.stream_usage = stream_usage
        self.reasoning: ReasoningRule = reasoning or reasoning_rule(model)
        if self.reasoning not in ("drop", "keep", "since_last_user"):
            raise ConfigError(f"unknown reasoning rule {self.reasoning!r}")
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.prices = DEFAULT_PRICES if prices is None else prices
        self.price = price_for(model, self.prices)
        self.rate_limit = rate_limit
        self.on_delta = on_delta
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self._sleep = sleep
        self._rand = rand
        self._client: Any = None
        self._client_loop: object = None  # the event loop the pool belongs to
        # Fixed request fields, encoded once: everything but messages (and the tool part).
        fixed: dict[str, Any] = {"model": model}
        if stream:
            fixed["stream"] = True
            if stream_usage:
                fixed["stream_options"] = {"include_usage": True}
        fixed.update(extra_body or {})
        self._fixed = _dumps(fixed)[1:-1]
        if cache_bytes < 0:
            raise ConfigError("cache_bytes must be 0 (no cache) or more")
        # Encoded messages by message identity, least recently used first; bounded by the sum
        # of the encoded sizes, not by a count, so long tool results cannot make it grow unseen.
        # Bytes and messages in two dicts (the same keys), not (message, bytes) pairs: no tuple
        # per message for the garbage collector to walk while it is cached.
        self._cache: dict[int, bytes] = {}
        self._held: dict[int, Message] = {}  # holding the message keeps its id from being reused
        self._cache_bytes = cache_bytes
        self._cache_used = 0
        self._tools: tuple[Any, bytes] = ((), b"")
        # Each conversation's last request (messages, their bytes, the bytes' total size), by the
        # identity of its first message, least recently used first; bounded by that total size.
        self._last: dict[int, tuple[tuple[Message, ...], list[bytes], int]] = {}
        self._last_bytes = 0
        self.calls = 0
        self.retries: list[dict[str, Any]] = []  # every retry taken: kind, attempt, delay

    def __repr__(self) -> str:
        return f"OpenAICompatible(model={self.model!r}, base_url={self.base_url!r})"

    # -- request body -------------------------------------------------------------------------

    def _message_bytes(self, message: Message, keep_reasoning: bool) -> bytes:
        key = id(message) * 2 + keep_reasoning
        cache, held = self._cache, self._held
        hit = cache.pop(key, None)
        if hit is not None:
            if held[key] is message:
                cache[key] = hit  # now the most recently used
                return hit
            self._cache_used -= len(hit)  # a stale entry for a reused id
            del held[key]
        wire = message.wire()
        if isinstance(message, AssistantMessage):
            if wire.get("content") is None and message.tool_calls:
                # A turn of tool calls only: "" rather than null, which llama.cpp's Python server
                # refuses (its validation wants a string; its chat templates read the field).
                wire["content"] = ""
            if keep_reasoning and message.reasoning:
                wire["reasoning_content"] = message.reasoning
        data = _dumps(wire)
        size = len(data)
        if size > self._cache_bytes:
            return data  # larger than the whole cache: encoded each time, never held
        cache[key] = data
        held[key] = message
        used = self._cache_used + size
        while used > self._cache_bytes:
            oldest = next(iter(cache))  # the least recently used first
            used -= len(cache.pop(oldest))
            del held[oldest]
        self._cache_used = used
        return data

    def _forget(self, message: Message) -> None:
        for key in (id(message) * 2, id(message) * 2 + 1):
            if self._held.get(key) is message:
                del self._held[key]
                self._cache_used -= len(self._cache.pop(key))

    def cache_stats(self) -> dict[str, int]:
        """The encoded-message cache now: ``entries``, ``bytes`` (encoded sizes summed; the
        messages it holds are not counted) and ``limit_bytes``; ``conversations`` and
        ``conversation_bytes``: the last requests kept per conversation (their bytes mostly
        the cache's own objects, counted again here; bounded by ``limit_bytes`` too)."""
        return {
            "entries": len(self._cache),
            "bytes": self._cache_used,
            "limit_bytes": self._cache_bytes,
            "conversations": len(self._last),
            "conversation_bytes": self._last_bytes,
        }

    def _tool_bytes(self, tools: tuple[dict[str, Any], ...]) -> bytes:
        if self._tools[0] is not tools:
            self._tools = (tools, _dumps(list(tools)))
        return self._tools[1]

    def encode(self, request: ModelRequest) -> bytes:
        """The request body: fixed fields, tools, tool_choice, then messages (append-only)."""
        parts = [b"{", self._fixed]
        if request.tools:
            parts += [
                b',"tools":',
                self._tool_bytes(request.tools),
                b',"tool_choice":',
                _dumps(request.tool_choice),
            ]
        limit = request.max_tokens if request.max_tokens is not None else self.max_tokens
        if limit is not None:
            parts += [b',"max_tokens":', str(int(limit)).encode()]
        parts.append(b',"messages":[')
        encoded = self._encoded_messages(request.messages)
        if encoded:  # the messages and their commas go into the one join: the body is copied once
            parts.append(encoded[0])
            for message in encoded[1:]:
                parts += (b",", message)
        parts.append(b"]}")
        return b"".join(parts)

    def _encoded_messages(self, messages: tuple[Message, ...]) -> list[bytes]:
        """Each message's bytes. Each conversation's previous request is kept (messages and
        bytes, found by its first message): when this request repeats it (an agent's next
        step: the same history, new messages after it, the status line replaced), only the new
        messages are looked up, so a step costs O(new messages), not O(history), however many
        conversations share the backend. Compared as a tuple: by identity for the same objects,
        by value for equal ones, whose bytes are equal. What these memos hold is bounded by
        ``cache_bytes`` too, the least recently used conversation dropped first."""
        rule = self.reasoning
        if rule == "since_last_user":  # which messages keep their reasoning moves with each user turn
            boundary = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=-1)
            return [
                self._message_bytes(m, i > boundary and isinstance(m, AssistantMessage) and bool(m.reasoning))
                for i, m in enumerate(messages)
            ]
        keep = rule == "keep"
        messages = tuple(messages)  # a list could change after this call; the memo must not
        if not messages:
            return []
        memos = self._last
        key = id(messages[0])
        memo = memos.pop(key, None)
        p, size = 0, 0
        if memo is not None:  # holding its messages keeps the key's id from being reused
            previous, previous_bytes, size = memo
            self._last_bytes -= size
            p = repeated_prefix(previous, messages)
            if p and p == len(previous) - 1:
                size -= len(previous_bytes[-1])
                self._forget(previous[-1])  # the replaced status line is not asked for again
            elif p == 0:
                size = 0
        encoded = previous_bytes[:p] if p else []
        for m in messages[p:]:
            data = self._message_bytes(m, keep and isinstance(m, AssistantMessage) and bool(m.reasoning))
            encoded.append(data)
            size += len(data)
        if size <= self._cache_bytes:
            memos[key] = (messages, encoded, size)
            self._last_bytes += size
            while self._last_bytes > self._cache_bytes:
                self._last_bytes -= memos.pop(next(iter(memos)))[2]  # the least recently used first
        return encoded

    # -- transport ----------------------------------------------------------------------------

    def _pool(self, connections: int | None = None, verify: Any = True, **headers: str) -> Any:
        import httpx2

        connections = self.max_connections if connections is None else connections
        return httpx2.AsyncClient(
            base_url=self.base_url + "/",
            headers=headers,
            timeout=self.timeout_s,
            verify=verify,
            # Keep every connection of a busy host alive: the default (20 kept of 100) makes
            # concurrent sessions reconnect on most calls.
            limits=httpx2.Limits(max_connections=connections, max_keepalive_connections=connections),
        )

    def _current_client(self) -> Any:
        """The pool of the running event loop, or None. A pool opened on another loop (an
        earlier ``asyncio.run``, ``Host.run_sync``) holds connections that loop owned: they
        cannot be used, nor closed, from this one, so it is dropped and a new one opened."""
        token = anyio.lowlevel.current_token()  # a new wrapper each call (anyio >= 4.11)
        loop = getattr(token, "native_token", token)
        if self._client is not None and self._client_loop is not loop:
            self._client = None
        self._client_loop = loop
        return self._client

    def _openai_client(self) -> Any:
        if self._current_client() is None:
            try:
                import openai
            except ImportError:  # pragma: no cover - depends on the installation
                raise ConfigError("transport='openai' needs: pip install 'tether[openai]'") from None
            # Our own pool, not the client's default wrapper: that one schedules its own close
            # on whatever event loop is running when it is garbage-collected.
            self._client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                max_retries=0,
                timeout=self.timeout_s,
                http_client=self._pool(),
            )
        return self._client

    def _http_client(self) -> _Lane:
        if self._current_client() is None:
            total = self.max_connections
            shards = max(1, total // SHARD_CONNECTIONS)
            sizes = [total // shards + (i < total % shards) for i in range(shards)]  # sums to total
            headers = {"Authorization": f"Bearer {self._api_key}", **self.headers}
            import httpx2

            tls = httpx2.create_ssl_context()  # what each client would build (certificates loaded once)
            pools = [self._pool(n, tls, **headers) for n in sizes]
            self._client = _Lane(pools, self.base_url + "/chat/completions")
        return self._client  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Close the connection pool (a later call opens a new one). Call it, or use
        ``async with``, when done: a pool belongs to the event loop that opened it."""
        client, self._client = self._client, None
        if client is not None:
            await (client.close() if self.transport == "openai" else client.aclose())

    async def __aenter__(self) -> OpenAICompatible:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, "[REDACTED]") if self._api_key != "no-key" else text

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One model turn; raises ``ModelError`` when retries are spent or the error is final.
        ``timeout_s`` bounds each attempt whole (see ``tether.models.retrying``)."""
        body = self.encode(request)
        return await self.send(body)

    async def _attempt(self, body: bytes) -> ModelResponse:
        import httpx2

        if self.transport == "openai":
            response = await self._send_openai(body)
        else:
            response = await self._send_http(body)
        try:
            # A server that ignores ``stream: true`` answers with one JSON document: read it whole.
            if self.stream and "json" not in response.headers.get("content-type", ""):
                return await self._read_stream(response)
            return self._parse(await response.aread())
        except httpx2.TimeoutException:
            raise Retryable("timeout", "the response stalled") from None
        except httpx2.TransportError as err:
            raise Retryable("connection", f"response interrupted: {type(err).__name__}") from None
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as err:
            # JSON that parsed but is not shaped like a chat completion (a list for an object, …).
            why = f"the answer is not shaped like a chat completion: {type(err).__name__}: {str(err)[:200]}"
            raise Retryable("unusable_response", why) from None
        finally:
            await response.aclose()

    async def _send_http(self, body: bytes) -> Any:
        """POST through the openai client's HTTP layer (httpx2), on its transport (``_Lane``)."""
        import httpx2

        try:
            response = await self._http_client().post(body)
        except httpx2.TimeoutException:
            raise Retryable("timeout", f"no response within {self.timeout_s:g}s") from None
        except httpx2.TransportError as err:
            raise Retryable("connection", type(err).__name__) from None
        if response.status_code >= 400:
            try:
                raw = await response.aread()
            finally:
                await response.aclose()
            self._status_error(response.status_code, _message_of(raw), response.headers)
        return response

    async def _send_openai(self, body: bytes) -> Any:
        """POST through the openai client's low-level ``post`` (its auth, headers, proxies)."""
        import httpx2
        import openai

        client = self._openai_client()
        try:
            return await client.post(
                "/chat/completions",
                cast_to=httpx2.Response,
                content=body,
                options={"headers": self.headers},
                stream=True,
            )
        except openai.APITimeoutError:
            raise Retryable("timeout", f"no response within {self.timeout_s:g}s") from None
        except openai.APIConnectionError as err:
            raise Retryable("connection", type(err.__cause__ or err).__name__) from None
        except openai.APIStatusError as err:
            self._status_error(err.status_code, _error_text(err), err.response.headers)
            raise  # unreachable: _status_error always raises

    def _status_error(self, status: int, message: str, headers: Mapping[str, str]) -> None:
        raise status_error(self.model, status, message, headers)

    # -- responses ----------------------------------------------------------------------------

    def _usage(self, raw: Mapping[str, Any] | None) -> Usage:
        if not raw:
            return Usage()
        details = raw.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") or raw.get("prompt_cache_hit_tokens") or 0
        extra: dict[str, Any] = {}
        reasoning = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if reasoning:
            extra["reasoning_tokens"] = reasoning
        return Usage(
            int(raw.get("prompt_tokens") or 0), int(raw.get("completion_tokens") or 0), int(cached), extra
        )

    def _response(
        self, message: AssistantMessage, usage: Usage, model: str, finish: str | None
    ) -> ModelResponse:
        cost = self.price.cost(usage) if self.price is not None else 0.0
        meta: dict[str, Any] = {
            "finish_reason": finish,
            "finish": finish_of(finish),
            "provider": "openai-chat",
        }
        if self.price is None:
            meta["unpriced"] = True
        return ModelResponse(
            message=message, usage=usage, model=model or self.model, cost_usd=cost, meta=meta
        )

    def _parse(self, raw: bytes) -> ModelResponse:
        try:
            data = json.loads(raw)
            choice = data["choices"][0]
            wire = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            why = f"response is not a chat completion: {raw[:200]!r}"
            raise Retryable("unusable_response", why) from None
        if not isinstance(wire, dict):
            raise Retryable("unusable_response", f"response has no message: {raw[:200]!r}")
        calls = tuple(
            ToolCall(
                id=str(c.get("id") or _call_id()),
                name=str((c.get("function") or {}).get("name") or ""),
                arguments=str((c.get("function") or {}).get("arguments") or ""),
            )
            for c in wire.get("tool_calls") or ()
        )
        reasoning = wire.get("reasoning_content") or wire.get("reasoning")
        content, finish = wire.get("content"), choice.get("finish_reason")
        if wire.get("refusal") and not calls:  # OpenAI's refusal field: the answer is a refusal
            content, finish = content or str(wire["refusal"]), "refusal"
        message = AssistantMessage(content=content, tool_calls=calls, reasoning=reasoning)
        _require_output(message, finish)
        return self._response(message, self._usage(data.get("usage")), data.get("model", ""), finish)

    async def _read_stream(self, response: Any) -> ModelResponse:
        text: list[str] = []
        thought: list[str] = []
        refused: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage_raw: Mapping[str, Any] | None = None
        model = ""
        finish: str | None = None
        done = False
        on_delta = self.on_delta
        async for line in sse_data(response):
            payload = line.strip()
            if payload == b"[DONE]":
                done = True
                break
            try:
                chunk = json.loads(payload)
            except ValueError:
                why = f"stream event is not JSON: {payload[:200]!r}"
                raise Retryable("stream_unreadable", why) from None
            if not isinstance(chunk, dict):
                raise Retryable("stream_unreadable", f"stream event is not an object: {payload[:200]!r}")
            if chunk.get("error"):
                why = f"the server reported an error mid-stream: {str(chunk['error'])[:500]}"
                raise Retryable("stream_error", why)
            model = chunk.get("model") or model
            if chunk.get("usage"):
                usage_raw = chunk["usage"]
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                finish = choice.get("finish_reason") or finish
                piece = delta.get("content")
                if piece:
                    text.append(piece)
                    if on_delta is not None:
                        on_delta("text", piece)
                piece = delta.get("refusal")
                if piece:
                    refused.append(piece)
                piece = delta.get("reasoning_content") or delta.get("reasoning")
                if piece:
                    thought.append(piece)
                    if on_delta is not None:
                        on_delta("reasoning", piece)
                for tc in delta.get("tool_calls") or ():
                    index = tc.get("index")
                    if index is None:
                        index = len(calls) if tc.get("id") not in {c["id"] for c in calls.values()} else 0
                    slot = calls.get(index)
                    if slot is None:
                        slot = calls[index] = {"id": "", "name": "", "arguments": []}
                    fn = tc.get("function") or {}
                    if tc.get("id"):
                        slot["id"] = tc["id"]
                    if fn.get("name"):
                        slot["name"] += fn["name"]
                        if on_delta is not None:
                            on_delta("tool_call", fn["name"])
                    if fn.get("arguments"):
                        slot["arguments"].append(fn["arguments"])
        if not done or finish is None:
            missing = " and ".join(
                part for part, seen in (("a finish reason", finish is not None), ("[DONE]", done)) if not seen
            )
            received = f"{len(''.join(text))} characters of text, {len(calls)} tool call(s)"
            raise Retryable("stream_incomplete", f"the stream ended without {missing} (after {received})")
        tool_calls = tuple(
            ToolCall(id=c["id"] or _call_id(), name=c["name"], arguments="".join(c["arguments"]))
            for _, c in sorted(calls.items())
        )
        if refused and not tool_calls:  # OpenAI's refusal deltas: the answer is a refusal
            finish = "refusal"
            text = text or refused
        message = AssistantMessage(
            content="".join(text) if text else None,
            tool_calls=tool_calls,
            reasoning="".join(thought) if thought else None,
        )
        _require_output(message, finish)
        return self._response(message, self._usage(usage_raw), model, finish)


def _require_output(message: AssistantMessage, finish: str | None) -> None:
    """A turn with neither text nor a tool call is no answer: never accepted as an empty one."""
    if message.tool_calls or (message.content and message.content.strip()):
        return
    why = f"the response has neither text nor tool calls (finish_reason {finish!r})"
    raise Retryable("empty_response", why)


def _call_id() -> str:
    # Some servers omit ids; a tool result must still name the call it answers.
    return "call_" + uuid.uuid4().hex[:16]


def _message_of(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw[:500].decode("utf-8", "replace")
    inner = body.get("error", body) if isinstance(body, dict) else body
    message = inner.get("message", inner) if isinstance(inner, dict) else inner
    return str(message)[:500]


def _error_text(err: Any) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        return str(message)[:500]
    return str(getattr(err, "message", err))[:500]
