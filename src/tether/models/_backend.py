"""What every HTTP backend shares — chat completions, the Responses API, Anthropic Messages —
written once: the settings each constructor takes and checks (``BackendOptions``), the API key
from a named environment variable, the connection pool of the running event loop
(``LoopClient``), the exchange, one attempt's read of the answer (whole or streamed), and the
response with its finish, cost and meta.

Two transports, the same bytes on the wire and the same answer:

``"http"`` (the chat-completions backend's default)
    ``httpx2`` — the HTTP layer of both official SDKs, and a dependency of tether — through its
    public API (``_Lane``): each POST a ``Request`` of headers merged once and the body encoded
    once, handed to ``AsyncClient.send``. Needs no SDK.
``"sdk"`` (the Anthropic and Responses backends' default: they speak through the vendor's
    official SDK unless ``transport="http"`` asks for the faster path)
    The provider's official SDK client (``openai`` or ``anthropic``, an extra, imported on first
    use) through its documented low-level ``post``: its auth hooks, headers and status-error
    mapping. Its request building costs each call about as much again as the rest of the
    client's work: ``bench/backends.py`` profiles and measures both (``tether_sdk``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import random
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypedDict
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel

from tether.core.messages import AssistantMessage, Usage
from tether.errors import ConfigError
from tether.models._base import (
    ModelRequest,
    ModelResponse,
    finish_of,
    rejoined,
    shown_call_names,
    unique_call_ids,
)
from tether.models._body import MAX_RESPONSE_BYTES, _Peeked, _read_json
from tether.models._estimate import unreported
from tether.models._failures import Failures, Reported, is_error, unusable
from tether.models._headers import api_key, header_values
from tether.models._json import written
from tether.models._pricing import DEFAULT_PRICES, Price, price_for
from tether.models._retrying import Retryable, RetryingBackend, RetryPolicy, billed
from tether.models._sse import status_error

if TYPE_CHECKING:
    from tether.core.ratelimit import TokenBucket

__all__ = [
    "SHARD_CONNECTIONS",
    "BackendOptions",
    "DeltaCallback",
    "HTTPBackend",
    "LoopClient",
    "OpenAIBackend",
    "Transport",
    "api_key",
    "arguments_text",
]

# (kind: "text" | "reasoning" | "tool_call", piece); ("discard", why): the pieces since the last
# "discard" were an attempt's that failed, no answer (``_retrying.RetryingBackend._discard``).
DeltaCallback = Callable[[str, str], None]
# "openai" and "anthropic" name the SDK of the backend that speaks through it: the same as "sdk".
Transport = Literal["http", "sdk", "openai", "anthropic"]
SHARD_CONNECTIONS = 16  # connections per pool shard (see _Lane)


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
    max_response_bytes: int
    transport: Transport
    sleep: Callable[[float], Awaitable[None]]
    rand: Callable[[], float]


def key_missing(backend: type[HTTPBackend], env: str | None, base_url: str | None) -> str | None:
    """What ``api_key`` would refuse for a backend of this class, said before it is built (``tether
    agent check``): the key's variable unset while the URL is the provider's own. None if fine."""
    env = env or backend.default_key_env
    url = (base_url or os.environ.get(backend.base_url_env) or backend.default_base_url).rstrip("/")
    try:
        api_key(env, url, urlsplit(backend.default_base_url).hostname)
    except ConfigError as err:
        return str(err)
    return None


_read_key = api_key  # ``HTTPBackend.__init__`` has a parameter of that name (refused, as SDKs take it)


class LoopClient:
    """A client for the running event loop: a client opened on another loop (an earlier
    ``asyncio.run``, ``Host.run_sync``) holds connections that loop owned — they can be neither
    used nor closed from this one — so it is dropped and a new one built."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None
        self._loop: object = None

    def get(self) -> Any:
        try:
            # On asyncio, the loop anyio's token wraps (its ``native_token``), read directly:
            # ``current_token`` detects the library and builds a new wrapper on each call.
            loop: object = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio): its token
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


_TLS: list[Any] = []  # the default TLS context, built by the first pool of this process


def _default_tls() -> Any:
    """The TLS context every client of every ``"http"`` pool of this process verifies with:
    ``httpx2``'s default (the system's or ``SSL_CERT_FILE``'s certificates, read when the first
    pool opens). Loading the certificates takes 20-40 ms of CPU; a pool is opened per model and
    event loop, and a durable worker builds its app's model for each run, so it was paid once a
    run (``bench/distributed.py``). A context is safe to share between threads and pools: each
    connection only sets the same ALPN list on it (HTTP/1.1) and wraps its socket. The SDK
    transport's client gets it too."""
    import httpx2

    if not _TLS:
        _TLS.append(httpx2.create_ssl_context())  # two threads racing both build one; either serves
    return _TLS[0]


