"""A Streamable HTTP answer held to the size a stdio line is held to: a JSON body is read up to
the host's limit and no further (the SDK reads it whole, and caps only an SSE event)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from tether.mcp._stdio import too_large

__all__ = ["CappedTransport"]


class _TooLarge(httpx2.StreamError):
    """The body went past the limit (a ``StreamError``: the SDK fails the request it answers)."""


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream, limit: int) -> None:
        self._stream, self._limit = stream, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            if (seen := seen + len(chunk)) > self._limit:
                raise _TooLarge(too_large(self._limit))
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """httpx's own transport, each answer but an event stream read up to ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self._inner, self._limit = httpx2.AsyncHTTPTransport(), limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            return response  # each event capped by the SDK (``max_sse_event_size``)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_Capped(response.stream, self._limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
