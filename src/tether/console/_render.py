"""HTML rendering: Jinja2 with autoescaping, and filters that make hidden characters visible.

Text written by models, tools and servers is shown exactly, but every character a reviewer
could not see (zero-width, bidi overrides, Unicode tags, controls other than newline and tab)
is replaced by a flagged, visible escape such as ``\\u200b``.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from tether.core._confusables import check_name, find_names
from tether.mcp._clean import hidden_kind

__all__ = ["environment", "has_hidden", "hidden_chars", "names_in", "pretty_json", "reveal"]

_TEMPLATES = Path(__file__).with_name("templates")


def _code(ch: str) -> str:
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def hidden_chars(text: str) -> list[str]:
    """The code points (``U+200B`` …) of every hidden character in ``text``, once each, in order."""
    seen: dict[str, None] = {}
    for ch in text:
        if hidden_kind(ch):
            seen.setdefault(f"U+{ord(ch):04X}")
    return list(seen)


def has_hidden(value: Any) -> bool:
    return bool(hidden_chars(value if isinstance(value, str) else str(value)))


def reveal(value: Any) -> Markup:
    """HTML for untrusted text: escaped, with each hidden character shown as a flagged escape."""
    text = value if isinstance(value, str) else str(value)
    if not any(hidden_kind(ch) for ch in text):
        return escape(text)
    parts: list[str] = []
    for ch in text:
        if hidden_kind(ch):
            name = unicodedata.name(ch, "unnamed")
            parts.append(
                f'<span class="hidden-char" title="hidden character U+{ord(ch):04X} {escape(name)}">'
                f"{_code(ch)}</span>"
            )
        else:
            parts.append(str(escape(ch)))
    return Markup("".join(parts))


def names_in(*texts: Any) -> list[dict[str, Any]]:
    """The look-alike check of every URL, e-mail address and domain in ``texts`` (strings, or
    JSON-like values whose strings are searched)."""
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
    """Indented JSON with sorted keys; non-ASCII kept (``reveal`` flags what cannot be seen)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


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
    env.filters["reveal"] = reveal
    env.filters["pretty"] = pretty_json
    env.filters["short"] = _short
    env.filters["has_hidden"] = has_hidden
    env.filters["hidden_chars"] = hidden_chars
    return env
