"""Who is asking, and whether a state change may proceed: session cookies, API tokens, CSRF.

- A session cookie holds a random id, signed, ``HttpOnly``, ``SameSite=Strict``, ``Secure`` over
  HTTPS, with no ``Max-Age`` (it ends with the browser); the store keeps only its digest. The
  sign-in, device and notice cookies are signed with their time and read only within their age.
  Browsers share one cookie jar per host, whatever the port, so each console names its cookies
  after its signing key (``cookie_names``: two consoles never overwrite each other's), with the
  ``__Host-`` prefix over HTTPS.
- Programs send ``Authorization: Bearer <token>``; a bad token is refused even beside a cookie.
- Every state change by a session carries its CSRF token (form field or ``X-CSRF-Token``) and no
  cross-site ``Origin``; sign-in has a signed double-submit token. Bearer requests need none: a
  browser never adds that header on its own.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import os
import re
import secrets
import stat
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from itsdangerous import BadSignature, Signer, TimestampSigner
from starlette.requests import Request
from starlette.responses import Response

from tether.console._users import AuthError, Principal, UserStore
from tether.errors import ConfigError

__all__ = [
    "CookieNames",
    "Gate",
    "WeakSecretKey",
    "check_secret_key",
    "cookie_names",
    "holds_unstorable",
    "load_secret_key",
    "read_json",
    "repeated_field",
]

_log = logging.getLogger(__name__)

# A signing key (``TETHER_CONSOLE_KEY``, the key file): whoever guesses it signs themselves in.
MIN_KEY_BYTES = 32
MIN_KEY_BITS = 80  # estimated (``key_bits``): a random hex key of 32 characters has about 115


class WeakSecretKey(ConfigError):
    """The console's signing key is too short or too uniform to keep its cookies unforgeable."""


def key_bits(key: bytes) -> float:
    """A rough estimate of a key's entropy in bits: its shortest repeating unit's length times the
    unit's Shannon entropy per byte (``k`` * 40 and ``password`` * 4 are worth what one unit is)."""
    # The shortest period (the prefix function's): key is key[:period] repeated, the last cut.
    border = [0] * len(key)
    for i in range(1, len(key)):
        k = border[i - 1]
        while k and key[i] != key[k]:
            k = border[k - 1]
        border[i] = k + (key[i] == key[k])
    unit = key[: len(key) - border[-1]] if key else b""
    counts = Counter(unit).values()
    return -sum(c * math.log2(c / len(unit)) for c in counts)


def check_secret_key(key: bytes) -> bytes:
    """``key`` if it is long and varied enough to sign the console's cookies; else raises
    ``WeakSecretKey`` (a console never starts with a guessable key)."""
    if len(key) < MIN_KEY_BYTES or (bits := key_bits(key)) < MIN_KEY_BITS:
        shown = f"{len(key)} bytes" if len(key) < MIN_KEY_BYTES else f"about {bits:.0f} bits"
        raise WeakSecretKey(
            f"the console's signing key (TETHER_CONSOLE_KEY or the key file) is too weak ({shown}):"
            f" use at least {MIN_KEY_BYTES} random bytes, e.g. the output of"
            " python -c 'import secrets; print(secrets.token_urlsafe(48))'"
        )
    return key


_RESOLVED = "tether.refused"  # the ASGI scope's key for the wrong token ``signed_in`` found

# Passwords and tokens hashed at once (each scrypt is about 16 MiB and tens of milliseconds).
HASHING_THREADS = 4
# Seconds each cookie the console signs with a time lasts (``Gate._mark``, ``Gate._read``): the
# browser is told so (``Max-Age``) and the console holds it to it, so a copy kept past it (a
# profile backed up, a cookie read off a shared computer) is nobody's. The session cookie has no
# ``Max-Age`` (it ends with the browser; the session's own ends are the store's).
LOGIN_AGE, DEVICE_AGE, NOTICE_AGE = 1800, 30 * 86400, 300

