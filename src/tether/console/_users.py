"""Console accounts in SQLite: people, per-tenant roles, API tokens, sessions and the audit log.

Passwords and API tokens are stored as scrypt hashes, session ids (256-bit random values) as
SHA-256 digests. A role is granted per tenant; ``*`` grants it for every tenant.

    viewer   reads the tenant's queue, questions, runs and servers
    reviewer also decides proposals, answers questions, resumes runs
    admin    also reviews and pins MCP servers and reads the audit log

The audit log is append-only (triggers refuse updates and deletes).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from tether.console._hashing import _SCRYPT_N, _dummy_hash, hash_secret, verify_secret
from tether.console._throttle import TOKEN_GUESSES as TOKEN_GUESSES  # (round 3's tests import it here)
from tether.console._throttle import TokenGuesses
from tether.core._confusables import skeleton
from tether.errors import ApprovalError, TetherError
from tether.policy._approvals import Reviewer
from tether.sql._database import Database

__all__ = [
    "ALL_TENANTS",
    "ROLES",
    "AuditEntry",
    "AuthError",
    "Denied",
    "Hidden",
    "Principal",
    "TokenInfo",
    "UserStore",
    "hash_secret",
    "name_likeness",
    "sign_in_name",
    "verify_secret",
]

ROLES: dict[str, int] = {"viewer": 1, "reviewer": 2, "admin": 3}
ALL_TENANTS = "*"
SESSION_TTL = timedelta(hours=12)  # a session ends this long after sign-in, however busy
SESSION_IDLE = timedelta(minutes=30)  # and this long after its last request (``session_idle``)
# Sessions one person holds at once: a sign-in past it ends their oldest (sign-ins by a script,
# or by whoever has the password, never pile up sessions that each live for hours).
MAX_SESSIONS = 20
MIN_PASSWORD = 10
MAX_PASSWORD = 1024  # what the sign-in form reads of one (a longer one could never sign in)
# Different characters a password needs besides its person's name (``aaaaaaaaaa``, the name
# written three times, ten spaces: each long enough, each among the first guesses).
MIN_PASSWORD_CHARS = 5
TOKEN_PREFIX = "tether_"
MAX_TOKEN_DAYS = 3660  # a token's longest lifetime when one is given (about ten years)
# Refusals of one kind by one actor audited one by one within a minute; past that only the 16th,
# 32nd, 64th... (naming the count): refused requests sent on and on add a handful of entries.
REFUSALS_AUDITED = 10

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")  # the whole name (fullmatch: no trailing line break)
# What a reader takes two names to be the same by: separators, and the ASCII digits and letters
# that look alike (TR39's ASCII confusables). No two accounts share a likeness (``name_likeness``).
_LIKE_CHARS = str.maketrans({"0": "o", "1": "l", "i": "l", "|": "l", ".": None, "_": None, "-": None})
_LIKE_PAIRS = (("rn", "m"), ("vv", "w"), ("cl", "d"))


class AuthError(TetherError):
    """A refused sign-in, token or account change. ``reason`` is machine-readable."""

    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(message or reason)
        self.reason = reason


class Hidden(ApprovalError):
    """Not visible to this principal: answered exactly like an unknown id."""

    def __init__(self, what: str) -> None:
        super().__init__("not_found", f"no {what} here")


class Denied(ApprovalError):
    """Visible, but the principal's role for that tenant does not allow the action."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _now() -> datetime:
    return datetime.now(UTC)


def _ts(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="seconds")


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise AuthError("bad_name", "user names are 1-64 of a-z 0-9 . _ - (starting with a letter or digit)")
    return name


