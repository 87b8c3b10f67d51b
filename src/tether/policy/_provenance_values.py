"""Typed values inside text, for provenance rules: links and handles (dates and figures are
in ``_provenance_dates``).

Rules compare values, never words: a link is compared by its canonical key (host and
path), a handle (an address, an account) by its unfolded value.

* **Links** are found on NFKC-normalised text (full-width and ideographic dots become
  ``.``, defanged forms such as ``example[.]com`` or ``hxxp://`` are undone), with any
  top-level domain, Unicode host names included; each link carries the host *as
  registered* (IDNA/punycode), which is what a reviewer is shown.
* **Handles** are the other pointers to a party a text can carry: e-mail addresses and
  account numbers (IBAN-shaped), found on the same unfolded text; and numbers long enough to
  name a party in any other shape (a phone, a bank account of digits: ``find_numbers``).
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.core._confusables import DEFAULT_IGNORABLE, label_to_ascii
from tether.policy._provenance_accounts import find_payment_addresses, find_wallets, spread_accounts

__all__ = [
    "LOCAL_MARKS",
    "Link",
    "compose",
    "displayed",
    "find_handles",
    "find_links",
    "find_numbers",
    "fold",
    "link_key",
    "undated",
    "unescaped",
    "unfold",
]

# -- text ------------------------------------------------------------------------------------


def _singleton(c: str) -> bool:
    d = unicodedata.decomposition(c)
    return bool(d) and not d.startswith("<") and " " not in d


# Characters NFC replaces by one other character (the Kelvin sign by K, the Ångström sign by Å,
# a CJK compatibility ideograph by its unified twin): another code point the tool receives.
_KEEP = [chr(c) for a, b in ((0, 0x3000), (0xF900, 0xFB00), (0x2F800, 0x2FA20)) for c in range(a, b)]
_SINGLETONS = re.compile("([" + "".join(re.escape(c) for c in _KEEP if _singleton(c)) + "])")


_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|x([0-9a-fA-F]{2})|N\{[^}]*\}|.)", re.S)


def unescaped(text: str) -> str:
    """``text`` with each backslash escape of JSON, YAML or a Python literal read as the
    character it writes (``\\u00e9`` as ``é``); any other (``\\n``, ``\\"``, a named one) as a space."""

    def one(m: re.Match[str]) -> str:
        code = m.group(1) or m.group(2) or m.group(3)
        return chr(int(code, 16)) if code and int(code, 16) <= 0x10FFFF else " "

    return _ESCAPE.sub(one, text) if "\\" in text else text


def compose(text: str) -> str:
    """``text`` canonically composed (NFC: ``e`` and a combining acute are ``é``), but for the
    characters NFC would replace by another single one (``\u212a``, the Kelvin sign, stays: a
    name spelled with it is not the name spelled with ``K``, to a tool that looks it up)."""
    if text.isascii():
        return text
    parts = _SINGLETONS.split(text)
    return "".join(part if i % 2 else unicodedata.normalize("NFC", part) for i, part in enumerate(parts))


_DOTS = str.maketrans({"\u3002": ".", "\uff61": ".", "\uff0e": ".", "\u2024": ".", "\ufe52": "."})
# Default-ignorable code points are drawn as nothing and left out of a host name by a browser, so
# ``mark@evil\u2063.com`` reads as ``mark@evil.com``. Bidi controls among them are dropped once
# ``displayed`` has applied them.
_INVISIBLE = {c: None for a, b in DEFAULT_IGNORABLE for c in range(a, b + 1)}
_OVERRIDE = re.compile("\u202e([^\u202c\n]*)\u202c?")  # right-to-left override, to its pop or line end


def displayed(text: str) -> str:
    """``text`` in the order a reader sees it where a right-to-left override (U+202E) reverses
    the characters after it, up to its pop (U+202C) or the end of the line: ``\u202emoc.live@kram``
    is drawn ``mark@evil.com``."""
    if "\u202e" not in text:
        return text
    return _OVERRIDE.sub(lambda m: m.group(1)[::-1], text)


def reader_views(text: str) -> list[str]:
    """``text`` as written and as its reader sees it: drawn (``displayed``), and with its HTML
    character references rendered as the characters they stand for (a mail client shows
    ``evil&#64;attacker&#46;com`` as ``evil@attacker.com``), each view once."""
    rendered = html.unescape(text) if "&" in text else text
    return list(dict.fromkeys((text, displayed(text), rendered, displayed(rendered))))


_DEFANG = [
    # (Spaces before the bracket are taken from where their run starts: read from inside a long
    # run, each start would re-read the rest of it.)
    (re.compile(r"(?<!\s)\s*[\[\(\{]\s*(?:\.|dot)\s*[\]\)\}]\s*", re.IGNORECASE), "."),
    (re.compile(r"\bhxxp(s?)(?=\[?:)", re.IGNORECASE), r"http\1"),
    (re.compile(r"\[:\]"), ":"),
]


# A dot spelled out or set apart by spaces ("site dot com", "site . com") after a name with a
# letter in it: a host a reader types in, when what follows is a domain suffix.
_SPELLED_DOT = re.compile(r"(?<![\w-])([\w-]+)\s+(?:\.|dot)\s+(?=([^\W\d_]{2,24})\b)", re.IGNORECASE)


def unfold(text: str, *, fold_case: bool = True) -> str:
    """NFKC, case-folded (unless ``fold_case`` is false), invisible characters dropped, exotic
    dots and defanged links undone (also a dot spelled out or spaced before a domain suffix:
    ``site dot com``)."""
    text = unicodedata.normalize("NFKC", text).translate(_DOTS).translate(_INVISIBLE)
    text = text.casefold() if fold_case else text
    for pattern, repl in _DEFANG:
        text = pattern.sub(repl, text)
    low = text if fold_case else text.lower()
    if " dot " not in low and " . " not in low:
        return text
    return _SPELLED_DOT.sub(_spelled_dot, text)


def _spelled_dot(m: re.Match[str]) -> str:
    name, suffix = m.group(1), m.group(2)
    if any(c.isalpha() for c in name) and public_suffix([suffix.casefold()]):
        return name + "."
    return m.group(0)


# -- links -----------------------------------------------------------------------------------

_WEB_LOOSE = re.compile(
    r"(?:\b(https?):[/\\]*|(?<![\w:/\\])[/\\]{2})([^\s/\\<>\"'`?#]+)([/\\?#][^\s<>\"'`]*)?", re.IGNORECASE
)
_SCHEME_ONLY = re.compile(r"\b[a-z][a-z0-9+.-]{1,15}://[^\s<>\"'`]+", re.IGNORECASE)
# A run of characters a host name can be made of, wherever it stands: glued to other words,
# to digits, to underscores or to punctuation, a host inside it is still found.
_HOST_RUN = re.compile(r"[\w.-]+", re.UNICODE)
_SCHEME_BEFORE = re.compile(r"([a-z][a-z0-9+.-]{1,15})://$", re.IGNORECASE)
_PATH_AFTER = re.compile(r"(?::\d{1,5})?([/?#][^\s<>\"'`)\]]*)?")
_IPV4 = re.compile(r"(?<!\d)(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?!\d)")


@dataclass(frozen=True, slots=True)
class Link:
    """One link found in text. ``key`` compares links (host without ``www.``, path without a
    trailing slash); ``registered`` is the host as the DNS knows it (punycode for IDN);
    ``site`` is its registrable domain (``mail.example.co.uk`` → ``example.co.uk``), by the
    Public Suffix List, or the host itself for an address or a name without a public suffix."""

    raw: str
    host: str
    registered: str
    key: str
    site: str = ""


@functools.lru_cache(maxsize=4096)
def _registered(host: str) -> str:
    """The host as a browser resolves it (``label_to_ascii``: ``ß`` stays ``ß``, encoded)."""
    try:
        return ".".join(label_to_ascii(label) if label else label for label in host.split("."))
    except UnicodeError:
        return host.encode("ascii", "backslashreplace").decode("ascii")


def fold(text: str) -> str:
    """``text`` case-folded as a host or an address is compared: as ``str.casefold``, except that
    the IDNA deviation characters keep their own form (``busineß`` is not ``business``: a browser
    and a mail server reach another name)."""
    if _KEPT.isdisjoint(text):
        return text.casefold()
    return "".join(c if c in _KEPT else c.casefold() for c in text)


_KEPT = frozenset("\u00df\u03c2")


@functools.cache
def _suffixes() -> Any:
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def public_suffix(labels: Sequence[str]) -> bool:
    """Whether ``labels`` (registered form) end in a suffix the Public Suffix List knows."""
    return bool(labels) and _suffixes().publicsuffix(".".join(labels), accept_unknown=False) is not None


def registrable(host: str) -> str:
    """The registrable domain of ``host`` (``www.a.example.com`` → ``example.com``), by the
    Public Suffix List; the host itself for an IP address or a name with no known suffix."""
    reg = _registered(host.rstrip(".")).lower()
    if _IPV4.fullmatch(reg):
        return reg
    return _suffixes().privatesuffix(reg, accept_unknown=False) or reg


def link_key(host: str, path: str = "") -> str:
    host = _registered(host.rstrip(".")).removeprefix("www.")
    return host + path.rstrip("/.,;:!?")


def _hosts_in_run(run: str) -> list[tuple[int, int]]:
    """Spans of the hosts inside one run of host characters (letters, digits, ``_.-``).

    A dotted sequence is a host when its last label is a word of two letters or more (any
    top-level domain, known or not, as a reader would take it), when a label in the middle
    is a suffix the Public Suffix List knows (``a.com.evil.org`` holds ``a.com`` too), or
    when a label begins with a known top-level domain glued to digits or ``_``/``-``
    (``site.com123``: a check that looks for the link as a substring still finds
    ``site.com``) at the end of the run. Whatever stands glued before the host stays in it;
    its registrable domain is unchanged."""
    spans: list[tuple[int, int]] = []
    labels = run.split(".")
    starts = []
    pos = 0
    for label in labels:
        starts.append(pos)
        pos += len(label) + 1
    first = lo = 0
    for i in range(1, len(labels)):
        if not labels[i - 1].strip("_-"):
            first = i  # an empty label ("a..b") breaks the sequence
            continue
        label = labels[i].rstrip("_-")
        end = -1
        last = i == len(labels) - 1 or not labels[i + 1]
        if _ALPHA_LABEL.fullmatch(label) and (last or public_suffix([_registered(label.casefold())])):
            end = starts[i] + len(label)
        elif (
            last
            and (head := _GLUED_HEAD.match(label))
            and public_suffix([_registered(head.group(1).casefold())])
        ):
            end = starts[i] + len(head.group(1))
        if end > 0:
            # No host is longer than the DNS allows: what is glued before it beyond that is
            # no part of it (and a run of suffixes, "com.com.com…", costs linear work).
            lo = max(lo, first)
            while end - starts[lo] > _HOST_MAX:
                lo += 1
            start = starts[lo]
            while start < end and not run[start].isalnum():
                start += 1
            spans.append((start, end))
    return spans


_HOST_MAX = 253
_ALPHA_LABEL = re.compile(r"[^\W\d_]{2,63}|xn--[a-z0-9-]{2,59}", re.IGNORECASE)
_GLUED_HEAD = re.compile(r"([^\W\d_]{2,63})[\d_-]")


_REMEMBERED_CHARS = 2048  # joined pieces, reread per later element (bench/provenance_lines.py)


def find_links(text: str) -> list[Link]:
    """Every link in ``text`` (``_links``; a short text's remembered, as pieces are reread)."""
    return list(_links(text) if len(text) <= _REMEMBERED_CHARS else _links.__wrapped__(text))


@functools.lru_cache(maxsize=1024)
def _links(text: str) -> tuple[Link, ...]:
    """Every link in ``text``: hosts with a public suffix found anywhere in a token (see
    ``_hosts_in_run``), IPv4 addresses, ``scheme://`` links with a dotless host, and URIs of
    any other scheme (``javascript:``, ``data:``, ``file:``, ``mailto:``…, see ``_uris``). Text
    is NFKC-normalised, invisible characters dropped and defanged forms undone first; what a
    browser decodes (character references, percent escapes) is read decoded as well. A host
    and a scheme are compared case-folded, a path and what follows another scheme's colon as
    written: a server that tells ``/Deal`` from ``/deal`` receives what the key says."""
    folded = unfold(text, fold_case=False)
    out: list[Link] = []
    seen: set[str] = set()

    def add(raw: str, host: str, path: str) -> None:
        host = fold(host)
        key = link_key(host, path)
        if key not in seen:
            seen.add(key)
            out.append(Link(raw, host, _registered(host), key, registrable(host)))

    decoded = unfold(_decoded(text), fold_case=False) if "&" in text or "%" in text else folded
    # And as written: a browser maps a host's compatibility characters (NFKC) but sends a path as
    # written, so ``bit.ly/Ｇrand`` is another page than ``bit.ly/Grand``, whatever it folds to.
    written = compose(text).translate(_INVISIBLE)
    # And as drawn, where an override reverses what follows it (``displayed``).
    shown = unfold(displayed(text), fold_case=False) if "\u202e" in text else folded
    # And with the tabs and newlines a browser drops from a URL (``joined``).
    spans = (text, _decoded(text)) if "&" in text or "%" in text else (text,)
    joined = [unfold(joined_url(v), fold_case=False) for v in spans if _TAB_OR_NEWLINE & set(v)]
    for view in dict.fromkeys((folded, decoded, written, shown, *joined)):
        _hosts_in(view, add)
    for m in _IPV4.finditer(folded):
        add(m.group(0), m.group(0), "")
    # A scheme with a host that has no dot ("http://intranet/x") is a link too.
    for m in _SCHEME_ONLY.finditer(folded):
        rest = m.group(0).split("://", 1)[1]
        host, _, path = rest.partition("/")
        key = link_key(fold(host), "/" + path if path else "")
        if key not in seen and not any(key.startswith(k) for k in seen):
            add(m.group(0), host, "/" + path if path else "")
    # A web link however loosely a browser takes it: ``http:host`` without slashes, backslashes
    # for slashes, ``//host`` in markup; its host may have no dot (``//3232235777`` is an IPv4
    # address) and is what follows any ``user@``.
    for m in _WEB_LOOSE.finditer(folded):
        if m.group(1) is None and _markup_before(folded, m.start()) is None:
            continue
        host = _host_of(m.group(2).rsplit("@", 1)[-1])
        path = (m.group(3) or "").replace("\\", "/")
        key = link_key(fold(host), path)
        if host and key not in seen and not any(key.startswith(k) for k in seen):
            add(m.group(0), host, path)
    for value in _uris(decoded):
        if value not in seen:
            seen.add(value)
            out.append(Link(value, "", value[:200], value, value))
    return tuple(out)


_TAB_OR_NEWLINE = frozenset("\t\n\r")
_ATTRIBUTE = re.compile(r"""=\s*("[^"]*"|'[^']*')""")


def joined_url(text: str) -> str:
    """``text`` as a URL parser reads the URLs in it (WHATWG, ``urllib.parse``): without the
    ASCII tabs and newlines it drops from one. A value that is a single token but for them is
    read whole so (``https://docs.example/d/abc/..<TAB>/evil`` opens ``/d/evil``), and so is a
    quoted attribute's value in markup (``href="…"``); prose is not (a line that ends with a
    link and the next line are two texts, to an autolinker as to a reader)."""
    strip = str.maketrans("", "", "\t\n\r")
    if not any(c.isspace() for c in text.strip().translate(strip)):
        return text.translate(strip)
    return _ATTRIBUTE.sub(lambda m: m.group(0).translate(strip), text)


def _host_of(authority: str) -> str:
    """The host of an authority without its user: an IPv6 literal whole, brackets and all
    (``[2001:db8::1]``, not ``[2001``: every address of the block would be one host), else
    what stands before a port."""
    if authority.startswith("["):
        end = authority.find("]")
        return authority[: end + 1] if end > 0 else authority
    return authority.split(":", 1)[0]


def _hosts_in(folded: str, add: Any) -> None:
    """Calls ``add(raw, host, path)`` for each host (with its path) inside ``folded``; the domain
    of an address is left to the handle check only where that check reads the address."""
    found = _EMAIL.finditer(folded) if "@" in folded else iter(())
    mails = {m.start() + m.group(0).index("@"): m.end() for m in found}  # where each @ is: its end
    for m in _HOST_RUN.finditer(folded):
        run = m.group(0)
        if "." not in run:
            continue
        for a, b in _hosts_in_run(run):
            start, end = m.start() + a, m.start() + b
            host = folded[start:end]
            if mails.get(start - 1, -1) >= end:
                continue  # the domain of an e-mail address: a handle, checked as one
            path = ""
            if end == m.end():
                after = _PATH_AFTER.match(folded, end)
                path = after.group(1) or "" if after else ""
            scheme = _SCHEME_BEFORE.search(folded[max(0, start - 20) : start])
            raw = (scheme.group(0) if scheme else "") + host + path
            add(raw.rstrip(".,;:!?"), host, path)


# -- URIs of any scheme ----------------------------------------------------------------------

# A scheme (RFC 3986) and its colon, with the control characters a browser strips from a URL
# (tab, line feed…) allowed between its letters; not inside a longer word, an address or a host.
# Matched on the text reversed, from each colon back: a long run with no colon costs one pass.
_URI_REVERSED = re.compile(
    r":[\x00-\x1f\x7f]*((?:[a-z0-9+.-][\x00-\x1f\x7f]*){1,31}[a-z])(?![\w+.@-])", re.IGNORECASE
)
_CONTROLS = re.compile(r"[\x00-\x1f\x7f]+")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]+", re.IGNORECASE)
_PROSE_START = re.compile(r"[\w/\\%#?(+~\[{!$.'\"@-]")  # not "Note: x", "**Note:**"
_REST = re.compile(r"[^\s<>\"'`]+")
_MARKUP_REST = re.compile(r"[\s\x00-\x1f]*[^\s<>\"'`]+")
_WEB = frozenset({"http", "https"})  # compared by host and path (``_hosts_in``)
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_OFFSET = re.compile(r"[+-]\d{1,2}$")  # "gmt+1" in "gmt+1:00" is a time zone, no scheme
# A percent escape of a printable character (an escaped space stays one, inside its link).
_PERCENT = re.compile(r"%(2[1-9a-f]|[3-6][0-9a-f]|7[0-9a-e])", re.IGNORECASE)


