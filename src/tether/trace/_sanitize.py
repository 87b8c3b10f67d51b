"""Make untrusted text safe to put in a log line: every character ``str.splitlines()`` breaks
on, and every other control or format character, becomes a visible escape (``\\u2028``);
printable text of any script passes unchanged. Also the ``Redactor`` of secrets."""

from __future__ import annotations

import itertools
import json
import re
import threading
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = [
    "JSON_OPENERS",
    "LINE_BREAKS",
    "MIN_FRAGMENT",
    "REDACTED",
    "Redactor",
    "finite",
    "redact_keyed_text",
    "redact_value",
    "sanitize",
    "sanitize_value",
]

LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
REDACTED = "[REDACTED]"


def _unsafe(ch: str) -> bool:
    if ch in LINE_BREAKS:
        return True
    cat = unicodedata.category(ch)
    return cat in ("Cc", "Cf", "Cs", "Zl", "Zp")


def _escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


class _Escapes(dict[int, str]):
    """A lazily filled ``str.translate`` table: unsafe characters map to escapes."""

    def __init__(self) -> None:
        super().__init__()
        self._safe: set[int] = set()

    def __missing__(self, code: int) -> str:
        if code in self._safe:
            raise LookupError(code)  # str.translate leaves the character as it is
        ch = chr(code)
        if not _unsafe(ch):
            self._safe.add(code)
            raise LookupError(code)
        value = self[code] = _escape(ch)
        return value


_ESCAPES = _Escapes()
# Backslash is escaped too, so "\\u2028" typed by an attacker stays distinguishable from an escape.
_ESCAPES[ord("\\")] = "\\\\"


def sanitize(text: str) -> str:
    """Escape every line-breaking and control character; keep everything else."""
    if text.isprintable() and "\\" not in text:
        return text
    return text.translate(_ESCAPES)


# Key names whose values are credentials, matched as whole words of the name (``api_token``,
# ``clientSecret``), never as substrings (``secretary_email`` and ``max_tokens`` are data).
_SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "token",
        "apikey",
        "authorization",
        "cookie",
        "credential",
        "credentials",
        "privatekey",
        "accesskey",
        "secretkey",
    }
)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
MIN_FRAGMENT = 8  # a piece of a secret this long or longer is redacted wherever it appears
_ANCHOR = 4  # every fragment of MIN_FRAGMENT characters holds one 4-character piece at a multiple of 4


class Redactor:
    """Replaces secrets with ``[REDACTED]``: known values and every piece of one of
    ``MIN_FRAGMENT`` characters or more, values of arguments a tool declares secret (``declare``,
    ``learn``), and values under credential-named keys (``is_secret_key``)."""

    def __init__(self, secrets: frozenset[str] | set[str] = frozenset()) -> None:
        self._secrets: set[str] = set()
        # piece -> (secret, offset of the piece in it); one pattern finds any piece in one pass
        self._anchors: dict[str, list[tuple[str, int]]] = {}
        # What ``text`` reads: the secrets longest first, a copy of the pieces and their pattern,
        # built again only when read after a secret was added (``_built``: learning a huge secret
        # argument sorts and compiles once, not once a value). A run's tools learn secrets on
        # other threads while its tracer redacts: ``add`` and the build hold ``_lock``, and a
        # reader only ever reads a view no ``add`` changes (iterating the live pieces while a
        # thread added one raised "dictionary changed size during iteration").
        self._view: _View = ((), {}, None)
        self._stale = False
        self._lock = threading.Lock()
        self._declared: dict[str, frozenset[str]] = {}
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str) -> None:
        if not secret or secret in self._secrets:
            return
        with self._lock:
            if secret in self._secrets:
                return
            self._secrets.add(secret)
            self._stale = True
            if len(secret) >= MIN_FRAGMENT:
                for at in range(0, len(secret) - _ANCHOR + 1, _ANCHOR):
                    self._anchors.setdefault(secret[at : at + _ANCHOR], []).append((secret, at))

    def _built(self) -> _View:
        """The secrets longest first, their pieces and the pieces' pattern, as of the last ``add``."""
        if self._stale:
            with self._lock:
                if self._stale:
                    self._stale = False
                    anchors = {piece: tuple(found) for piece, found in self._anchors.items()}
                    rx = re.compile("|".join(map(re.escape, sorted(anchors)))) if anchors else None
                    self._view = (tuple(sorted(self._secrets, key=len, reverse=True)), anchors, rx)
        return self._view

    def has_secrets(self) -> bool:
        return bool(self._secrets)

    def declare(self, tool: str, arguments: frozenset[str] | set[str]) -> None:
        """``tool``'s contract declares ``arguments`` secret: their values are learned per call."""
        if arguments:
            self._declared[tool] = frozenset(arguments) | self._declared.get(tool, frozenset())

    def declared(self, tool: Any) -> frozenset[str]:
        return (
            self._declared.get(tool, frozenset()) if self._declared and isinstance(tool, str) else frozenset()
        )

    def learn(self, tool: Any, arguments: Any) -> None:
        """Learn ``tool``'s declared secret arguments (a mapping, or its JSON text, maybe cut)."""
        names = self._declared.get(tool) if isinstance(tool, str) else None
        if not names:
            return
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments)
            except (ValueError, RecursionError):  # not JSON, or nested past reading: its text is read
                parsed = None
            if not isinstance(parsed, dict):
                for name in names:
                    for raw in re.findall(rf'"{re.escape(name)}"\s*:\s*"((?:[^"\\]|\\.)*)', arguments):
                        self._learn_value(_unescape(raw))
                        self._learn_value(raw)
                return
            arguments = parsed
        if isinstance(arguments, Mapping):
            for name in names:
                if name in arguments:
                    self._learn_value(arguments[name])

    def _learn_value(self, value: Any) -> None:
        """Every scalar in ``value``, read without recursion (a model may nest an argument hundreds
        deep: a secret at the bottom is learned all the same)."""
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, Mapping):
                stack.extend(item.values())
            elif isinstance(item, list | tuple):
                stack.extend(item)
            elif item is not None and not isinstance(item, bool):
                text = str(item)
                if len(text) >= 4:  # shorter would redact every common word or number
                    # As it is, and as it appears inside JSON text (add ignores a repeat).
                    for variant in (text, json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1]):
                        self.add(variant)

    def text(self, value: str) -> str:
        order, anchors, rx = self._built()
        for secret in order:
            if secret in value:
                value = value.replace(secret, REDACTED)
        if rx is not None:
            value = _fragments(value, anchors, rx)
        return value

    def is_secret_key(self, key: str) -> bool:
        return _secret_key(key)


