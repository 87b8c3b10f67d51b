"""What every HTTP backend shares — chat completions, the Responses API, Anthropic Messages —
written once: the settings each constructor takes and checks (``BackendOptions``), the API key
from a named environment variable, the HTTP client of the running event loop (``LoopClient``,
on ``httpx2``: the HTTP layer of both official SDKs, and a declared dependency), one attempt's
read of the answer (whole or streamed), and the response with its finish, cost and meta.

Only public APIs of ``httpx2`` and of the SDKs are used: ``AsyncClient.send`` with a
``Request`` built here, and the SDK clients' documented low-level ``post``.
"""

from __future__ import annotations

import json
import os
import random
from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel

from tether.errors import ConfigError
from tether.messages import AssistantMessage, Usage
from tether.models.base import ModelRequest, ModelResponse, finish_of
from tether.models.pricing import DEFAULT_PRICES, Price, price_for
from tether.models.retrying import Retryable, RetryingBackend, RetryPolicy

if TYPE_CHECKING:
    from tether.ratelimit import TokenBucket

__all__ = ["BackendOptions", "DeltaCallback", "HTTPBackend", "LoopClient", "api_key", "events", "sse_data"]

DeltaCallback = Callable[[str, str], None]  # (kind: "text" | "reasoning" | "tool_call", piece)


class BackendOptions(TypedDict, total=False):
    """The options every backend takes (``HTTPBackend`` documents them and their defaults)."""

    base_url: str | None
    api_key_env: str | None
    stream: bool | None
    timeout_s: float
    retry: RetryPolicy | None
    prices: Mapping[str, Price] | None
    rate_limit: TokenBucket | None
    on_delta: DeltaCallback | None
    max_tokens: int | None
    extra_body: Mapping[str, Any] | None
    headers: Mapping[str, str] | None
    max_connections: int
    sleep: Callable[[float], Awaitable[None]]
    rand: Callable[[], float]


def api_key(env: str, base_url: str, official_host: str | None) -> str:
    """The key from ``$env``: required for the provider's own host, a placeholder for a local
    server. Raises ``ConfigError``."""
    key = os.environ.get(env, "")
    if not key and urlsplit(base_url).hostname == official_host:
        raise ConfigError(f"set ${env} to use {base_url}")
    return key or "no-key"


