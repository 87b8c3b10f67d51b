"""What the backends on an official SDK share (``anthropic``, ``openai-responses``, and
``openai-chat`` with ``transport="openai"``): the exchange, and the SDK's errors sorted into
retryable and final. Both SDKs are generated from the same template: their error classes carry
the same names and fields (``status_code``, ``response.headers``, ``body``).

The exchange goes through the SDK client's documented low-level ``post`` (its auth, headers,
base URL, proxies and status-error mapping; its retries off), with a body tether encoded once,
and the answer read as JSON — not through the typed ``messages.create`` / ``responses.create``,
which walk and re-serialise the whole history on every call and build typed objects of every
answer and stream event: in ``bench/backends.py`` that cost several times the rest of a step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.errors import ModelError
from tether.models._backend import error_body
from tether.models._retrying import Retryable, status_error

__all__ = ["post", "sdk_error"]

# Error types a provider sends in a body (Anthropic's ``error.type``, OpenAI's ``error.code``)
# that another attempt may get past.
_RETRYABLE_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "server_error", "rate_limit_exceeded", "timeout"}
)


def sdk_error(sdk: Any, err: BaseException, label: str) -> Exception:
    """The ``Retryable`` or ``ModelError`` for an exception of the SDK module ``sdk``."""
    if isinstance(err, sdk.APITimeoutError):
        return Retryable("timeout", "the HTTP client timed out")
    if isinstance(err, sdk.APIConnectionError):
        return Retryable("connection", type(err.__cause__ or err).__name__)
    if isinstance(err, sdk.APIStatusError):
        kind, message = error_body(err.body)
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
