"""Where a destination argument points (T8): one host or e-mail domain, or a refusal.

The egress rule compares a host with the allowlist, but the tool's own client (an HTTP library,
an SMTP library) decides where the data really goes. The two parsers must not disagree, so only
values every parser reads the same way are accepted:

- a URL ``scheme://[userinfo@]host[:port][/path][?query][#fragment]``;
- an e-mail address ``local@domain`` with a plain local part (letters, digits, ``.``, ``_``,
  ``+``, ``-``): no list, no display name, no quotes, no source route (``%``, ``!``);
- a bare host name.

Refused as ambiguous: whitespace or control characters anywhere (stripped or split differently
by clients, or a header/request-line injection), a backslash (a path separator for WHATWG URL
parsers and urllib3, userinfo for ``urllib.parse``), more than one ``@`` in an authority or
address, a host that is not a plain DNS name or IP literal (percent escapes, non-ASCII, IPv6 zone
ids, empty labels), a port that is not a number.
"""

from __future__ import annotations

import re

__all__ = ["destination_of"]

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST = re.compile(rf"(?:{_LABEL}\.)*{_LABEL}\.?", re.ASCII)
_IPV6 = re.compile(r"\[([0-9a-f:.]+)\]", re.ASCII)  # no zone id ("%25eth0")
_URL = re.compile(r"([a-z][a-z0-9+.-]*)://([^/?#]*)(?:[/?#].*)?", re.ASCII | re.DOTALL)
_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)
_LOCAL_PART = re.compile(r"[a-z0-9_+-]+(?:\.[a-z0-9_+-]+)*", re.ASCII)
_UNSAFE = re.compile(r"[\x00-\x20\x7f-\x9f\\\u1680\u2000-\u200f\u2028\u2029\u202f\u205f\u3000\ufeff]")


def _host(text: str) -> str | None:
    if (v6 := _IPV6.fullmatch(text)) is not None:
        return v6.group(1)
    if _HOST.fullmatch(text) is None or text.endswith(".."):
        return None
    return text.rstrip(".")


def _url_host(authority: str) -> str | None:
    if not authority.isascii() or authority.count("@") > 1:
        return None
    hostport = authority.rpartition("@")[2]
    host, port = hostport, ""
    if ":" in hostport and not hostport.endswith("]"):  # "[::1]" is a host, "[::1]:80" has a port
        host, _, port = hostport.rpartition(":")
    if port and (_PORT.fullmatch(port) is None or int(port) > 65535):
        return None
    return _host(host)


def destination_of(value: str) -> str:
    """The host (or e-mail domain) a destination argument points at, lower-cased.

    Raises ``ValueError`` when ``value`` is not one unambiguous destination (see the module
    docstring): the egress rule refuses it rather than guess which host a client would reach.
    """
    value = value.strip().lower()
    if _UNSAFE.search(value) is not None:
        raise ValueError("a destination must not contain whitespace, control characters or '\\'")
    found: str | None
    if "://" in value:
        url = _URL.fullmatch(value)
        found = _url_host(url.group(2)) if url is not None else None
    elif "@" in value:
        local, _, domain = value.partition("@")
        found = _host(domain) if _LOCAL_PART.fullmatch(local) is not None else None
    else:
        found = _host(value)
    if not found:
        raise ValueError("the destination is not one plain URL, e-mail address or host name")
    return found
