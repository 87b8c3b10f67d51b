"""Bytes as the text they hold (``bytes_text``): what a reader of them shows.

One owner for the policy's two readers of bytes: a server's declared decoding (base64 of a
message, ``declared_received``) and what a local tool's function receives (``bytes``,
``Base64Bytes``, ``SecretBytes``: ``tether.tools._received.as_data``). A reader that honours a
byte-order mark shows UTF-16 or UTF-32 text where UTF-8 reads the same bytes as noise, so each
such reading is given.
"""

from __future__ import annotations

import codecs

__all__ = ["bytes_text"]

_MARKS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def bytes_text(raw: bytes) -> str:
    """``raw`` as the text it holds, as UTF-8; where a byte-order mark says UTF-16 or -32, that
    reading after it, for a reader may take either."""
    text = raw.decode("utf-8", "replace")
    for mark, codec in _MARKS:
        if raw.startswith(mark):
            return f"{text}\n{raw.decode(codec, 'replace')}"
    return text
