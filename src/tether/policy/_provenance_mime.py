"""A string that is a mail message (RFC 822/2045), read as a mail client shows it.

A server's send of a whole message (Gmail's ``raw``) gets it as a MIME message: its client
shows each header with its encoded words decoded (RFC 2047: ``=?utf-8?B?...?=`` in ``To``),
and each part's body decoded by its ``Content-Transfer-Encoding`` (base64, quoted-printable:
``=3D``, soft line breaks inside a link) and charset, an HTML part as its entities print.
``mime_read`` gives that reading, to be judged beside the message as written.

Detected conservatively (a header block, a blank line, and a header a message has), and
bounded: a hostile message's size, parts, nesting, headers and decoded text cost at most
``_SIZE``, ``_DELIMITERS``/``_PARTS``, ``_NESTING``, ``_HEADERS`` and ``_DECODED`` (what lies
past a bound is judged as written only, as before).
"""

from __future__ import annotations

import base64
import contextlib
import email
import html
import quopri
import re
from email import policy
from email.message import Message
from email.utils import getaddresses
from typing import Any

__all__ = ["mime_read"]

_PARTS = 64  # parts read of one message, nested ones included
_NESTING = 8  # levels of multipart (and attached messages) read
_DECODED = 1 << 20  # characters of decoded text read, headers and bodies together
_PIECES = 512  # headers, addresses and bodies kept
_SIZE = 4 << 20  # characters of a message parsed (what follows is judged as written only)
_DELIMITERS = 1024  # lines that may open a part, parsed (what follows: as written only)
_HEADER = re.compile(r"[!-9;-~]+:")  # a field name (printable, no colon) then its colon
_MESSAGE = frozenset({"mime-version", "content-type", "to", "from", "cc", "bcc", "reply-to"})
_ADDRESSES = ("to", "cc", "bcc", "reply-to", "from", "sender", "resent-to", "resent-cc", "resent-bcc")
_FIRST = frozenset({*_ADDRESSES, "subject"})
_HEADERS = 512  # header fields read, in all parts together
_LONG = 8192  # characters of a header the stdlib's parser reads (the encoded words of any)


def mime_read(text: str) -> list[str] | None:
    """What a mail client shows of ``text`` where it is a MIME message, piece by piece (each
    judged on its own, as a list's items are: nothing glued across two of them): each header
    decoded, each address of ``To``/``Cc``/``Bcc``/``Reply-To``/``From`` alone, each text part's
    body decoded; None where ``text`` is no message or shows nothing it does not say as
    written."""
    if not _looks_like_message(text):
        return None
    try:
        message = email.message_from_string(_bounded(text[:_SIZE]), policy=policy.default)
    except Exception:  # the stdlib parser on hostile input; nothing read then
        return None
    pieces: list[str] = []
    addresses: list[str] = []
    _read_part(message, (pieces, addresses), [_PARTS], [_DECODED, _HEADERS], 0)
    # A recipient alone, as a recipient argument holds one, whether or not it was encoded.
    shown = [*addresses, *(p for p in pieces if p.strip() and p not in text)]
    return list(dict.fromkeys(shown))[:_PIECES] or None


_DELIMITER = re.compile(r"^--", re.MULTILINE)


def _bounded(text: str) -> str:
    """``text`` up to its ``_DELIMITERS``-th line that may open a part (the parser builds every
    part it meets: a hostile message of a hundred thousand costs seconds)."""
    for count, found in enumerate(_DELIMITER.finditer(text)):
        if count >= _DELIMITERS:
            return text[: found.start()]
    return text


def _looks_like_message(text: str) -> bool:
    """A header block (a field name and colon starting its first line) ended by a blank line,
    one of its fields one that only a message has."""
    if not _HEADER.match(text):
        return False
    end = _BLANK.search(text)
    if end is None:
        return False
    names = _NAME.findall(text, 0, end.start() + 1)
    return any(name.lower() in _MESSAGE for name in names)


_BLANK = re.compile(r"\r?\n\r?\n|\r\r")
_NAME = re.compile(r"^([!-9;-~]+)[ \t]*:", re.MULTILINE)


