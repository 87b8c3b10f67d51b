"""SQLite connections set up as all of tether's are (``setup``, also ``Database``'s), and one
opened by the driver alone (``connect``: for ``tether submit``, which writes a row and exits)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def setup(conn: sqlite3.Connection, synchronous: str = "NORMAL") -> None:
    """Autocommit (the caller says ``BEGIN``, as SQLite means it), foreign keys on, ``synchronous``."""
    conn.isolation_level = None
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA synchronous={synchronous}")


# SQLite's result codes for a file another connection holds (SQLITE_BUSY, SQLITE_LOCKED).
_HELD = (5, 6)


def held(err: BaseException) -> bool:
    """Whether ``err`` (the driver's, or SQLAlchemy's wrapper of it) is a SQLite file another
    writer held past the busy timeout: not a fault of the caller's, nothing of its transaction
    written, the same operation may be asked again."""
    orig = getattr(err, "orig", None) or err
    if not isinstance(orig, sqlite3.OperationalError):
        return False
    code = getattr(orig, "sqlite_errorcode", None)  # extended: its low byte is the primary code
    return (isinstance(code, int) and code & 0xFF in _HELD) or str(orig).startswith("database is locked")


def connect(
    path: str | Path, *, busy_timeout_s: float = 30.0, synchronous: str = "NORMAL"
) -> sqlite3.Connection:
    """A connection to the existing SQLite file at ``path`` (``sqlite3.OperationalError`` if there
    is none: nothing is created), set up by ``setup``."""
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=rw", uri=True, timeout=busy_timeout_s)
    setup(conn, synchronous)
    return conn
