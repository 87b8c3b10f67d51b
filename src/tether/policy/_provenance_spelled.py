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
from typing import TYPE_CHECKING

from tether.policy._provenance_values import PARTY_DIGITS, find_links

if TYPE_CHECKING:
    from tether.policy._provenance import ProvenanceIndex
    from tether.policy._provenance_labels import Origin

__all__ = ["spelled_forms", "spelled_numbers", "turned_forms", "turned_links"]

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


# Characters set apart one by one (``b i l l i n g @ s e c u r e …``): four or more, each a
# single character between single spaces (a word's letters, as a reader joins them again), the
# last one perhaps with the sentence's mark after it.
_SPACED = re.compile(r"(?<!\S)\S(?: \S(?![^\s.,;:!?)])){3,}")
# Text as hexadecimal (``62696c6c…``): sixteen digits or more, an even count, alone.
_HEX = re.compile(r"(?<![0-9A-Za-z])(?:[0-9A-Fa-f]{2}){8,}(?![0-9A-Za-z])")
# The words a reader takes for an address's ``@`` and ``.``, in the languages digit words are
# read in (``chiocciola``, ``arroba``, ``Klammeraffe``, ``punto``, ``Punkt``, ``point`` …).
_AT_WORDS = "at-sign|arobase|arroba|chiocciola|klammeraffe|affenschwanz|apenstaartje|apestaart"  # and ``at``
_DOT_WORDS = "dot|point|punto|punkt|ponto|punt"
_APART = r"(?: +|_)"  # a word set apart by spaces, or by underscores (``billing_at_shop_dot_com``)
# An address's ``@`` spelled: bracketed (``billing [at] secure-systems``), or an ``@`` word
# between two names where a dot is spelled too (``billing at secure-systems dot com``,
# ``billing arobase secure-systems point com``; bare ``at`` only with ``dot``, as prose says
# "at the point").
_AT = re.compile(
    rf"(?<=\w)\s*[\[\(\{{<]\s*(?:at|{_AT_WORDS})\s*[\]\)\}}>]\s*(?=\w)"
    rf"|(?<=[^\W_]){_APART}at{_APART}(?=[^\W_][\w-]*?{_APART}[\[\(\{{]?\s*dot(?![^\W_]))"
    rf"|(?<=[^\W_]){_APART}(?:{_AT_WORDS}){_APART}"
    rf"(?=[^\W_][\w-]*?{_APART}[\[\(\{{]?\s*(?:{_DOT_WORDS})(?![^\W_]))",
    re.IGNORECASE,
)
# An ``@`` written as one before a name and a spelled dot (``billing@secure-systems dot example``).
_AT_SIGN = re.compile(rf"@\s*[^\W_][\w-]*?{_APART}[\[\(\{{]?\s*(?:{_DOT_WORDS})(?![^\W_])", re.IGNORECASE)
# A spelled ``.`` (with a spelled or written ``@``).
_DOT = re.compile(
    rf"\s*[\[\(\{{]\s*(?:{_DOT_WORDS})\s*[\]\)\}}]\s*|(?:\s+|_)(?:{_DOT_WORDS})(?:\s+|_)", re.IGNORECASE
)


def spelled_forms(value: str) -> list[str]:
    """``value`` as a reader (the next run's model, a trusted tool) makes of text spelled so no
    address or link is seen in it: characters set apart one by one joined, hexadecimal text
    decoded, an ``@`` spelled as ``at`` (or ``arobase`` …) written as one, and the ``.`` spelled
    after it. Each form that differs, once."""
    out: list[str] = []
    joined = _SPACED.sub(lambda m: m.group(0).replace(" ", ""), value)
    unhexed = _HEX.sub(lambda m: _text_of_hex(m.group(0)), value)
    at = [
        _DOT.sub(".", _AT.sub("@", text))
        for text in (value, joined)
        if _AT.search(text) or _AT_SIGN.search(text)
    ]
    for form in (joined, unhexed, *at):
        if form != value and form not in out:
            out.append(form)
    return out


def _text_of_hex(digits: str) -> str:
    """The text ``digits`` encode as UTF-8 (printable, a letter in it), else ``digits``."""
    try:
        text = bytes.fromhex(digits).decode("utf-8")
    except ValueError:
        return digits
    return text if text.isprintable() and any(c.isalpha() for c in text) else digits


# A mark of a link set apart by spaces (``secure-systems . example / deal``).
_SPACED_MARK = re.compile(r"(?<=\w)\s+([./@:])\s+(?=\w)")


def turned_forms(value: str) -> list[str]:
    """``value`` reversed, and with the marks of a link set apart by spaces closed up: a reader
    (a trusted tool, the next run's model) turns back what was written so; prose turned so reads
    as links now and then, so what these forms hold is judged only where a source holds it."""
    closed = _SPACED_MARK.sub(r"\1", value)
    return [value[::-1], *([closed] if closed != value else [])]


def turned_links(index: ProvenanceIndex, value: str) -> list[tuple[str, list[Origin]]]:
    """The links ``value`` holds reversed or with their marks spaced (``turned_forms``), each
    with its origins, where a source holds it forward or as ``value`` writes it; never one that
    is a piece of a link ``value`` shows as written (judged as that link)."""
    shown = [link.raw.casefold() for link in find_links(value)]
    out: list[tuple[str, list[Origin]]] = []
    for link in {k.key: k for f in turned_forms(value) for k in find_links(f)}.values():
        raw = link.raw.casefold()
        if any(raw in s or raw[::-1] in s for s in shown):
            continue
        origins = [*index.link_origins(link), *index.trace(link.raw[::-1])]
        out += [(link.raw, origins)] if any(o.kind != "nowhere" for o in origins) else []
    return out