# The session cookie's name up to 19cb230, still read over plain HTTP (sessions survive an
# upgrade); only one signed with this console's key is taken, like any other.
LEGACY_SESSION_COOKIE = "tether_session"


def cookie_names(secret_key: bytes, *, secure: bool) -> tuple[str, str]:
    """A console's session and sign-in cookie names, from its signing key (``__Host-`` if ``secure``)."""
    instance = hmac.new(secret_key, b"tether-console-cookie-names", "sha256").hexdigest()[:12]
    prefix = "__Host-" if secure else ""
    return f"{prefix}tether_session_{instance}", f"{prefix}tether_login_{instance}"


def load_secret_key(path: Path) -> bytes:
    """The signing key kept beside the user store (created once, mode 600). One that is weak, or
    that others may read (group or other bits: whoever copied it signs themselves in), is
    replaced, logged, by a new key in a new file: a descriptor held on the old one reads none of it."""
    if path.exists():
        key = path.read_bytes().strip()
        mode = path.stat().st_mode
        if os.name == "posix" and mode & 0o077:
            _log.warning(
                "the console key file %s was readable by others (mode %o): replaced by a new key"
                " (every session ends)",
                path,
                stat.S_IMODE(mode),
            )
        else:
            try:
                return check_secret_key(key)
            except WeakSecretKey:
                pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48).encode("ascii")
    fd, fresh = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(key + b"\n")
        os.replace(fresh, path)
    except BaseException:
        Path(fresh).unlink(missing_ok=True)
        raise
    return key


@dataclass(frozen=True)
class CookieNames:
    """The names of a console's cookies for one kind of request (``Gate.names``): ``sessions``,
    the session cookie names read (the legacy one over plain HTTP only)."""

    session: str
    login: str
    device: str
    notice: str
    sessions: tuple[str, ...]

    @classmethod
    def of(cls, secret_key: bytes, *, secure: bool) -> CookieNames:
        session, login = cookie_names(secret_key, secure=secure)
        legacy = () if secure else (LEGACY_SESSION_COOKIE,)
        device, notice = (login.replace("tether_login_", f"tether_{kind}_") for kind in ("device", "notice"))
        return cls(session, login, device, notice, (session, *legacy))


