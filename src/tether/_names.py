"""Sets of names given by the application (roles, tenants, tool names, destinations)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["name_set"]


def name_set(value: Iterable[str], *, what: str) -> frozenset[str]:
    """``value`` as a frozenset of strings. A bare string is a ``TypeError``: iterating it would
    give its characters (``roles="admin"`` would grant the roles "a", "d", "m", "i", "n")."""
    if isinstance(value, str | bytes | bytearray):
        raise TypeError(f"{what} must be a collection of names, not a bare string: write {{{value!r}}}")
    try:
        names = frozenset(value)
    except TypeError:
        raise TypeError(f"{what} must be a collection of names, not {type(value).__name__}") from None
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what} must hold strings, not {type(name).__name__} ({name!r})")
    return names