# A redactor's secrets as ``text`` reads them: longest first, piece -> (secret, offset), pattern.
_View = tuple[tuple[str, ...], dict[str, tuple[tuple[str, int], ...]], "re.Pattern[str] | None"]


def _positions(value: str, anchors: Mapping[str, Any], rx: re.Pattern[str]) -> list[tuple[int, str]]:
    """Where a piece of a secret starts in ``value`` (overlapping ones too)."""
    out: list[tuple[int, str]] = []
    if len(value) <= 512:
        found = rx.search(value)
        while found is not None:
            out.append((found.start(), found.group()))
            found = rx.search(value, found.start() + 1)
        return out
    for piece in anchors:
        pos = value.find(piece)
        while pos != -1:
            out.append((pos, piece))
            pos = value.find(piece, pos + 1)
    return out


def _fragments(value: str, anchors: Mapping[str, tuple[tuple[str, int], ...]], rx: re.Pattern[str]) -> str:
    spans: list[tuple[int, int]] = []
    for pos, piece in _positions(value, anchors, rx):
        for secret, at in anchors[piece]:
            left = 0
            while pos - left > 0 and at - left > 0 and value[pos - left - 1] == secret[at - left - 1]:
                left += 1
            right = 0
            end, send = pos + _ANCHOR, at + _ANCHOR
            while (
                end + right < len(value)
                and send + right < len(secret)
                and (value[end + right] == secret[send + right])
            ):
                right += 1
            if left + _ANCHOR + right >= MIN_FRAGMENT:
                spans.append((pos - left, end + right))
    if not spans:
        return value
    spans.sort()
    out, last = [], 0
    for start, stop in spans:
        if stop <= last:
            continue
        if start >= last:
            out.append(value[last:start])
            out.append(REDACTED)
        last = stop
    out.append(value[last:])
    return "".join(out)


def _unescape(raw: str) -> str:
    try:
        value = json.loads(f'"{raw}"')
    except ValueError:  # cut inside an escape
        return raw
    return value if isinstance(value, str) else raw


def _secret_key(key: str) -> bool:
    if key.isalpha() and key.isascii() and key.islower():
        return key in _SECRET_WORDS  # one lowercase word, as ``_WORD`` would split it (``id``, ``name``)
    words = [w.lower() for w in _WORD.findall(key)]
    if any(w in _SECRET_WORDS for w in words):
        return True
    return any(a + b in _SECRET_WORDS for a, b in itertools.pairwise(words))


KEYED_TEXT = 1_000_000  # the longest JSON text whose keys are read for credential names


