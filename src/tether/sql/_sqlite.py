"""SQLite connections set up as all of tether's are (``setup``, also ``Database``'s), and one
opened by the driver alone (``connect``: for ``tether submit``, which writes a row and exits)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from tether.sql._postgres import StoreRefused


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
    try:
        setup(conn, synchronous)  # the first statement: where SQLite opens the file and its -shm
    except sqlite3.OperationalError as err:
        conn.close()
        raise (read_only(path, err) or err) from None
    return conn


# SQLite's result codes for a file it may not write or open: SQLITE_READONLY, SQLITE_CANTOPEN.
_UNWRITABLE = (8, 14)


def read_only(path: str | Path, err: BaseException) -> StoreRefused | None:
    """``StoreRefused`` (``store_read_only``) naming ``path`` when SQLite could not open or write
    it (``err``) because the disk takes no writes there (a read-only mount or file system, a
    folder or file this process may not write): a store in write-ahead-log mode needs its
    ``-wal`` and ``-shm`` files beside it even to be read. ``None`` for any other failure."""
    orig = getattr(err, "orig", None) or err
    code = getattr(orig, "sqlite_errorcode", None)
    if (
        not isinstance(orig, sqlite3.OperationalError)
        or not isinstance(code, int)
        or code & 0xFF not in _UNWRITABLE
    ):
        return None
    file = Path(path)
    try:
        mount_ro = bool(os.statvfs(file.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return None
    if mount_ro:
        why = "is on a read-only file system"
    elif not os.access(file.parent, os.W_OK):
        why = "is in a folder this process may not write"
    elif file.exists() and not os.access(file, os.W_OK):
        why = "may not be written by this process"
    else:
        return None
    return StoreRefused(
        "store_read_only",
        f"{path}: the SQLite store file {why} ({orig}): a store in write-ahead-log mode needs its -wal"
        " and -shm files beside it, even to be read; nothing was written. Mount the folder"
        " read-write (or, to read a copy, copy the folder where this process may write)",
    )
