"""Password and API-token hashes: scrypt, salted (``scrypt$N$r$p$salt$hash``).

A secret is hashed in Unicode NFC (RFC 8265's OpaqueString): ``é`` typed as one character or as
``e`` and a combining accent (macOS, some keyboards and input methods) is one password."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets
import unicodedata

__all__ = ["hash_secret", "verify_secret"]

_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(secret.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=32, maxmem=2**26)


def hash_secret(secret: str, *, n: int = _SCRYPT_N) -> str:
    """``scrypt$N$r$p$salt$hash`` of a password or token (``n``: the CPU/memory cost, a power of 2)."""
    salt = secrets.token_bytes(16)
    dk = _scrypt(unicodedata.normalize("NFC", secret), salt, n, _SCRYPT_R, _SCRYPT_P)
    return f"scrypt${n}${_SCRYPT_R}${_SCRYPT_P}${_b64(salt)}${_b64(dk)}"


def verify_secret(secret: str, stored: str) -> bool:
    """Whether ``secret`` (in NFC) matches ``stored``; one not in NFC is also tried as given,
    for a hash made before secrets were normalised (ASCII, and every token, is tried once)."""
    composed = unicodedata.normalize("NFC", secret)
    tries = [composed] if composed == secret else [composed, secret]
    try:
        scheme, n, r, p, salt, expected = stored.split("$")
        if scheme != "scrypt":
            return False
        found = [_scrypt(text, _unb64(salt), int(n), int(r), int(p)) for text in tries]
    except (ValueError, TypeError):
        return False
    return any(hmac.compare_digest(dk, _unb64(expected)) for dk in found)


@functools.cache
def _dummy_hash(n: int) -> str:
    """Verified against for an unknown user: a wrong name costs what a wrong password does."""
    return hash_secret(secrets.token_hex(16), n=n)
