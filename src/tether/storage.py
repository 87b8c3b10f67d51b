"""The one way tether touches a SQLite file: ``SqliteDatabase``.

Every store built on SQLite (approvals and the effect ledger, MCP pins and pauses, memory)
holds one ``SqliteDatabase`` and runs each operation through it as one short transaction:

- ``run(fn, *args)`` / ``read(fn, *args)`` on the caller's thread, for the CLI and scripts;
- ``arun(fn, *args)`` / ``aread(fn, *args)`` in an anyio worker thread, for code on the event
  loop: a transaction that waits for another process's write lock waits in that thread, and
  the loop goes on.

``fn(conn, *args)`` gets a connection already inside ``BEGIN IMMEDIATE`` (``run``: the write
lock is taken before the first read, so a check and the write it guards cannot interleave with
another writer) or a deferred ``BEGIN`` (``read``: one consistent snapshot). It commits when
``fn`` returns and rolls back when it raises. Connections come from a small pool per file and
are all set up alike: WAL, a busy timeout, foreign keys on, ``synchronous=NORMAL`` (a commit
survives a crash of the process, which is what the effect ledger's exactly-once is proven
against; a power cut may undo the last commits. ``synchronous="FULL"`` also survives that, at
one fsync per commit: see bench/storage.py). Writers of one process queue on an in-process
lock per file instead of SQLite's sleeping busy handler; writers of other processes meet the
busy timeout. Schema changes are ordered, named migrations
recorded in ``_migrations``, applied when the database object is built.

``SqliteOps`` runs, on the same transactions, the generator operations of ``tether.sqlops``
that a store shares with its PostgreSQL backend (``tether.pg``), which keeps the same shape: a
pool, and one transaction per operation.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

import anyio.to_thread

from tether.sqlops import SQLITE, Dialect, Fetch, Op

__all__ = ["Migration", "SqliteDatabase", "SqliteOps", "Synchronous", "apply_migrations"]

Migration = tuple[str, tuple[str, ...]]
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

P = ParamSpec("P")
T = TypeVar("T")


def apply_migrations(
    conn: sqlite3.Connection, migrations: Iterable[Migration], *, now: str | None = None
) -> list[str]:
    """Apply, in order, the migrations not yet recorded; returns the names applied.

    Runs inside the caller's transaction, so a failing migration leaves nothing half-applied.
    """
    conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    applied = {name for (name,) in conn.execute("SELECT name FROM _migrations")}
    stamp = now or datetime.now(UTC).isoformat(timespec="seconds")
    done = []
    for name, statements in migrations:
        if name in applied:
            continue
        for sql in statements:
            conn.execute(sql)
        conn.execute("INSERT INTO _migrations VALUES (?, ?)", (name, stamp))
        done.append(name)
    return done


# One write lock per file per process, shared by every SqliteDatabase on that file.
_WRITE_LOCKS: dict[str, threading.Lock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()
_held = threading.local()  # the files this thread is inside a transaction on


def _reset_after_fork() -> None:
    # A lock held by another thread of the parent would stay held forever in the child.
    global _WRITE_LOCKS_GUARD
    _WRITE_LOCKS.clear()
    _WRITE_LOCKS_GUARD = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _write_lock(key: str) -> threading.Lock:
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(key, threading.Lock())


class SqliteDatabase:
    """One SQLite file, its migrations, and a small pool of identically configured connections.

    Building one creates the file, switches it to WAL and migrates it, so a wrong path fails at
    wiring time; build stores once at setup, never per call. Raises ``sqlite3.Error``/``OSError``.
    """

    def __init__(
        self,
        path: str | Path,
        migrations: Sequence[Migration] = (),
        *,
        busy_timeout_s: float = 30.0,
        pool_size: int = 4,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        if busy_timeout_s < 0 or pool_size < 1:
            raise ValueError("busy_timeout_s must be >= 0 and pool_size >= 1")
        self.path = Path(path)
        self.migrations = tuple(migrations)
        self.busy_timeout_s = busy_timeout_s
        self.pool_size = pool_size
        self.synchronous: Synchronous = synchronous
        self._key = os.path.abspath(self.path)
        self._idle: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()
        self._open()

    def __repr__(self) -> str:
        return f"SqliteDatabase({str(self.path)!r})"

    # -- operations ----------------------------------------------------------------------

    def run(self, fn: Callable[Concatenate[sqlite3.Connection, P], T], /, *args: P.args, **kw: P.kwargs) -> T:
        """``fn(conn, *args)`` in one ``BEGIN IMMEDIATE`` transaction on this thread."""
        return self._transaction(True, lambda conn: fn(conn, *args, **kw))

    def read(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], T], /, *args: P.args, **kw: P.kwargs
    ) -> T:
        """``fn(conn, *args)`` in one read transaction (a snapshot; takes no write lock)."""
        return self._transaction(False, lambda conn: fn(conn, *args, **kw))

    async def arun(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], T], /, *args: P.args, **kw: P.kwargs
    ) -> T:
        """``run`` in a worker thread. Once started, the transaction finishes (commit or rollback)
        even if the caller is cancelled meanwhile; a cancellation before it starts runs nothing."""
        call = functools.partial(self._transaction, True, lambda conn: fn(conn, *args, **kw))
        return await anyio.to_thread.run_sync(call)

    async def aread(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], T], /, *args: P.args, **kw: P.kwargs
    ) -> T:
        """``read`` in a worker thread."""
        call = functools.partial(self._transaction, False, lambda conn: fn(conn, *args, **kw))
        return await anyio.to_thread.run_sync(call)

    def close(self) -> None:
        """Close the pooled connections; a later operation raises ``sqlite3.ProgrammingError``."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- plumbing ------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """The discipline of ``run``/``read`` for a block of statements on this thread: one
        transaction (``BEGIN IMMEDIATE`` when ``write``), committed at the end of the block and
        rolled back if it raises. Async code uses ``arun``/``aread`` instead."""
        held: set[str] = _held.__dict__.setdefault("files", set())
        if self._key in held:
            # The inner one would wait for the outer one's lock, which waits for it.
            raise RuntimeError(f"nested transaction on {self.path}: pass the connection down instead")
        lock = _write_lock(self._key) if write else None
        if lock is not None and not lock.acquire(timeout=self.busy_timeout_s):
            raise sqlite3.OperationalError(f"database is locked: {self.path} (in-process writer)")
        held.add(self._key)
        try:
            conn = self._acquire()
            healthy = False
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                healthy = True
            finally:
                self._release(conn, healthy or not conn.in_transaction)
        finally:
            held.discard(self._key)
            if lock is not None:
                lock.release()

    def _transaction(self, write: bool, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self.transaction(write=write) as conn:
            return fn(conn)

    @staticmethod
    def _in_transaction(conn: sqlite3.Connection, write: bool, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
            return result
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        return conn

    def _acquire(self) -> sqlite3.Connection:
        with self._pool_lock:
            if self._closed:
                raise sqlite3.ProgrammingError(f"{self!r} is closed")
            if self._pid != os.getpid():
                # A connection must not cross a fork: the child starts its own pool.
                self._idle, self._pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        return self._connect()

    def _release(self, conn: sqlite3.Connection, reusable: bool) -> None:
        with self._pool_lock:
            if (
                reusable
                and not self._closed
                and self._pid == os.getpid()
                and len(self._idle) < self.pool_size
            ):
                self._idle.append(conn)
                return
        conn.close()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            conn.execute("PRAGMA journal_mode=WAL")  # persistent: recorded in the file itself
            with _write_lock(self._key):
                self._in_transaction(conn, True, lambda c: apply_migrations(c, self.migrations))
        except BaseException:
            conn.close()
            raise
        self._release(conn, True)


class SqliteOps:
    """A ``SqliteDatabase`` as a ``tether.sqlops.OpDatabase``: each generator operation runs in
    one transaction of ``run``/``read`` (or their worker-thread twins), its ``%s`` placeholders
    written ``?`` and ``%%`` written ``%``."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    @property
    def dialect(self) -> Dialect:
        return SQLITE

    def run(self, fn: Callable[..., Op[T]], /, *args: Any) -> T:
        return self.db.run(_drive, fn(*args))

    def read(self, fn: Callable[..., Op[T]], /, *args: Any) -> T:
        return self.db.read(_drive, fn(*args))

    async def arun(self, fn: Callable[..., Op[T]], /, *args: Any) -> T:
        return await self.db.arun(_drive, fn(*args))

    async def aread(self, fn: Callable[..., Op[T]], /, *args: Any) -> T:
        return await self.db.aread(_drive, fn(*args))


@functools.lru_cache(maxsize=512)
def _qmark(text: str) -> str:
    return re.sub(r"%([s%])", lambda m: "?" if m.group(1) == "s" else "%", text)


def _fetch(cur: sqlite3.Cursor, fetch: Fetch) -> Any:
    if fetch == "none":
        return None
    if fetch == "rowcount":
        return cur.rowcount
    if fetch == "one":
        row = cur.fetchone()
        cur.close()  # the statement is done, whatever rows it had left
        return row
    return cur.fetchall()


def _drive(conn: sqlite3.Connection, op: Op[T]) -> T:
    try:
        sql = op.send(None)
        while True:
            sql = op.send(_fetch(conn.execute(_qmark(sql.text), sql.params), sql.fetch))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