@dataclass
class Gate:
    users: UserStore
    secret_key: bytes
    secure_cookies: bool = False

    def __post_init__(self) -> None:
        check_secret_key(self.secret_key)
        self._session = Signer(self.secret_key, salt="tether-console-session")
        # Signed with the time they were set: read only within their age (``_read``).
        self._login = TimestampSigner(self.secret_key, salt="tether-console-login")
        self._device = TimestampSigner(self.secret_key, salt="tether-console-device")
        self._notice = TimestampSigner(self.secret_key, salt="tether-console-notice")
        self._hashing: anyio.CapacityLimiter | None = None
        # Over HTTPS only ``__Host-`` names, with ``--secure-cookies`` or without (a console
        # behind a TLS proxy, ``names``): a sibling subdomain can set any other name for the
        # whole site (a cookie with ``Domain=``), and so sign a browser in as another person.
        self._names = {secure: CookieNames.of(self.secret_key, secure=secure) for secure in (False, True)}

    def names(self, request: Request) -> CookieNames:
        """The cookie names a request's cookies are read and set under: ``__Host-`` ones where
        its cookies are ``Secure`` (``--secure-cookies``, or the request came over HTTPS: a
        trusted proxy's ``X-Forwarded-Proto``), the plain ones otherwise (plain HTTP, where the
        browser refuses a ``__Host-`` cookie)."""
        return self._names[self.secure_cookies or request.scope.get("scheme") == "https"]

    @property
    def hashing(self) -> anyio.CapacityLimiter:
        """The worker threads scrypt runs on (sign-in, a token's first use), apart from anyio's
        default ones every other request's work shares: a flood of slow requests never holds
        sign-in up, and a flood of sign-ins takes at most these."""
        if self._hashing is None:
            self._hashing = anyio.CapacityLimiter(HASHING_THREADS)
        return self._hashing

    async def signed_in(self, request: Request) -> bool:
        """Whether the request comes with a session or API token that is valid now (``Guard``
        asks before it reads the body). A wrong token is kept as the request's answer (it counts
        once); a valid one is not: ``principal`` looks again once the body is in, so a session or
        token that ended meanwhile (sign-out, a new password, revoked) acts on nothing it sent."""
        try:
            found = await self.principal(request)
        except AuthError as err:
            request.scope[_RESOLVED] = err
            return False
        return found is not None

    async def principal(self, request: Request) -> Principal | None:
        """The principal of a request, or ``None``. Raises ``AuthError`` for a bad bearer token."""
        if isinstance(refused := request.scope.get(_RESOLVED), AuthError):
            raise refused
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthError("bad_token", "use Authorization: Bearer <token>")
            return await anyio.to_thread.run_sync(
                self.users.principal_for_token, token.strip(), limiter=self.hashing
            )
        for raw in self._presented(request):
            return self.users.principal_for_session(raw)
        return None

    def has_credentials(self, request: Request) -> bool:
        """Whether the request comes with an API token or a session cookie signed with this
        console's key (valid or not: nothing is looked up); a stranger's comes with neither."""
        return "authorization" in request.headers or bool(self._presented(request))

    def _presented(self, request: Request) -> list[str]:
        """The session ids of the request's session cookies signed with this console's key. Of
        two of one name the last is read (Starlette's parser): the one the console set at ``/``,
        which a browser sends after one another port's app planted under a narrower path."""
        found = []
        for name in self.names(request).sessions:
            try:
                found.append(self._session.unsign(request.cookies.get(name) or "").decode("ascii"))
            except (BadSignature, UnicodeDecodeError):
                continue
        return found

    def start_session(self, request: Request, response: Response, name: str, credential: str) -> None:
        """A new session for ``name``, if ``credential`` (the one the sign-in verified) is still
        theirs (else ``AuthError``, nothing changed); the sessions the browser held end (a copy
        of an old cookie, which another may have taken, dies with the sign-in that replaces it)."""
        raw = self.users.create_session(name, credential=credential)
        self._end_presented(request)
        names = self.names(request)
        for legacy in names.sessions[1:]:
            self._forget(response, legacy)
        # No Max-Age: a cookie of the browser's session, never written to its profile to be sent
        # again after the browser is closed and opened (the next person at a shared computer).
        self._cookie(response, names.session, self._session.sign(raw.encode("ascii")), None)
        self._forget(response, names.login)

    def _cookie(self, response: Response, name: str, signed: bytes, max_age: int | None) -> None:
        """Every cookie the console sets: signed, ``HttpOnly``, ``SameSite=Strict``, site-wide;
        ``max_age`` ``None``: it ends when the browser does."""
        response.set_cookie(
            name,
            signed.decode("ascii"),
            httponly=True,
            samesite="strict",
            secure=self.secure_cookies or name.startswith("__Host-"),
            path="/",
            max_age=max_age,
        )

    def end_session(self, request: Request, response: Response, principal: Principal) -> None:
        """Sign out: every session the browser presented ends (a legacy cookie beside the new one
        too, which otherwise kept it signed in), and its session cookies are deleted."""
        if principal.session:
            self.users.end_session(principal.session)
        self._end_presented(request)
        for name in self.names(request).sessions:
            self._forget(response, name)

    def _end_presented(self, request: Request) -> None:
        for raw in self._presented(request):
            if (held := self.users.principal_for_session(raw)) is not None and held.session:
                self.users.end_session(held.session)

    def _forget(self, response: Response, name: str) -> None:
        """Delete a cookie, with the attributes it was set with (a ``__Host-`` one needs them)."""
        secure = self.secure_cookies or name.startswith("__Host-")
        response.delete_cookie(name, path="/", secure=secure, httponly=True, samesite="strict")

    def same_origin(self, request: Request) -> bool:
        """Whether a browser's ``Origin`` is this console's (HTTPS when its cookies are ``Secure``,
        whatever scheme a proxy forwards)."""
        origin = request.headers.get("origin")
        if origin is None:  # not a browser, or an old one: the CSRF token still decides
            return True
        scheme = "https" if self.secure_cookies else request.url.scheme
        return origin == f"{scheme}://{request.headers.get('host', request.url.netloc)}"

    def csrf_ok(self, request: Request, principal: Principal, supplied: str | None) -> bool:
        """Whether a POST carries this session's CSRF token (an API token needs none); a refusal
        is audited here, for pages and the API alike."""
        if principal.via == "token":
            return True
        token = supplied or request.headers.get("x-csrf-token") or ""
        expected = principal.csrf
        if self.same_origin(request) and token and expected and _same(token, expected):
            return True
        self.users.audit(principal.actor, "csrf_refused", target=request.url.path, outcome="refused:csrf")
        return False

    def set_login_cookie(self, request: Request, response: Response, value: str) -> None:
        """The sign-in CSRF token, signed, in a short-lived cookie (the form carries it too)."""
        self._mark(response, self.names(request).login, self._login, value, LOGIN_AGE)

    def _mark(self, response: Response, name: str, signer: TimestampSigner, value: str, age: int) -> None:
        """Set cookie ``name`` to ``value`` signed with the time, for ``age`` seconds (``_read``)."""
        self._cookie(response, name, signer.sign(value.encode()), age)

    def _read(self, request: Request, name: str, signer: TimestampSigner, age: int) -> str | None:
        """The value of cookie ``name`` if ``signer`` signed it less than ``age`` seconds ago: a
        copy kept past the ``Max-Age`` the browser was given (which only the browser kept to)
        reads as no cookie."""
        try:
            return signer.unsign(request.cookies.get(name) or "", max_age=age).decode()
        except (BadSignature, UnicodeDecodeError):  # SignatureExpired is one
            return None

    def mark_device(self, request: Request, response: Response, name: str) -> None:
        """This browser signed in as ``name``: a signed cookie that says so (30 days; sign-out
        keeps it), so its next sign-ins count as its own, not its address's (``device``). It
        holds a stamp of the person's password as it is now (``_stamp``): a new one unmarks it."""
        value = f"{name}:{self._stamp(name)}:{secrets.token_urlsafe(16)}"
        self._mark(response, self.names(request).device, self._device, value, DEVICE_AGE)

    def _stamp(self, name: str) -> str:
        """A keyed digest of ``name``'s stored password hash (``""``: no such or a disabled person)."""
        stored = self.users.credential(name)
        if stored is None:
            return ""
        return hmac.new(self.secret_key, b"tether-device\x00" + stored.encode(), "sha256").hexdigest()[:24]

    def device(self, request: Request, name: str) -> str | None:
        """Whom the sign-in throttle counts a sign-in as ``name`` from a browser that signed in as
        ``name`` before (``mark_device``) with the password the person has now: that browser,
        whatever address it shares (a proxy, a NAT, the loopback of a shared host) with guessers;
        ``None`` for any other browser, and for one that signed in before the password changed
        (whoever signed in with a leaked password is no device of the person once it is reset)."""
        value = self._read(request, self.names(request).device, self._device, DEVICE_AGE)
        if value is None:
            return None
        who, stamp, nonce = [*value.split(":", 2), "", ""][:3]  # a user name holds no ':'
        if who != name or not nonce or not stamp or not _same(stamp, self._stamp(name)):
            return None
        return f"device:{nonce}"

    def flash(self, request: Request, response: Response, me: Principal, path: str, notice: str) -> None:
        """Say ``notice`` (a key of the pages' notices) once, on ``path``, to this session only:
        a signed cookie naming the session and the page (a link's query string said it, so any
        link showed "Approved." on any page, to anyone)."""
        if me.session:
            value = f"{me.session}|{path}|{notice}"
            self._mark(response, self.names(request).notice, self._notice, value, NOTICE_AGE)

    def notice(self, request: Request, principal: Principal | None) -> str:
        """The notice ``flash`` left for this session on this page, or ``""``."""
        value = self._read(request, self.names(request).notice, self._notice, NOTICE_AGE)
        if value is None:
            return ""
        session, _, rest = value.partition("|")
        path, _, notice = rest.rpartition("|")
        ours = principal is not None and bool(principal.session) and session == principal.session
        return notice if ours and path == request.url.path else ""

    def forget_notice(self, request: Request, response: Response) -> None:
        self._forget(response, self.names(request).notice)

    def login_ok(self, request: Request, supplied: str | None) -> bool:
        expected = self._read(request, self.names(request).login, self._login, LOGIN_AGE)
        if expected is None:
            return False
        return self.same_origin(request) and bool(supplied) and _same(supplied or "", expected)