class LoopClient:
    """A client for the running event loop: a client opened on another loop (an earlier
    ``asyncio.run``, ``Host.run_sync``) holds connections that loop owned — they can be neither
    used nor closed from this one — so it is dropped and a new one built."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None
        self._loop: object = None

    def get(self) -> Any:
        token = anyio.lowlevel.current_token()  # a new wrapper each call (anyio >= 4.11)
        loop = getattr(token, "native_token", token)
        if self._client is None or self._loop is not loop:
            self._client = self._make()
            self._loop = loop
        return self._client

    @property
    def current(self) -> Any:
        """The client built last (None before the first call or after ``aclose``)."""
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose() if hasattr(client, "aclose") else await client.close()


class HTTPBackend(RetryingBackend):
    """A ``Model`` over HTTP. Each subclass names its protocol (``provider``), its default URL
    and key variable, the body fields it writes itself, and implements ``encode``, ``_post``,
    ``_whole`` and ``_read_stream``.

    ``model`` is the provider's model name; ``base_url`` defaults to ``$<base_url_env>`` or the
    provider's; the key comes from ``$<api_key_env>`` (required only for the provider's own
    host; local servers get a placeholder; never in ``repr``, errors or traces). ``stream`` asks
    for server-sent events; by default (``None``) only when ``on_delta`` reads the pieces as they
    arrive. ``max_tokens`` caps every response unless the request sets its own. ``extra_body``
    adds fixed request fields (``temperature`` …), never those the backend writes. ``timeout_s``
    bounds each attempt whole; ``retry`` is the retry policy; ``prices`` maps model names to
    ``Price`` (default ``DEFAULT_PRICES``); ``rate_limit`` is a shared ``TokenBucket`` each
    attempt draws from; ``headers`` are sent with every request; ``max_connections`` bounds the
    connection pool (all kept alive: a busy host's sessions do not reconnect).
    """

    provider: ClassVar[str]
    base_url_env: ClassVar[str]
    default_base_url: ClassVar[str]
    default_key_env: ClassVar[str]
    reserved: ClassVar[frozenset[str]]  # the body fields the backend writes itself

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str | None = None,
        stream: bool | None = None,
        timeout_s: float = 120.0,
        retry: RetryPolicy | None = None,
        prices: Mapping[str, Price] | None = None,
        rate_limit: TokenBucket | None = None,
        on_delta: DeltaCallback | None = None,
        max_tokens: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        max_connections: int = 64,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if not model:
            raise ConfigError("model name is required")
        self.name = self.model = model
        url = base_url or os.environ.get(self.base_url_env) or self.default_base_url
        self.base_url = url.rstrip("/")
        self.api_key_env = api_key_env or self.default_key_env
        self._api_key = api_key(self.api_key_env, self.base_url, urlsplit(self.default_base_url).hostname)
        self.stream = on_delta is not None if stream is None else stream
        if max_tokens is not None and max_tokens < 1:
            raise ConfigError("max_tokens must be at least 1")
        self.max_tokens = max_tokens
        if clash := sorted(self.reserved & set(extra_body or {})):
            raise ConfigError(f"extra_body may not set {', '.join(clash)}: the backend writes those")
        self.extra_body = dict(extra_body or {})
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.prices = DEFAULT_PRICES if prices is None else prices
        self.price = price_for(model, self.prices)
        self.rate_limit = rate_limit
        self.on_delta = on_delta
        self.headers = dict(headers or {})
        if max_connections < 1:
            raise ConfigError("max_connections must be at least 1")
        self.max_connections = max_connections
        self._sleep = sleep
        self._rand = rand
        self._client = LoopClient(self._open_client)
        self.calls = 0
        self.retries: list[dict[str, Any]] = []  # every retry taken: kind, attempt, delay

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, "[REDACTED]") if self._api_key != "no-key" else text

    async def aclose(self) -> None:
        """Close the connection pool (a later call opens a new one). Call it, or use
        ``async with``, when done: a pool belongs to the event loop that opened it."""
        await self._client.aclose()

    async def __aenter__(self) -> HTTPBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- clients ------------------------------------------------------------------------------

    @abstractmethod
    def _open_client(self) -> Any:
        """The client this backend posts through, for the running event loop."""

    def _http_client(
        self, headers: Mapping[str, str] | None = None, connections: int | None = None, verify: Any = True
    ) -> Any:
        """An ``httpx2.AsyncClient`` for ``base_url``: our timeout, every connection of the pool
        kept alive (the default, 20 kept of 100, makes concurrent sessions reconnect on most
        calls), proxies from the environment."""
        import httpx2

        n = self.max_connections if connections is None else connections
        return httpx2.AsyncClient(
            headers=dict(headers or {}),
            timeout=self.timeout_s,
            verify=verify,
            limits=httpx2.Limits(max_connections=n, max_keepalive_connections=n),
        )

    def _sdk_client(self, module: str, cls: str, extra: str) -> Any:
        """The official SDK's client (``module.cls``) on our HTTP client, its retries off
        (retries are tether's: one policy, traced). Raises ``ConfigError`` without the SDK."""
        import importlib

        try:
            sdk = importlib.import_module(module)
        except ImportError:  # pragma: no cover - depends on the installation
            raise ConfigError(f"provider {self.provider} needs: pip install 'tether[{extra}]'") from None
        return getattr(sdk, cls)(
            api_key=self._api_key,
            base_url=self.base_url,
            max_retries=0,
            timeout=self.timeout_s,
            default_headers=self.headers or None,
            # Our own client, not the SDK's default wrapper: that one schedules its own close on
            # whatever event loop is running when it is garbage-collected.
            http_client=self._http_client(),
        )

    # -- one call -----------------------------------------------------------------------------

    @abstractmethod
    def encode(self, request: ModelRequest) -> bytes:
        """The request's body as sent."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One model turn; raises ``ModelError`` when retries are spent or the error is final.
        ``timeout_s`` bounds each attempt whole (see ``tether.models.retrying``)."""
        response: ModelResponse = await self.send(self.encode(request))
        return response

    @abstractmethod
    async def _post(self, body: bytes) -> Any:
        """POST ``body``; the response with its body unread, or ``Retryable``/``ModelError``."""

    @abstractmethod
    def _whole(self, data: dict[str, Any]) -> ModelResponse:
        """A whole (not streamed) answer's JSON object as a response."""

    @abstractmethod
    async def _read_stream(self, response: Any) -> ModelResponse:
        """A streamed answer as a response."""

    async def _attempt(self, body: bytes) -> ModelResponse:
        import httpx2

        response = await self._post(body)
        try:
            # A server that ignores ``stream: true`` answers with one JSON document: read it whole.
            if self.stream and "json" not in response.headers.get("content-type", ""):
                return await self._read_stream(response)
            return self._whole(await _read_json(response))
        except httpx2.TimeoutException:
            raise Retryable("timeout", "the response stalled") from None
        except httpx2.TransportError as err:
            raise Retryable("connection", f"response interrupted: {type(err).__name__}") from None
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as err:
            # JSON that parsed but is not shaped as the protocol says (a list for an object, …).
            why = f"the answer is not shaped like a {self.provider} answer: {type(err).__name__}: {err}"
            raise Retryable("unusable_response", why[:300]) from None
        finally:
            await response.aclose()

    def _answer(
        self, message: AssistantMessage, usage: Usage, model: str, finish: str | None, **meta: Any
    ) -> ModelResponse:
        """The response: the provider's finish and tether's word for it, the cost by the price
        table (``unpriced`` when the model is in none), and any further ``meta``."""
        meta = {"finish_reason": finish, "finish": finish_of(finish), "provider": self.provider, **meta}
        if self.price is None:
            meta["unpriced"] = True
        cost = self.price.cost(usage) if self.price is not None else 0.0
        return ModelResponse(
            message=message, usage=usage, model=model or self.model, cost_usd=cost, meta=meta
        )


async def _read_json(response: Any) -> dict[str, Any]:
    """A whole answer's JSON object; anything else is a ``Retryable`` unusable response."""
    raw = await response.aread()
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise Retryable("unusable_response", f"the answer is not a JSON object: {raw[:200]!r}")
    return data


async def sse_data(response: Any) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of a server-sent event stream, split by hand from raw bytes
    (cheaper per chunk than decoding text lines; events are ASCII-framed, payloads UTF-8)."""
    pending = b""
    async for block in response.aiter_bytes():
        pending += block
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:]
    if pending.startswith(b"data:"):
        yield pending[5:]


async def events(response: Any) -> AsyncIterator[dict[str, Any]]:
    """Each stream event as a JSON object; one that is not is a ``Retryable`` unreadable stream."""
    async for payload in sse_data(response):
        try:
            event = json.loads(payload)
        except ValueError:
            raise Retryable("stream_unreadable", f"stream event is not JSON: {payload[:200]!r}") from None
        if not isinstance(event, dict):
            raise Retryable("stream_unreadable", f"stream event is not an object: {payload[:200]!r}")
        yield event
