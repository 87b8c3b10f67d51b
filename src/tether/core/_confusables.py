"""Look-alike names: one check for every domain, e-mail address and URL a person or a rule reads.

``check_name(text)`` says what a name is (its registered ASCII form and its Unicode form), which
scripts its labels mix, and whether it can pass for another name: a label that mixes scripts
(``pаypal`` with a Cyrillic ``а``) or non-ASCII characters that look like ASCII ones (TR39
skeletons from the ``confusable-homoglyphs`` data). ``find_names(text)`` picks the names out of
free text. Accented names in one script (``münchen.de``) and non-Latin names that imitate
nothing (``例え.jp``) pass."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

__all__ = ["DEFAULT_IGNORABLE", "NameCheck", "check_name", "find_names", "label_to_ascii", "skeleton"]

# Unicode's Default_Ignorable_Code_Point ranges (not in ``unicodedata``): what a renderer draws as
# nothing, and what a browser leaves out of a host name (UTS 46 maps most to nothing).
DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)

# Scripts that every script shares (digits, punctuation) or that inherit from their base letter.
_NEUTRAL = frozenset({"COMMON", "INHERITED", "UNKNOWN"})
# Mixes TR39 calls "highly restrictive" and allows: Latin with the scripts written together in
# Japanese, Chinese or Korean text.
_ALLOWED_MIXES = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)
# Runs of text no name can cross, scanned by ``_scan_word``.
_WORD = re.compile(r"[^\s<>\"'`]+")
_EMAIL_STOP = frozenset("@<>\"'`(),;:")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{1,15}://\Z", re.IGNORECASE)
_PUNYCODE_TLD = re.compile(r"xn--[a-z0-9-]{2,59}", re.IGNORECASE)


@functools.lru_cache(maxsize=1)
def _data() -> tuple[dict[str, Any], Any]:
    from confusable_homoglyphs import categories, confusables

    return confusables.confusables_data, categories


@functools.lru_cache(maxsize=65536)
def _prototype(ch: str) -> str:
    """The ASCII character ``ch`` imitates, else ``ch`` itself (ASCII maps to itself)."""
    if ch.isascii():
        return ch
    data, _ = _data()
    for glyph in data.get(ch, ()):
        target = str(glyph.get("c", "")).strip("\u200e\u200f")
        if len(target) == 1 and target.isascii() and target.isalnum():
            return target.lower()
    return ch


def skeleton(text: str) -> str:
    """A TR39-style skeleton: decomposed, each character replaced by the ASCII one it imitates."""
    base = unicodedata.normalize("NFD", text)
    out = "".join(_prototype(ch) for ch in base)
    return unicodedata.normalize("NFC", out).lower()


@functools.lru_cache(maxsize=65536)
def _script(ch: str) -> str:
    _, categories = _data()
    try:
        return str(categories.alias(ch))
    except Exception:  # a code point the data does not list
        return "UNKNOWN"


def _scripts(label: str) -> list[str]:
    found: dict[str, None] = {}
    for ch in label:
        script = _script(ch)
        if script not in _NEUTRAL:
            found.setdefault(script)
    return list(found)


@dataclass(frozen=True, slots=True)
class NameCheck:
    """What a name is and whether it can pass for another one."""

    text: str  # as written
    kind: str  # url | email | domain
    host: str  # the domain part as written
    ascii: str  # the domain as registered (IDNA / punycode); "" if it does not encode
    unicode: str  # the domain decoded to Unicode
    local_part: str = ""  # an e-mail address's part before the @
    scripts: tuple[str, ...] = ()
    mixed_script: bool = False
    looks_like: str = ""  # the ASCII name it imitates ("" when none)
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def suspicious(self) -> bool:
        return bool(self.problems)

    @property
    def internationalised(self) -> bool:
        return bool(self.ascii) and self.ascii != self.unicode

    def to_json(self) -> dict[str, Any]:
        """Every field (tuples as lists) and the two verdicts."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(scripts=list(self.scripts), problems=list(self.problems))
        return {**out, "internationalised": self.internationalised, "suspicious": self.suspicious}