def _decoded(text: str) -> str:
    """``text`` as a browser or a second decoder reads a URL in it: character references
    (``&#115;``, ``&colon;``) and percent escapes undone, twice-encoded ones too."""
    for _ in range(3):
        before = text
        text = html.unescape(text) if "&" in text else text
        text = _PERCENT.sub(lambda m: chr(int(m.group(1), 16)), text) if "%" in text else text
        if text == before:
            break
    return text


def _uris(folded: str) -> list[str]:
    """Each URI of a scheme other than the web's in (unfolded, decoded) ``folded``, as its whole
    normalised value: the scheme without control characters, then what follows the colon up
    to a space (to the closing quote of a quoted attribute), control characters stripped, and
    trailing punctuation or an unbalanced closing bracket dropped. A scheme that is a host
    name (``www.site.com:8080``) is the host's link; ``10:30`` and ``key: value`` are none.
    In prose, where a line break may only part two words, a scheme with control characters
    inside also stands as the word after them (``send\njavascript:`` holds ``javascript:``)."""
    out: list[str] = []
    pos = 0
    for m in reversed(list(_URI_REVERSED.finditer(folded[::-1]))):
        start, end = len(folded) - m.end(), len(folded) - m.start()  # scheme and colon
        if start < pos:
            continue  # inside the link before it
        written = m.group(1)[::-1].casefold()
        scheme = _CONTROLS.sub("", written)
        web = scheme in _WEB or ("." in scheme and bool(_hosts_in_run(scheme)))
        quote = None if web else _markup_before(folded, start)  # a web link: with what its path holds
        rest = _rest_after(folded, end, quote) or ""
        pos = end + len(rest)
        rest = _trimmed(_CONTROLS.sub("", rest).strip())
        if web or _OFFSET.search(scheme):
            continue  # a web link (or a time zone, "utc+2:00")
        if not rest or _EMAIL.fullmatch(rest):
            continue  # a label before an address ("email:bob@x.example"), checked as a handle
        schemes = [scheme]
        if quote is None and (last := _CONTROLS.split(written)[-1]) != scheme and _SCHEME.fullmatch(last):
            schemes.append(last)
        out.extend(v for s in schemes if (v := s + ":" + rest) not in out)
    return out


