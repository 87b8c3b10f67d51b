"""Numbers spelled out a digit a word (``zero zero zero one two three …``, ``triple zero``,
``oh``, glued ``zerozeroone``, mixed with digit groups, in a few languages): what a trusted
tool (a words-to-figures converter, a speech or translation service) or the next run's model
reads back as a number. A write that keeps one in a store the deployment trusts hands a later
run the number it spells as the store's own, so a write's parties are also read in this form
(``provenance_flow.party_handles``), and a number's origins include the texts that spell it
(``provenance_flow.handle_origins``)."""

from __future__ import annotations

import functools
import re
import unicodedata

from tether.policy._provenance_values import PARTY_DIGITS

__all__ = ["spelled_numbers"]

_WORDS: dict[str, tuple[str, ...]] = {
    "0": ("zero", "oh", "nil", "nought", "naught", "cero", "null", "nul"),
    "1": ("one", "un", "une", "uno", "una", "um", "uma", "eins", "ein", "een"),
    "2": ("two", "deux", "dos", "zwei", "zwo", "due", "dois", "duas", "twee"),
    "3": ("three", "trois", "tres", "drei", "tre", "drie"),
    "4": ("four", "quatre", "cuatro", "vier", "quattro", "quatro"),
    "5": ("five", "cinq", "cinco", "funf", "fuenf", "cinque", "vijf"),
    "6": ("six", "seis", "sechs", "sei", "zes"),
    "7": ("seven", "sept", "siete", "sieben", "sette", "sete", "zeven"),
    "8": ("eight", "huit", "ocho", "acht", "otto", "oito"),
    "9": ("nine", "neuf", "nueve", "neun", "nove", "negen"),
}
_DIGIT = {word: digit for digit, words in _WORDS.items() for word in words}
_TIMES = {"double": 2, "triple": 3}  # "triple zero": 000
_JOINING = frozenset({"and"})  # "000 and 123 and 456" (``party_key`` reads the same)
_TOKEN = re.compile(r"[^\W_]+")
_GAP = re.compile(r"[\W_]*")  # marks and spaces between two items of one number
_LONGEST = 256  # a glued token longer than this is read as no number
_LONGEST_WORD = max(map(len, _DIGIT))


def _bare(word: str) -> str:
    """``word`` case-folded, its accents dropped (``Zéro``: ``zero``, ``fünf``: ``funf``)."""
    parts = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in parts if not unicodedata.combining(c))


def _digits_of(token: str) -> str | None:
    """The digits ``token`` gives as an item of a spelled number: a group of digits, a digit
    word, or digit words glued (each with digits between); None for any other word."""
    word = _bare(token)
    if word.isdigit():
        return "".join(str(unicodedata.digit(c)) for c in word)
    if word in _DIGIT:
        return _DIGIT[word]
    return _glued(word) if len(word) <= _LONGEST else None


def _glued(word: str) -> str | None:
    """The digits of ``word`` read as digit words (and digits) glued together (``zerozeroone``),
    never ``oh``, which glues into too many words; None where no such reading takes it whole."""
    ways: list[str | None] = [None] * len(word) + [""]  # the digits of each suffix, read whole
    for i in range(len(word) - 1, -1, -1):
        if word[i].isdigit() and ways[i + 1] is not None:
            ways[i] = word[i] + str(ways[i + 1])
            continue
        for n in range(2, _LONGEST_WORD + 1):
            rest, piece = ways[i + n] if i + n <= len(word) else None, word[i : i + n]
            if rest is not None and piece != "oh" and piece in _DIGIT:
                ways[i] = _DIGIT[piece] + rest
                break
    return ways[0]


class _Run:
    """A spelled number being read: where it starts and reaches, its digits, how many are words."""

    def __init__(self) -> None:
        self.start = self.end = self.reach = self.pending = -1
        self.digits, self.worded, self.times = "", 0, 1


@functools.lru_cache(maxsize=4096)
def spelled_numbers(text: str) -> tuple[tuple[str, str, int], ...]:
    """The numbers ``text`` spells (``PARTY_DIGITS`` digits or more, at least one a word), each as
    written there, as its digits, and with how many of them words spell: runs of digit words and
    digit groups with only marks and spaces between them, ``and`` joining two, ``double`` and
    ``triple`` repeating the next digit."""
    out: list[tuple[str, str, int]] = []
    run = _Run()

    def close() -> _Run:
        found = (text[run.start : run.end], run.digits, run.worded)
        if run.worded and len(run.digits) >= PARTY_DIGITS and found not in out:
            out.append(found)
        return _Run()

    for m in _TOKEN.finditer(text):
        word = _bare(m.group(0))
        joined = run.reach >= 0 and _GAP.fullmatch(text, run.reach, m.start()) is not None
        if word in _TIMES or word in _JOINING:
            if not joined or run.start < 0:
                run = close()
                run.pending = m.start() if word in _TIMES else -1
            run.reach = m.end() if run.start >= 0 or word in _TIMES else -1
            run.times = _TIMES.get(word, run.times)
            continue
        found = _digits_of(m.group(0))
        if found is None or (run.start >= 0 and not joined):
            run = close()
            if found is None:
                continue
        if run.start < 0:
            run.start = run.pending if run.pending >= 0 and joined else m.start()
        run.digits += found[0] * (run.times - 1) + found
        run.worded += 0 if word.isdigit() else len(found) + run.times - 1
        run.end = run.reach = m.end()
        run.times, run.pending = 1, -1
    close()
    return tuple(out)