def _split(text: str) -> tuple[str, str, str]:
    """(kind, host, local part) of a URL, an e-mail address or a bare domain."""
    value = text.strip()
    if "://" in value:
        try:
            host = urlsplit(value).hostname or ""
        except ValueError:
            host = ""
        return "url", host, ""
    if "@" in value:
        local, _, host = value.rpartition("@")
        return "email", host, local
    return "domain", value, ""


# Characters IDNA 2003 maps away and a browser (UTS 46 nontransitional) keeps: ``straße.example``
# opens ``xn--strae-oqa.example``, not ``strasse.example``.
_DEVIATIONS = frozenset("\u00df\u03c2\u200c\u200d")


def label_to_ascii(label: str) -> str:
    """One label of a host as a browser resolves it: lower case; a Unicode label by IDNA 2003
    (Python's ``idna`` codec), except that a label with a deviation character (``ß``, final ``ς``,
    the zero-width joiners) is encoded as written, never folded into another name. Raises
    ``UnicodeError`` for a label no codec can encode."""
    if label.isascii():
        return label.lower()
    if _DEVIATIONS.isdisjoint(label):
        return label.encode("idna").decode("ascii")
    return "xn--" + unicodedata.normalize("NFKC", label).lower().encode("punycode").decode("ascii")


def _label_to_unicode(label: str) -> str:
    if not label.startswith("xn--"):
        return label
    try:
        return label.encode("ascii").decode("idna")
    except UnicodeError:  # a deviation character does not survive IDNA 2003's round trip
        return label[4:].encode("ascii").decode("punycode")


def _codec(host: str) -> tuple[str, str, str]:
    """(ASCII form, Unicode form, problem) of a host, label by label."""
    labels = [label for label in host.strip().rstrip(".").split(".") if label]
    ascii_labels, unicode_labels = [], []
    problem = ""
    for label in labels:
        try:
            a = label_to_ascii(label)
            u = _label_to_unicode(a)
        except UnicodeError:
            problem = f"the label {label!r} is not a valid international domain name"
            a = u = label
        ascii_labels.append(a)
        unicode_labels.append(u)
    return ".".join(ascii_labels), ".".join(unicode_labels), problem


@functools.lru_cache(maxsize=4096)
def check_name(text: str) -> NameCheck:
    """Check one domain, e-mail address or URL (see the module docstring)."""
    kind, host, local = _split(text)
    ascii_host, unicode_host, problem = _codec(host)
    problems: list[str] = [problem] if problem else []
    scripts: dict[str, None] = {}
    mixed = False
    parts = [p for p in unicode_host.split(".") if p]
    if local:
        parts.append(local)
    for part in parts:
        found = _scripts(part)
        scripts.update(dict.fromkeys(found))
        if len(found) > 1 and not any(set(found) <= mix for mix in _ALLOWED_MIXES):
            mixed = True
            problems.append(f"{part!r} mixes scripts ({', '.join(found)})")
    looks_like = ""
    shown = (f"{local}@" if local else "") + unicode_host
    if not shown.isascii():
        skel = skeleton(shown)
        if skel.isascii() and skel != shown.lower():
            looks_like = skel
            problems.append(f"looks like {skel!r} but is written with other characters")
    hidden = [ch for ch in text if unicodedata.category(ch) in ("Cf", "Cc", "Zl", "Zp")]
    if hidden:
        problems.append(
            "contains hidden characters " + ", ".join(f"U+{ord(c):04X}" for c in dict.fromkeys(hidden))
        )
    return NameCheck(
        text, kind, host, ascii_host, unicode_host, local, tuple(scripts), mixed, looks_like, tuple(problems)
    )


class _Work:
    """Character steps the name search took (a test checks they grow linearly with the input)."""

    steps = 0


def _email_hosts(word: str) -> list[tuple[int, int, int]]:
    """(the @, where its local part starts, where its host ends) of each e-mail address shape
    (a host with a dot that has a character before it and two after)."""
    found: list[tuple[int, int, int]] = []
    run = 0
    n = len(word)
    for i, ch in enumerate(word):
        if ch not in _EMAIL_STOP:
            continue
        if ch == "@" and run < i:
            host_end = i + 1
            while host_end < n and word[host_end] not in _EMAIL_STOP:
                host_end += 1
            if word.rfind(".", i + 2, host_end - 2) >= 0:
                found.append((i, run, host_end))
        run = i + 1
    return found


