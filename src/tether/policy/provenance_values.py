"""Typed values inside text, for provenance rules: links, dates and stated figures.

Rules compare values, never words: a link is compared by its canonical key (host and
path), a date by the calendar day it names, an amount by the figures the user stated.

* **Links** are found on NFKC-normalised text (full-width and ideographic dots become
  ``.``, defanged forms such as ``example[.]com`` or ``hxxp://`` are undone), with any
  top-level domain, Unicode host names included; each link carries the host *as
  registered* (IDNA/punycode), which is what a reviewer is shown.
* **Dates** are read from ISO forms (``2024-05-19``, ``2024-5-19 12:00``,
  ``2024-05-19T12:00``) and from English mentions (``January 11th``, ``11th of January
  2025``, ``the 13th to the 17th of May``). A mention without a year takes the year of the
  next mention in the same sentence that has one, else matches any year.
* **Handles** are the other pointers to a party a text can carry: e-mail addresses and
  account numbers (IBAN-shaped), found on the same unfolded text.
* **Figures** are the numbers of a text that are not part of a date or an identifier.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import date, datetime

__all__ = [
    "DateMention",
    "Link",
    "date_mentions",
    "figures",
    "find_handles",
    "find_links",
    "link_key",
    "parse_date",
    "unfold",
]

# -- text ------------------------------------------------------------------------------------

_DOTS = str.maketrans({"\u3002": ".", "\uff61": ".", "\uff0e": ".", "\u2024": ".", "\ufe52": "."})
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
_DEFANG = [
    (re.compile(r"\s*[\[\(\{]\s*(?:\.|dot)\s*[\]\)\}]\s*", re.IGNORECASE), "."),
    (re.compile(r"\bhxxp(s?)(?=\[?:)", re.IGNORECASE), r"http\1"),
    (re.compile(r"\[:\]"), ":"),
]


def unfold(text: str) -> str:
    """NFKC, case-folded, invisible characters dropped, exotic dots and defanged links undone."""
    text = unicodedata.normalize("NFKC", text).translate(_DOTS).translate(_INVISIBLE).casefold()
    for pattern, repl in _DEFANG:
        text = pattern.sub(repl, text)
    return text


# -- links -----------------------------------------------------------------------------------

_LABEL = r"[^\W_](?:[\w-]{0,61}[^\W_])?"
_LINK = re.compile(
    r"(?<![@\w.-])"  # not the domain of an e-mail address, not inside a longer token
    rf"(?:(?P<scheme>[a-z][a-z0-9+.-]{{1,15}})://)?"
    rf"(?P<host>(?:{_LABEL}\.)+(?P<tld>xn--[a-z0-9-]{{2,59}}|[^\W\d_]{{2,63}}))"
    r"(?P<port>:\d{1,5})?"
    r"(?P<path>[/?#][^\s<>\"'`)\]]*)?"
    r"(?![\w@-])",  # the whole token: not the first part of an e-mail address or a longer name
    re.UNICODE,
)
_SCHEME_ONLY = re.compile(r"\b[a-z][a-z0-9+.-]{1,15}://[^\s<>\"'`]+")


@dataclass(frozen=True, slots=True)
class Link:
    """One link found in text. ``key`` compares links (host without ``www.``, path without a
    trailing slash); ``registered`` is the host as the DNS knows it (punycode for IDN)."""

    raw: str
    host: str
    registered: str
    key: str


def _registered(host: str) -> str:
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host.encode("ascii", "backslashreplace").decode("ascii")


def link_key(host: str, path: str = "") -> str:
    host = _registered(host.rstrip(".")).removeprefix("www.")
    return host + path.rstrip("/.,;:!?")


def find_links(text: str) -> list[Link]:
    """Every link in ``text`` (see the module docstring for what counts)."""
    folded = unfold(text)
    out: list[Link] = []
    seen: set[str] = set()
    for m in _LINK.finditer(folded):
        host, path = m.group("host"), m.group("path") or ""
        key = link_key(host, path)
        if key not in seen:
            seen.add(key)
            out.append(Link(m.group(0).rstrip(".,;:!?"), host, _registered(host), key))
    # A scheme with a host that has no dot ("http://intranet/x") is a link too.
    for m in _SCHEME_ONLY.finditer(folded):
        rest = m.group(0).split("://", 1)[1]
        host, _, path = rest.partition("/")
        key = link_key(host, "/" + path if path else "")
        if key not in seen and not any(key.startswith(k) for k in seen):
            seen.add(key)
            out.append(Link(m.group(0), host, _registered(host), key))
    return out


_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[^\W_](?:[\w-]*[^\W_])?(?:\.[^\W_](?:[\w-]*[^\W_])?)+")
_IBAN = re.compile(r"(?<![\w])[a-z]{2}\d{2}[a-z0-9]{10,30}(?![\w])")


def find_handles(text: str) -> list[str]:
    """E-mail addresses and IBAN-shaped account numbers in ``text``, unfolded (lower case)."""
    folded = unfold(text)
    out: list[str] = []
    for pattern in (_EMAIL, _IBAN):
        for m in pattern.finditer(folded):
            if m.group(0) not in out:
                out.append(m.group(0))
    return out


# -- dates -----------------------------------------------------------------------------------

_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
_MONTH = r"(?P<{}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s*(?P<{}>(?:19|20)\d\d))?"
_ISO = re.compile(r"(?<!\d)(?P<y>(?:19|20)\d\d)-(?P<m>[01]?\d)-(?P<d>[0-3]?\d)(?!\d)")
_RANGE = re.compile(
    r"\b"
    + _DAY.format("d1")
    + r"\s*(?:to|-|–|until|till|through|and)\s*(?:the\s+)?"
    + _DAY.format("d2")
    + r"\s+(?:of\s+)?"
    + _MONTH.format("m")
    + _YEAR.format("y")
    + r"\b"
)
_MONTH_DAY = re.compile(r"\b" + _MONTH.format("m") + r"\s+" + _DAY.format("d") + _YEAR.format("y") + r"\b")
_DAY_MONTH = re.compile(
    r"\b" + _DAY.format("d") + r"\s+(?:of\s+)?" + _MONTH.format("m") + _YEAR.format("y") + r"\b"
)
_MONTH_YEAR = re.compile(r"\b" + _MONTH.format("m") + r"\s+(?P<y>(?:19|20)\d\d)\b")
_SENTENCE = re.compile(r"[.!?\n]\s")


@dataclass(frozen=True, slots=True)
class DateMention:
    """A calendar day a text names; ``year`` is ``None`` when the text leaves it open."""

    year: int | None
    month: int
    day: int
    span: tuple[int, int]

    def matches(self, d: date) -> bool:
        return (self.month, self.day) == (d.month, d.day) and self.year in (None, d.year)


def _valid(y: int | None, m: int, d: int) -> bool:
    try:
        date(y or 2000, m, d)
    except ValueError:
        return False
    return True


def date_mentions(text: str) -> list[DateMention]:
    """The calendar days ``text`` names (see the module docstring)."""
    folded = unfold(text)
    found: list[tuple[int | None, int, int, tuple[int, int]]] = []
    taken: list[tuple[int, int]] = []

    def free(span: tuple[int, int]) -> bool:
        return all(span[1] <= a or span[0] >= b for a, b in taken)

    def add(y: str | None, m: int, d: str, span: tuple[int, int]) -> None:
        year = int(y) if y else None
        if _valid(year, m, int(d)):
            found.append((year, m, int(d), span))

    for m in _ISO.finditer(folded):
        taken.append(m.span())
        add(m.group("y"), int(m.group("m")), m.group("d"), m.span())
    for m in _RANGE.finditer(folded):
        if free(m.span()):
            taken.append(m.span())
            month = _MONTHS[m.group("m")]
            add(m.group("y"), month, m.group("d1"), m.span())
            add(m.group("y"), month, m.group("d2"), m.span())
    for pattern in (_MONTH_DAY, _DAY_MONTH):
        for m in pattern.finditer(folded):
            if free(m.span()):
                taken.append(m.span())
                add(m.group("y"), _MONTHS[m.group("m")], m.group("d"), m.span())
    found.sort(key=lambda f: f[3])
    # A mention with no year borrows the year of the next one in the same sentence.
    out: list[DateMention] = []
    for i, (year, month, day, span) in enumerate(found):
        if year is None:
            for later in found[i + 1 :]:
                between = folded[span[1] : later[3][0]]
                if _SENTENCE.search(between):
                    break
                if later[0] is not None:
                    year = later[0] if _valid(later[0], month, day) else None
                    break
        out.append(DateMention(year, month, day, span))
    return out


_VALUE_FORMATS = ("%Y-%m-%d", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y/%m/%d", "%Y/%m/%d %H:%M")


def parse_date(value: object) -> date | None:
    """The calendar day of an argument value (``2024-05-19``, ``2024-5-19 12:00``,
    ``2024-05-19T12:00:00``, ``20240519``…), or ``None`` when it is not a date."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    for fmt in _VALUE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            pass
    try:
        return datetime.fromisoformat(text).date()
    except ValueError:
        return None


# -- figures ---------------------------------------------------------------------------------

_FIGURE = re.compile(r"(?<![\w.,-])[$€£]?\s?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\w-]|[.,]\d)")


def figures(text: str) -> list[float]:
    """The numbers ``text`` states, leaving out days, years and parts of identifiers."""
    folded = unfold(text)
    dated = [m.span for m in date_mentions(text)]
    dated += [m.span() for m in _MONTH_YEAR.finditer(folded)]
    out: list[float] = []
    for m in _FIGURE.finditer(folded):
        if any(a <= m.start(1) < b for a, b in dated):
            continue
        whole = m.group(1).replace(",", "")
        out.append(float(whole + ("." + m.group(2) if m.group(2) else "")))
    return out
