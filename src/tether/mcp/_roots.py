"""Roots (X4, legacy in 2026-07-28): the file:// URIs a server is told to look at.

Roots are advice, not enforcement (the sandbox enforces). Every root is validated: ``file``
scheme, local, absolute, no dot segments, query, fragment or control characters, and inside the
base folder when one is given. Only servers with declared roots get an answer to ``roots/list``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from pydantic import FileUrl

from tether.errors import ConfigError

if TYPE_CHECKING:
    import mcp_types as types

__all__ = ["RootsGate", "root_path", "validate_root"]


def validate_root(uri: str, *, base: Path | None = None) -> str:
    """Return the URI if it is a safe file:// root; raise ``ConfigError`` otherwise."""
    if any(ord(c) < 0x20 or c in "\x7f\\" for c in uri):
        raise ConfigError(f"root {uri!r}: control characters or backslashes are not allowed")
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise ConfigError(f"root {uri!r}: only file:// URIs are roots")
    if parts.netloc not in ("", "localhost"):
        raise ConfigError(f"root {uri!r}: a root must be on this machine (host {parts.netloc!r})")
    if parts.query or parts.fragment:
        raise ConfigError(f"root {uri!r}: no query or fragment")
    raw_segments = parts.path.split("/")
    decoded = unquote(parts.path)
    if "\x00" in decoded or any(ord(c) < 0x20 for c in decoded):
        raise ConfigError(f"root {uri!r}: encoded control characters")
    for seg in [*raw_segments, *decoded.split("/"), *decoded.replace("\\", "/").split("/")]:
        if seg in (".", ".."):
            raise ConfigError(f"root {uri!r}: '.' and '..' segments are not allowed (traversal)")
    if not decoded.startswith("/"):
        raise ConfigError(f"root {uri!r}: the path must be absolute")
    if base is not None:
        real = Path(os.path.realpath(decoded))
        real_base = Path(os.path.realpath(base))
        if real != real_base and real_base not in real.parents:
            raise ConfigError(f"root {uri!r}: outside the project folder {real_base}")
    return uri


class RootsGate:
    """Answers ``roots/list`` for one server from its declared, validated roots."""

    def __init__(
        self,
        server: str,
        roots: Iterable[str],
        *,
        base: Path | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.server = server
        self.base = base
        self.roots = [validate_root(r, base=base) for r in roots]
        self._on_event = on_event or (lambda _e: None)
        self.listed = 0

    def paths(self) -> list[Path]:
        """The roots as local paths (what results are checked against)."""
        return [root_path(r) for r in self.roots]

    def set_roots(self, roots: Iterable[str]) -> bool:
        """Replace the roots (all validated first: a bad one changes nothing). True if they changed."""
        new = [validate_root(r, base=self.base) for r in roots]
        changed = new != self.roots
        self.roots = new
        return changed

    async def __call__(self, context: Any) -> types.ListRootsResult | types.ErrorData:
        import mcp_types as types

        self.listed += 1
        self._on_event({"server": self.server, "action": "list", "roots": list(self.roots)})
        return types.ListRootsResult(
            roots=[types.Root(uri=FileUrl(r), name=root_path(r).name or "/") for r in self.roots]
        )


def root_path(uri: str) -> Path:
    return Path(unquote(urlsplit(uri).path))
