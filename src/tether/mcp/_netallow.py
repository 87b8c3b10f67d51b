"""A confined server's network allowlist: the ``host:port`` entries of ``network``.

An entry is a name, a ``*.suffix`` wildcard (subdomains only) or an address literal, with one
port. A name's resolved addresses are checked too: loopback, link-local, unspecified and
multicast addresses are reached only through an entry naming them literally, or ``localhost``
(no DNS rebinding onto the host's own services).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PROXY_PORT", "Entry", "allowlist", "matching", "parse_entry", "parse_host", "special_address"]

PROXY_PORT = 3128  # the host's proxy, in a confined server's own network namespace (tether.mcp._netproxy)
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Entry:
    """One allowlist entry, normalized: ``host`` a lowercase name, ``*.suffix`` or an address."""

    host: str
    port: int
    address: Address | None = None

    @property
    def text(self) -> str:
        host = f"[{self.host}]" if self.address is not None and self.address.version == 6 else self.host
        return f"{host}:{self.port}"

    @property
    def reaches_special(self) -> bool:
        """Whether this entry may reach loopback, link-local and such addresses: it names them."""
        return self.address is not None or self.host == "localhost"


def parse_host(text: str) -> tuple[str, Address | None]:
    """``(normalized host, address or None)``; ValueError when it is neither."""
    raw = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        address = ipaddress.ip_address(raw.split("%", 1)[0] if "%" in raw else raw)
    except ValueError:
        address = None
    if address is not None:
        if "%" in raw:
            raise ValueError("a scoped address (with %zone) cannot be listed")
        if address.version == 6 and raw == text:
            raise ValueError("an IPv6 address is written in brackets: [2001:db8::1]:443")
        return str(address), address
    name = text.lower().removesuffix(".")
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError("not a host name or an address")
    return name, None


def parse_entry(text: str) -> Entry:
    """One ``host:port`` entry; ValueError (naming the entry) when it is not one."""
    if not isinstance(text, str):
        raise ValueError(f"network entry {text!r}: must be a string 'host:port'")
    host, sep, port_text = text.strip().rpartition(":")
    try:
        if "/" in text or "@" in text:
            raise ValueError("write host:port, without a scheme, user or path")
        if not sep or not host:
            raise ValueError("a port is required: 'host:port'")
        if ":" in host and not host.startswith("["):
            raise ValueError("an IPv6 address is written in brackets: [2001:db8::1]:443")
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError("the port must be a number from 1 to 65535")
        wildcard = host.startswith("*.")
        name, address = parse_host(host[2:] if wildcard else host)
        if wildcard and (address is not None or "." not in name):
            raise ValueError("a wildcard stands for the names under a domain: *.example.com")
        return Entry(f"*.{name}" if wildcard else name, int(port_text), address)
    except ValueError as err:
        raise ValueError(f"network entry {text!r}: {err}") from None


def allowlist(entries: Iterable[str]) -> tuple[Entry, ...]:
    """Every entry parsed (duplicates once)."""
    return tuple(dict.fromkeys(parse_entry(e) for e in entries))


def matching(entries: Iterable[Entry], host: str, port: int) -> Entry | None:
    """The entry that lets a request for ``host:port`` through, if any (ValueError: no host)."""
    name, address = parse_host(host)
    for entry in entries:
        if entry.port != port:
            continue
        if address is not None:
            if entry.address == address:
                return entry
        elif entry.host == name or (entry.host.startswith("*.") and name.endswith(entry.host[1:])):
            return entry
    return None


def special_address(address: Address) -> bool:
    """Loopback, link-local, unspecified or multicast (also as an IPv4-mapped IPv6 address)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_link_local or address.is_unspecified or address.is_multicast