def _markup_before(text: str, start: int) -> str | None:
    """The quote of the attribute the URI at ``start`` opens (``href="…"``), ``""`` for other
    markup (``href=…``, ``[text](…)``, ``<…>``), ``None`` in prose; the spaces and control
    characters a browser strips before a URL are skipped."""
    i = _blank_before(text, start)
    quote = ""
    if i and text[i - 1] in "\"'":
        quote, i = text[i - 1], _blank_before(text, i - 1)
    if i and text[i - 1] == "=":
        return quote
    return "" if not quote and (text[max(0, i - 2) : i] == "](" or text[i - 1 : i] == "<") else None


def _blank_before(text: str, i: int) -> int:
    while i and (text[i - 1].isspace() or text[i - 1] < " " or text[i - 1] == "\x7f"):
        i -= 1
    return i


def _rest_after(text: str, end: int, quote: str | None) -> str | None:
    """What follows a scheme's colon at ``end``: to the closing quote of a quoted attribute, to
    a space in other markup (spaces after the colon skipped), in prose only what can open a URI."""
    close = text.find(quote, end, end + 4096) if quote else -1
    if close >= 0:
        return text[end:close]
    found = (_MARKUP_REST if quote == "" else _REST).match(text, end)
    return found.group(0) if found and (quote == "" or _PROSE_START.match(text, end)) else None