def _same(supplied: str, expected: str) -> bool:
    """Whether a client's token is the expected one, in constant time (any text, never an error)."""
    return hmac.compare_digest(supplied.encode("utf-8", "replace"), expected.encode("utf-8", "replace"))


# Form fields a form of the console sends more than once: a server review's checkboxes, and a
# question's fields (``f:<name>``, a multi-select; its parser refuses more than one value elsewhere).
MANY_VALUED = frozenset({"tool", "accept_flagged"})


def repeated_field(form: Any) -> str | None:
    """A field of one value that ``form`` gives more than once (``reason``, ``content_hash``,
    ``csrf_token`` …), or ``None``: such a form is refused whole. Each was read as its last
    value, so what a reader of its first (a proxy's filter, a log, another framework) saw was
    not what was acted on."""
    seen: set[str] = set()
    for key, _ in form.multi_items():
        if key in seen and key not in MANY_VALUED and not key.startswith("f:"):
            return str(key)
        seen.add(key)
    return None


def form_value(form: Any, key: str, limit: int = 4000) -> str:
    value = form.get(key, "")
    return value[:limit] if isinstance(value, str) else ""


# A NUL character or a lone surrogate (JSON's "\ud800", a form its charset decodes so)
# names nothing the console keeps (an id, a tenant, a reason, a name): a request that holds one is
# refused as a whole (PostgreSQL cannot take a NUL in text, and no store takes a surrogate, which
# is no UTF-8: each failed deep in a store, its refusal unaudited, as a server error).
UNSTORABLE = (
    "a request may not hold a NUL character or a lone surrogate (in its path, query, form fields or JSON)"
)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def holds_unstorable(value: Any) -> bool:
    """Whether a NUL character or a lone surrogate is in ``value``: a string, or any key or string
    within dicts, lists and form data (read without recursion: a body may nest as deep as its
    parser took)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _UNSTORABLE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif hasattr(item, "multi_items"):  # a form (keys and every value of each)
            stack.extend(k for pair in item.multi_items() for k in pair)
    return False


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key[:80]!r} is given twice in one object")
        out[key] = value
    return out


def read_json(raw: bytes) -> Any:
    """A request's JSON body as one reading only can take it: UTF-8 (no byte-order mark; Python's
    parser also guessed UTF-16 and UTF-32 from the bytes), each key once in an object (a second
    one silently replaced the first, so what another reader, a proxy's filter or a log, saw was
    not what was acted on). ``NaN`` and the infinities are read (an answer's check refuses them,
    ``validate_answer``). Raises ``ValueError`` (``RecursionError`` past the parser's depth)."""
    text = raw.decode("utf-8")  # strict: UnicodeDecodeError is a ValueError
    if text.startswith("\ufeff"):
        raise ValueError("a byte-order mark is not allowed")
    return json.loads(text, object_pairs_hook=_pairs)
