"""Dates and figures inside text, for provenance rules: a date is compared by the calendar day
it names, an amount by the figures the user stated.

* **Dates** are read from ISO forms (``2024-05-19``, ``2024-5-19 12:00``,
  ``2024-05-19T12:00``) and from English mentions (``January 11th``, ``11th of January
  2025``, ``the 13th to the 17th of May``). A mention without a year takes the year of the
  next mention in the same sentence that has one, else matches any year.
* **Figures** are the numbers of a text that are not part of a date or an identifier;
  **amounts** those a money word or sign governs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from tether.policy._provenance_mentions import refused
from tether.policy._provenance_text import LIMITING
from tether.policy._provenance_values import PARTY_DIGITS, unfold

__all__ = [
    "DateMention",
    "Numeral",
    "amounts",
    "bounding",
    "currency_code",
    "date_mentions",
    "figure",
    "figures",
    "is_currency",
    "is_month",
    "numeral",
    "paid",
    "parse_date",
    "priced",
    "undated_words",
]

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
    near: date | None = None  # the day the text was said (``ProvenanceIndex.asked_on``)

    def matches(self, d: date) -> bool:
        """Whether ``d`` is this day: in its year, or, where the text leaves the year open, in
        the year its speaker means: the day within a year of ``near`` ("book May 13" asked in
        May 2026 books no May 13 of 2031, nor of 1999: the year is the value's alone)."""
        if (self.month, self.day) != (d.month, d.day) or self.year not in (None, d.year):
            return False
        return self.year is not None or self.near is None or abs((d - self.near).days) <= _A_YEAR


_A_YEAR = 366


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


def is_month(word: str) -> bool:
    """Whether ``word`` (lower case) names a month ("March", "Jan"): a date's word, no name's."""
    return word in _MONTHS


def parse_date(value: object) -> date | None:
    """The calendar day of an argument value (``2024-05-19``, ``2024-5-19 12:00``,
    ``2024-05-19T12:00:00``, ``20240519T12``…), or ``None`` when it is not a date — nor when
    its offset puts it on another day in UTC (``2024-05-19T23:30-11:00``), nor when it is digits
    alone: ``20240519`` is a day to ISO 8601's basic form but a count of seconds to a JSON Schema
    ``date-time`` reader (pydantic, a FastMCP server: ``1970-08-23T06:21:59Z``), so which day the
    tool books is not the value's to say."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.isdigit():
        return None
    for fmt in _VALUE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is not None and moment.astimezone(UTC).date() != moment.date():
        return None  # a day here, another in UTC: which one the tool books is not the value's to say
    return moment.date()


# -- figures ---------------------------------------------------------------------------------

# A figure glued to a slash and a digit is a part of a date (12/01/2026) or of a fraction, no sum.
_FIGURE = re.compile(r"(?<![\w.,/-])[$€£]?\s?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\w-]|[.,/]\d)")


def figures(text: str) -> list[float]:
    """The numbers ``text`` states, leaving out days, years and parts of identifiers."""
    folded = unfold(text)
    dated = _dated(text, folded)
    out: list[float] = []
    for m in _FIGURE.finditer(folded):
        if any(a <= m.start(1) < b for a, b in dated):
            continue
        whole = m.group(1).replace(",", "")
        out.append(float(whole + ("." + m.group(2) if m.group(2) else "")))
    return out


def undated_words(text: str, word: re.Pattern[str]) -> list[str]:
    """The tokens (``word``) of ``text`` unfolded that stand outside every date it names: the
    digits of "December 2026" or "14 March 2026" are a day and a year, never a figure of
    their own."""
    folded = unfold(text)
    dated = _dated(text, folded)
    return [m.group(0) for m in word.finditer(folded) if not any(a <= m.start() < b for a, b in dated)]


def _dated(text: str, folded: str) -> list[tuple[int, int]]:
    """The spans of ``folded`` (``text`` unfolded) that name a day or a month of a year: their
    digits are a day or a year, never a figure."""
    dated = [m.span for m in date_mentions(text)]
    return dated + [m.span() for m in _MONTH_YEAR.finditer(folded)]


# -- amounts ---------------------------------------------------------------------------------

# A currency: a sign, an ISO 4217 code of a currency many pay in, or its name. A sum in one the
# list does not know is a bare figure, which bounds a payment in any currency.
_CODE_WORDS = "usd eur gbp chf jpy cad aud sek nok dkk isk pln czk huf cny rmb hkd sgd nzd krw inr brl mxn"
_CODE_WORDS += (
    " zar rub aed sar thb ils kr zł dollars? euros? pounds? bucks yen rupees yuan francs kronor kroner"
)
_CODE_WORDS += " roubles? rubles? руб 円 元 baht shekels? zloty forints? rand lira pesos dirhams?"
_CURRENCY = r"(?:[$€£¥₹₩₽₺₪₫฿]|(?<![^\W\d_])(?:" + "|".join(_CODE_WORDS.split(" ")) + "))"
# A currency named with a qualifier: letters glued before a sign ("MX$", "C$"), or a word or two
# before a name written after the figure ("30,000 Japanese yen", "300 Canadian dollars"). A mark
# several currencies share, qualified, is the qualified currency ("MX$" is no US dollar), its
# own unless the qualifier is the United States'; a name only one currency has keeps its code.
_QUALIFIED_SIGN = re.compile(r"(?<![^\W\d_])([^\W\d_]{1,3})([$¥£]|kr)\s?$")
_QUALIFIED_NAME = re.compile(r"\s((?:[^\W\d_]+\.?){1,2}(?:\s[^\W\d_]+\.?)?)\s(" + _CURRENCY + r")\b")
_SHARED = frozenset(["$", "¥", "£", "kr", "dollar", "dollars", "bucks", "pound", "pounds", "francs"])
_SHARED |= {"rupees", "pesos", "lira", "dirham", "dirhams", "kroner", "yuan"}
_US = frozenset(["us", "u.s.", "u.s", "usa", "american"])
# The currency each mark names (a sign or a word), as ISO 4217 writes it; a code is its own, and a
# mark several currencies share ("kr", "francs") is a currency of its own, which no code matches.
_CODES = {"$": "USD", "dollar": "USD", "dollars": "USD", "bucks": "USD", "€": "EUR", "euro": "EUR"}
_CODES |= {"euros": "EUR", "£": "GBP", "pound": "GBP", "pounds": "GBP", "¥": "JPY", "yen": "JPY", "₹": "INR"}
_CODES |= {"rupees": "INR", "yuan": "CNY", "rmb": "CNY", "zł": "PLN", "kronor": "SEK", "₩": "KRW", "₽": "RUB"}
_CODES |= {"₺": "TRY", "₪": "ILS", "₫": "VND", "฿": "THB", "rouble": "RUB", "roubles": "RUB"}
_CODES |= {"ruble": "RUB", "rubles": "RUB", "руб": "RUB", "円": "JPY", "元": "CNY", "baht": "THB"}
_CODES |= {"shekel": "ILS", "shekels": "ILS", "zloty": "PLN", "forint": "HUF", "forints": "HUF"}
_CODES |= {"rand": "ZAR"}
_AMOUNT_CUES = frozenset(
    [
        "amount",
        "amounts",
        "pay",
        "paid",
        "pays",
        "paying",
        "payment",
        "payments",
        "send",
        "sent",
        "transfer",
        "transferred",
        "refund",
        "refunded",
        "total",
        "price",
        "prices",
        "cost",
        "costs",
        "rent",
        "fee",
        "fees",
        "charge",
        "charged",
        "sum",
        "balance",
        "owe",
        "owed",
        "worth",
        "budget",
        "salary",
        "spent",
        "spend",
        "spending",
        "difference",
        "tip",
        "deposit",
    ]
)
# Nouns a figure after names a thing by (a room, an order, a street's house, a phone): a cue
# before them ("pay the deposit for room 4021") governs the noun, not the figure.
_LABEL_WORDS = "room rooms suite apt apartment unit floor flat house street st avenue road lane booking "
_LABEL_WORDS += "reservation confirmation invoice order ref reference number no nr id ticket flight "
_LABEL_WORDS += "seat gate table account iban code pin case claim policy item page version line "
_LABEL_WORDS += "card zip postcode postal phone mobile tel fax call"
_LABELS = frozenset(_LABEL_WORDS.split(" "))
# Those that name a number someone is known or reached by: after a word for money, anywhere
# before the figure ("the deposit from my account ending 8765"), not only right before it.
_IDS = "booking reservation confirmation invoice order ref reference number no nr id ticket flight "
_IDS += "account iban code pin card zip postcode postal phone mobile tel fax call"
_IDENTIFIERS = frozenset(_IDS.split(" "))
_LABEL_GAP = re.compile(r"[\s#.]*")
# Words a house number stands just before ("1600 Pennsylvania Avenue").
_STREETS = frozenset(["street", "st", "avenue", "ave", "road", "rd", "lane", "boulevard", "blvd", "drive"])
_ALPHA = re.compile(r"[^\W\d_]+")


def _labelled(folded: str, before: list[tuple[int, str]], start: int, end: int) -> bool:
    """Whether the figure at ``start:end`` names a thing, not a sum: one of ``_LABELS`` right
    before it (with at most ``#``, ``.`` and spaces between: "invoice no. 20931", "room 4021"),
    one of ``_IDENTIFIERS`` anywhere between it and the last word before it that asks for an
    amount ("the deposit from my account ending 8765", "the booking code is 4411", "flight LH
    4521"), a ``#`` straight before it, or a street's name just after it ("1600 Pennsylvania
    Avenue")."""
    if folded[:start].rstrip().endswith("#"):
        return True
    if before and before[-1][1] in _LABELS:
        pos, word = before[-1]
        if _LABEL_GAP.fullmatch(folded, pos + len(word), start) is not None:
            return True
    words = [w for _, w in before]
    cue = max((i for i, w in enumerate(words) if w in _AMOUNT_CUES), default=-1)
    if any(w in _IDENTIFIERS for w in words[cue + 1 :]):
        return True
    return any(w in _STREETS for w in _ALPHA.findall(folded, end, end + 40)[:3])


def _party_number(whole: str) -> bool:
    """Whether a bare figure (no currency, no fraction) is a number that names a party: a run of
    ``PARTY_DIGITS`` digits or more written without thousands separators (an account, a phone),
    as ``find_numbers`` reads one. A sum that large is written grouped (``12,000,000``) or with
    its currency; read as one, it would bound a payment to that account by the account's digits."""
    return "," not in whole and len(whole) >= PARTY_DIGITS


_NEXT_FIGURE = re.compile(r"\s?\d")
_GROUP_AFTER = re.compile(r"[^\S\n]+(?=\d)")
_GROUP_BEFORE = re.compile(r"[^\W_]*\d[^\W_]*[^\S\n]+$")


def _grouped(folded: str, start: int, end: int, dated: list[tuple[int, int]]) -> bool:
    """Whether the figure at ``start:end`` is one group of a number written in groups (an IBAN,
    a card, a phone number: "DE89 3704 0044", "+49 151 2345"): only spaces between it and a
    token holding a digit just before it, or a digit just after it (a day or a year excepted).
    Each group is a figure; none is a sum, whatever cue the sentence holds."""
    gap = _GROUP_AFTER.match(folded, end)
    if gap is not None and not any(a <= gap.end() < b for a, b in dated):
        return True
    base = max(0, start - 48)
    prior = _GROUP_BEFORE.search(folded, base, start)
    return prior is not None and not any(a <= prior.start() < b for a, b in dated)


_SENTENCE_END = re.compile(r"[.!?;](?:\s|$)|\n")
_CUE_WINDOW = 6  # words before a figure, in its sentence, where a cue governs it ("a fee of 5.29")


def currency_code(mark: str) -> str:
    """The ISO 4217 code of a currency as written (``€``, ``euros``, ``eur`` are ``EUR``); any
    other text upper-cased as it is (a code the marks here do not know is still its own)."""
    folded = unfold(mark).strip()
    return _CODES.get(folded, folded.upper())


# The codes of ISO 4217 (and of the coins payment services also take): a field whose whole text
# is one names a currency (``is_currency``), whatever the field is called.
_ISO_TEXT = (
    "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD "
    "BTN BWP BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUC CUP CVE CZK DJF DKK DOP "
    "DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HRK HTG HUF IDR ILS "
    "INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD "
    "MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR "
    "PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS "
    "SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW "
    "UZS VED VES VND VUV WST XAF XAG XAU XCD XCG XDR XOF XPD XPF XPT XSU YER ZAR ZMW ZWG ZWL "
    "BTC ETH USDT USDC"
)
_ISO_CODES = frozenset(_ISO_TEXT.split())


def is_currency(text: str) -> bool:
    """Whether ``text`` is, whole, a currency: an ISO 4217 code in any case, or a sign or a name
    ``currency_code`` knows (``€``, ``euros``)."""
    folded = unfold(text).strip()
    return folded in _CODES or folded.upper() in _ISO_CODES


def _qualified(before: str, after: str) -> str | None:
    """The currency a qualifier names around a figure (``_QUALIFIED_SIGN`` in ``before``,
    ``_QUALIFIED_NAME`` in ``after``), as ``currency_code`` writes it; None where none does."""
    sign = _QUALIFIED_SIGN.search(before)
    name = None if sign else _QUALIFIED_NAME.match(after)
    found = sign or name
    if found is None:
        return None
    qualifier, mark = found.group(1), found.group(2)
    if mark not in _SHARED:
        return currency_code(mark)
    if qualifier in _US and mark not in ("¥", "£", "kr"):
        return "USD"
    return currency_code(qualifier + ("" if sign else " ") + mark)


def amounts(text: str) -> list[float]:
    """The amounts of money ``text`` states (``priced``), whatever their currency."""
    return [value for value, _ in priced(text)]


def priced(text: str) -> list[tuple[float, str | None]]:
    """The amounts of money ``text`` states: figures next to a currency (``$40``, ``40 EUR``),
    written with cents (``12.00``), or governed by a word that asks for an amount a few words
    before it in the same sentence (``rent is 2200``, ``a fee of 5.29``). A postal code, a
    street number, an order or a count is a figure, not an amount; nor is a percentage, nor
    the day or the year of a date ("the rent for December 2026" states no sum of 2026), nor a
    figure that names a thing ("room 4021", "order #7731") without a currency or cents, nor a
    group of a number written in groups ("DE89 3704 0044", ``_grouped``). In a sentence that
    states its sum with a currency or cents, a word governs a bare figure only right before it:
    "pay the 200 EUR deposit for the 2500 guests" counts guests after "deposit", no sum. Each
    comes with the currency written beside it (``currency_code``), or None where none is."""
    folded = unfold(text)
    words = [(m.start(), m.group(0)) for m in re.finditer(r"[^\W\d_]+", folded)]
    dated = _dated(text, folded)
    found: list[tuple[float, str | None, bool, int, list[str]]] = []  # value, currency, marked, …
    for m in _FIGURE.finditer(folded):
        start, end = m.start(1), m.end()
        if any(a <= start < b for a, b in dated) or _grouped(folded, start, end, dated):
            continue
        after = folded[end : end + 12]
        if after.lstrip().startswith("%") or re.match(r"\s*percent", after):
            continue
        whole = m.group(1).replace(",", "")
        value = float(whole + ("." + m.group(2) if m.group(2) else ""))
        before = folded[max(0, m.start() - 8) : start]
        leading = re.search(_CURRENCY + r"\s?$", before)
        trailing = None if leading else re.match(r"\s?" + _CURRENCY + r"\b", after)
        currency = leading or trailing
        # A currency between a figure and the next is the next's ("room 4021 EUR 200").
        ahead = trailing is not None and _NEXT_FIGURE.match(after, trailing.end()) is not None
        named = _qualified(before, folded[end : end + 48]) if not ahead else None
        cents = m.group(2) is not None and len(m.group(2)) == 2
        ends = [e.end() for e in _SENTENCE_END.finditer(folded, 0, m.start())]
        sentence = ends[-1] if ends else -1
        earlier = [(pos, w) for pos, w in words if sentence < pos < m.start()]
        preceding = [w for _, w in earlier][-_CUE_WINDOW:]
        if not ((currency and not ahead) or named or cents) and _labelled(folded, earlier, m.start(), end):
            continue  # "room 4021", "invoice 20931", "order #7731": what it names, no sum
        if not ((currency and not ahead) or named or m.group(2)) and _party_number(m.group(1)):
            continue  # "pay the 200.00 deposit to 301018104000": the payee's account, no sum
        code = named or (currency_code(currency.group(0)) if currency and not ahead else None)
        minor = _MINOR.match(folded, end)
        value *= (_MINOR_UNITS[minor.group(1)] if minor else 1.0) * _share_of(folded, sentence, m.start())
        if refused(folded, m.start(), end) and not LIMITING.intersection(preceding[-4:]):
            continue  # "pay 50 EUR, not the 500 EUR they ask": a sum the user turns down
        found.append((value, code, bool(code or cents or minor), sentence, preceding))
    stated = {sentence for _, _, marked, sentence, _ in found if marked}
    return [
        (value, code)
        for value, code, marked, sentence, preceding in found
        if marked
        or (_governed(preceding) if sentence in stated else bool(_AMOUNT_CUES.intersection(preceding)))
    ]


def bounding(
    sums: list[tuple[float, str | None]], currency: str | None, home: str | None = None
) -> list[float]:
    """The amounts of ``sums`` (``priced``) that bound a payment in ``currency``: those stated in
    it, and those stated in no currency where it is the tool's ``home`` one (what it pays when
    told none) or the tool has none. Sums in different currencies are no one scale ("¥30,000 a
    night" bounds no euro payment): where the payment's currency is unknown (None) and ``sums``
    name several, those of the currency whose largest is least."""
    if currency is not None:
        bare = home in (None, currency)
        return [value for value, code in sums if code == currency or (code is None and bare)]
    codes = {code for _, code in sums if code is not None}
    if len(codes) < 2:
        return [value for value, _ in sums]
    each = [[value for value, code in sums if code in (None, c)] for c in sorted(codes)]
    return min(each, key=max)


# A figure's minor unit, written after it (with the currency they are a part of, or not): "50
# cents", "20 euro cents", "75p", "50¢" state a hundredth of the figure, never the figure in
# whole units (a payment of 50 is a hundred times "pay the 50 cents fee").
_MINOR_UNITS = {"¢": 0.01, "c": 0.01, "ct": 0.01, "cts": 0.01, "p": 0.01, "pence": 0.01, "penny": 0.01}
_MINOR_UNITS |= {"pennies": 0.01, "cent": 0.01, "cents": 0.01, "centime": 0.01, "centimes": 0.01}
_MINOR_UNITS |= {"céntimo": 0.01, "céntimos": 0.01, "centavo": 0.01, "centavos": 0.01, "paise": 0.01}
_MINOR_UNITS |= {"kopeck": 0.01, "kopecks": 0.01, "kopek": 0.01, "kopeks": 0.01, "öre": 0.01, "øre": 0.01}
_MINOR_UNITS |= {"grosz": 0.01, "groszy": 0.01, "rappen": 0.01, "satoshi": 1e-8, "satoshis": 1e-8}
_MINOR_UNITS |= {"sat": 1e-8, "sats": 1e-8}
_MINOR = re.compile(
    r"\s?(?:"
    + _CURRENCY
    + r"\s)?("
    + "|".join(sorted(map(re.escape, _MINOR_UNITS), key=len, reverse=True))
    + r")(?![^\W\d_])"
)
# A share of a sum the figure after it states: "10% of the 500 EUR invoice", "half of 300".
_SHARE = re.compile(
    r"(?:(\d+(?:\.\d+)?)\s?(?:%|per\s?cent\b)|\b(half|a\s+third|a\s+quarter))\s+of\b[^\d.!?;\n]{0,40}$"
)
_FRACTIONS = {"half": 0.5, "a third": 1 / 3, "a quarter": 0.25}


def _share_of(folded: str, sentence: int, start: int) -> float:
    """The share of the figure at ``start`` that its sentence asks for: "pay 10% of the 500 EUR
    invoice" states a sum of 50, never one of 500; 1 where no share governs it."""
    share = _SHARE.search(folded, max(sentence, 0, start - 64), start)
    if share is None:
        return 1.0
    if share.group(1) is not None:
        return float(share.group(1)) / 100
    return _FRACTIONS[re.sub(r"\s+", " ", share.group(2))]


# Words that may stand between a word for money and its figure: "a fee of 5", "rent is 2200".
_JOINING = frozenset(["of", "is", "was", "are", "be", "the", "a", "an", "to", "at", "about", "around", "now"])


def _governed(preceding: list[str]) -> bool:
    """Whether a word that asks for an amount stands right before a figure, or with one joining
    word between ("pay 300", "a fee of 5"), not further ("the deposit before 1800")."""
    last = preceding[-1:]
    if last and last[0] in _AMOUNT_CUES:
        return True
    return len(preceding) >= 2 and preceding[-2] in _AMOUNT_CUES and preceding[-1] in _JOINING


_NUMERAL = re.compile(r"[+-]?\d+(?:\.\d{1,2})?", re.ASCII)


_NUMERAL_TEXT = re.compile(r"^[+-]?\d+(?:[.,]\d+)?$", re.ASCII)
# What a numeral says before its value: its sign and the zeros that lead another digit.
_PREFIX = re.compile(r"[+-]?0*(?=\d)")
Numeral = tuple[str, Decimal]


def numeral(value: str) -> Numeral | None:
    """The number ``value`` writes, exactly, with what it writes before it (``_PREFIX``):
    ``98.7`` is ``98.70``, but no two numerals that differ in a digit are one number (as floats,
    twenty-digit account numbers a few thousand apart are equal), nor two that differ in a
    leading ``+`` or in leading zeros (``+5551234567`` and ``005551234567`` dial another country
    than ``5551234567``; ``0042`` is another id than ``42``). Only ASCII digits are a numeral:
    digits of another script are another text, as a full-width letter is."""
    v = value.strip().replace(",", "") if value.count(",") == 1 and "." in value else value.strip()
    if not _NUMERAL_TEXT.match(v):
        return None
    prefix = _PREFIX.match(v)
    try:
        return (prefix.group(0) if prefix else "", Decimal(v.replace(",", ".")))
    except InvalidOperation:
        return None


def figure(value: Any) -> float | None:
    """The finite number an amount argument holds (a number, or a string of a plain decimal
    numeral), else None: ``"NaN"`` or ``"inf"`` compare with no bound, and a string another
    reader takes for another sum is no amount: an exponent (``"5000e-3"``: 5000 to a parser
    that stops at the ``e``), a point before three digits or more (``"5.000"``: five thousand
    where a point groups thousands; ``"200.0000"``: two million to a reader that drops the
    points that group digits; no currency is paid in fractions past its cents), spaces,
    separators or digits of another script."""
    if isinstance(value, bool) or (isinstance(value, str) and not _NUMERAL.fullmatch(value)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # an integer no float holds is no amount either
        return None
    return number if math.isfinite(number) else None


def paid(value: Any) -> float:
    """What an amount argument pays: its figure, the sum of a list's, nothing when it is left
    out; a value that is no amount (``figure``) counts as unbounded."""
    if value is None:
        return 0.0
    if isinstance(value, list | tuple):
        return sum(paid(v) if v is not None else math.inf for v in value)
    number = figure(value)
    return math.inf if number is None else abs(number)