def _trimmed(rest: str) -> str:
    """``rest`` without the punctuation that ends a sentence or a closing bracket it never
    opened (``javascript:go())."`` is ``javascript:go()``), in one pass from the end."""
    unmatched = {c: rest.count(c) - rest.count(o) for c, o in _CLOSERS.items()}
    end = len(rest)
    while end and (rest[end - 1] in ".,;:!?'\"" or unmatched.get(rest[end - 1], 0) > 0):
        unmatched[rest[end - 1]] = unmatched.get(rest[end - 1], 0) - 1
        end -= 1
    return rest[:end]


# A local part may hold the other marks RFC 5322 allows between its letters (``o'brien``,
# ``sales&events``): an address is read whole, not as the ``brien@…`` after the mark, another
# mailbox at a webmail. Not ``=`` (``email=bob@x`` is a key and its value) nor ``%`` or ``?``.
LOCAL_MARKS = "!#$&'*^`{|}~"
_EMAIL = re.compile(
    # (Begun only where a local part begins, so a long run of letters and marks is read once; its
    # runs of letters and of marks alternate, one way only, so no quantifier needs to be possessive.)
    r"(?<![\w.+-])(?<![\w.+-][!#$&'*^`{|}~])(?:[\w.+-]+[!#$&'*^`{|}~]+)*[\w.+-]+"
    r"@[^\W_](?:[\w-]*[^\W_])?(?:\.[^\W_](?:[\w-]*[^\W_])?)+"
)
# Account numbers of the IBAN shape, found even when glued to other characters.
_IBAN = re.compile(r"[a-z]{2}\d{2}[a-z0-9]{10,30}(?![a-z0-9])")
# ... and as a bank prints one: groups of four apart by spaces (runs, line breaks, as ``normalise``
# reads them), any dash, or a dot, slash or underscore before a group with a digit (``db01.prod``: none).
_WHITE = r"[ \t\r\n]"  # what ``normalise`` reads as one space, in runs
_DASHES = "\u2010-\u2015\u2212"  # hyphens, figure, en and em dashes, the minus sign
_PRINTED_GAP = (
    rf"(?:{_WHITE}*[-{_DASHES}]{_WHITE}*|{_WHITE}+|{_WHITE}*(?:[^\w\s@]|_){_WHITE}*(?=[a-z]{{0,3}}\d))"
)
_IBAN_PRINTED = re.compile(
    rf"(?<![a-z0-9])[a-z]{{2}}\d{{2}}(?:{_PRINTED_GAP}[a-z0-9]{{4}}){{2,7}}"
    rf"(?:{_PRINTED_GAP}[a-z0-9]{{1,3}})?(?![a-z0-9])"
)
_NOT_ALNUM = re.compile(r"[^a-z0-9]")


