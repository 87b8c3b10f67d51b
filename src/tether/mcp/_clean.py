"""Clean a tool result's text before it reaches the model, the logs or memory.

``clean_result_text`` removes and counts what a person cannot see but a model reads (invisible
format characters, bidi controls, tag characters, variation selectors, control characters) and
neutralises markup that acts when rendered (HTML comments cut, image targets dropped, links
showing only their host, self-loading elements removed). ``escape_for_review`` writes every
invisible or control character as a visible ``<U+XXXX>``.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

from tether.core._confusables import DEFAULT_IGNORABLE

__all__ = ["clean_result_data", "clean_result_text", "escape_for_review", "hidden_kind"]

MAX_DECODED = 500

# Blank fillers that are not default-ignorable but are drawn as an empty cell: the Braille blank.
_BLANK_FILLERS = {0x2800}
_ZERO_WIDTH = {*(code for low, high in DEFAULT_IGNORABLE for code in range(low, high + 1)), *_BLANK_FILLERS}
_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}

_SUSPECT = re.compile(r"[^\x20-\x7e\n\t]")
_PLAIN = bytes(range(0x20, 0x7F)) + b"\n\t"  # every character _SUSPECT leaves alone
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_IMAGE = re.compile(r"!\[([^\]\n]{0,500})\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)\n]*)?\)")
_REF_IMAGE = re.compile(r"!\[([^\]\n]{0,500})\]\[([^\]\n]{0,200})\]")
_HTML_IMG = re.compile(r"<\s*img\b[^>]*>", re.IGNORECASE)
_LINK = re.compile(r"\[([^\]\n]{0,500})\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)\n]*)?\)")
_HREF = r"""\bhref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))"""
_HTML_LINK = re.compile(rf"<\s*a\b[^>]*?{_HREF}[^>]*>(.{{0,2000}}?)<\s*/\s*a\s*>", re.IGNORECASE | re.DOTALL)
_HTML_OPEN_LINK = re.compile(rf"<\s*a\b[^>]*?{_HREF}[^>]*>", re.IGNORECASE)
# Elements a renderer loads or submits by themselves: removed with their target.
_HTML_FETCHING = re.compile(
    r"<\s*(iframe|frame|script|embed|object|link|source|video|audio|form|meta|base)\b[^>]*>", re.IGNORECASE
)
_LINK_DEF = re.compile(r"^[ \t]{0,3}\[([^\]\n]{1,200})\]:[ \t]*<?(\S+?)>?(?:[ \t]+.*)?$", re.MULTILINE)


def hidden_kind(ch: str) -> str | None:
    """Why a character is invisible to a reader, or ``None`` for an ordinary one."""
    code = ord(ch)
    if ch in "\n\t":
        return None
    if 0xE0000 <= code <= 0xE007F:
        return "tag"
    if 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF:
        return "variation_selector"
    if code in _BIDI:
        return "bidi"
    if code in _ZERO_WIDTH:
        return "zero_width"
    category = unicodedata.category(ch)
    if category == "Cc":
        return "control"
    if category in ("Cf", "Co", "Cs", "Cn"):
        return "other_format"
    if category in ("Zl", "Zp"):
        return "line_separator"
    return None


def _host(url: str) -> str:
    try:
        host = urlsplit(url).hostname
    except ValueError:
        host = None
    if host:
        return host
    return "a relative target" if url and "://" not in url else "an unparsable target"


def _plain(text: str) -> bool:
    """``_SUSPECT.search(text) is None``, by a byte table (far faster than the regex)."""
    return text.isascii() and not text.encode().translate(None, _PLAIN)


def clean_result_text(text: str) -> tuple[str, dict[str, Any]]:
    """The text cleaned, and what was done: ``hidden_chars`` (kind → count), ``hidden_tag_text``
    (the ASCII smuggled in tag characters), ``html_comments``, ``images``, ``links``."""
    if "[" not in text and "<" not in text and "\r" not in text and _plain(text):
        return text, {}  # plain text with no markup: nothing to look at (the common case)
    cleaned, meta = _strip_hidden(text)
    cleaned, n = _COMMENT.subn(lambda m: f"[html comment removed: {len(m.group(0))} characters]", cleaned)
    cleaned, images = _neutralise_images(cleaned)
    cleaned, links = _neutralise_links(cleaned)
    meta.update((k, v) for k, v in (("html_comments", n), ("images", images), ("links", links)) if v)
    return cleaned, meta


def _strip_hidden(text: str) -> tuple[str, dict[str, Any]]:
    """Hidden characters removed (counted by kind; tag characters' ASCII kept for the review)."""
    counts: Counter[str] = Counter()
    tags: list[str] = []

    def strip(m: re.Match[str]) -> str:
        ch = m.group(0)
        kind = hidden_kind(ch)
        if kind is None:
            return ch
        counts[kind] += 1
        if kind == "tag" and 0xE0020 <= ord(ch) <= 0xE007E and len(tags) < MAX_DECODED:
            tags.append(chr(ord(ch) - 0xE0000))
        return "\n" if kind == "line_separator" or ch == "\r" else ""

    # Only characters outside printable ASCII are looked at: plain text costs one regex scan.
    cleaned = _SUSPECT.sub(strip, text.replace("\r\n", "\n"))
    meta: dict[str, Any] = {}
    if counts:
        meta["hidden_chars"] = dict(sorted(counts.items()))
    if tags:
        meta["hidden_tag_text"] = "".join(tags)
    return cleaned, meta


def _neutralise_images(text: str) -> tuple[str, int]:
    """Markdown and HTML images replaced by a note (a rendered image fetches its target)."""

    def image(m: re.Match[str]) -> str:
        return f"[image {m.group(1)!r} not shown: its target on {_host(m.group(2))} was removed]"

    text, a = _IMAGE.subn(image, text)  # images first: the link pattern would match their tail
    text, b = _REF_IMAGE.subn(lambda m: f"[image {m.group(1)!r} not shown]", text)
    text, c = _HTML_IMG.subn("[html image removed]", text)
    return text, a + b + c


def _neutralise_links(text: str) -> tuple[str, int]:
    """Links keep their text and lose their target (its host named); loading elements are removed."""

    def html_link(m: re.Match[str]) -> str:
        target = next((g for g in m.groups()[:3] if g is not None), "")
        inner = m.group(4) if m.lastindex and m.lastindex >= 4 and m.group(4) is not None else ""
        return f"{inner}{' ' if inner else ''}[link to {_host(target)} removed]"

    text, a = _LINK.subn(lambda m: f"{m.group(1)} [link to {_host(m.group(2))} removed]", text)
    text, b = _LINK_DEF.subn(lambda m: f"[{m.group(1)}]: [link to {_host(m.group(2))} removed]", text)
    count = a + b
    if "<" in text:  # raw HTML: links cleaned like markdown ones, loading elements removed
        text, c = _HTML_LINK.subn(html_link, text)
        text, d = _HTML_OPEN_LINK.subn(html_link, text)
        text, e = _HTML_FETCHING.subn(lambda m: f"[html {m.group(1).lower()} removed]", text)
        count += c + d + e
    return text, count


def _untouched(value: Any) -> bool:
    """Whether ``clean_result_text`` leaves every string of ``value`` (keys included) as it is,
    judged on the value written as JSON at once: no escape (so no control character, and each
    string stands in it verbatim), no ``<`` (HTML, comments), no ``](``, ``][`` or ``]:`` (what
    every markdown image, link and link definition holds, which JSON's own brackets never
    write), and no character ``hidden_kind`` names. ``False`` when unsure (not JSON)."""
    import json

    try:
        blob = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return False
    if "\\" in blob or "<" in blob or "](" in blob or "][" in blob or "]:" in blob:
        return False
    return _plain(blob) or all(hidden_kind(ch) is None for ch in set(_SUSPECT.findall(blob)))


def clean_result_data(value: Any) -> tuple[Any, dict[str, Any]]:
    """``clean_result_text`` on every string (keys included) of a JSON-like value, counts summed.
    A value none of whose strings it would change is returned as it is, judged at once
    (``_untouched``): walked string by string, a result of 800,000 keys held the event loop for
    tens of seconds, past its run's deadline."""
    if _untouched(value):
        return value, {}
    total: dict[str, Any] = {}

    def merge(meta: dict[str, Any]) -> None:
        for key, v in meta.items():
            if key == "hidden_chars":
                bucket = total.setdefault(key, {})
                for kind, n in v.items():
                    bucket[kind] = bucket.get(kind, 0) + n
            elif key == "hidden_tag_text":
                total[key] = (total.get(key, "") + v)[:MAX_DECODED]
            else:
                total[key] = total.get(key, 0) + v

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            text, meta = clean_result_text(v)
            merge(meta)
            return text
        if isinstance(v, dict):
            return {walk(k) if isinstance(k, str) else k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value), total


def escape_for_review(text: str, limit: int = 4000) -> str:
    """The raw text for a person: invisible and control characters shown as ``<U+XXXX>``."""
    more = f"… [{len(text) - limit} more characters]" if len(text) > limit else ""
    if text.isascii() and text.isprintable():  # nothing to show (the common case, and fast)
        return text[:limit] + more
    return "".join(f"<U+{ord(ch):04X}>" if hidden_kind(ch) is not None else ch for ch in text[:limit]) + more
