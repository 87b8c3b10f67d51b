"""Names given by the application: sets of them (roles, tenants, tool names, destinations), and
what an app name on the command line is (an agent file or ``module:factory``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

__all__ = ["is_agent_file", "name_set", "repeated"]


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


def repeated(names: Iterable[str]) -> list[str]:
    """The names that stand more than once in ``names``, sorted (empty when each is unique)."""
    return sorted(name for name, count in Counter(names).items() if count > 1)


def is_agent_file(name: str) -> bool:
    """Whether ``name`` (an app on the command line) names an agent file, not ``module:factory``.
    Here, not in ``tether.agents._file``, so a command that only needs the answer (``tether submit
    module:factory``) does not load the agent-file machinery."""
    return name.lower().endswith((".yaml", ".yml", ".toml"))
