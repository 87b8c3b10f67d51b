"""Authority objects the application builds: never reachable from model output."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tether.core._names import name_set

__all__ = ["Catalog", "DictCatalog", "Permissions", "TrustedContext"]


@dataclass(frozen=True, slots=True)
class Permissions:
    """What a run may read and write (names of scopes or resources)."""

    read: frozenset[str] = frozenset()
    write: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "read", name_set(self.read, what="Permissions.read"))
        object.__setattr__(self, "write", name_set(self.write, what="Permissions.write"))


@dataclass(frozen=True, slots=True)
class TrustedContext:
    """Who is asking, for which tenant, with which roles: supplied by the host, never by the model."""

    tenant: str
    roles: frozenset[str] = frozenset()
    user: str | None = None
    permissions: Permissions = field(default_factory=Permissions)

    def __post_init__(self) -> None:
        if not self.tenant or not self.tenant.strip():
            raise ValueError("TrustedContext.tenant must be a non-empty string")
        object.__setattr__(self, "roles", name_set(self.roles, what="TrustedContext.roles"))

    @property
    def scope(self) -> str:
        return f"tenant:{self.tenant}"


@runtime_checkable
class Catalog(Protocol):
    """The trusted record of which tenant owns which target."""

    def owner(self, kind: str, target_id: str) -> str | None:
        """The owning tenant, or None when the target does not exist."""
        ...


class DictCatalog:
    """A catalog held in memory: ``{kind: {id: tenant}}``."""

    def __init__(self, entries: Mapping[str, Mapping[str, str]]) -> None:
        self._entries = {k: dict(v) for k, v in entries.items()}

    def owner(self, kind: str, target_id: str) -> str | None:
        return self._entries.get(kind, {}).get(target_id)