def _keyed(value: Any, redactor: Redactor) -> tuple[Any, bool]:
    """``value`` with each string under a credential-named key redacted, and whether any was."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        hit = False
        for k, v in value.items():
            if isinstance(v, str) and redactor.is_secret_key(k):
                out[k], hit = REDACTED, True
            else:
                out[k], found = _keyed(v, redactor)
                hit = hit or found
        return out, hit
    if isinstance(value, list):
        pairs = [_keyed(v, redactor) for v in value]
        return [v for v, _ in pairs], any(found for _, found in pairs)
    return value, False


JSON_OPENERS = ("{", "[")  # text that may be a JSON object or array (a call's traced arguments)
_NOT_ALNUM = re.compile(r"[^0-9a-z]+")
# Any credential word as a substring: one search, not a Python step per word (about a sixth of
# the instructions for a call's arguments, under callgrind).
_ANY_SECRET_WORD = re.compile("|".join(map(re.escape, sorted(_SECRET_WORDS))))


def _names_a_secret(text: str) -> bool:
    """Whether ``text`` could hold a credential-named key: a key ``_secret_key`` takes is ASCII
    words of which one, or two adjacent ones joined, is a credential word, so with every other
    character dropped the text holds that word. Most calls' arguments hold none and are not parsed
    (a trace line of a call's arguments costs no JSON parse: bench/governance.py)."""
    squashed = _NOT_ALNUM.sub("", text.lower())
    return _ANY_SECRET_WORD.search(squashed) is not None


def redact_keyed_text(text: str, redactor: Redactor) -> str:
    """``text``, a JSON object or array as a call's arguments are traced, with the strings under
    its credential-named keys redacted as a traced mapping's are; any other text unchanged."""
    if text[:1] not in JSON_OPENERS or len(text) > KEYED_TEXT or not _names_a_secret(text):
        return text
    try:
        parsed, hit = _keyed(json.loads(text), redactor)
    except (ValueError, RecursionError):  # not JSON, or nested past reading: kept as text
        return text
    return json.dumps(parsed, ensure_ascii=False) if hit else text


def finite(value: float) -> float | str:
    """A float as a trace line holds it: a number when finite, else its name as text (JSON has no
    NaN or infinity; written bare, strict readers refused the line and PostgreSQL the batch)."""
    if value - value == 0:  # false for NaN and both infinities
        return value
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


def sanitize_value(value: Any, redactor: Redactor | None = None, _key: str = "") -> Any:
    """Recursively sanitise (and redact) a JSON-like value for a trace line."""
    kind = type(value)
    if kind is int or kind is bool or value is None:  # the common case first
        return value
    if kind is float:
        return finite(value)
    if kind is str or isinstance(value, (str, bytes)):
        if _key and redactor is not None and redactor.is_secret_key(_key):
            return REDACTED
        if kind is not str:
            value = str(value) if kind is bytes else str.__str__(value)
        if redactor is None:
            return sanitize(value)
        if value[:1] in JSON_OPENERS:
            value = redact_keyed_text(value, redactor)
        return sanitize(redactor.text(value) if redactor.has_secrets() else value)  # none: as is
    if kind is dict or isinstance(value, Mapping):
        out: dict[str, Any] = {}
        redact = redactor.text if redactor is not None and redactor.has_secrets() else None
        for k, v in value.items():
            name = str(k)
            shown = sanitize(redact(name) if redact is not None else name)  # a secret as a key too
            out[_kept_key(shown, out)] = sanitize_value(v, redactor, name)
        return out
    if kind is list or kind is tuple:
        return [sanitize_value(v, redactor) for v in value]
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [sanitize_value(v, redactor) for v in items]
    if isinstance(value, float):
        return finite(float(value))
    if isinstance(value, (bool, int)):
        return value
    return sanitize(redactor.text(str(value)) if redactor else str(value))


def redact_value(value: Any, redactor: Redactor, *, keys: bool = False) -> Any:
    """``value`` with every string in it redacted, nothing else changed (no escaping). ``keys``:
    its mappings' keys too, for data a model or a server wrote (a secret written as a key is a
    secret as well); leave it off for a mapping whose keys are the caller's own field names."""
    if isinstance(value, str):
        return redactor.text(value)
    if isinstance(value, Mapping):
        if not keys:
            return {k: redact_value(v, redactor) for k, v in value.items()}
        out: dict[Any, Any] = {}
        for k, v in value.items():
            out[_kept_key(redactor.text(k) if isinstance(k, str) else k, out)] = redact_value(
                v, redactor, keys=True
            )
        return out
    if isinstance(value, list | tuple):
        return [redact_value(v, redactor, keys=keys) for v in value]
    return value


def _kept_key(key: Any, taken: Mapping[Any, Any]) -> Any:
    """``key``, or ``key (2)`` … if a redacted key took it: no key hides another's value."""
    if key not in taken:
        return key
    n = 2
    while f"{key} ({n})" in taken:
        n += 1
    return f"{key} ({n})"