def _domain_ends(word: str) -> list[int]:
    """For each position, where a domain that starts there ends (-1: none starts there).

    A label is a whole run of ``[\\w-]`` (1 to 64 characters, alphanumeric at both ends) followed by
    a dot; labels chain, and the domain ends with the top-level domain after the last label
    (punycode ``xn--…``, else 2 to 63 letters)."""
    n = len(word)
    run_end = [n] * (n + 1)
    letters = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        ch = word[i]
        run_end[i] = run_end[i + 1] if ch.isalnum() or ch in "_-" else i
        letters[i] = letters[i + 1] + 1 if ch.isalnum() and not ch.isdecimal() else 0
    label_next = [-1] * (n + 1)  # where the next label starts after a label at i and its dot
    for i in range(n):
        end = run_end[i]
        dotted = i < end < n and end - i <= 64 and word[end] == "."
        if dotted and word[i].isalnum() and word[end - 1].isalnum():
            label_next[i] = end + 1
    after = [-1] * (n + 1)  # the end of a domain whose labels have reached j
    for j in range(n, -1, -1):
        nxt = label_next[j]
        deeper = after[nxt] if nxt >= 0 else -1
        if deeper >= 0:
            after[j] = deeper
        elif j < n:
            puny = _PUNYCODE_TLD.match(word, j, j + 63) if letters[j] >= 2 else None
            after[j] = puny.end() if puny else (j + min(letters[j], 63) if letters[j] >= 2 else -1)
    return [after[label_next[i]] if label_next[i] >= 0 else -1 for i in range(n)]


def _scan_word(word: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each name in one run of text, leftmost first (a URL, then an e-mail
    address, then a domain where two start together); each character is visited a bounded number
    of times."""
    n = len(word)
    domains = _domain_ends(word)
    ats = _email_hosts(word)
    colons = [k for k in range(n) if word.startswith("://", k)] if "://" in word else []
    _Work.steps += 4 * n
    pos = d = a = c = 0
    while pos < n:
        while c < len(colons) and colons[c] < pos + 2:
            c += 1
        url_at = n
        while c < len(colons):  # the first "://" with a scheme (at most 16 characters) before it
            k = colons[c]
            _Work.steps += 1
            scheme = _SCHEME.search(word, max(pos, k - 16), k + 3) if k + 3 < n else None
            if scheme:
                url_at = scheme.start()
                break
            c += 1
        while a < len(ats) and ats[a][0] <= pos:
            a += 1
        mail_at = max(pos, ats[a][1]) if a < len(ats) else n
        d = max(d, pos)
        while d < n and domains[d] < 0:
            d += 1
        _Work.steps += 1
        if url_at < n and url_at <= mail_at and url_at <= d:
            yield url_at, n
            return
        if mail_at < n and mail_at <= d:
            yield mail_at, ats[a][2]
            pos = ats[a][2]
        elif d < n:
            yield d, domains[d]
            pos = domains[d]
        else:
            return


def _trim(name: str) -> str:
    """``name`` without the sentence's punctuation and closing brackets after it."""
    end = len(name.rstrip(".,!?;:"))
    closed = {")": name.count(")"), "]": name.count("]")}
    opened = {")": name.count("("), "]": name.count("[")}
    while end and name[end - 1] in closed and closed[name[end - 1]] > opened[name[end - 1]]:
        closed[name[end - 1]] -= 1  # the sentence's bracket, not the URL's
        end -= 1
        while end and name[end - 1] in ".,!?;:":
            end -= 1
    return name[:end]


def find_names(text: str, *, limit: int = 50) -> list[str]:
    """URLs, e-mail addresses and domains in ``text``, in order, once each (at most ``limit``), in
    time linear in the length of ``text``."""
    seen: dict[str, None] = {}
    for word in _WORD.finditer(text):
        for start, end in _scan_word(word.group(0)):
            name = _trim(word.group(0)[start:end])
            if name.count(".") or "@" in name or "://" in name:
                seen.setdefault(name)
            if len(seen) >= limit:
                return list(seen)
    return list(seen)
