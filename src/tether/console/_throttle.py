"""Who is guessing, and how often they may: the sign-in throttle (``Throttle``) and the API-token
guess limiter (``TokenGuesses``), each counting a client address as ``attacker`` says."""

from __future__ import annotations

import ipaddress
import threading
import time
from typing import ClassVar, TypeVar

__all__ = ["TOKEN_GUESSES", "TOKEN_ID_GUESSES", "Throttle", "TokenGuesses", "attacker"]

TOKEN_GUESSES = 10  # secrets one client may try under one token's id in a minute before none is hashed
# Secrets tried under one token's id in a minute, from all clients, past which a client that tried
# a wrong one there is refused at once (each other client still has its attempts hashed).
TOKEN_ID_GUESSES = 5 * TOKEN_GUESSES

_LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")


def attacker(client: str) -> str:
    """Whom the throttle counts a client address as: an IPv6 client as its /64 (one household's
    or one server's share: an attacker rotating through it is one attacker), an IPv4-mapped IPv6
    address as the IPv4 address it is, any loopback address (127.0.0.0/8, ``::1``) as 127.0.0.0/8
    (this host: its every account connects from any of them); anything else (no address) as itself."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client
    if address.is_loopback:
        return str(_LOOPBACK)
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return attacker(str(address.ipv4_mapped))
        return str(ipaddress.IPv6Network((int(address) >> 64 << 64, 64)))
    return str(address)


class Throttle:
    """Failed sign-ins within ``window_s``: refused after 5 failures for one name from one address,
    20 from one address (any names), or 100 for one name from anywhere, so a handful of guesses
    from elsewhere never locks a person out at their own address. An address is counted as
    ``attacker`` says (an IPv6 client's whole /64). The name's own limit, which guesses from
    anywhere reach, spares the networks the name signed in from lately (``known_s``, the newest
    ``known_kept``): its person still signs in from their usual network while strangers guess,
    and those networks keep their own limits (the name's guesses stay bounded)."""

    limits: ClassVar = {"pair": 5, "client": 20, "name": 100}
    window_s = 900.0
    known_s = 30 * 86400.0
    known_kept = 8

    def __init__(self) -> None:
        self._failures: dict[tuple[str, str], list[float]] = {}
        self._known: dict[str, dict[str, float]] = {}  # name -> network -> when it last signed in

    def _keys(self, name: str, client: str) -> list[tuple[str, str]]:
        client = attacker(client)
        return [("pair", f"{name}\x00{client}"), ("client", client), ("name", name)]

    def _recent(self, key: tuple[str, str]) -> list[float]:
        return _within(self._failures, key, time.monotonic(), self.window_s)

    def blocked(self, name: str, client: str) -> bool:
        keys = self._keys(name, client)
        seen = self._known.get(name, {}).get(attacker(client))
        if seen is not None and time.monotonic() - seen < self.known_s:
            keys = keys[:2]  # a network the name signed in from: its pair's and its own limits
        return any(len(self._recent(k)) >= self.limits[k[0]] for k in keys)

    def attempt(self, name: str, client: str) -> float | None:
        """Reserve one attempt, counted as a failure until ``succeeded`` gives it back (checked and
        counted with no await between: attempts sent at once cannot all pass); ``None``: blocked."""
        if self.blocked(name, client):
            return None
        if len(self._failures) > 50_000:  # bounded memory: drop what has expired
            for key in list(self._failures):
                self._recent(key)
        now = time.monotonic()
        for key in self._keys(name, client):
            self._failures.setdefault(key, []).append(now)
        return now

    def first_refusal(self, client: str) -> bool:
        """Whether this refused attempt is the address's first within the window: only that one is
        audited (attempts past the limit cannot flood the append-only audit log)."""
        key = ("refused", attacker(client))
        if self._recent(key):
            return False
        self._failures[key] = [time.monotonic()]
        return True

    def succeeded(self, name: str, client: str, at: float) -> None:
        """The attempt reserved at ``at`` signed in: it is no failure, the pair starts afresh, and
        the network is known for the name (the newest ``known_kept`` of its networks)."""
        keys = self._keys(name, client)
        self._failures.pop(keys[0], None)  # the pair
        for key in keys:
            if at in self._failures.get(key, []):
                self._failures[key].remove(at)
        known = self._known.setdefault(name, {})
        known.pop(attacker(client), None)
        known[attacker(client)] = time.monotonic()
        for network in list(known)[: -self.known_kept]:
            del known[network]


class TokenGuesses:
    """Secrets tried under API tokens' ids within a minute, counted per (id, client) (``attacker``)
    before any is hashed. A client is refused, unhashed, past ``TOKEN_GUESSES`` of its own under an
    id, or past ``TOKEN_ID_GUESSES`` from all clients under it once it sent a wrong one there: a
    token's id is no secret (the audit log names it), and whoever knows it spends only their own
    attempts, never its holder's, who tries from elsewhere and is hashed as ever. The decision reads
    the id and the client only, never the secret (it says nothing of how near a guess came). An
    attempt counts until ``verified`` gives it back: its holder's right secret spends nothing."""

    window_s = 60.0

    def __init__(self) -> None:
        # (id, client) and (id, "") -> when attempts were reserved; ("wrong", id, client) -> when
        # a wrong secret came from there (a client's attempts in flight are no wrong ones yet).
        self._tried: dict[tuple[str, ...], list[float]] = {}
        self._lock = threading.Lock()  # token checks run on worker threads

    def _recent(self, key: tuple[str, ...], now: float) -> list[float]:
        return _within(self._tried, key, now, self.window_s)

    def attempt(self, token_id: str, client: str) -> float | None:
        """Reserve one attempt under ``token_id`` from ``client`` (checked and counted under one
        lock: attempts sent at once cannot all pass); ``None``: refused, nothing to hash."""
        who, now = attacker(client) or "-", time.monotonic()
        pair, everyone = (token_id, who), (token_id, "")
        with self._lock:
            if len(self._tried) > 10_000:  # bounded memory: drop what has expired
                for key in list(self._tried):
                    self._recent(key, now)
            guessed = bool(self._recent(("wrong", token_id, who), now))
            if len(self._recent(pair, now)) >= TOKEN_GUESSES or (
                guessed and len(self._recent(everyone, now)) >= TOKEN_ID_GUESSES
            ):
                return None
            for key in (pair, everyone):
                self._tried.setdefault(key, []).append(now)
        return now

    def verified(self, token_id: str, client: str, at: float, *, right: bool) -> None:
        """The attempt reserved at ``at`` was hashed: a ``right`` secret is no guess (given back),
        a wrong one marks its client as one that guessed under the id."""
        who = attacker(client) or "-"
        with self._lock:
            if not right:
                self._tried.setdefault(("wrong", token_id, who), []).append(at)
                return
            for key in ((token_id, who), (token_id, "")):
                if at in self._tried.get(key, []):
                    self._tried[key].remove(at)


_K = TypeVar("_K")


def _within(times: dict[_K, list[float]], key: _K, now: float, window_s: float) -> list[float]:
    """``key``'s times within the last ``window_s`` seconds, the older ones dropped from
    ``times`` (and the key, once none is left)."""
    recent = [t for t in times.get(key, []) if now - t < window_s]
    if recent:
        times[key] = recent
    else:
        times.pop(key, None)
    return recent
