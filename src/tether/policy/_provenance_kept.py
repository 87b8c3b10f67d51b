"""Numbers a store makes of what it keeps: a phone book that keeps numbers as E.164 (``+…``
and digits only, a vanity number's letters read as its keypad's digits), an account field
that keeps only an account's digits. What a write gives in a form no number is to the judge
(``find_numbers``: groups of digits parted by ``:``, ``=``, ``#``, ``;``, ``|``, ``ー``; a
number spelled partly in capitals, ``1-800-FLOWERS``) is read back by the next run, from the
store the deployment trusts, as a number the store vouches for (``provenance_flow.party_handles``
judges what this module finds)."""

from __future__ import annotations

import re

from tether.policy._provenance_values import PARTY_DIGITS, undated, unfold

__all__ = ["as_grouped", "kept_numbers", "keypad"]

# Digit groups parted by marks that are no letter (``000:123:456:789``, ``000 = 123 = 456``), or
# by the long-vowel mark a Japanese number is printed with (``03ー1234ー5678``); not run on from
# a word, nor a time of day (blanked first: ``10:30-12:45``). Each run is matched once, whole,
# and what stands beside it read after (``_apart``): no match starts inside another. No possessive
# quantifier (``*+``): CPython before 3.11.4 matches some wrongly, and nothing follows the
# repeats here to make them backtrack.
_GROUPED = re.compile(r"\+?\d+(?:[^\S\n]*(?:[^\w\s]|_|\u30fc|\uff70)+[^\S\n]*\d+)*")
_TIME = re.compile(r"(?<![\d:])\d{1,2}:\d\d(?::\d\d)?(?![\d:])")
# A number some of whose groups are written in capitals, as a phone's keypad spells them
# (``1-800-FLOWERS``, ``+44 800 BIG BANK``): digits first, a group of three capitals or more.
_VANITY = re.compile(r"\+?\d[\d().\- ]*(?:[A-Z]{2,}[\d().\- ]*)*")
_KEYPAD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "22233344455566677778889999")
_OPENING_DIGITS = 3  # the digits a vanity number opens with, at least (``1-800``, ``0800``)


# The marks such a store drops between a number's groups that no reader of numbers reads as one
# (``find_numbers`` reads spaces, dots, dashes, slashes, brackets; a comma that groups thousands).
_KEPT_MARK = r"(?:[:;=#|*~\\\u30fc\uff70])"
_KEPT_GAP = re.compile(rf"[^\S\n]*{_KEPT_MARK}+[^\S\n]*")
# A run of digit groups with such marks between them, before or after them.
_RUN = re.compile(rf"(?:{_KEPT_MARK}+[^\S\n]*)?\d+(?:[^\S\n]*[^\w\s]+[^\S\n]*\d+)*(?:[^\S\n]*{_KEPT_MARK}+)?")
# A figure with a fraction (``4.5``, ``200,00``): a rating or a sum, no group of a number.
_DECIMAL = re.compile(r"(?<![\d.,])\d+[.,]\d{1,2}(?![\d.,]?\d)")


def as_grouped(text: str) -> str:
    """``text`` as a store that keeps numbers as their digits joins them, for the digits a piece
    opens or closes with (``edge_fragments``): a time of day blanked, and the marks it drops
    (``_KEPT_MARK``) in and around a run of whole digit groups read as a dash (``Deposit
    000:123`` kept by one run, ``:456:789`` by the next, kept as ``000123456789``). A run with a
    fraction in it (ratings ``4.5; 4.7``) is left as it is."""
    blanked = _TIME.sub(lambda m: " " * len(m.group(0)), text)
    return _RUN.sub(lambda m: m[0] if _DECIMAL.search(m[0]) else _KEPT_GAP.sub("-", m[0]), blanked)


def keypad(text: str) -> str:
    """``text`` with its capitals as a phone's keypad reads them (``FLOWERS``: ``3569377``)."""
    return text.translate(_KEYPAD)


def kept_numbers(value: str) -> list[str]:
    """What in ``value`` a store that keeps numbers as their digits keeps as a number of
    ``PARTY_DIGITS`` or more that no other reader sees: digit groups parted by marks
    (``_GROUPED``) and vanity numbers (``_VANITY``), each as written (folded as
    ``find_numbers`` reads text); the days and times beside them blanked."""
    text = _TIME.sub(lambda m: " " * len(m.group(0)), undated(unfold(value, fold_case=False)))
    out: list[str] = []
    for m in _GROUPED.finditer(text):
        start, end = m.span()
        if not _apart(text, start, end, "."):  # run on from a word: what follows its first mark
            glued = _AFTER_MARK.search(text, start, end)
            start = glued.end() if glued is not None else end
        raw = text[start:end]
        number = len(_digits(raw)) >= PARTY_DIGITS and not raw.isdigit() and not _DECIMAL.search(raw)
        if number and _apart(text, start, end, ".") and raw not in out:
            out.append(raw)
    for m in _VANITY.finditer(text):
        raw = m.group(0).rstrip(" -.(")
        if not _apart(text, m.start(), m.start() + len(raw), "+"):
            continue
        opening = re.match(r"\+?[\d().\- ]*", raw)
        if opening is None or len(_digits(opening.group(0))) < _OPENING_DIGITS:
            continue
        if not re.search(r"[A-Z]{3}", raw) or len(_digits(keypad(raw))) < PARTY_DIGITS:
            continue
        if raw not in out:
            out.append(raw)
    return out


_AFTER_MARK = re.compile(r"(?:[^\w\s]|_|\u30fc|\uff70)[^\S\n]*(?=\d)")


def _apart(text: str, start: int, end: int, before: str) -> bool:
    """Whether ``text[start:end]`` stands apart from words: no letter, digit or ``_`` (nor one
    of ``before``) just before it, no letter just after it."""
    if start and (text[start - 1].isalnum() or text[start - 1] in f"_{before}"):
        return False
    return end == len(text) or not text[end].isalpha()


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())
