"""``module:attribute`` import paths (tools, hooks, reconcilers, worker apps), read one way: a
path that does not import or name anything is a ``ConfigError`` naming the path and its cause,
with a "did you mean" when the module has a close name."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from tether.errors import ConfigError

__all__ = ["import_ref"]


def import_ref(ref: str, where: str) -> Any:
    """The object ``ref`` (``module:attribute``) names; ``where`` says who asked, for the error."""
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"{where}: cannot import {module_name!r}: {err}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        close = difflib.get_close_matches(attr, [n for n in dir(module) if not n.startswith("_")], n=1)
        maybe = f" (did you mean {module_name}:{close[0]}?)" if close else ""
        raise ConfigError(f"{where}: module {module_name!r} has no {attr!r}{maybe}") from None
