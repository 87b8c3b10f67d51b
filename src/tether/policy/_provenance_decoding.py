"""What a store that decodes a value the run wrote keeps of it (``decoded``): the run's writes
are read as written and in each of these forms (``provenance_run._writes``), so a value read
back from a store that decoded it is still the run's, traced to what it was when written.

Transfer encodings (base64, whole or in MIME's lines; quoted-printable) and text escapes: a
form's or a URL's percent escapes (``%40``, ``+`` for a space), a JSON or source string's
backslash escapes (``\\u0040``, ``\\x40``), HTML character references (``&#64;``), and a
domain's punycode labels (``xn--``) as a mail client shows them. Escapes within escapes
(a percent escape in base64, ``%255C``) are undone too, a few layers deep.
"""

from __future__ import annotations

import base64
import html
import quopri
import re
import urllib.parse
from collections.abc import Callable

__all__ = ["decoded"]

_DEPTH = 3  # layers of encoding undone
_MOST = 16  # decoded forms of one value, at most

_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{8,}={0,2}")
_BASE64_LINE = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")  # a line of a block, its spaces left out
_QUOTED_PRINTABLE = re.compile(r"=(?:[0-9A-F]{2}|\r?\n)")
_BLANK = re.compile(r"[ \t]+")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_BACKSLASH = re.compile(
    r"\\(?:u\{?[0-9A-Fa-f]{4,6}\}?|U[0-9A-Fa-f]{8}|x[0-9A-Fa-f]{2}|[0-7]{3}|[\\/\"'nrtbf])"
)
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", "\\": "\\", "/": "/", '"': '"', "'": "'"}
_REFERENCE = re.compile(r"&(?:#[0-9]+|#[xX][0-9A-Fa-f]+|[A-Za-z][A-Za-z0-9]*);?")
_PUNYCODE = re.compile(r"(?<![\w-])xn--[A-Za-z0-9-]+", re.IGNORECASE)


def decoded(value: str) -> list[str]:
    """What a store that decodes ``value`` keeps of it, beside the value as written: each form
    the module docstring names, and those forms' own decodings (``_DEPTH`` layers, ``_MOST``
    forms at most). A file uploaded as base64, a form posted percent-encoded or a JSON string
    with its escapes, read back as text, is the text the run wrote, not the store's."""
    out: list[str] = []
    layer = [value]
    for _ in range(_DEPTH):
        following: list[str] = []
        for text in layer:
            for form in _once(text):
                if form != value and form not in out and len(out) < _MOST:
                    out.append(form)
                    following.append(form)
        layer = following
    return out


def _once(value: str) -> list[str]:
    """Each one-layer decoding of ``value`` that changes it."""
    out = [text for block in _base64_blocks(value) if (text := _base64_text(block))]
    decoders: list[Callable[[str], str]] = [_quoted_printable, _percent, _backslash, _references, _punycode]
    for decode in decoders:
        text = decode(value)
        if text.strip() and text != value:
            out.append(text)
    return out


def _quoted_printable(value: str) -> str:
    if not _QUOTED_PRINTABLE.search(value):
        return value
    try:
        return quopri.decodestring(value.encode("utf-8")).decode("utf-8")
    except (ValueError, UnicodeError):
        return value


def _percent(value: str) -> str:
    """Percent escapes undone, and a ``+`` read as a space where escapes show the text is a
    form's (a ``+`` kept where they do not: an address's ``ann+news@``)."""
    if not _PERCENT.search(value):
        return value
    return urllib.parse.unquote_plus(value) if " " not in value else urllib.parse.unquote(value)


def _backslash(value: str) -> str:
    """A string literal's escapes undone (JSON, JavaScript, Python): ``\\u0040``, a pair of
    ``\\u`` surrogates as the one character they make, ``\\x40``, ``\\100``, ``\\n``."""
    if "\\" not in value or not _BACKSLASH.search(value):
        return value

    def one(m: re.Match[str]) -> str:
        escape = m.group(0)[1:]
        if escape in _SIMPLE:
            return _SIMPLE[escape]
        digits = escape.strip("uUx{}") if escape[0] in "uUx" else escape
        code = int(digits, 8 if escape[0] not in "uUx" else 16)
        return chr(code) if code <= 0x10FFFF else m.group(0)

    text = _BACKSLASH.sub(one, value)
    try:  # surrogate pairs, as JSON writes a character outside the BMP
        return text.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeError:
        return text


def _references(value: str) -> str:
    return html.unescape(value) if "&" in value and _REFERENCE.search(value) else value


def _punycode(value: str) -> str:
    """Each ``xn--`` label as the letters it stands for (as a mail client shows a domain)."""

    def one(m: re.Match[str]) -> str:
        try:
            return m.group(0).encode("ascii").decode("idna")
        except UnicodeError:
            return m.group(0)

    return _PUNYCODE.sub(one, value) if "xn--" in value.lower() else value


def _base64_blocks(value: str) -> list[str]:
    """The runs of consecutive lines of ``value`` that are base64 once their spaces are left out,
    each joined into one string (a single line: the value itself)."""
    blocks: list[list[str]] = [[]]
    for line in value.splitlines():
        bare = _BLANK.sub("", line)
        if bare and _BASE64_LINE.fullmatch(bare) and not (blocks[-1] and "=" in blocks[-1][-1]):
            blocks[-1].append(bare)
        elif blocks[-1]:
            blocks.append([])
    return ["".join(b) for b in blocks if b]


def _base64_text(s: str) -> str:
    """``s`` decoded from base64 as UTF-8 text, or "" where it is no such text (bytes that decode
    by chance, or not base64)."""
    if not _BASE64.fullmatch(s) or len(s.rstrip("=")) % 4 == 1:
        return ""
    raw = s.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        text = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return ""
    return text if text.strip() and "".join(text.split()).isprintable() else ""
