"""What the backends on an official SDK share (``anthropic``, ``openai-responses``): one client
per event loop, the API key from a named environment variable, the exchange, and the SDK's
errors sorted into retryable and final. Both SDKs are generated from the same template: their
error classes carry the same names and fields (``status_code``, ``response.headers``, ``body``).

The exchange goes through the SDK client's own ``post`` (its auth, headers, base URL, proxies
and status-error mapping; its retries off), with a body tether encoded once, and the answer
read as JSON — not through the typed ``messages.create`` / ``responses.create``, which walk and
re-serialise the whole history on every call and build typed objects of every answer and
stream event: in ``bench/backends.py`` that cost several times the rest of a step."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio.lowlevel

from tether.errors import ConfigError, ModelError
from tether.models.retrying import Retryable, status_error

__all__ = [
    "LoopClient",
    "api_key",
    "body_error",
    "cache_encoded",
    "events",
    "post",
    "read_json",
    "sdk_error",
    "sse_data",
]

# Error types a provider sends in a body (Anthropic's ``error.type``, OpenAI's ``error.code``)
# that another attempt may get past.
_RETRYABLE_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "server_error", "rate_limit_exceeded", "timeout"}
)


def api_key(env: str, base_url: str, official_host: str) -> str:
    """The key from ``$env``: required for the provider's own host, a placeholder for a local
    server. Raises ``ConfigError``."""
    key = os.environ.get(env, "")
    if not key and urlsplit(base_url).hostname == official_host:
        raise ConfigError(f"set ${env} to use {base_url}")
    return key or "no-key"


class LoopClient:
    """An SDK client for the running event loop: a client opened on another loop (an earlier
    ``asyncio.run``, ``Host.run_sync``) holds connections that loop owned, so it is dropped
    and a new one built."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None
        self._loop: object = None

    def get(self) -> Any:
        token = anyio.lowlevel.current_token()
        loop = getattr(token, "native_token", token)
        if self._client is None or self._loop is not loop:
            self._client = self._make()
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()


def _body_message(body: object) -> tuple[str | None, str]:
    """The error type and message of an error body (``{"error": {"type"|"code", "message"}}``)."""
    inner = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(inner, dict):
        kind = inner.get("type") or inner.get("code")
        return (str(kind) if kind else None), str(inner.get("message") or inner)[:500]
    return None, str(inner)[:500]


def sdk_error(sdk: Any, err: BaseException, label: str) -> Exception:
    """The ``Retryable`` or ``ModelError`` for an exception of the SDK module ``sdk``."""
    if isinstance(err, sdk.APITimeoutError):
        return Retryable("timeout", "the HTTP client timed out")
    if isinstance(err, sdk.APIConnectionError):
        return Retryable("connection", type(err.__cause__ or err).__name__)
    if isinstance(err, sdk.APIStatusError):
        kind, message = _body_message(err.body)
        status = err.status_code
        if status == 200:  # an error event inside a stream: judged by its type
            if kind in _RETRYABLE_TYPES:
                name = "overloaded" if kind == "overloaded_error" else "stream_error"
                return Retryable(name, f"the server reported {kind} mid-stream: {message}")
            return ModelError(f"{label}: the server reported {kind or 'an error'} mid-stream: {message}")
        headers: Mapping[str, str] = err.response.headers if err.response is not None else {}
        return status_error(label, status, f"{kind + ': ' if kind else ''}{message}", headers)
    if isinstance(err, sdk.APIError):  # a response the SDK could not read
        return Retryable("unusable_response", f"{type(err).__name__}: {str(err)[:300]}")
    raise err


class cache_encoded:
    """A bounded memo of each message's wire form, by identity (the message is held so its id
    cannot be reused): a step converts only the messages it has not seen."""

    def __init__(self, convert: Callable[[Any], Any], limit: int = 8192) -> None:
        self._convert = convert
        self._memo: dict[int, tuple[Any, Any]] = {}
        self._limit = limit

    def __call__(self, item: Any) -> Any:
        key = id(item)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is item:
            return hit[1]
        value = self._convert(item)
        if len(self._memo) >= self._limit:
            self._memo.pop(next(iter(self._memo)))
        self._memo[key] = (item, value)
        return value


async def post(sdk: Any, client: Any, path: str, body: bytes, label: str) -> Any:
    """POST ``body`` through the SDK client; the response unread (an ``httpx2.Response``).
    Raises ``Retryable`` or ``ModelError`` (``sdk_error``)."""
    import httpx2

    try:
        return await client.post(
            path,
            cast_to=httpx2.Response,
            content=body,
            options={"headers": {"Content-Type": "application/json"}},
            stream=True,
        )
    except sdk.APIError as err:
        raise sdk_error(sdk, err, label) from None


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


async def read_json(response: Any) -> dict[str, Any]:
    """A whole answer's JSON object; anything else is a ``Retryable`` unusable response."""
    raw = await response.aread()
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise Retryable("unusable_response", f"the answer is not a JSON object: {raw[:200]!r}")
    return data


def body_error(err: BaseException) -> Retryable:
    """A failure while the body was read (the SDK maps only what fails before the headers)."""
    import httpx2

    if isinstance(err, httpx2.TimeoutException):
        return Retryable("timeout", "the response stalled")
    return Retryable("connection", f"response interrupted: {type(err).__name__}")


def httpx2_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's errors a body read can raise (``body_error`` maps them)."""
    import httpx2

    return (httpx2.TimeoutException, httpx2.TransportError)
