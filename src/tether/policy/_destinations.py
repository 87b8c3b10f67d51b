"""Where a destination argument points (T8): one host or e-mail domain, or a refusal.

The egress rule compares a host with the allowlist, but the tool's own client (an HTTP library,
an SMTP library) decides where the data really goes. The two parsers must not disagree, so only
values every parser reads the same way are accepted:

- a URL ``scheme://[userinfo@]host[:port][/path][?query][#fragment]``;
- an e-mail address ``local@domain`` with a plain local part (letters, digits, ``.``, ``_``,
  ``+``, ``-``): no list, no display name, no quotes, no source route (``%``, ``!``);
- a bare host name;
- a ``mailto:`` URI (RFC 6068; ``mailto://`` too, as ``urllib.parse`` reads it): every address
  it names, in its path and in its ``to``, ``cc`` and ``bcc`` fields, each percent-decoded and
  read as an e-mail address above (``destinations_of``): a mail client sends to all of them, so
  ``mailto://ok@partner.example?cc=mallory@attacker.example`` is not a mail to the partner alone.

Refused as ambiguous: whitespace or control characters anywhere (stripped or split differently
by clients, or a header/request-line injection), a backslash (a path separator for WHATWG URL
parsers and urllib3, userinfo for ``urllib.parse``), more than one ``@`` in an authority or
address, a host that is not a plain DNS name or IP literal (percent escapes, non-ASCII, IPv6 zone
ids, empty labels), a port that is not a number.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["destination_of", "destinations_of"]

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


_MAILTO = "mailto:"
_RECIPIENT_FIELDS = frozenset({"to", "cc", "bcc"})


def _safe(value: str) -> str:
    if _UNSAFE.search(value) is not None:
        raise ValueError("a destination must not contain whitespace, control characters or '\\'")
    return value


def _address_domain(address: str) -> str | None:
    local, at, domain = address.partition("@")
    return _host(domain) if at and _LOCAL_PART.fullmatch(local) is not None else None


def _mailto(uri: str) -> tuple[str, ...]:
    """The domains of every address a ``mailto:`` URI names (its path, its ``to``, ``cc`` and
    ``bcc`` fields), each percent-decoded as a mail client decodes it; ``ValueError`` for a
    fragment, an address that is not plain, or none at all."""
    path, _, fields = uri.removeprefix("//").partition("?")
    if "#" in uri:
        raise ValueError("a mailto: destination must not have a fragment")
    lists = [path] if path else []
    for field in re.split("[&;]", fields) if fields else ():  # ';': an older form separator
        name, _, value = field.partition("=")
        if _safe(unquote(name)) in _RECIPIENT_FIELDS:
            lists.append(value)
    domains = [_address_domain(_safe(unquote(a))) for part in lists for a in part.split(",") if a]
    if not domains or None in domains:
        raise ValueError("a mailto: destination names an address that is not plain, or none")
    return tuple(dict.fromkeys(d for d in domains if d is not None))


def destinations_of(value: str) -> tuple[str, ...]:
    """Every host (or e-mail domain) a destination argument points at, lower-cased: one, but
    for a ``mailto:`` URI naming several addresses. Raises ``ValueError`` as ``destination_of``."""
    value = _safe(value.strip().lower())
    if value.startswith(_MAILTO):
        return _mailto(value.removeprefix(_MAILTO))
    return (destination_of(value),)


def destination_of(value: str) -> str:
    """The host (or e-mail domain) a destination argument points at, lower-cased.

    Raises ``ValueError`` when ``value`` is not one unambiguous destination (see the module
    docstring): the egress rule refuses it rather than guess which host a client would reach.
    A ``mailto:`` URI is one destination when all its addresses share one domain
    (``destinations_of`` gives each).
    """
    value = _safe(value.strip().lower())
    if value.startswith(_MAILTO):
        found_all = _mailto(value.removeprefix(_MAILTO))
        if len(found_all) != 1:
            raise ValueError("the mailto: destination names more than one domain")
        return found_all[0]
    found: str | None
    if "://" in value:
        url = _URL.fullmatch(value)
        found = _url_host(url.group(2)) if url is not None else None
    elif "@" in value:
        found = _address_domain(value)
    else:
        found = _host(value)
    if not found:
        raise ValueError("the destination is not one plain URL, e-mail address or host name")
    return found