class _Lane:
    """The ``"http"`` transport: one request, through ``httpx2``'s public API, over a pool split
    into shards of ``SHARD_CONNECTIONS`` (64 connections: four clients of 16), taken in turn.

    httpcore's pool walks all of its connections each time a request starts or ends, and asks
    each idle one whether it has expired (a poll of its socket): with a large pool that walk,
    not the exchange, is what a call costs most, and a shard's walk is a quarter as long.
    ``bench/overhead.py`` measures it (``tether_one_pool``, ``after_burst``): once a burst has
    opened every connection, a sequential 20-step session costs about half as much again per
    step on one pool of 64 as on four of 16. The connection limit overall stays the same.

    Each shard's headers (its defaults, the protocol's, ours) are merged once; each POST is a
    ``Request`` of those headers and the body handed to ``AsyncClient.send``, which picks the
    transport (environment proxies and mounts), applies the timeout and maps transport errors,
    as ``post`` would; what ``post`` adds and a model call never uses — URL and header merging
    per call, the cookie jar (cookies a server sets are not sent back) — is skipped."""

    def __init__(self, clients: list[Any], url: str) -> None:
        import httpx2

        self.clients = clients
        self.url = httpx2.URL(url)
        self.headers = clients[0].headers
        self._request = httpx2.Request
        self._stream = httpx2.ByteStream
        self._turn = 0
        # The headers ``Request(content=body)`` writes (the merged ones, ``Host`` first and
        # ``Content-Length`` next), prepared once for a sample body: each POST copies them,
        # sets the body's length in place and passes the body as its stream, so the request
        # is not prepared again (its headers rebuilt and normalised) nor its body copied.
        # Headers that set the length or the transfer coding themselves take the full path.
        template = httpx2.Request("POST", self.url, headers=self.headers, content=b"{}").headers
        own = {k.lower() for k in self.headers}
        self._prepared = None if own & {"content-length", "transfer-encoding"} else template
        self._headers = httpx2.Headers

    async def post(self, body: bytes) -> Any:
        if self._prepared is None:
            request = self._request("POST", self.url, headers=self.headers, content=body)
        else:
            headers = self._headers(self._prepared)
            headers["Content-Length"] = str(len(body))
            request = self._request("POST", self.url, headers=headers, stream=self._stream(body))
        clients = self.clients
        self._turn = turn = (self._turn + 1) % len(clients)
        return await clients[turn].send(request, stream=True)

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


