"""Look-alike names: one check for every domain, e-mail address and URL a person or a rule reads.

``check_name(text)`` takes a domain, an e-mail address or a URL (punycode or Unicode) and says
what it is (both the registered ASCII form and the decoded Unicode form), which scripts its
labels mix, and whether it can pass for another name: a label that mixes scripts
(``pаypal`` with a Cyrillic ``а``), or a non-ASCII character that looks like an ASCII one
(``раураl`` written wholly in Cyrillic). The look-alike test follows Unicode TR39: each
character is mapped to its prototype from the Unicode confusables data (the
``confusable-homoglyphs`` package ships it with the script of every code point) to form a
*skeleton*; a name whose skeleton differs from it and is plain ASCII imitates that ASCII name.

``find_names(text)`` picks the URLs, e-mail addresses and domain-looking words out of free text,
so a page can check every name it shows. Accented names in one script (``münchen.de``) and
names in one non-Latin script that imitate nothing (``例え.jp``) pass.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = ["NameCheck", "check_name", "find_names", "skeleton"]

# Scripts that every script shares (digits, punctuation) or that inherit from their base letter.
_NEUTRAL = frozenset({"COMMON", "INHERITED", "UNKNOWN"})
# Mixes TR39 calls "highly restrictive" and allows: Latin with the scripts written together in
# Japanese, Chinese or Korean text.
_ALLOWED_MIXES = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)
# What could be a name in running text: a URL, an e-mail address, or dotted labels with a TLD.
_NAME = re.compile(
    r"(?:[a-z][a-z0-9+.-]{1,15}://[^\s<>\"'`]+)"
    r"|(?:[^\s@<>\"'`(),;:]+@[^\s@<>\"'`(),;:]+\.[^\s@<>\"'`(),;:]{2,})"
    r"|(?:(?:[^\W_](?:[\w-]{0,62}[^\W_])?\.)+(?:[^\W\d_]{2,63}|xn--[a-z0-9-]{2,59}))",
    re.IGNORECASE,
)


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
        return {
            "text": self.text,
            "kind": self.kind,
            "host": self.host,
            "ascii": self.ascii,
            "unicode": self.unicode,
            "local_part": self.local_part,
            "scripts": list(self.scripts),
            "mixed_script": self.mixed_script,
            "looks_like": self.looks_like,
            "internationalised": self.internationalised,
            "suspicious": self.suspicious,
            "problems": list(self.problems),
        }


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


def _codec(host: str) -> tuple[str, str, str]:
    """(ASCII form, Unicode form, problem) of a host, label by label."""
    labels = [label for label in host.strip().rstrip(".").split(".") if label]
    ascii_labels, unicode_labels = [], []
    problem = ""
    for label in labels:
        try:
            if label.isascii():
                a = label.lower()
                u = a.encode("ascii").decode("idna") if a.startswith("xn--") else a
            else:
                a = label.encode("idna").decode("ascii")
                u = a.encode("ascii").decode("idna")
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
        text=text,
        kind=kind,
        host=host,
        ascii=ascii_host,
        unicode=unicode_host,
        local_part=local,
        scripts=tuple(scripts),
        mixed_script=mixed,
        looks_like=looks_like,
        problems=tuple(problems),
    )


def find_names(text: str, *, limit: int = 50) -> list[str]:
    """URLs, e-mail addresses and domains in ``text``, in order, once each (at most ``limit``)."""
    seen: dict[str, None] = {}
    for match in _NAME.finditer(text[:100_000]):
        name = match.group(0).rstrip(".,!?;:")
        while name.endswith((")", "]")) and name.count(name[-1]) > name.count(
            "(" if name[-1] == ")" else "["
        ):
            name = name[:-1].rstrip(".,!?;:")  # the sentence's bracket, not the URL's
        if name.count(".") or "@" in name or "://" in name:
            seen.setdefault(name)
        if len(seen) >= limit:
            break
    return list(seen)
