"""A whole answer's body as the backends read it: its first bytes peeked to tell a stream of
events from one document (``_Peeked``), and a whole answer read as one JSON object
(``_read_json``), each bounded by ``max_response_bytes``."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from tether.models._failures import is_error, unusable
from tether.models._json import loads
from tether.models._sse import BOM as _BOM
from tether.models._sse import declared_over, decoded, too_large

__all__ = ["MAX_RESPONSE_BYTES"]

MAX_RESPONSE_BYTES = 32 * 1024 * 1024  # an answer larger than this is refused, not held

_CHARSET = re.compile(r"""charset\s*=\s*["']?([\w.:-]+)""", re.IGNORECASE)
_SPACE = b" \t\r\n" + _BOM
_SSE_OPEN = (b"data:", b"event:", b"id:", b"retry:", b":")  # how a stream of events starts
_SSE_OPEN_BYTES = 6


class _Peeked:
    """A response body whose first bytes were read to tell what it is: those bytes, then the
    rest (``headers`` and ``aiter_bytes``, all the readers use)."""

    def __init__(self, response: Any, head: bytes, rest: AsyncIterator[bytes]) -> None:
        self.headers = response.headers
        self._head = head
        self._rest = rest

    @classmethod
    async def open(
        cls, response: Any, labelled: bool, limit: int = MAX_RESPONSE_BYTES
    ) -> tuple[_Peeked, bool]:
        """The body, and whether it is a stream of events (it opens with an SSE field or
        comment, past whitespace and a byte-order mark; or it is ``labelled`` one and does not
        open as a JSON object) rather than one document, read whole (JSON, or what the error
        then quotes: an HTML page …). Whitespace before the first bytes that tell counts
        against ``limit`` (``ModelError`` past it), as every other byte does: a body of
        nothing but blanks (a gzip bomb of spaces) is not held without bound."""
        rest = decoded(response)
        parts: list[bytes] = []
        total = told = 0  # bytes so far; of them, past the leading whitespace
        async for block in rest:
            parts.append(block)
            total += len(block)
            told = told + len(block) if told else len(block.lstrip(_SPACE))
            if told >= _SSE_OPEN_BYTES:
                break
            if total > limit:
                raise too_large(limit)
        head = parts[0] if len(parts) == 1 else b"".join(parts)
        first = head.lstrip(_SPACE)
        return cls(response, head, rest), first.startswith(_SSE_OPEN) or (labelled and first[:1] != b"{")

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        if self._head:
            yield self._head
        async for block in self._rest:
            yield block

    async def read(self, limit: int) -> bytes:
        """The whole body, as ``_sse.blocks`` bounds one (``ModelError`` past ``limit`` bytes,
        declared or received), in one loop over the rest: a whole answer, the usual
        case, pays for no generator of its own."""
        if declared_over(self.headers, limit):
            raise too_large(limit)
        parts, total = [self._head], len(self._head)
        if total <= limit:
            async for block in self._rest:
                total += len(block)
                if total > limit:
                    break
                parts.append(block)
        if total > limit:
            raise too_large(limit)
        return b"".join(parts)


async def _read_json(response: _Peeked, limit: int) -> dict[str, Any]:
    """A whole answer's JSON object; anything else is a ``Retryable`` unusable response. JSON
    is read as UTF-8 (or UTF-16/32, told by its first bytes), and only where that fails in the
    charset its ``content-type`` names (``iso-8859-1`` …): a label that a UTF-8 body
    contradicts, as many servers send, changes nothing. An error object in a one-item list is
    that object (the caller reports it as the error it is)."""
    raw = await response.read(limit)
    try:
        data = loads(raw)
    except UnicodeDecodeError:
        charset = _CHARSET.search(response.headers.get("content-type", ""))
        try:
            data = loads(raw.decode(charset.group(1))) if charset else None
        except (ValueError, LookupError):  # not JSON in that charset either, or no such charset
            data = None
    except ValueError:
        data = None
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict) and is_error(data[0]):
        data = data[0]  # an error object in a one-item list (Google's OpenAI-compatible endpoint)
    if not isinstance(data, dict):
        raise unusable(f"the answer is not a JSON object: {raw[:200]!r}")
    return data
