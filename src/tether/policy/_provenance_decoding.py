"""What a store that decodes a value the run wrote keeps of it (``decoded``): the run's writes
are read as written and in each of these forms (``provenance_run._writes``), so a value read
back from a store that decoded it is still the run's, traced to what it was when written.

Transfer encodings (base64, whole or in MIME's lines; quoted-printable) and text escapes: a
form's or a URL's percent escapes (``%40``, ``+`` for a space), a JSON or source string's
backslash escapes (``\\u0040``, ``\\x40``), HTML character references (``&#64;``), a
domain's punycode labels (``xn--``) as a mail client shows them, and markup as a store that
renders it to text keeps it (``_rendered``: HTML tags and comments, markdown's emphasis, code
and strike marks left out, so ``000<b>123</b>456789`` is the number it shows). Escapes within escapes
(a percent escape in base64, ``%255C``) are undone too, a few layers deep. Base64 is also read
as a lenient decoder reads a whole value (either alphabet, every other character skipped), and
word by word inside prose.

The same forms are what a call's arguments are judged in besides the text as written
(``self_decoded``, in ``judged_as_received``): the host cannot see what a tool's function does
with a value after its validators, and a store that imports an upload on its own keeps the
decoded value, so a goal hidden in an encoding is judged as the goal it is. The parties a
write keeps (its addresses, accounts and long numbers) are looked for in every form ``decoded``
reads (``provenance_flow.party_handles``): a store that undoes an escape or renders markup on
its own keeps them so, and a later request reads them back as the store's own.
"""

from __future__ import annotations

import base64
import html
import quopri
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from tether.policy._provenance_values import PARTY_DIGITS

__all__ = ["converted", "decoded", "decoded_forms", "self_decoded"]

_DEPTH = 3  # layers of encoding undone
_MOST = 16  # decoded forms of one value, at most

_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{8,}={0,2}")
_BASE64_LINE = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")  # a line of a block, its spaces left out
# A base32 word (RFC 4648, one case): sixteen characters or more, ten bytes (a TOTP secret's
# or a file name's alphabet; what a decoding tool turns back into an account or an address).
_BASE32 = re.compile(r"(?<![A-Za-z0-9=])(?:[A-Z2-7]{16,}|[a-z2-7]{16,})={0,6}(?![A-Za-z0-9=])")
_QUOTED_PRINTABLE = re.compile(r"=(?:[0-9A-F]{2}|\r?\n)")
_BLANK = re.compile(r"[ \t]+")
_NOT_BASE64_LINE = re.compile(r"[^A-Za-z0-9+/_=\- \t]")  # a line holding one is no base64
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
    return _layers(value, _once)


def converted(value: str) -> list[str]:
    """What a converter the deployment trusts (a decoder, a number-base tool) makes of ``value``
    where no store does it on its own: its base32 words as the texts they encode, and its
    integers of another base as decimal numbers (``_integers``). A write's parties are looked
    for in these forms too (``provenance_flow.party_handles``): kept so, the next run had the
    converter turn them back into an account as the notes' own. Not a form of the run's writes
    (``decoded``): a converter's answer is its own result, judged as one."""
    out = [text for word in _BASE32.findall(value) if (text := _base32_text(word)) and text not in value]
    number = _integers(value)
    return [*out, number] if number != value else out


def _layers(value: str, once: Callable[[str], list[str]]) -> list[str]:
    out: list[str] = []
    layer = [value]
    for _ in range(_DEPTH):
        following: list[str] = []
        for text in layer:
            for form in once(text):
                if form != value and form not in out and len(out) < _MOST:
                    out.append(form)
                    following.append(form)
        layer = following
    return out