def find_handles(text: str) -> list[str]:
    """E-mail addresses and IBAN-shaped accounts in ``text`` (``_handles``, remembered as links are)."""
    return list(_handles(text) if len(text) <= _REMEMBERED_CHARS else _handles.__wrapped__(text))


@functools.lru_cache(maxsize=1024)
def _handles(text: str) -> tuple[str, ...]:
    """E-mail addresses, IBAN-shaped account numbers and wallet addresses in ``text``, unfolded
    (lower case), wherever they stand: glued to other characters they are still found (with
    their glue, so the handle checked is the one a reader would copy); in each of its
    ``reader_views``."""
    shown = [unfold(view, fold_case=False) for view in reader_views(text)]
    out: list[str] = []
    for folded in map(fold, shown):  # as written, as drawn, as rendered
        for pattern in (_EMAIL, _IBAN):
            for m in pattern.finditer(folded):
                if m.group(0) not in out:
                    out.append(m.group(0))
        for m in _IBAN_PRINTED.finditer(folded):  # the account it prints, as one value
            account = _NOT_ALNUM.sub("", m.group(0))
            if len(account) >= 14 and account not in out:
                out.append(account)
        out.extend(a for a in spread_accounts(folded) if a not in out)
        out.extend(a for a in find_payment_addresses(folded) if a not in out)
    wallets = list(dict.fromkeys(w for view in shown for w in find_wallets(view)))
    return tuple([*(h for h in out if not any(h in w for w in wallets)), *wallets])


