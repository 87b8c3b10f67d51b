"""Lines of a stdio server's output as JSON-RPC messages, for servers in the wild that frame
newline-delimited JSON loosely: a message pretty-printed over lines (``JSON.stringify(m, null,
2)``), messages written one after the other with no newline between (``}{``), and a message
with no newline after it (read once it is whole, blanks or a lone ``\r`` after it too, or at the
end of the output).

The common line (one whole message) costs a byte search only: a message is joined over lines
only from a line that is a lone ``{`` or ``[``, and ends at the first line that closes one at
its first column, as pretty printers write a message's first and last lines (what is not a whole
message then is refused as any line is: parsed once, never again at each later line).

A printer given no indent (``json.dumps(m, indent=0)``, Go's ``MarshalIndent(v, "", "")``) writes
every line at the first column, nested brackets too: a message whose second line is not indented
is followed bracket by bracket (each line scanned once), and ends where its first bracket closes;
a line opening an object where its innermost open one wants a key, or closing the wrong bracket,
is no part of it (the one begun is cut, as above).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["BOM", "FLOAT_ID", "Framer", "id_key", "well_formed", "whole", "whole_id"]

FLOAT_ID = re.compile(rb'"id"\s*:\s*-?\d+\.0*[,}\s]')  # an id that may be a whole float

_JOINED = re.compile(rb"[}\]]\s*[{\[]")  # one value closed and the next opened on one line
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, which some runtimes write before their first line
_BLANKS = b" \t\r"
MAX_UNENDED = 1 << 20  # the longest output without a newline tried as a whole message


def whole(buffer: bytes | bytearray) -> bool:
    """Whether output not yet ended by a newline is a whole message (tried up to ``MAX_UNENDED``),
    blanks after it too: a server ending its lines with a lone ``\r`` (no ``\n`` ever came: the
    start waited out its connect timeout) or a space."""
    end = len(buffer)
    while end > max(1, len(buffer) - 16) and buffer[end - 1] in _BLANKS:  # (a few, at each chunk)
        end -= 1
    if (
        not 1 < len(buffer) <= MAX_UNENDED
        or buffer[:1] not in (b"{", b"[")
        or buffer[end - 1 : end] not in (b"}", b"]")
    ):
        return False
    try:
        json.loads(bytes(buffer))
    except (ValueError, RecursionError):
        return False
    return True


# A lone UTF-16 surrogate written as a JSON escape: an escaped backslash (read first, so the
# ``\\ud83d`` of a backslash before ``ud83d`` is left alone), a pair (kept), or a half alone.
_HALVES = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_HALF = re.compile(rb"\\u[dD][89a-fA-F]")
_REPLACEMENT = b"\\ufffd"


def well_formed(raw: bytes) -> bytes:
    """``raw`` (one message as sent) with text that is not well-formed Unicode read as U+FFFD, as
    the TypeScript SDK reads it (Node decodes bytes so, and ``JSON.parse`` takes the escape of
    half a surrogate pair): a JavaScript server cutting a text between the two halves of an emoji
    (``text.slice(0, n)``, written ``"\\ud83d"`` by ``JSON.stringify``), or bytes that are not
    UTF-8, failed the whole call as "not valid JSON-RPC", and over HTTP could not even start the
    server when in its listing. ``raw`` itself when nothing is to be read so (one byte search)."""
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raw = raw.decode("utf-8", "replace").encode("utf-8")
    if _HALF.search(raw) is None:
        return raw
    formed = _HALVES.sub(lambda m: _REPLACEMENT if len(m.group()) == 6 else m.group(), raw)
    return raw if formed == raw else formed


def id_key(ident: Any) -> str:
    """An id as the SDK matches it (``1``, ``1.0`` and ``"1"`` are one id)."""
    if isinstance(ident, float) and ident.is_integer():
        ident = int(ident)
    return str(ident)


def whole_id(message: Any) -> Any:
    """``message`` with an id written as a float of a whole number (``3.0``: servers whose JSON
    numbers are all doubles) made the integer it means, which the SDK reads (it refuses the
    float, and the request it answers waited out its timeout); any other as it is."""
    ident = message.get("id") if isinstance(message, dict) else None
    if isinstance(ident, float) and ident.is_integer() and abs(ident) <= 2**53:
        return {**message, "id": int(ident)}
    return message


def _split(line: bytes) -> list[bytes]:
    """The values of a line holding more than one, each alone; ``[line]`` where it is one, or
    not JSON values throughout."""
    text = line.decode("utf-8", "replace")
    decoder, values, at = json.JSONDecoder(), [], 0
    try:
        while at < len(text):
            _, end = decoder.raw_decode(text, at)
            values.append(text[at:end].encode("utf-8"))
            at = end
            while at < len(text) and text[at].isspace():
                at += 1
    except (ValueError, RecursionError):
        return [line]
    return values if len(values) > 1 else [line]


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')  # a JSON string, its escapes read
_BRACKET = re.compile(rb"[{}\[\]]")
_PAIRS = {b"}": b"{", b"]": b"["}


def _brackets(line: bytes, open_: bytearray) -> bool:
    """``open_`` (the brackets open before ``line``) updated past it; False (``open_`` as it was)
    where the line closes a bracket it did not open: no part of the message."""
    before = bytes(open_)
    for bracket in _BRACKET.findall(_STRING.sub(b"", line)):
        if bracket in _PAIRS:
            if open_[-1:] != _PAIRS[bracket]:
                open_[:] = before
                return False
            del open_[-1]
        else:
            open_ += bracket
    return True


class Framer:
    """The messages each line of output ends (``limit``: the most bytes one message may hold)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pending = bytearray()  # a message begun on earlier lines
        self.flat: bool | None = None  # whether its lines carry no indent (None: one line so far)
        self.open = bytearray()  # the brackets a flat one has open

    def _flat(self, line: bytes) -> list[bytes] | None:
        """What ``line`` of a message printed with no indent completes (None: it is no part of it)."""
        if line[:1] == b"{" and self.open[-1:] == b"{":  # an object where a key is wanted
            return None
        if not _brackets(line, self.open):
            return None
        self.pending += b"\n" + line
        if self.open and len(self.pending) <= self.limit:
            return []
        done, self.pending, self.flat = bytes(self.pending), bytearray(), None
        return [done]

    def lines(self, raw: bytes) -> list[bytes]:
        """The messages the line ``raw`` (its newline cut) completes, in order, each stripped."""
        line = raw.strip().removeprefix(BOM).strip()
        if not line:
            return []
        if self.pending and self.flat is None:
            self.flat = raw[:1] not in (b" ", b"\t")
            self.open = bytearray(self.pending[:1])
        if self.pending and self.flat:
            read = self._flat(line)
            if read is not None:
                return read
            cut, self.pending, self.flat = bytes(self.pending), bytearray(), None
            return [cut, *self.lines(raw)]
        if self.pending:
            if raw[:1] == b"{":  # a new message at the first column: the one begun is cut
                cut, self.pending, self.flat = bytes(self.pending), bytearray(), None
                return [cut, *self.lines(raw)]
            self.pending += b"\n" + line
            if len(self.pending) > self.limit:
                cut, self.pending, self.flat = bytes(self.pending), bytearray(), None
                return [cut]
            if raw[:1] not in (b"}", b"]"):  # only a closing line at the first column ends one
                return []
            done, self.pending, self.flat = bytes(self.pending), bytearray(), None  # parsed once
            return [done]
        if line in (b"{", b"["):  # the first line of a pretty-printed message or batch
            self.pending = bytearray(line)
            return []
        if _JOINED.search(line) is not None:
            return _split(line)
        return [line]

    def rest(self) -> list[bytes]:
        """What a message begun and never ended leaves at the end of the output."""
        rest, self.pending, self.flat = bytes(self.pending), bytearray(), None
        return [rest] if rest else []
