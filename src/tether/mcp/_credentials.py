"""Per-server credentials: resolved by the host, handed to one server, never traced.

From ``env:VAR`` (``env:VAR:-default``) or ``file:PATH`` (not readable by group or others). The
user's and the model provider's credentials are never forwarded; every value is a trace secret.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tether.errors import ConfigError

__all__ = ["PROVIDER_ENV", "Credentials", "resolve_credentials"]

# Environment variables that hold the user's or a model provider's credentials.
PROVIDER_ENV = frozenset(
    {
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "MISTRAL_API_KEY",
        "GROQ_API_KEY",
        "OPENROUTER_API_KEY",
        "TETHER_MODEL_API_KEY",
        "TETHER_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "GITHUB_TOKEN",
        "GH_TOKEN",
    }
)
_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


@dataclass(frozen=True)
class Credentials:
    """Resolved credentials of one server: env for a stdio child, headers for HTTP."""

    env: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def secrets(self) -> set[str]:
        values = set(self.env.values())
        values |= {v for v in self.headers.values() if v}
        # Also the bare token inside "Bearer <token>" and similar.
        values |= {part for v in self.headers.values() for part in v.split() if len(part) >= 8}
        return {v for v in values if v}


def _read_secret_file(path: Path) -> str:
    try:
        mode = path.stat().st_mode
    except OSError as err:
        raise ConfigError(f"secret file {path}: {err.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"secret file {path} is readable by group or others (chmod 600 it)")
    return path.read_text(encoding="utf-8").strip()


def _resolve(ref: str, server: str, name: str, environ: Mapping[str, str], base: Path) -> str:
    kind, _, target = ref.partition(":")
    if kind == "env":
        target, given, default = target.partition(":-")  # env:VAR:-default (${VAR:-default})
        if target in PROVIDER_ENV:
            raise ConfigError(
                f"server {server}: credential {name} would forward {target}, a user/model-provider "
                "credential; give the server its own credential"
            )
        value = environ.get(target)
        if not value and given:
            return default
        if not value:
            raise ConfigError(f"server {server}: credential {name} needs environment variable {target}")
        return value
    if kind == "file":
        p = Path(target).expanduser()
        return _read_secret_file(p if p.is_absolute() else base / p)
    raise ConfigError(f"server {server}: credential {name} must be 'env:VAR' or 'file:PATH', not {ref!r}")


def resolve_credentials(
    server: str,
    credentials: Mapping[str, str],
    headers: Mapping[str, str] = {},
    *,
    environ: Mapping[str, str] | None = None,
    base: Path = Path("."),
) -> Credentials:
    """Resolve one server's credentials. Raises ``ConfigError`` for anything missing or unsafe."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for name, ref in credentials.items():
        if not _NAME.match(name) or name in PROVIDER_ENV:
            raise ConfigError(f"server {server}: credential name {name!r} is not allowed")
        values[name] = _resolve(ref, server, name, environ, base)
    rendered: dict[str, str] = {}
    for header, template in headers.items():
        try:
            rendered[header] = template.format_map(values)
        except KeyError as err:
            raise ConfigError(f"server {server}: header {header} uses undeclared credential {err}") from None
        except (ValueError, IndexError):
            raise ConfigError(f"server {server}: header {header} is not a valid template") from None
    # env goes to a stdio child, headers to an HTTP server; both are registered as secrets.
    return Credentials(env=values, headers=rendered)
