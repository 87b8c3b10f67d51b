"""The ``"http"`` transport's cheaper per-call paths send and read exactly what the full ones do.

Each POST copies headers prepared once and passes the body as its stream (no ``Request``
preparation per call); a whole answer is read in one loop over the body. Both only save time
(``bench/backends.py``): the request on the wire (headers in their order, body, URL) and the
size limit must be those of ``httpx2.Request(content=body)`` and of ``blocks``."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import httpx2
import pytest

from tether.errors import ModelError
from tether.models._anthropic import AnthropicMessages
from tether.models._backend import _Peeked
from tether.models._openai import OpenAICompatible
from tether.models._responses import OpenAIResponses

CASES: list[tuple[type[Any], dict[str, Any]]] = [
    (OpenAICompatible, {}),
    (OpenAIResponses, {"transport": "http"}),
    (AnthropicMessages, {"transport": "http"}),
    (OpenAICompatible, {"headers": {"X-Team": "ops", "Host": "models.example"}}),
]


def _lane(backend: Any, seen: list[httpx2.Request]) -> Any:
    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json={})

    lane = backend._client.get()
    lane.clients = [httpx2.AsyncClient(transport=httpx2.MockTransport(handler))]  # send() merges nothing
    return lane


@pytest.mark.parametrize(("backend_type", "options"), CASES)
def test_each_post_sends_what_a_freshly_prepared_request_sends(
    backend_type: type[Any], options: dict[str, Any]
) -> None:
    async def main() -> None:
        backend = backend_type("m", base_url="http://127.0.0.1:9/v1", **options)
        seen: list[httpx2.Request] = []
        lane = _lane(backend, seen)
        assert lane._prepared is not None  # the prepared path is the one taken
        for body in (b"{}", '{"q":"caf\u00e9 \u2014 ok"}'.encode() + b" " * 5000):
            await (await lane.post(body)).aclose()
            got = seen[-1]
            want = httpx2.Request("POST", lane.url, headers=lane.headers, content=body)
            assert got.headers.raw == want.headers.raw  # the same headers, in the same order
            assert (got.method, got.url, got.content) == (want.method, want.url, body)
        await backend.aclose()

    asyncio.run(main())


def test_headers_that_set_the_length_themselves_take_the_full_path() -> None:
    async def main() -> None:
        backend = OpenAICompatible("m", base_url="http://127.0.0.1:9/v1", headers={"Content-Length": "2"})
        seen: list[httpx2.Request] = []
        lane = _lane(backend, seen)
        assert lane._prepared is None
        await (await lane.post(b"{}")).aclose()
        want = httpx2.Request("POST", lane.url, headers=lane.headers, content=b"{}")
        assert seen[-1].headers.raw == want.headers.raw
        await backend.aclose()

    asyncio.run(main())


class _Body:
    """A response body in given blocks (what ``_Peeked`` reads)."""

    def __init__(self, blocks: list[bytes], headers: dict[str, str]) -> None:
        self.headers = httpx2.Headers(headers)
        self._blocks = blocks

    async def aiter_bytes(self) -> Any:
        for block in self._blocks:
            yield block


@pytest.mark.parametrize(
    ("blocks", "headers", "limit", "whole"),
    [
        ([b'{"a":', b' "b"}'], {}, 100, b'{"a": "b"}'),
        ([b"  \n", b'{"a"', b":1}"], {}, 100, b'  \n{"a":1}'),
        ([b'{"a": "' + b"x" * 50, b'"}'], {}, 40, None),  # received past the limit
        ([b"{}"], {"content-length": "500"}, 100, None),  # declared past it: refused unread
        ([b"{}"], {"content-length": "2"}, 100, b"{}"),
    ],
)
def test_a_whole_body_reads_as_blocks_reads_it(
    blocks: list[bytes], headers: dict[str, str], limit: int, whole: bytes | None
) -> None:
    async def main() -> None:
        peeked, streamed = await _Peeked.open(_Body(blocks, headers), labelled=False)
        assert not streamed
        if whole is None:
            with pytest.raises(ModelError, match="larger than max_response_bytes"):
                await peeked.read(limit)
        else:
            assert await peeked.read(limit) == whole

    asyncio.run(main())


def test_a_whole_gzip_body_of_several_members_reads_whole() -> None:
    members = [gzip.compress(b'{"a": '), gzip.compress(b'"b"}')]

    class Raw(_Body):
        async def aiter_raw(self) -> Any:
            for block in self._blocks:
                yield block

    async def main() -> None:
        peeked, _ = await _Peeked.open(Raw([b"".join(members)], {"content-encoding": "gzip"}), False)
        assert await peeked.read(100) == b'{"a": "b"}'

    asyncio.run(main())
