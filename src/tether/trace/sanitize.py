"""Make untrusted text safe to put in a log line, without losing the legitimate text.

Every character that ``str.splitlines()`` breaks on, and every other control or
format character (C0, DEL, C1, bidi overrides, zero-width joiners …), is replaced by a
visible escape such as ``\\u2028``. Printable text, non-Latin scripts and emoji pass
through unchanged, so a sanitised value is still readable and diffable.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = ["LINE_BREAKS", "REDACTED", "Redactor", "sanitize", "sanitize_value"]

LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
REDACTED = "[REDACTED]"


def _unsafe(ch: str) -> bool:
    if ch in LINE_BREAKS:
        return True
    cat = unicodedata.category(ch)
    # Cc: controls; Cf: format (bidi overrides, zero-width); Cs: lone surrogates; Zl/Zp: separators.
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


_SECRET_KEY = re.compile(
    r"(pass(word)?|secret|token|api[_-]?key|authorization|cookie|credential|private[_-]?key)", re.I
)


class Redactor:
    """Replaces known secret values and values under secret-looking keys with ``[REDACTED]``."""

    def __init__(self, secrets: frozenset[str] | set[str] = frozenset()) -> None:
        self._secrets = {s for s in secrets if s}

    def add(self, secret: str) -> None:
        if secret:
            self._secrets.add(secret)

    def has_secrets(self) -> bool:
        return bool(self._secrets)

    def text(self, value: str) -> str:
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def is_secret_key(self, key: str) -> bool:
        return _secret_key(key)


@functools.lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    # Trace keys repeat on every event: match each one once.
    return bool(_SECRET_KEY.search(key))


def sanitize_value(value: Any, redactor: Redactor | None = None, _key: str = "") -> Any:
    """Recursively sanitise (and redact) a JSON-like value for a trace line."""
    kind = type(value)
    if kind is int or kind is float or kind is bool or value is None:  # the common case first
        return value
    # Exact types before the isinstance checks: an ABC check (Mapping) costs more than the rest.
    if kind is str or isinstance(value, (str, bytes)):
        if _key and redactor is not None and redactor.is_secret_key(_key):
            return REDACTED
        if kind is not str:
            value = str(value) if kind is bytes else str.__str__(value)
        return sanitize(redactor.text(value) if redactor else value)
    if kind is dict or isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            name = str(k)
            out[sanitize(name)] = sanitize_value(v, redactor, name)
        return out
    if kind is list or kind is tuple:
        return [sanitize_value(v, redactor) for v in value]
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [sanitize_value(v, redactor) for v in items]
    if isinstance(value, (bool, int, float)):
        return value
    return sanitize(redactor.text(str(value)) if redactor else str(value))
