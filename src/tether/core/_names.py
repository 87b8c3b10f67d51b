"""Names given by the application: sets of them (roles, tenants, tool names, destinations), and
what an app name on the command line is (an agent file or ``module:factory``)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable

__all__ = ["MAX_TOOL_NAME", "SEPARATOR", "folded", "is_agent_file", "name_set", "offered_name", "repeated"]


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


def folded(name: str) -> str:
    """``name`` as names a deployer declares for tools (``deny``, ``roles``, a server's declared
    effects, targets and egress) are compared: NFKC, case-folded, without format characters
    (zero-width spaces, joiners) and surrounding whitespace. A server's ``Delete_Order`` or
    ``delete_<zero-width space>order`` names, to its reader, the ``delete_order`` denied."""
    text = unicodedata.normalize("NFKC", name)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    return unicodedata.normalize("NFKC", text.casefold()).strip()


def repeated(names: Iterable[str]) -> list[str]:
    """The names that stand more than once in ``names``, sorted (empty when each is unique)."""
    return sorted(name for name, count in Counter(names).items() if count > 1)


def is_agent_file(name: str) -> bool:
    """Whether ``name`` (an app on the command line) names an agent file, not ``module:factory``.
    Here, not in ``tether.agents._file``, so a command that only needs the answer (``tether submit
    module:factory``) does not load the agent-file machinery."""
    return name.lower().endswith((".yaml", ".yml", ".toml"))


SEPARATOR = "__"
MAX_TOOL_NAME = 64  # the longest tool name every provider takes
_UNTAKEN = re.compile(r"[^A-Za-z0-9_-]")  # characters a provider refuses in a tool name


def offered_name(server: str, tool: str) -> str:
    """The name the model is offered for a server's tool: ``server__tool`` when every provider
    takes it; otherwise made to fit, with the start of the tool name's sha256 (``files__read.file``
    → ``files__read_file_8a1f…``). The server is called by its own name (``remote_name``)."""
    name = f"{server}{SEPARATOR}{tool}"
    if len(name) <= MAX_TOOL_NAME and not _UNTAKEN.search(name):
        return name
    tag = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{_UNTAKEN.sub('_', name)[: MAX_TOOL_NAME - len(tag) - 1]}_{tag}"
