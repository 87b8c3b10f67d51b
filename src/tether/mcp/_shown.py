"""What an MCP server runs or contacts, as people and traces are shown it: a config expands
``${VAR}`` into commands and URLs when it is loaded, so a credential can sit in either."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

from tether.trace._sanitize import MIN_FRAGMENT, Redactor

__all__ = [
    "HIDDEN",
    "bare_url",
    "bare_urls",
    "hide_secrets",
    "launch_secrets",
    "secret_values",
    "shown_launch",
]

HIDDEN = "[secret]"
_NAMES = Redactor()  # its rule for credential names (``is_secret_key``): options, environment variables
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_SESSION = re.compile(r"(session ID: )\S+", re.IGNORECASE)


def bare_url(url: str) -> str:
    """``url`` without user info, query or fragment."""
    try:
        parts = urlsplit(url)
        netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    except ValueError:  # a port out of range: nothing after the scheme is shown
        return url.partition("://")[0] + "://" + HIDDEN
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def bare_urls(text: str) -> str:
    """A log line with every URL in it bare (``bare_url``) and a session id it gives hidden: httpx
    logs each request's URL (a token in a server's URL query with it), the MCP SDK the session id
    a server gives (the session's credential) and where a redirect it did not follow led."""
    return _SESSION.sub(rf"\1{HIDDEN}", _URL.sub(lambda m: bare_url(m.group()), text))


def _secret_option(part: str) -> bool:
    """Whether ``part`` is an option that names a credential (``--token``, ``--db-password``)."""
    return part.startswith("-") and "=" not in part and _NAMES.is_secret_key(part.lstrip("-"))


def _bare_argument(part: str, previous: str) -> str:
    if _secret_option(previous):
        return HIDDEN
    flag, eq, value = part.partition("=")
    if eq and flag.startswith("-"):
        return f"{flag}={HIDDEN}" if _secret_option(flag) else f"{flag}={_bare_argument(value, '')}"
    return bare_url(part) if "://" in part else part


def shown_launch(
    command: list[str] | None = None, url: str | None = None, *, secrets: Iterable[str] = ()
) -> str:
    """What a server runs (its command) or contacts (its URL), as the console shows it: every URL
    bare (``bare_url``), a credential-named option's value hidden, and the value of every
    credential-named environment variable (``${GITHUB_TOKEN}`` in the config is expanded when it
    is loaded) and of each of ``secrets`` (the server's own credentials) hidden wherever it
    appears."""
    if command is not None:
        text = shlex.join(_bare_argument(a, p) for a, p in zip(command, ["", *command], strict=False))
    else:
        text = bare_url(url or "")
    # Whole values (the config substitutes a variable's whole value), long enough to be secrets.
    for value in sorted(_known(secrets), key=len, reverse=True):
        text = text.replace(value, HIDDEN)
    return text


def _known(secrets: Iterable[str]) -> set[str]:
    """The values ``shown_launch`` and ``hide_secrets`` hide: each of ``secrets`` and every
    credential-named environment variable's (what a ``${VAR}`` in the config expands to), long
    enough to be secrets."""
    known = {v for k, v in os.environ.items() if len(v) >= MIN_FRAGMENT and _NAMES.is_secret_key(k)}
    return known | {v for v in secrets if len(v) >= MIN_FRAGMENT}


def launch_secrets(*launch: str) -> set[str]:
    """The secrets ``shown_launch`` hides that a server's launch (its command's parts, its URL,
    its environment's values, as loaded) holds: what a ``${VAR}`` of a credential-named variable
    expanded into. The host redacts them as it does the server's credentials (a server that
    repeats its command line on stderr, which the trace keeps for the person, says them)."""
    return {v for v in _known(()) if any(v in part for part in launch)}


def hide_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """Text a server wrote that a person is shown (a failed start's last stderr lines: a client
    library echoing the token it was refused with, an option parser the bad option) with what
    ``shown_launch`` hides there hidden too, and every piece of it the tracer's ``Redactor``
    finds (a line cut mid-secret)."""
    return Redactor(_known(secrets)).text(text)


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of ``env``'s credential-named variables."""
    return [value for key, value in env.items() if _NAMES.is_secret_key(key)]