def self_decoded(arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """``arguments`` with each string that holds base64 of text (``_base64_once``, layer by
    layer) read decoded too: ``[as given, *decoded]``, in lists and objects at any depth;
    ``None`` where no string does. The policy judges both readings (``judged_as_received``).
    Base64 alone: the other forms leave the text readable as written (a percent-escaped link is
    judged as one), and reading them as decoded would give an address or a host two spellings."""
    out = _forms(dict(arguments), 0)
    return None if out == arguments else out


def decoded_forms(value: str) -> list[str]:
    """The texts ``value`` is also judged as (``self_decoded``): its base64, layer by layer."""
    return _layers(value, _base64_once)


_NESTED = 32  # a value's levels walked (a call's value has at most 16 nested containers)


def _forms(value: Any, depth: int) -> Any:
    if depth > _NESTED:
        return value
    if isinstance(value, str):
        forms = decoded_forms(value)
        return [value, *forms] if forms else value
    if isinstance(value, list):
        return [_forms(item, depth + 1) for item in value]
    if isinstance(value, Mapping):
        return {k: _forms(v, depth + 1) for k, v in value.items()}
    return value


def _once(value: str) -> list[str]:
    """Each one-layer decoding of ``value`` that changes it."""
    out = _base64_once(value)
    decoders: list[Callable[[str], str]] = [
        _quoted_printable,
        _percent,
        _backslash,
        _references,
        _punycode,
        _rendered,
    ]
    for decode in decoders:
        text = decode(value)
        if text.strip() and text != value:
            out.append(text)
    return out


def _base64_once(value: str) -> list[str]:
    """The texts ``value`` holds in base64: its blocks of lines, the whole as a lenient decoder
    reads it, and its long words. None in a value of fewer than ``_SHORTEST`` characters: each
    reading needs that many base64 characters of it (most arguments: keys, ids, names)."""
    if len(value) < _SHORTEST:
        return []
    out = [text for block in _base64_blocks(value) if (text := _base64_text(block))]
    for text in (_lenient_base64(value), *map(_base64_text, _base64_words(value))):
        if text and text not in out:
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


# An integer literal of another base, no longer than a 64-bit number (a wallet's 40 hexadecimal
# digits are a wallet, judged as one).
_INTEGER = re.compile(r"(?<![\w.])0(?:[xX][0-9A-Fa-f]{1,16}|[oO][0-7]{1,22}|[bB][01]{1,64})(?![\w.])")


def _integers(value: str) -> str:
    """Each integer literal of another base as the decimal number a converter gives, where that
    is long enough to name a party (``PARTY_DIGITS``): ``0x75bcd15`` is ``123456789``."""

    def one(m: re.Match[str]) -> str:
        number = str(int(m.group(0), 0))
        return number if len(number) >= PARTY_DIGITS else m.group(0)

    return _INTEGER.sub(one, value) if "0" in value else value


def _references(value: str) -> str:
    return html.unescape(value) if "&" in value and _REFERENCE.search(value) else value


# Markup a store may render away: an HTML comment (to its end, or the value's), a tag (a name
# after ``<``, or ``</``), and markdown's emphasis, code and strike marks.
_MARKUP = re.compile(r"<!--.*?(?:-->|$)|</?[A-Za-z][^<>]{0,400}>|[*`~]+", re.S)


def _rendered(value: str) -> str:
    """``value`` as a store that renders markup to text keeps it: its tags, comments and
    markdown marks left out (``000**123**456789``, ``0001<!-- -->23456789`` are one number
    there; a rendered table's cells ``<td>000</td><td>123…`` run on, the strict reading)."""
    return _MARKUP.sub("", value) if _MARKUP.search(value) else value


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
        bare = "" if _NOT_BASE64_LINE.search(line) else _BLANK.sub("", line)
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


def _base32_text(word: str) -> str:
    """``word`` decoded from base32 as UTF-8 text, or "" where it is no such text."""
    raw = word.rstrip("=").upper()
    try:
        text = base64.b32decode(raw + "=" * (-len(raw) % 8)).decode("utf-8")
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        return ""
    return text if text.strip() and "".join(text.split()).isprintable() else ""


_SHORTEST = 8  # base64 characters: 6 bytes, fewer than any address, account or link holds
_WORD = 12  # a base64 word inside prose: 9 bytes or more
_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_NOT_ALPHABET = bytes(sorted(set(range(256)) - set(_ALPHABET)))  # lenient decoders skip them
_STANDARD = bytes.maketrans(b"-_", b"+/")
_APART = bytes(sorted(set(range(256)) - set(_ALPHABET + b"-_=")))
_WORDS_APART = bytes.maketrans(_APART, b" " * len(_APART))  # every other byte splits words


def _lenient_base64(value: str) -> str:
    """``value`` as a lenient decoder reads it whole (Python's ``b64decode``, Node's ``Buffer``:
    either alphabet, every other character skipped, up to the first padding), as UTF-8 text, or
    "" where that is no text."""
    bare = value.partition("=")[0].encode("utf-8").translate(_STANDARD, _NOT_ALPHABET)
    if len(bare) < _SHORTEST:
        return ""
    try:
        text = base64.b64decode(bare[: len(bare) - (len(bare) % 4 == 1)] + b"==").decode("utf-8")
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        return ""
    return text if text.strip() and "".join(text.split()).isprintable() else ""


def _base64_words(value: str) -> list[str]:
    """The words of ``value`` long enough to be base64 of a value inside prose (not the whole
    value: read as a block already)."""
    words = value.encode("utf-8").translate(_WORDS_APART).split()
    found = [w.decode("ascii") for w in words if len(w) >= _WORD]
    return [] if found == [value.strip()] else found