def _read_part(
    part: Message, out: tuple[list[str], list[str]], parts: list[int], left: list[int], depth: int
) -> None:
    pieces, addresses = out
    if parts[0] <= 0 or left[0] <= 0 or depth > _NESTING:
        return
    parts[0] -= 1
    lines, named = _headers(part, left)
    for line in lines:
        _keep(line, pieces, left)
    for address in named:
        _keep(address, addresses, left)
    if part.is_multipart():
        payload = part.get_payload()
        for sub in payload if isinstance(payload, list) else []:
            if isinstance(sub, Message):
                _read_part(sub, out, parts, left, depth + 1)
        return
    _keep(_body(part), pieces, left)


def _keep(text: str, pieces: list[str], left: list[int]) -> None:
    if left[0] > 0 and len(pieces) < _PIECES * 2:
        pieces.append(text[: left[0]])
    left[0] -= len(text)


def _headers(part: Message, left: list[int]) -> tuple[list[str], list[str]]:
    """A part's headers as its reader shows them, and the addresses they name: those that name
    addresses and the subject first, as many as ``_HEADERS`` in all the message's parts."""
    lines: list[str] = []
    named: list[str] = []
    items = sorted(part.raw_items(), key=lambda item: item[0].lower() not in _FIRST)
    for name, raw in items:
        if left[1] <= 0:
            break
        left[1] -= 1
        parsed: Any = None
        shown = ""
        try:
            # The stdlib's header parser takes seconds over a long one: past ``_LONG``, the
            # encoded words alone are read.
            parsed = part.policy.header_fetch_parse(name, raw) if len(raw) <= _LONG else None
            shown = "" if parsed is None else str(parsed)
        except Exception:  # a header the stdlib parser refuses; a client still shows it
            parsed = None
        # And each encoded word decoded where it stands, an address's own parts too (RFC 2047
        # allows them in a name only; a client that decodes them anywhere reads another address).
        words = _words(raw)
        lines.extend(f"{name}: {text}" for text in dict.fromkeys((shown, words)) if text)
        if name.lower() in _ADDRESSES:
            named.extend(_addresses(parsed, (shown, words)))
    return lines, named


def _words(raw: str) -> str:
    """A header's encoded words (``=?charset?B|Q?text?=``) decoded where they stand, the
    space between two of them dropped as a client drops it (linear: the stdlib's
    ``decode_header`` takes seconds over a long one)."""
    joined = _BETWEEN.sub(r"\1", raw)
    return _WORD.sub(_word, joined) if "=?" in joined else ""


_WORD = re.compile(r"=\?([^?\s]{1,64})\?([bBqQ])\?([^?\s]*)\?=")
_BETWEEN = re.compile(r"(\?=)[ \t\r\n]+(?==\?[^?\s]{1,64}\?[bBqQ]\?)")


def _word(found: re.Match[str]) -> str:
    charset, kind, text = found.group(1).split("*")[0], found.group(2).lower(), found.group(3)
    try:
        if kind == "b":
            data = base64.b64decode(text + "=" * (-len(text) % 4))
        else:
            data = quopri.decodestring(text.replace("_", " ").encode("ascii", "replace"), header=True)
    except (ValueError, TypeError):
        return found.group(0)
    try:
        return data.decode(charset, "replace")
    except LookupError:
        return data.decode("utf-8", "replace")


def _addresses(parsed: Any, shown: tuple[str, ...]) -> list[str]:
    """The addresses a header names: as parsed, and as its decoded text parses again (a client
    that decodes an encoded word before it reads the address: ``=?utf-8?B?...?=`` holding
    ``Bob <addr>``)."""
    found: list[str] = []
    with contextlib.suppress(Exception):  # an address the stdlib cannot parse
        found += [a.addr_spec for a in getattr(parsed, "addresses", ()) if a.addr_spec]
    with contextlib.suppress(Exception):
        found += [addr for _, addr in getaddresses([t for t in shown if len(t) <= _LONG]) if "@" in addr]
    return found


def _body(part: Message) -> str:
    """A part's payload decoded by its transfer encoding and charset (UTF-8 where that names
    no codec), an HTML part also as its entities print."""
    if part.get_content_maintype() != "text" and part.get_content_subtype() != "xhtml+xml":
        return ""
    try:
        raw = part.get_payload(decode=True)
    except Exception:
        return ""
    if not isinstance(raw, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        text = raw.decode(charset, "replace")
    except (LookupError, ValueError):
        text = raw.decode("utf-8", "replace")
    if part.get_content_subtype() in ("html", "xhtml+xml", "xml"):
        shown = html.unescape(text)
        text = text if shown == text else f"{text}\n{shown}"
    return text
