"""HTML rendering: Jinja2 with autoescaping, and filters that show untrusted text exactly, but
with every character a reviewer could not see (zero-width, bidi, tags, controls) as a flagged,
visible escape such as ``\\u200b``."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from tether.console._runs import SHOWN_DEPTH, nests_deeper, shallow
from tether.core._confusables import check_name, find_names
from tether.core.types import Effect, StopReason
from tether.mcp._clean import hidden_kind

__all__ = [
    "SHOWN_DEPTH",
    "environment",
    "hidden_chars",
    "names_in",
    "pretty_json",
    "reorders",
    "reveal",
    "token",
]

_TEMPLATES = Path(__file__).with_name("templates")


def _code(ch: str) -> str:
    return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"


def hidden_chars(text: str) -> list[str]:
    """The code points (``U+200B`` …) of every hidden character in ``text``, once each, in order."""
    seen: dict[str, None] = {}
    for ch in text:
        if hidden_kind(ch):
            seen.setdefault(f"U+{ord(ch):04X}")
    return list(seen)


SHOWN_TEXT = 20_000  # one value shown on a page: longer text is cut, with its length said
FLAGGED = 200  # hidden characters flagged one by one in a value; the rest are plain escapes


def _cut(text: str, limit: int) -> tuple[str, str]:
    """``text`` cut at ``limit`` characters, and the note that says so (empty if not cut)."""
    if len(text) <= limit:
        return text, ""
    return text[:limit], f"\u2026 [cut: showing {limit} of {len(text)} characters]"


_RIGHT_TO_LEFT = ("R", "AL")  # bidirectional classes of Hebrew, Arabic, Syriac, Thaana … letters
_LEFT_TO_RIGHT = ("L", "EN", "AN")  # Latin letters, digits: what a right-to-left run reorders


def reorders(text: str) -> bool:
    """Whether a browser would draw ``text`` in another order than it is stored: right-to-left
    letters next to digits or left-to-right letters (``5 \u05d0 1000 250`` reads
    ``5 250 1000 \u05d0``), with no bidi control in sight."""
    if text.isascii():
        return False
    kinds = {unicodedata.bidirectional(ch) for ch in text}
    return any(k in kinds for k in _RIGHT_TO_LEFT) and any(k in kinds for k in _LEFT_TO_RIGHT)


_STORED_ORDER = Markup(
    '<bdo dir="ltr" class="stored-order" title="right-to-left letters among digits or Latin'
    ' letters: shown left to right in the order stored, as it runs">'
)


def reveal(value: Any, limit: int = SHOWN_TEXT) -> Markup:
    """HTML for untrusted text: escaped, each hidden character a flagged escape (past ``FLAGGED``,
    plain escapes), at most ``limit`` characters (a note gives the full length). Text a browser
    would reorder (``reorders``) is drawn in the order stored (``<bdo dir="ltr">``)."""
    text, note = _cut(value if isinstance(value, str) else str(value), limit)
    shown = _revealed(text)
    return (_STORED_ORDER + shown + Markup("</bdo>") if reorders(text) else shown) + note


def _revealed(text: str) -> Markup:
    if not any(hidden_kind(ch) for ch in text):
        return escape(text)
    parts: list[str] = []
    flagged = 0
    for ch in text:
        if hidden_kind(ch):
            flagged += 1
            if flagged > FLAGGED:
                parts.append(_code(ch))
                continue
            name = unicodedata.name(ch, "unnamed")
            parts.append(
                f'<span class="hidden-char" title="hidden character U+{ord(ch):04X} {escape(name)}">'
                f"{_code(ch)}</span>"
            )
        else:
            parts.append(str(escape(ch)))
    return Markup("".join(parts))


def plain(value: Any, limit: int = 200) -> str:
    """Untrusted text where markup cannot go (a page title): hidden characters as plain escapes,
    cut at ``limit`` characters (autoescaping escapes the rest)."""
    text, note = _cut(value if isinstance(value, str) else str(value), limit)
    return "".join(_code(ch) if hidden_kind(ch) else ch for ch in text) + note


def segment(value: Any) -> str:
    """``value`` as one URL path segment: every reserved character percent-encoded, and ``.``
    and ``..`` too, so an id can never lead a link or a form to another path. A lone surrogate
    (a trace's JSON ``"\\ud800"``), which no UTF-8 holds, is written as its escape, as ``reveal``
    shows it: it made the page that links it (a run's, by a rule or proposal its trace names) a
    server error for every reader."""
    text = quote(value if isinstance(value, str) else str(value), safe="", errors="backslashreplace")
    return text.replace(".", "%2E") if text in (".", "..") else text


def names_in(*texts: Any) -> list[dict[str, Any]]:
    """The look-alike check of every URL, e-mail address and domain in ``texts`` (or their strings)."""
    found: dict[str, None] = {}
    stack = list(texts)
    while stack and len(found) < 50:
        value = stack.pop(0)
        if isinstance(value, str):
            found.update(dict.fromkeys(find_names(value, limit=20)))
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return [check_name(n).to_json() for n in found]


def pretty_json(value: Any) -> str:
    """Indented JSON with sorted keys; non-ASCII kept (``reveal`` flags what cannot be seen).
    Whatever nests deeper than ``SHOWN_DEPTH`` levels is cut (``shallow``: the indenting encoder
    recurses once a level, and an MCP server, a model or a trace may nest hundreds deep), each
    cut marked where it is and the whole said cut on a first line."""
    if not nests_deeper(value):
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    text = json.dumps(shallow(value), indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return f"[cut: nested deeper than {SHOWN_DEPTH} levels, the deeper parts not shown]\n{text}"


# The words a value may add to an element's ``class`` (``token``): a closed set each, so that text
# a run, a tool or a store writes (a proposal's declared effect, a trace's stop reason) never adds
# classes of its own through spaces (``effect-write hidden-char``) nor styles with a made-up one.
CLASS_WORDS: dict[str, frozenset[str]] = {
    "effect": frozenset(e.value for e in Effect),
    "stop": frozenset({*(r.value for r in StopReason), "running"}),
}


def token(value: Any, kind: str) -> str:
    """``value`` as one word of an element's ``class``: itself where it is one of ``kind``'s
    known words (``CLASS_WORDS``), else ``other``."""
    return value if isinstance(value, str) and value in CLASS_WORDS[kind] else "other"


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(_TEMPLATES)),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        reveal=reveal,
        plain=plain,
        seg=segment,
        pretty=pretty_json,
        short=_short,
        token=token,
    )
    return env
