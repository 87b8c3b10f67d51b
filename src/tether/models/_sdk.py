"""What the backends on an official SDK share (``anthropic``, ``openai-responses``, and
``openai-chat`` with ``transport="openai"``): the exchange, and the SDK's errors handed to
``tether.models._failures``, which sorts them as it does the http transport's. Both SDKs are
generated from the same template: their error classes carry the same names and fields
(``status_code``, ``response.headers``, ``body``).

The exchange goes through the SDK client's documented low-level ``post`` (its auth, headers,
base URL and proxies; its retries off), with a body tether encoded once,
and the answer read as JSON — not through the typed ``messages.create`` / ``responses.create``,
which walk and re-serialise the whole history on every call and build typed objects of every
answer and stream event: in ``bench/backends.py`` that cost several times the rest of a step.
The ``post`` itself costs about five times a plain ``httpx2`` send on the client side (its
request options, headers and URL built anew per call): that is the SDK's own work.

An error answer (a status other than 2xx) is read by tether, not by the SDK: a hook on the
client (``HTTPBackend._sdk_error_hook``) reads its body as the ``"http"`` transport does (at
most 64 kB, decoded in bounded pieces) and raises the error, before the SDK would read the
whole body into memory however large it inflates; ``sdk_error`` unwraps it where the SDK
wrapped it."""

from __future__ import annotations

from typing import Any

from tether.errors import ModelError
from tether.models._failures import Failures, said_by, unusable
from tether.models._retrying import Retryable
from tether.models._sse import gunzipped

__all__ = ["post", "sdk_error"]


def sdk_error(sdk: Any, err: BaseException, failures: Failures) -> Exception:
    """The ``Retryable`` or ``ModelError`` for an exception of the SDK module ``sdk``."""
    if isinstance(err.__cause__, (Retryable, ModelError)):  # our client's error hook, wrapped
        return err.__cause__
    if isinstance(err, sdk.APITimeoutError):
        return Retryable("timeout", "the HTTP client timed out")
    if isinstance(err, sdk.APIConnectionError):
        cause = err.__cause__ or err
        return Retryable("connection", f"{type(cause).__name__}{said_by(cause)}")
    if isinstance(err, sdk.APIStatusError):
        if err.status_code == 200:  # an error event inside a stream the SDK read
            return failures.reported(err.body, "mid-stream")
        headers = err.response.headers if err.response is not None else {}
        body = err.body if isinstance(err.body, (dict, list)) else _error_bytes(err, headers)
        return failures.status(err.status_code, body, headers)
    if isinstance(err, sdk.APIError):  # a response the SDK could not read
        return unusable(f"{type(err).__name__}: {err}")
    raise err


def _error_bytes(err: Any, headers: Any) -> bytes:
    """The body of an error answer the SDK could not read as JSON: its bytes, gunzipped where
    the SDK's client left them compressed (``x-gzip``), else the text the SDK read."""
    import httpx2

    try:
        raw = err.response.content if err.response is not None else b""
    except httpx2.ResponseNotRead:
        raw = b""
    unpacked = gunzipped(headers, raw)
    return unpacked if unpacked is not raw else str(err.body or "").encode()


async def post(sdk: Any, client: Any, path: str, body: bytes, failures: Failures) -> Any:
    """POST ``body`` through the SDK client; the response unread (an ``httpx2.Response``).
    Raises ``Retryable`` or ``ModelError`` (``sdk_error``)."""
    import httpx2

    try:
        # No per-call options: the client's default headers already say Content-Type JSON, and
        # every option given here is merged again into the request on each call.
        return await client.post(path, cast_to=httpx2.Response, content=body, stream=True)
    except sdk.APIError as err:
        raise sdk_error(sdk, err, failures) from None
    except httpx2.RequestError as err:  # the SDK reads an error answer's body: it may be cut
        raise failures.transport(err, "while an error answer was read") from None