def sign_in_name(typed: str) -> str:
    """The account name a sign-in form's ``typed`` name means: width- and case-folded (RFC 8265's
    user-name mapping) and stripped, so ``Admin``, ``admin `` and fullwidth ``ａｄｍｉｎ`` are
    ``admin`` (one account, one throttle, one audit name), never another person. A name no
    account can have (``check_name``) comes back with what is not printable ASCII escaped:
    Cyrillic ``\\u0430dmin`` or Greek ``r\\u03bfot`` is throttled and audited as that, never as
    text that reads ``admin`` or ``root``."""
    name = unicodedata.normalize("NFKC", typed).strip().casefold()
    return name if _NAME.fullmatch(name) else name.encode("unicode_escape").decode("ascii")


def name_likeness(name: str) -> str:
    """What ``name`` reads as: ``adm1n``, ``ad.min`` and ``Admin`` all read as ``admln``. An account
    is not created under a name that reads as an existing one (``add_user``: ``name_collides``)."""
    text = sign_in_name(name).translate(_LIKE_CHARS)
    for pair, one in _LIKE_PAIRS:
        text = text.replace(pair, one)
    return text


def check_tenant(tenant: str) -> str:
    if tenant != ALL_TENANTS and (
        not tenant or len(tenant) > 128 or not tenant.isprintable() or tenant != tenant.strip()
    ):
        raise AuthError("bad_tenant", "a tenant is 1-128 printable characters, or * for every tenant")
    return tenant


def _check_grant(tenant: str, role: str) -> None:
    check_tenant(tenant)
    if role not in ROLES:
        raise AuthError("bad_role", f"role must be one of {', '.join(ROLES)}")


