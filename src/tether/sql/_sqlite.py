"""SQLite connections set up as all of tether's are (``setup``, also ``Database``'s), and one
opened by the driver alone (``connect``: for ``tether submit``, which writes a row and exits)."""

from __future__ import annotations

import errno
import os
import sqlite3
from contextlib import closing
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


# SQLite's result codes for a file it may not write or open: SQLITE_READONLY, SQLITE_CANTOPEN;
# the system's for a path it may not write: EROFS, EACCES, EPERM.
_UNWRITABLE = (8, 14)
_UNWRITABLE_OS = (errno.EROFS, errno.EACCES, errno.EPERM)


def read_only(path: str | Path, err: BaseException) -> StoreRefused | None:
    """``StoreRefused`` (``store_read_only``) naming ``path`` when SQLite (or the system) could
    not open or write it (``err``) because the disk takes no writes there (a read-only mount or
    file system, a folder or file this process may not write): a SQLite deployment needs its
    folder writable even to be read (a store in write-ahead-log mode keeps its ``-wal`` and
    ``-shm`` files beside it, a worker its lock file). ``None`` for any other failure."""
    orig = getattr(err, "orig", None) or err
    if isinstance(orig, sqlite3.OperationalError):
        code = getattr(orig, "sqlite_errorcode", None)
        if not isinstance(code, int) or code & 0xFF not in _UNWRITABLE:
            return None
    elif not isinstance(orig, OSError) or orig.errno not in _UNWRITABLE_OS:
        return None
    if (why := _unwritable(Path(path))) is None:
        return None
    return StoreRefused(
        "store_read_only",
        f"{path} {why} ({orig}): a SQLite deployment's folder must be writable even to be read (a"
        " store in write-ahead-log mode keeps its -wal and -shm files beside it, a worker its lock"
        " file); nothing was written. Mount the folder read-write (or, to read a copy, copy the"
        " folder where this process may write)",
    )


def not_a_database(path: Path) -> str | None:
    """Why the existing file at ``path`` is no SQLite database a store could open (read-only: it
    neither makes nor changes the file), or ``None`` (also when nothing is there yet)."""
    if path.is_dir():
        return "is a folder, not a SQLite database file"
    if not path.is_file():
        return None
    try:
        with closing(sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)) as db:
            db.execute("PRAGMA schema_version")
    except sqlite3.DatabaseError as err:
        return f"is not a SQLite database file ({err})"
    return None


def _unwritable(file: Path) -> str | None:
    """Why nothing can be written at ``file``, or ``None``."""
    folder = file.parent
    while not folder.exists() and folder != folder.parent:  # a folder not made yet: its parent's
        folder = folder.parent
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "is on a read-only file system"
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return "is in a folder this process may not write"
    if file.exists() and not os.access(file, os.W_OK):
        return "may not be written by this process"
    return None
