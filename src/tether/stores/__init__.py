"""Where everything tether keeps lives: one URL opens every store."""

from tether.stores._url import Stores, open_stores

__all__: list[str] = ["Stores", "open_stores"]