# A number set apart from words as a reader takes one whole (``contains_whole``): digits, with
# what a phone or an account is printed with between them, a "+" before: spaces (runs, line breaks,
# as ``normalise`` reads them), a dot, any dash, slash, underscore or middle dot (spaced or not), a
# bracket, a comma or apostrophe grouping thousands; not run on from a token nor into one.
_MARK = rf"[./_\-{_DASHES}\u00b7]"
# Written so that a gap matches its spaces one way only (each run of spaces ends at a mark, a
# bracket or a digit), with no possessive quantifier (``*+``), which CPython before 3.11.4 matches
# wrongly in some patterns: a number run into a word backtracks through its groups in linear time.
_NUMBER_GAP = rf"(?:[,'\u2019](?=\d{{3}}(?!\d))|{_WHITE}*(?:{_MARK}{_WHITE}*)?(?:[()]{_WHITE}*)?)"
_NUMBER = re.compile(rf"(?<![\w@.+/:-])\+?\(?\d(?:{_NUMBER_GAP}\d)*(?![\w@+/-])")
# A day written in figures, no more groups on either side (``01.23.45.67.89`` is a phone).
_DATE = r"(?<![\d./-])(?:\d{4}([-./])\d{1,2}\1\d{1,2}|\d{1,2}([-./])\d{1,2}\2\d{2,4})(?![./-]?\d)"
_DATED = re.compile(_DATE)
_DAY = re.compile(r"(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])")  # 20240512
_CENTS = re.compile(r"[.,]\d{1,2}")  # the fraction of a sum of money
PARTY_DIGITS = 8  # the digits of a number that may name a party (a phone, an account), at least


