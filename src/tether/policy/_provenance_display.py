"""How a text shows on its reader's screen, beside how it is written: what ``provenance_text.shown``
reads before it folds look-alike letters, so that a message is compared with a secret as its
recipient sees it.

* A run under a right-to-left override (U+202E, until U+202C, U+2069 or the end of its
  paragraph) is drawn backwards: every character in it is laid out right to left, Latin letters
  and digits too, so ``\\u202e9xV-2retnuh`` shows ``hunter2-Vx9``. An isolate or embedding
  (U+2067, U+202B) only orders runs; the letters inside read as written.
* A letter shows through the marks set on it (``hünter2``, ``h̃untér2``: ``hunter2``): combining
  marks, composed with their letter or not, are left out.
"""

from __future__ import annotations

import re
import unicodedata

import regex

__all__ = ["displayed"]

_OVERRIDE = re.compile("\u202e([^\u202c\u2069\n\r\u2028\u2029]*)")
_MARKS = regex.compile(r"[\p{Mn}\p{Me}]+")  # combining marks: nonspacing, enclosing


def displayed(text: str) -> str:
    """``text`` in the order its reader sees it, its letters without their marks."""
    if text.isascii():
        return text
    if "\u202e" in text:
        text = _OVERRIDE.sub(lambda m: m.group(1)[::-1], text)
    parts = unicodedata.normalize("NFD", text)
    bare = _MARKS.sub("", parts)
    return text if bare == parts else unicodedata.normalize("NFC", bare)