class HTTPBackend(RetryingBackend):
    """A ``Model`` over HTTP. Each subclass names its protocol (``provider``, ``path``, ``sdk``),
    its default URL and key variable, the body fields it writes itself, and implements
    ``encode``, ``_whole`` and ``_read_stream`` (and ``_auth_headers`` where its protocol does
    not take a bearer token).

    ``model`` is the provider's model name; ``base_url`` defaults to ``$<base_url_env>`` or the
    provider's; the key comes from ``$<api_key_env>`` (required only for the provider's own
    host; local servers get a placeholder; never in ``repr``, errors or traces). ``stream`` asks
    for server-sent events; by default (``None``) only when ``on_delta`` reads the pieces as they
    arrive. ``max_tokens`` caps every response unless the request sets its own. ``extra_body``
    adds fixed request fields (``temperature`` …), never those the backend writes. ``timeout_s``
    bounds each attempt whole; ``retry`` is the retry policy; ``prices`` maps model names to
    ``Price`` (default ``DEFAULT_PRICES``); ``rate_limit`` is a shared ``TokenBucket`` each
    attempt draws from; ``headers`` are sent with every request; ``max_connections`` bounds the
    connection pool (all kept alive: a busy host's sessions do not reconnect); ``transport`` is
    ``"http"`` or ``"sdk"`` (see the module docstring; default ``default_transport``);
    ``max_response_bytes`` bounds one answer, decoded (a larger one is a ``ModelError``).
    Every failure is sorted by ``tether.models._failures``.
    """

    provider: ClassVar[str]
    path: ClassVar[str]  # the endpoint, after base_url
    sdk: ClassVar[tuple[str, str]]  # the official SDK's module and client class
    default_transport: ClassVar[Literal["http", "sdk"]] = "http"
    shard_connections: int = SHARD_CONNECTIONS  # connections per pool shard (see _Lane)
    base_url_env: ClassVar[str]
    default_base_url: ClassVar[str]
    default_key_env: ClassVar[str]
    reserved: ClassVar[frozenset[str]]  # the body fields the backend writes itself
    answer_key: ClassVar[str]  # the field a whole answer has (one without it may be an error body)

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
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        transport: Transport | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        rand: Callable[[], float] = random.random,
        api_key: None = None,
    ) -> None:
        if not model:
            raise ConfigError("model name is required")
        if api_key is not None:  # as the official SDKs take it; here a key is read from a variable
            raise ConfigError(
                "api_key is not taken: put the key in an environment variable and name it, "
                f"api_key_env='MY_KEY' (default ${self.default_key_env}); a key is never held in a "
                "model's settings, which runs record and traces show"
            )
        transport = transport or self.default_transport
        if transport not in ("http", "sdk", self.sdk[0]):
            raise ConfigError(f"unknown transport {transport!r}: 'http' or 'sdk'")
        self.transport: Literal["http", "sdk"] = "http" if transport == "http" else "sdk"
        if self.transport == "sdk" and importlib.util.find_spec(self.sdk[0]) is None:
            raise ConfigError(
                f"provider {self.provider} with transport='sdk' needs the {self.sdk[0]} SDK: "
                f"pip install 'tether[{self.sdk[0]}]', or use transport='http'"
            )
        self.name = self.model = model
        url = base_url or os.environ.get(self.base_url_env) or self.default_base_url
        self.base_url = url.rstrip("/")
        # Where the URL came from, for a person told it could not be reached: given, $VAR, default.
        self.base_url_from = (
            "given" if base_url else f"${self.base_url_env}" if url != self.default_base_url else ""
        )
        self.api_key_env = api_key_env or self.default_key_env
        self._api_key = _read_key(self.api_key_env, self.base_url, urlsplit(self.default_base_url).hostname)
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
        self.headers = header_values(headers)
        if max_connections < 1:
            raise ConfigError("max_connections must be at least 1")
        self.max_connections = max_connections
        if max_response_bytes < 1:
            raise ConfigError("max_response_bytes must be at least 1")
        self.max_response_bytes = max_response_bytes
        key_set = bool(os.environ.get(self.api_key_env))
        self.failures = Failures(model, self.api_key_env, key_set, self.base_url + self.path)
        self._sleep = sleep
        self._rand = rand
        self._sdk_loaded: Any = None
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

    # -- the exchange -------------------------------------------------------------------------

    def _auth_headers(self) -> dict[str, str]:
        """The protocol's own headers on the ``"http"`` transport (the key, a version …)."""
        return {"Authorization": f"Bearer {self._api_key}"}

    def _open_client(self) -> Any:
        """The pool of the running event loop: the SDK client, or a ``_Lane``."""
        if self.transport == "sdk":
            return self._sdk_client()
        headers = {**self._auth_headers(), "Content-Type": "application/json", **self.headers}
        total = self.max_connections
        shards = max(1, total // self.shard_connections)
        sizes = [total // shards + (i < total % shards) for i in range(shards)]  # sums to total
        tls = _default_tls()
        clients = [self._http_client(headers, n, tls) for n in sizes]
        return _Lane(clients, self.base_url + self.path)

    def _http_client(
        self,
        headers: Mapping[str, str] | None = None,
        connections: int | None = None,
        verify: Any = True,
        hooks: Mapping[str, list[Any]] | None = None,
    ) -> Any:
        """An ``httpx2.AsyncClient``: our timeout, every connection of the pool kept alive (the
        default, 20 kept of 100, makes concurrent sessions reconnect on most calls), proxies
        from the environment."""
        import httpx2

        n = self.max_connections if connections is None else connections
        return httpx2.AsyncClient(
            headers=dict(headers or {}),
            timeout=self.timeout_s,
            verify=verify,
            limits=httpx2.Limits(max_connections=n, max_keepalive_connections=n),
            event_hooks=dict(hooks or {}),
        )

    def _sdk_module(self) -> Any:
        """The SDK's module, imported on first use and kept (not looked up again per call)."""
        if self._sdk_loaded is None:
            try:
                self._sdk_loaded = importlib.import_module(self.sdk[0])
            except ImportError:  # pragma: no cover - depends on the installation
                hint = f"pip install 'tether[{self.sdk[0]}]'"
                raise ConfigError(f"provider {self.provider} with transport='sdk' needs: {hint}") from None
        return self._sdk_loaded

    def _sdk_client(self) -> Any:
        """The official SDK's client on our HTTP client, its retries off (retries are tether's:
        one policy, traced)."""
        return getattr(self._sdk_module(), self.sdk[1])(
            api_key=self._api_key,
            base_url=self.base_url,
            max_retries=0,
            timeout=self.timeout_s,
            default_headers=self.headers or None,
            # Our own client, not the SDK's default wrapper: that one schedules its own close on
            # whatever event loop is running when it is garbage-collected.
            # Its error answers are read by ``status_error`` as they arrive (the hook runs before
            # the SDK reads the body whole, without bound: a gzip bomb as a 500 …).
            http_client=self._http_client(verify=_default_tls(), hooks={"response": [self._sdk_error_hook]}),
        )

    async def _sdk_error_hook(self, response: Any) -> None:
        """The SDK transport's answers as they arrive: an error status raises its error here."""
        if not 200 <= response.status_code < 300:
            raise await status_error(response, self.failures)

    async def _post(self, body: bytes) -> Any:
        """POST ``body``; the response with its body unread, or ``Retryable``/``ModelError``."""
        if self.transport == "sdk":
            from tether.models._sdk import post

            client = self._client.get()
            return await post(self._sdk_module(), client, self.path, body, self.failures)
        import httpx2

        try:
            response = await self._client.get().post(body)
        except httpx2.RequestError as err:
            raise self.failures.transport(err, "before the answer") from None
        if not 200 <= response.status_code < 300:
            raise await status_error(response, self.failures)
        return response

    # -- one call -----------------------------------------------------------------------------

    @abstractmethod
    def encode(self, request: ModelRequest) -> bytes:
        """The request's body as sent."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One model turn; raises ``ModelError`` when retries are spent or the error is final.
        ``timeout_s`` bounds each attempt whole (see ``tether.models._retrying``): the client
        is opened first, outside it (the first call imports the SDK, seconds on a busy host).
        Token counts the server left out are estimated (``_estimate.unreported``; the
        response's ``meta["usage_estimated"]`` names them), so budgets still count the turn; a
        call whose id an earlier call has gets a new one (``_base.unique_call_ids``); a name
        longer than any offered is kept bounded (``_base.shown_call_names``)."""
        body = self.encode(request)
        self._client.get()

        def settle(response: ModelResponse) -> ModelResponse:
            response = unique_call_ids(request.messages, response)  # an id an earlier call has
            response = shown_call_names(request, response)  # a name no offered tool's, of 50 KB
            response, estimated = unreported(request, response)
            if estimated and (price := self.price_of(response.model)) is not None:
                # counts the server left out, estimated: priced too (looked up only then: an
                # answer naming another model is a table search)
                response = replace(response, cost_usd=price.cost(response.usage))
            return response

        return await self.send(body, settle)

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
            if response.status_code in _PARTIAL:  # a range, or a delta, of an answer: never one whole
                said = f"HTTP {response.status_code} {_PARTIAL[response.status_code]}"
                raise unusable(f"{said}: a part of an answer, when the request asked for the whole")
            if (undecodable := self.failures.encoding(response)) is not None:
                raise undecodable
            # Read as the answer is, not as it was asked for or labelled: a server that ignores
            # ``stream`` answers with one JSON document, or streams unasked, and labels either
            # as it likes (events as JSON, a document as a stream, ``text/plain``, none): the
            # first bytes tell.
            labelled = "event-stream" in response.headers.get("content-type", "")
            body_of, streamed = await _Peeked.open(response, labelled, self.max_response_bytes)
            if streamed:
                return await self._read_stream(body_of)
            data = await _read_json(body_of, self.max_response_bytes)
            if is_error(data):  # an error body with status 200, or an error beside a cut answer
                raise self.failures.reported(data, "in a 200 answer")
            if self.answer_key not in data:
                raise unusable(f"the answer has no {self.answer_key!r}: {str(data)[:200]}")
            return self._whole(data)
        except Reported as err:  # an error in a 2xx answer waits as the answer's headers say
            raise self.failures.again(err, response.headers) from None
        except httpx2.RequestError as err:
            raise self.failures.transport(err, "while the answer was read") from None
        except (AttributeError, TypeError, LookupError, ValueError, ArithmeticError, RecursionError) as err:
            # JSON that parsed but is not shaped as the protocol says (a list for an object, a
            # count of 1e400 tokens …), or nested too deep to parse.
            why = f"the answer is not shaped like a {self.provider} answer: {type(err).__name__}: {err}"
            raise unusable(why) from None
        finally:
            await response.aclose()

    def _answer(
        self, message: AssistantMessage, usage: Usage, model: str, finish: str | None, **meta: Any
    ) -> ModelResponse:
        """The response: the provider's finish and tether's word for it, the cost by the price
        table (``unpriced`` when the model is in none), and any further ``meta``. A turn that
        is no answer is refused here, for every protocol: neither text nor a tool call where
        the finish says the turn ended normally, text alone where it says the turn calls tools
        (the calls were lost), a call without a name, or two calls with one id (their results
        could not be told apart). Its usage is billed whether or not the turn is refused
        (``_retrying.billed``)."""
        billed(usage)
        finish_word = finish_of(finish)
        message = rejoined(message)  # characters a server split at their surrogates
        message = _ids_as_text(message)  # a call id sent as a number or an object
        calls = message.tool_calls
        if not calls and not (message.content and message.content.strip()) and finish_word in _NORMAL:
            why = f"the response has neither text nor tool calls (finish_reason {finish!r})"
            raise Retryable("empty_response", why)
        if not calls and finish_word == "tool_calls":
            # The model asked for tools and none arrived (a proxy that dropped them): the text
            # is the preamble to calls now lost, no final answer.
            raise unusable(f"the finish reason {finish!r} says the turn calls tools, but it has none")
        if nameless := [c.id for c in calls if not c.name.strip()]:
            # A call the host could only refuse as an unknown tool: its name was lost (a delta
            # numbered for a call never begun, a call of a kind tether never offers).
            raise unusable(f"a tool call without a name in the turn (ids {nameless})")
        if len(calls) > 1 and len({c.id for c in calls}) < len(calls):
            raise unusable(f"duplicate tool call id in one turn: {[c.id for c in calls]}")
        meta = {"finish_reason": finish, "finish": finish_word, "provider": self.provider, **meta}
        price = self.price_of(model)
        if price is None:
            meta["unpriced"] = True
        elif price is not self.price:
            meta["priced_as"] = model
        cost = price.cost(usage) if price is not None else 0.0
        return ModelResponse(
            message=message, usage=usage, model=model or self.model, cost_usd=cost, meta=meta
        )

    def price_of(self, answered: str) -> Price | None:
        """The price of an answer that names the model that gave it (``answered``, its
        ``model`` field): the provider bills the model that served, which a router, an alias or
        a silent upgrade makes another than the one asked for (``gpt-4o`` for ``gpt-4o-mini``):
        that model's price where the table has one (exactly or by prefix: a dated snapshot is
        its model's), else the asked model's (a local server's or a deployment's own name)."""
        if not answered or answered == self.model:
            return self.price
        price = price_for(answered, self.prices)  # only for an answer naming another model: no memo
        return self.price if price is None else price


_NORMAL = ("stop", "tool_calls")
# 2xx answers whose body is no whole answer (RFC 9110, RFC 3229): a 206 from a cache or proxy
# holds a range of one (the tail of a stream read as the whole answer: before, accepted).
_PARTIAL = {206: "Partial Content", 226: "IM Used"}


def _ids_as_text(message: AssistantMessage) -> AssistantMessage:
    """The message with each tool call's id as text: an id a server sent as another JSON value
    (``4242``, ``true``, an object) written as text, as a whole chat answer's always was. The id
    only pairs a call with its result, and the protocols want it as a string: sent back as the
    number it came as, the next request is refused (HTTP 400), and an object cannot even be
    compared with the ids before it (``unique_call_ids``: before, an internal ``TypeError``
    ended the run, the answer never retried). The same message when every id is text (the
    usual case)."""
    calls = message.tool_calls
    if all(type(c.id) is str for c in calls):
        return message
    fixed = tuple(c if type(c.id) is str else replace(c, id=written(c.id)) for c in calls)
    return replace(message, tool_calls=fixed)


def arguments_text(value: object) -> str:
    """A tool call's arguments as the JSON text the host reads: a string as sent (malformed or
    not: the gate judges it); an object or list a server sent unencoded, encoded (a key it named
    twice, twice: the gate refuses it as it refuses the same text); none, ``""``."""
    if value is None or isinstance(value, str):
        return value or ""
    return written(value)  # an object that named a key twice, with each pair (``_json``)


class OpenAIBackend(HTTPBackend):
    """Where both OpenAI protocols live (chat completions and the Responses API): the URL and
    key variables, the default host, the ``openai`` SDK."""

    base_url_env = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"
    default_key_env = "OPENAI_API_KEY"
    sdk = ("openai", "AsyncOpenAI")
