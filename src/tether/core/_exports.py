"""A package's names imported on first use (PEP 562), so that importing the package stays light."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, which exports each name of ``exports``
    from the module it maps to: imported on first use, then kept in the package's namespace."""
    namespace = sys.modules[package].__dict__

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later look-ups skip this function
        return value

    def dir_() -> list[str]:
        return sorted(exports)

    return getattr_, dir_