def undated(text: str) -> str:
    """``text`` with its days (``2024-05-20``, ``20240520``) blanked, each character a space:
    pieces a store glues together are read for numbers this way, so that two days that touch
    (``2024-05-20`` + ``2024-05-21``) make no number, while digits a day stands beside still join
    the next piece's (``2024-05-12 000123`` + ``456789``)."""
    blanked = _DATED.sub(lambda m: " " * len(m.group(0)), text)
    return _NUMBER.sub(lambda m: " " * len(m.group(0)) if _DAY.fullmatch(m.group(0)) else m.group(0), blanked)


def find_numbers(text: str) -> list[str]:
    """Numbers in ``text`` that may name a party in a shape no other handle has (a phone, a
    bank account of digits: ``+44 7700 900123``, ``000.123.456.789``), as written (spaces
    folded): eight digits or more set apart from words, found also with the dates beside them
    left out (``2024-05-12 000123456789``); not a sum's cents (``1 250 000.00`` is an amount) nor a day,
    nor the digits of an account ``find_handles`` finds (judged as that account)."""
    out: list[str] = []
    for view in reader_views(text):
        unfolded = unfold(view, fold_case=False)
        undated = _DATED.sub(lambda m: " " * len(m.group(0)), unfolded)
        found = [m.group(0) for m in _NUMBER.finditer(unfolded) if not _DATED.search(m.group(0))]
        found += [m.group(0) for m in _NUMBER.finditer(undated)]
        accounts = [a for a in find_handles(view) if "@" not in a]
        for number in found:
            whole, dot, cents = number.rpartition(".")
            sum_of_money = dot and number.count(".") == 1 and _CENTS.fullmatch(dot + cents)
            raw = " ".join((whole if sum_of_money else number).split())
            digits = "".join(c for c in raw if c.isdigit())
            if len(digits) < PARTY_DIGITS or raw in out or _DAY.fullmatch(raw):
                continue  # too short to name anyone, or a day (``20240512``)
            if not any(digits in a for a in accounts):
                out.append(raw)
    return out