def _tenant_unlike(conn: sqlite3.Connection, tenant: str) -> None:
    """Refuse ``tenant`` where it reads as another tenant already granted, one of them not plain
    ASCII (``tenant-\u0430`` for ``tenant-a``): as a user name reading as another's is refused
    (``name_collides``), a grant of a look-alike read as the real one is refused, never silent."""
    reads = skeleton(unicodedata.normalize("NFKC", tenant))  # fullwidth letters read as ASCII too
    for (other,) in conn.execute("SELECT DISTINCT tenant FROM grants WHERE tenant != ?", (tenant,)):
        if not (tenant.isascii() and other.isascii()) and reads == skeleton(
            unicodedata.normalize("NFKC", other)
        ):
            named = [t.encode("unicode_escape").decode("ascii") for t in (tenant, other)]
            raise AuthError(
                "tenant_collides", "tenant {} reads as the tenant {} granted: choose another".format(*named)
            )


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking, as the console established it (a session or an API token)."""

    name: str
    grants: Mapping[str, str] = field(default_factory=dict)  # tenant -> role
    via: Literal["session", "token"] = "session"
    csrf: str | None = None  # the session's CSRF token (sessions only)
    session: str | None = None  # digest of the session id (sessions only)
    token: str | None = None  # the API token's id (tokens only): ``tether users tokens`` lists it

    @property
    def actor(self) -> str:
        """How the audit log names this principal: ``session:ana``, ``token:ana/<token id>`` (which
        token acted decides which to revoke; no name holds a ``/``, never a refusal's ``token:<id>``)."""
        return f"{self.via}:{self.name}" if self.token is None else f"token:{self.name}/{self.token}"

    def level(self, tenant: str) -> int:
        return max(ROLES.get(self.grants.get(tenant, ""), 0), ROLES.get(self.grants.get(ALL_TENANTS, ""), 0))

    def may(self, tenant: str, role: str) -> bool:
        return self.level(tenant) >= ROLES[role]

    def tenants(self, role: str = "viewer") -> frozenset[str] | None:
        """The tenants where this principal has at least ``role``; ``None`` means every tenant."""
        if ROLES.get(self.grants.get(ALL_TENANTS, ""), 0) >= ROLES[role]:
            return None
        return frozenset(t for t, r in self.grants.items() if ROLES.get(r, 0) >= ROLES[role])

    def sees(self, tenant: str | None) -> bool:
        """Whether records of ``tenant`` are visible (records with no tenant: only to ``*`` grants)."""
        visible = self.tenants("viewer")
        return visible is None or (tenant is not None and tenant in visible)

    def reviewer(self) -> Reviewer:
        """The host-side authority the approval desk checks again for every decision."""
        if (tenants := self.tenants("reviewer")) is None:
            return Reviewer.for_all_tenants(self.name)
        return Reviewer(self.name, tenants=tenants)


@dataclass(frozen=True, slots=True)
class TokenInfo:
    id: str
    user: str
    label: str
    created_at: str
    expires_at: str | None
    revoked: bool


@dataclass(frozen=True, slots=True)
class AuditEntry:
    seq: int
    at: str
    actor: str
    action: str
    tenant: str
    target: str
    content_hash: str
    outcome: str
    detail: str
    client: str = ""


# An audit entry's short fields, in characters (``_kept``): a path names an action and a target.
AUDIT_FIELD, AUDIT_DETAIL = 256, 2000  # its detail (a reason, a refusal's message): 2000; client: 200


def _kept(text: str, limit: int = AUDIT_FIELD) -> str:
    """``text``, or past ``limit`` characters its start and its whole length (never cut unsaid)."""
    return text if len(text) <= limit else f"{text[: limit - 40]}… [cut: {len(text)} characters]"


# The address of the request being served (set by ``Guard``): every audit entry records it.
CLIENT: ContextVar[str] = ContextVar("tether_console_client", default="")


class UserStore:
    """Accounts, grants, tokens, sessions and the audit log in the SQLite file at ``path``.
    ``scrypt_n``: the cost of new hashes (each records its own, so old ones stay verifiable)."""

    def __init__(
        self, path: str | Path, *, scrypt_n: int = _SCRYPT_N, session_idle: timedelta = SESSION_IDLE
    ) -> None:
        if scrypt_n < 2**10 or scrypt_n & (scrypt_n - 1):
            raise ValueError("scrypt_n must be a power of two of at least 1024")
        if not timedelta(0) < session_idle <= SESSION_TTL:
            raise ValueError(f"session_idle must be more than 0 and at most {SESSION_TTL}")
        self.scrypt_n = scrypt_n
        self.session_idle = session_idle
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = Database.sqlite(self.path)  # the one connection discipline (storage.py)
        self._db.migrate("users")  # the tables: tether.sql._tables
        # digest of a verified token -> (user, token id, valid until): skips scrypt on every API call.
        self._token_cache: dict[str, tuple[str, str, float]] = {}
        self._guesses = TokenGuesses()  # secrets tried under a token's id, per client
        self._guess_lock = threading.Lock()  # (the refusals' counts)
        self._refusals: dict[tuple[str, str], tuple[float, int]] = {}  # (actor, outcome) -> (since, n)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        with self._db.transaction(write=write) as conn:
            yield conn.connection.driver_connection  # type: ignore[misc]

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._tx(write=False) as conn:
            return list(conn.execute(sql, params))

    def _write(self, sql: str, params: tuple[Any, ...]) -> bool:
        """One statement in its own transaction; whether it changed a row."""
        with self._tx() as conn:
            return bool(conn.execute(sql, params).rowcount)

    def add_user(self, name: str, password: str, grants: Mapping[str, str] | None = None) -> None:
        """Create a person, with ``grants`` (tenant -> role), all in one transaction: a bad
        tenant or role creates nobody. Raises ``AuthError`` (``bad_name``, ``weak_password``,
        ``exists``, ``name_collides``: it reads as an existing name, ``bad_tenant``, ``bad_role``)."""
        check_name(name)
        for tenant, role in (grants or {}).items():
            _check_grant(tenant, role)
        hashed = self._new_password(name, password)
        with self._tx() as conn:
            if conn.execute("SELECT 1 FROM users WHERE name = ?", (name,)).fetchone():
                raise AuthError("exists", f"user {name} exists")
            likeness = name_likeness(name)
            for (other,) in conn.execute("SELECT name FROM users"):
                if name_likeness(other) == likeness:
                    raise AuthError(
                        "name_collides",
                        f"user name {name} reads as the existing user {other}: choose another",
                    )
            for tenant in grants or {}:
                _tenant_unlike(conn, tenant)
            conn.execute(
                "INSERT INTO users (name, password_hash, created_at, disabled) VALUES (?, ?, ?, 0)",
                (name, hashed, _ts(_now())),
            )
            conn.executemany(
                "INSERT INTO grants (user, tenant, role) VALUES (?, ?, ?)",
                [(name, t, r) for t, r in (grants or {}).items()],
            )

    def set_password(self, name: str, password: str) -> None:
        """A new password means the old one may be known: the sessions and API tokens end too."""
        self._update_user(name, "password_hash", self._new_password(name, password), end_access=True)

    def _new_password(self, name: str, password: str) -> str:
        """The hash to store for a password ``name`` chose. Raises ``AuthError("weak_password")``
        for one shorter than ``MIN_PASSWORD``, longer than ``MAX_PASSWORD``, or with fewer than
        ``MIN_PASSWORD_CHARS`` different characters once the name and white space are left out (read
        as NFKC), or holding a control character."""
        if len(password) < MIN_PASSWORD:
            raise AuthError("weak_password", f"a password needs at least {MIN_PASSWORD} characters")
        if len(password) > MAX_PASSWORD:
            raise AuthError("weak_password", f"a password has at most {MAX_PASSWORD} characters")
        if any(unicodedata.category(c) == "Cc" for c in password):  # RFC 8265: no control characters
            # A password piped with a Windows line end kept its ``\r``: no browser ever types it.
            raise AuthError(
                "weak_password", "a password may not hold control characters (a line break, a tab)"
            )
        # Read as NFKC: the name in fullwidth letters (``ａｄｍｉｎ``) is the name, not 5 new characters.
        rest = (
            "".join(unicodedata.normalize("NFKC", password).split()).casefold().replace(name.casefold(), "")
        )
        if len(set(rest)) < MIN_PASSWORD_CHARS:
            raise AuthError(
                "weak_password",
                f"a password needs at least {MIN_PASSWORD_CHARS} different characters besides the user name",
            )
        return hash_secret(password, n=self.scrypt_n)

    def set_disabled(self, name: str, disabled: bool) -> None:
        """Disable a person (sessions end, tokens are revoked, sign-in fails), or enable them again."""
        self._update_user(name, "disabled", int(disabled), end_access=disabled)

    def _update_user(self, name: str, column: str, value: Any, *, end_access: bool) -> None:
        with self._tx() as conn:
            if not conn.execute(f"UPDATE users SET {column} = ? WHERE name = ?", (value, name)).rowcount:
                raise AuthError("unknown_user", f"no user {name}")
            if end_access:
                conn.execute("DELETE FROM sessions WHERE user = ?", (name,))
                conn.execute("UPDATE tokens SET revoked = 1 WHERE user = ?", (name,))
        self._token_cache.clear()

    def grant(self, name: str, tenant: str, role: str) -> None:
        """Give ``name`` the ``role`` for ``tenant`` (replacing an earlier role there); refused
        (``tenant_collides``) where ``tenant`` reads as another tenant granted (``_tenant_unlike``)."""
        _check_grant(tenant, role)
        with self._tx() as conn:
            if not conn.execute("SELECT 1 FROM users WHERE name = ?", (name,)).fetchone():
                raise AuthError("unknown_user", f"no user {name}")
            _tenant_unlike(conn, tenant)
            conn.execute(
                "INSERT INTO grants (user, tenant, role) VALUES (?, ?, ?)"
                " ON CONFLICT (user, tenant) DO UPDATE SET role = ?",
                (name, tenant, role, role),
            )

    def revoke_grant(self, name: str, tenant: str) -> bool:
        return self._write("DELETE FROM grants WHERE user = ? AND tenant = ?", (name, tenant))

    def grants(self, name: str) -> dict[str, str]:
        return dict(self._read("SELECT tenant, role FROM grants WHERE user = ?", (name,)))

    def users(self) -> list[dict[str, Any]]:
        rows = self._read("SELECT name, created_at, disabled FROM users ORDER BY name")
        return [
            {"name": n, "created_at": c, "disabled": bool(d), "grants": self.grants(n)} for n, c, d in rows
        ]

    def has_users(self) -> bool:
        return bool(self._read("SELECT 1 FROM users LIMIT 1"))

    def credential(self, name: str) -> str | None:
        """What a sign-in as ``name`` is checked against now (its stored password hash: a new
        password changes it); ``None`` for no such person or a disabled one."""
        rows = self._read("SELECT password_hash, disabled FROM users WHERE name = ?", (name,))
        return str(rows[0][0]) if rows and not rows[0][1] else None

    def authenticate(self, name: str, password: str) -> str:
        """The user's name if the password matches; raises ``AuthError("bad_credentials")``."""
        self.check_password(name, password)
        return name

    def check_password(self, name: str, password: str) -> str:
        """The stored credential (``credential``) the password matched: a session begun on it
        (``create_session(credential=…)``) is begun only while it is still the person's. Raises
        ``AuthError("bad_credentials")``."""
        rows = self._read("SELECT password_hash, disabled FROM users WHERE name = ?", (name,))
        stored, disabled = rows[0] if rows else (_dummy_hash(self.scrypt_n), 1)
        ok = verify_secret(password, stored)
        if not ok or disabled or not rows:
            raise AuthError("bad_credentials", "wrong user name or password")
        return str(stored)

    def create_token(self, name: str, *, label: str = "", days: float | None = None) -> tuple[str, TokenInfo]:
        """A new API token for ``name``: the secret is returned once and stored only hashed.
        ``days``: it expires after so many (``None``: never). Raises ``AuthError`` (``bad_days``:
        not a number of days in (0, ``MAX_TOKEN_DAYS``]; 0 once made a token that never expired;
        ``bad_label``: a label with a line break, a control or a format character)."""
        if not label.isprintable():  # ``tether users tokens`` prints one row per token
            raise AuthError("bad_label", "a token's label is printable text on one line")
        if days is not None and not (math.isfinite(days) and 0 < days <= MAX_TOKEN_DAYS):
            limit = f"more than 0 and at most {MAX_TOKEN_DAYS} days"
            raise AuthError("bad_days", f"a token's lifetime is {limit}")
        if not self._read("SELECT 1 FROM users WHERE name = ?", (name,)):
            raise AuthError("unknown_user", f"no user {name}")
        token_id = secrets.token_hex(6)
        secret = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
        now = _now()
        expires = _ts(now + timedelta(days=days)) if days is not None else None
        self._write(
            "INSERT INTO tokens (id, user, secret_hash, label, created_at, expires_at, revoked)"
            " VALUES (?, ?, ?, ?, ?, ?, 0)",
            (token_id, name, hash_secret(secret, n=self.scrypt_n), label[:200], _ts(now), expires),
        )
        return secret, TokenInfo(token_id, name, label[:200], _ts(now), expires, False)

    def tokens(self, name: str | None = None) -> list[TokenInfo]:
        sql = "SELECT id, user, label, created_at, expires_at, revoked FROM tokens"
        rows = self._read(
            sql + (" WHERE user = ?" if name else "") + " ORDER BY created_at", (name,) if name else ()
        )
        return [TokenInfo(i, u, la, c, e, bool(r)) for i, u, la, c, e, r in rows]

    def revoke_token(self, token_id: str) -> bool:
        done = self._write("UPDATE tokens SET revoked = 1 WHERE id = ?", (token_id,))
        self._token_cache.clear()
        return done

    def principal_for_token(self, secret: str, *, client: str | None = None) -> Principal:
        """Raises ``AuthError("bad_token")`` for an unknown, revoked, expired or malformed token
        (``client``: its address, by default the request's; its wrong secrets are its own)."""
        match = re.fullmatch(rf"{TOKEN_PREFIX}([0-9a-f]{{12}})_[A-Za-z0-9_-]{{20,100}}", secret)
        if match is None:
            raise AuthError("bad_token", "not a tether API token")
        rows = self._read(
            "SELECT t.user, t.secret_hash, t.expires_at, t.revoked, u.disabled FROM tokens t"
            " JOIN users u ON u.name = t.user WHERE t.id = ?",
            (match.group(1),),
        )
        if not rows:
            # No stand-in hash (sign-in has one): a token's id is no secret, and hashing made-up
            # tokens would let a flood of them take the CPU from every request.
            raise AuthError("bad_token", "unknown token")
        user, stored, expires, revoked, disabled = rows[0]
        ended = bool(revoked or disabled or (expires and datetime.fromisoformat(expires) <= _now()))
        try:  # a known token's id with a wrong secret, or a revoked or expired token, is audited
            # Its state is said only to whoever holds its secret: a token's id alone (the audit
            # log's ``token:<id>``, a token cut in a log) tells nobody that its person's access ended.
            key = _digest(secret)
            cached = self._token_cache.get(key)
            if not (cached and cached[0] == user and cached[2] > time.monotonic()):
                token_id, client = match.group(1), CLIENT.get() if client is None else client
                at = self._guesses.attempt(token_id, client)  # by id and client, before hashing
                if at is None and not (cached and cached[0] == user):  # (verified before: never)
                    raise AuthError(
                        "bad_token", "too many wrong secrets for this token: try again in a minute"
                    )
                right = verify_secret(secret, stored)
                if at is not None:
                    self._guesses.verified(token_id, client, at, right=right)
                if not right:
                    raise AuthError("bad_token", "unknown token")
                if not ended:
                    self._token_cache[key] = (user, token_id, time.monotonic() + 60)
            if ended:
                raise AuthError("bad_token", "token revoked or expired")
        except AuthError as err:  # (under its id, counted: ``refused``); an unknown id names nobody
            self.refused(f"token:{match.group(1)}", "token", err)
            raise
        return Principal(user, self.grants(user), via="token", token=match.group(1))

    def create_session(self, name: str, *, credential: str | None = None) -> str:
        """A new session for ``name``; returns the raw session id (only its digest is stored).
        ``credential``: the one a sign-in verified (``check_password``); the session is begun in
        the same transaction that finds it still the person's, so a password set or an account
        disabled while the password was being checked (``tether users`` on the host) ends the
        sign-in too. Past ``MAX_SESSIONS`` of the person's, the oldest ends. Raises
        ``AuthError("credential_changed")``."""
        raw = secrets.token_urlsafe(32)
        now = _now()
        with self._tx() as conn:
            if credential is not None:
                row = conn.execute(
                    "SELECT password_hash, disabled FROM users WHERE name = ?", (name,)
                ).fetchone()
                if row is None or row[1] or not hmac.compare_digest(str(row[0]), credential):
                    raise AuthError("credential_changed", "the password changed or the account was disabled")
            conn.execute("DELETE FROM sessions WHERE expires_at <= ?", (_ts(now),))
            conn.execute(
                "INSERT INTO sessions (id_hash, user, csrf, created_at, expires_at, seen_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (_digest(raw), name, secrets.token_urlsafe(32), _ts(now), _ts(now + SESSION_TTL), _ts(now)),
            )
            conn.execute(  # the newest MAX_SESSIONS are kept (rowid: the order they were made in)
                "DELETE FROM sessions WHERE user = ? AND rowid NOT IN"
                " (SELECT rowid FROM sessions WHERE user = ? ORDER BY rowid DESC LIMIT ?)",
                (name, name, MAX_SESSIONS),
            )
        return raw

    def principal_for_session(self, raw: str) -> Principal | None:
        """The session's principal; ``None`` once it expired, its person was disabled, or it
        went unused for ``session_idle`` (it ends then: a cookie left in an idle browser)."""
        digest = _digest(raw)
        rows = self._read(
            "SELECT s.user, s.csrf, s.expires_at, s.seen_at, s.created_at, u.disabled FROM sessions s"
            " JOIN users u ON u.name = s.user WHERE s.id_hash = ?",
            (digest,),
        )
        if not rows:
            return None
        user, csrf, expires, seen, created, disabled = rows[0]
        now = _now()
        idle = now - datetime.fromisoformat(seen or created)
        if disabled or datetime.fromisoformat(expires) <= now:
            return None
        if idle >= self.session_idle:
            self.end_session(digest)
            return None
        if idle >= min(self.session_idle / 10, timedelta(minutes=1)):  # not a write per request
            self._write("UPDATE sessions SET seen_at = ? WHERE id_hash = ?", (_ts(now), digest))
        return Principal(user, self.grants(user), via="session", csrf=csrf, session=digest)

    def end_session(self, session_digest: str) -> None:
        self._write("DELETE FROM sessions WHERE id_hash = ?", (session_digest,))

    def audit(
        self,
        actor: str,
        action: str,
        *,
        tenant: str = "",
        target: str = "",
        content_hash: str = "",
        outcome: str = "ok",
        detail: str = "",
        client: str | None = None,
    ) -> None:
        """Append an entry (``client``: by default the request's address), each field ``_kept``. A
        refusal (``refused:…``) past ``REFUSALS_AUDITED`` of its kind (the outcome, never the action
        a client names) by ``actor`` in a minute is audited only at each power of two, counted."""
        where = CLIENT.get() if client is None else client
        if outcome.startswith("refused:"):
            note = self._refusal_note(actor, outcome)
            if note is None:
                return
            detail = f"{note}; {detail}" if note and detail else note or detail
        named = [_kept(text) for text in (actor, action, tenant, target, content_hash, outcome)]
        named += [_kept(detail, AUDIT_DETAIL), _kept(where, 200)]  # each cut with its length said
        self._write(
            "INSERT INTO audit (at, actor, action, tenant, target, content_hash, outcome, detail, client)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (_now().isoformat(timespec="microseconds"), *named),
        )

    def refused(self, actor: str, action: str, err: Exception, **fields: str) -> None:
        """Audit an action refused by ``err``: its reason (else its type) and its message."""
        reason = getattr(err, "reason", "") or type(err).__name__
        self.audit(actor, action, outcome=f"refused:{reason}", detail=_kept(str(err), 500), **fields)

    def _refusal_note(self, actor: str, outcome: str) -> str | None:
        """What to add to a refusal's entry ("" for the first few), or ``None``: only counted."""
        now = time.monotonic()
        with self._guess_lock:
            if len(self._refusals) > 10_000:  # bounded memory: drop the windows that have ended
                self._refusals = {k: v for k, v in self._refusals.items() if now - v[0] < 60}
            since, count = self._refusals.get((actor, outcome), (now, 0))
            if now - since >= 60:
                since, count = now, 0
            count += 1
            self._refusals[(actor, outcome)] = (since, count)
        if count <= REFUSALS_AUDITED:
            return ""
        if count & (count - 1):
            return None
        return f"refused {count} times within a minute (entries past {REFUSALS_AUDITED}: each power of two)"

    def audit_log(self, *, tenants: frozenset[str] | None = None, limit: int = 500) -> list[AuditEntry]:
        """The newest ``limit`` entries of ``tenants`` (``None``: all), chosen by the query (other
        tenants' entries never push these out)."""
        where = "" if tenants is None else f" WHERE tenant IN ({', '.join('?' * len(tenants))})"
        rows = self._read(
            "SELECT seq, at, actor, action, tenant, target, content_hash, outcome, detail, client FROM audit"
            f"{where} ORDER BY seq DESC LIMIT ?",
            (*sorted(tenants or ()), limit),
        )
        return [AuditEntry(*r) for r in rows]
