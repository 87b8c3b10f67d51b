"""What the backends on an official SDK share (``anthropic``, ``openai-responses``): one client
per event loop, the API key from a named environment variable, and the SDK's errors sorted
into retryable and final. Both SDKs are generated from the same template: their error classes
carry the same names and fields (``status_code``, ``response.headers``, ``body``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio.lowlevel

from tether.errors import ConfigError, ModelError
from tether.models.retrying import Retryable, status_error

__all__ = ["LoopClient", "api_key", "cache_encoded", "sdk_error"]

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
