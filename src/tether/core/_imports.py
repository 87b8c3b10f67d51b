"""``module:attribute`` import paths (tools, hooks, reconcilers, worker apps), read one way: a
path that does not import or name anything, or a module that fails as it is imported (any
exception, a syntax error, ``sys.exit``), is a ``ConfigError`` naming the path and its cause
(with the user's file and line, or a "did you mean" when the module has a close name)."""

from __future__ import annotations

import difflib
import importlib
import os
import re
import traceback
from typing import Any

from tether.errors import ConfigError

__all__ = ["import_ref", "module_spelling", "raised_at"]

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def import_ref(ref: str, where: str) -> Any:
    """The object ``ref`` (``module:attribute``) names; ``where`` says who asked, for the error."""
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"{where}: cannot import {module_name!r}: {err}{module_spelling(ref)}") from None
    except (Exception, SystemExit) as err:  # the module itself fails: the file names broken code
        raise ConfigError(
            f"{where}: importing {module_name!r} raised {type(err).__name__}: {err}{raised_at(err)}"
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        close = difflib.get_close_matches(attr, [n for n in dir(module) if not n.startswith("_")], n=1)
        maybe = f" (did you mean {module_name}:{close[0]}?)" if close else ""
        raise ConfigError(f"{where}: module {module_name!r} has no {attr!r}{maybe}") from None


def module_spelling(ref: str) -> str:
    """``; name the module, not its file: tools:read_order`` when ``ref`` names a tool by its
    file (``tools.py:read_order``, ``./pkg/tools.py:f``, ``.\\tools.py:f``), else ``""``."""
    path, colon, attr = ref.rpartition(":")
    if not colon or not (path.endswith(".py") or "/" in path or "\\" in path):
        return ""
    module = path.removesuffix(".py").replace("\\", "/").removeprefix("./").replace("/", ".")
    if not _DOTTED.match(module) or not _DOTTED.match(attr):
        return ""
    return f"; name the module, not its file: {module}:{attr}"


_INSTALLED = frozenset({"site-packages", "dist-packages"})


def raised_at(err: BaseException) -> str:
    """`` (at FILE:LINE)`` of the innermost line of the user's code ``err`` came from (a syntax
    error's own line; not tether's, not the standard library's or the import machinery's, and not
    an installed library's — a tool that calls a library which raises names its own line — unless
    no other line is left: then the innermost installed one), else ``""``."""
    if isinstance(err, SyntaxError) and err.filename:
        return f" (at {err.filename}:{err.lineno})"
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = installed = ""
    for frame, line in traceback.walk_tb(err.__traceback__):
        name = frame.f_code.co_filename
        if name.startswith(("<", own)) or name.startswith(os.path.dirname(os.__file__)):
            continue
        if _INSTALLED.intersection(re.split(r"[\\/]", name)):
            installed = f" (at {name}:{line})"
        else:
            found = f" (at {name}:{line})"
    return found or installed
