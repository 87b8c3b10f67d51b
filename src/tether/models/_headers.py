"""What a backend puts in its request's headers from its settings, checked where they are read:
the key from its variable and the extra ``headers``. A value an HTTP header cannot carry (a
newline a secrets file ended the key with, a typographic quote copied around it) failed every
attempt of every call: a control character as ``LocalProtocolError`` (retried, then a
``connection`` error that never named the key), a character outside ASCII as an untyped
``UnicodeEncodeError`` that ended ``tether run`` as a crash. Space around a value (a file's last
newline) is dropped, as every HTTP client drops it from a header it reads; any other such
character is a ``ConfigError`` naming the variable or header and the character, never the value
(a key, or a token in a header)."""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Mapping
from urllib.parse import urlsplit

from tether.errors import ConfigError

__all__ = ["api_key", "header_key", "header_values"]

_UNSENDABLE = re.compile(r"[^\t\x20-\x7e]")  # a header value holds visible ASCII, spaces and tabs
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name (RFC 9110 5.1)


def api_key(env: str, base_url: str, official_host: str | None) -> str:
    """The key from ``$env`` (``header_key``): required for the provider's own host, a
    placeholder for a local server. Raises ``ConfigError``."""
    key = header_key(os.environ.get(env, ""), env)
    if not key and urlsplit(base_url).hostname == official_host:
        raise ConfigError(f"set ${env} to use {base_url}")
    return key or "no-key"


def header_key(key: str, env: str) -> str:
    """The key read from ``$env``, as a header carries it: without the space around it (a file's
    last newline); a ``ConfigError`` when a character inside it cannot be sent."""
    key = key.strip()
    if odd := _UNSENDABLE.search(key):
        raise ConfigError(f"${env} {_holds(odd.group(), odd.start())}: fix the key in ${env}")
    return key


def header_values(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The extra headers, each value without the space around it; a ``ConfigError`` for a name
    that is no header name or a value with a character a header cannot carry."""
    out: dict[str, str] = {}
    for name, value in (headers or {}).items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ConfigError(f"headers: {str(name)[:80]!r} is not a header name")
        value = str(value).strip()
        if odd := _UNSENDABLE.search(value):
            raise ConfigError(f"headers: the value of {name} {_holds(odd.group(), odd.start())}")
        out[name] = value
    return out


def _holds(char: str, at: int) -> str:
    name = unicodedata.name(char, "a control character")
    return f"holds U+{ord(char):04X} ({name}) at position {at + 1}, which an HTTP header cannot carry"
