"""``Database``: the one way tether touches SQLite or PostgreSQL (SQLAlchemy Core).

Each store operation is one short transaction: ``write``/``read`` await ``fn(conn, *args)`` in a
worker thread (``run``/``snapshot``: on the caller's thread); it commits when ``fn`` returns and
rolls back when it raises. Errors come out as the driver's own (``sqlite3.Error``, ``psycopg.Error``).

SQLite: WAL, ``BEGIN IMMEDIATE`` for writes (the lock is taken before the first read), ``BEGIN``
for reads, ``synchronous=NORMAL`` (a commit survives a process crash: what the effect ledger's
exactly-once is proven against). Writers of one process queue on an in-process lock per file.
PostgreSQL: one pool per ``Database``; a connection lost *before* the commit is retried, one lost
during the commit raises ``StoreUnavailable`` (outcome unknown). ``migrate(concern)`` applies the
concern's named migrations not yet in ``_migrations``, in one transaction, serialised across processes;
on PostgreSQL its DDL waits ``MIGRATION_LOCK_WAIT_S`` for a table's lock, lets go and tries again
(``MigrationBusy`` after ``MIGRATION_TRIES``). ``busy(err)``: a store another session held.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Concatenate, Literal, ParamSpec, TypeVar

import anyio.to_thread
from sqlalchemy import Connection, Engine, Table, create_engine, event, select, text
from sqlalchemy import inspect as inspect_db
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import QueuePool, StaticPool

from tether.errors import ConfigError
from tether.sql import _postgres as pgsql
from tether.sql._earlier import earlier_names
from tether.sql._journal import check_own_marks, refuse_later
from tether.sql._postgres import CUT, PG_SCHEMES, PgUrl, StoreHeld, StoreUnavailable, ensure_schema, refused
from tether.sql._sqlite import held, read_only, setup
from tether.sql._tables import CONCERNS, METADATA
from tether.sql._tables import migrations as migrations_table

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
Migration = tuple[str, Callable[[Connection], None]]

P = ParamSpec("P")
T = TypeVar("T")
_RETRIES = 3
# A PostgreSQL migration's DDL waits this long for its table's lock, then lets go and tries again.
MIGRATION_LOCK_WAIT_S = 5.0
MIGRATION_TRIES = 6


class MigrationBusy(StoreHeld):
    """A migration's DDL could not take its table's lock on any try (another session held the
    table: a worker of any release inside a transaction, or stopped in one); nothing written."""


def _create(concern: str) -> Callable[[Connection], None]:
    """Create what is missing of the concern's tables, columns and indexes (data kept)."""

    def step(conn: Connection) -> None:
        tables = CONCERNS[concern]
        METADATA.create_all(conn, tables=list(tables), checkfirst=True)
        for table in tables:
            _add_columns(conn, table)
            for index in table.indexes:
                index.create(conn, checkfirst=True)

    return step


def _add_columns(conn: Connection, table: Table) -> None:
    """Add the declared columns an older table lacks (each must be nullable or have a default)."""
    from sqlalchemy.schema import CreateColumn

    have = {c["name"] for c in inspect_db(conn).get_columns(table.name, schema=table.schema)}
    for column in table.columns:
        if column.name in have:
            continue
        ddl = CreateColumn(column).compile(dialect=conn.dialect).string  # None: not on this dialect
        if not ddl:
            continue
        if not column.nullable and column.server_default is None and column.identity is None:
            raise RuntimeError(
                f"{table.name}.{column.name} cannot be added to existing rows: declare a default"
            )
        name = conn.dialect.identifier_preparer.format_table(table)
        conn.execute(text(f"ALTER TABLE {name} ADD COLUMN {ddl}"))


# Per concern, in order; a new schema change is appended as a named step, a released name never changes.
MIGRATIONS: dict[str, tuple[Migration, ...]] = {
    concern: ((f"{concern}.001_tables", _create(concern)),) for concern in CONCERNS
}
MIGRATIONS["traces"] += (("traces.002_first_event_index", _create("traces")),)
# Resume claims (run_resumes): an approval store written before them.
MIGRATIONS["approvals"] += (("approvals.002_resume_claims", _create("approvals")),)
# The effect ledger's tenant (effect_ledger.tenant): a ledger written before it.
MIGRATIONS["approvals"] += (("approvals.003_ledger_tenant", _create("approvals")),)
# Sessions' last request (sessions.seen_at): a user store written before the idle timeout.
MIGRATIONS["users"] += (("users.002_session_seen", _create("users")),)
# Workers' versions (app_version, apps): a deployment whose table was written before them.
MIGRATIONS["workers"] += (("workers.002_versions", _create("workers")),)
# Workers' owner token (owner, owner_since): a restarted worker under its dead one's host and pid.
MIGRATIONS["workers"] += (("workers.003_owner", _create("workers")),)
# The names earlier releases' own migrations of these tables had (``_earlier``), so that such a
# release opens a store this one created as one this one upgraded, not "table already exists".
for _concern, _number in (("approvals", "004"), ("memory", "002"), ("pins", "002"), ("pauses", "002")):
    MIGRATIONS[_concern] += ((f"{_concern}.{_number}_earlier_names", earlier_names(_concern)),)


# A marked migration of this release's own is known to it (``_journal``): it refuses only another's.
# Checked here (not an ``assert``: ``python -O`` drops those) and again by each ``migrate``.
check_own_marks("tether.sql._database.MIGRATIONS", (n for steps in MIGRATIONS.values() for n, _ in steps))

# One write lock per SQLite file per process, shared by every Database on that file.
_WRITE_LOCKS: dict[str, threading.Lock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()
_held = threading.local()  # the files this thread is inside a transaction on


def _reset_after_fork() -> None:
    # A lock held by another thread of the parent would stay held forever in the child.
    global _WRITE_LOCKS_GUARD
    _WRITE_LOCKS.clear()
    _WRITE_LOCKS_GUARD = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def busy(err: BaseException) -> bool:
    """Whether ``err`` says a store was held by another session (a SQLite file past its busy
    timeout, a PostgreSQL table a migration could not lock): no fault of the caller's, the
    transaction that waited wrote nothing, and the same operation may be asked again."""
    return held(err) or isinstance(err, StoreHeld)


def blocking(fn: Callable[P, Awaitable[T]], /, *args: P.args, **kw: P.kwargs) -> T:
    """Await ``fn(*args, **kw)`` from synchronous code (the CLI, threads of our own); never on
    the event loop's thread (``RuntimeError`` there)."""
    return anyio.run(functools.partial(fn, *args, **kw))


class Database:
    """One SQLite file (``sqlite``), one in memory (``memory``) or one PostgreSQL database and
    schema (``postgresql``), with its migrations and a pool of identically set-up connections.

    Build once at setup. A SQLite one creates the file and switches it to WAL at once (a wrong
    path fails at wiring time); a PostgreSQL one connects on first use (``StoreUnavailable``).
    """

    path: Path | None = None
    _serial: threading.Lock | None = None  # the one lock of a database in memory
    url: PgUrl | None = None
    application_name: str = ""

    def __init__(self, engine: Engine, *, key: str, busy_timeout_s: float = 30.0) -> None:
        self.engine = engine
        self.dialect: str = engine.dialect.name
        self.busy_timeout_s = busy_timeout_s
        self._key = key
        self._closed = False
        self._pid = os.getpid()
        self._migrated: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def sqlite(
        cls,
        path: str | Path,
        *,
        busy_timeout_s: float = 30.0,
        synchronous: Synchronous = "NORMAL",
    ) -> Database:
        if busy_timeout_s < 0:
            raise ValueError("busy_timeout_s must be >= 0")
        file = Path(path)
        if file.is_dir():
            raise ConfigError(f"{file} is a folder, not a SQLite database file")
        _create_file(file)
        engine = create_engine(
            f"sqlite:///{file}",
            poolclass=QueuePool,
            pool_size=4,
            max_overflow=-1,
            pool_reset_on_return=None,  # every transaction ends in our commit or rollback
            connect_args={"timeout": busy_timeout_s, "check_same_thread": False},
        )
        db = cls._on_sqlite(engine, os.path.abspath(file), busy_timeout_s, synchronous)
        db.path = file
        raw = sqlite3.connect(file, timeout=busy_timeout_s)
        try:
            raw.execute("PRAGMA journal_mode=WAL")  # persistent: recorded in the file itself
        except sqlite3.DatabaseError as err:
            engine.dispose()
            # Held: as any store operation's (``busy``, the file named, ask again).
            if isinstance(err, sqlite3.OperationalError) and held(err):
                raise db._named(err) from None
            raise (read_only(file, err) or ConfigError(_unopened(file, err))) from err
        finally:
            raw.close()
        return db

    @classmethod
    def memory(cls) -> Database:
        """A private SQLite database in memory, gone once closed: for scripts and tests. One
        connection, its transactions one at a time, reads included."""
        engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
        db = cls._on_sqlite(engine, f":memory:{id(engine):x}", 30.0, "OFF")
        db._serial = threading.Lock()
        return db

    @classmethod
    def _on_sqlite(
        cls, engine: Engine, key: str, busy_timeout_s: float, synchronous: Synchronous
    ) -> Database:
        @event.listens_for(engine, "connect")
        def _setup(dbapi: Any, _record: Any) -> None:
            setup(dbapi, synchronous)  # we say BEGIN ourselves (below), as SQLite means it

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("tether_write", True)
            # On the driver's connection: a statement through SQLAlchemy costs as much again.
            conn.connection.dbapi_connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")  # type: ignore[union-attr]

        return cls(engine, key=key, busy_timeout_s=busy_timeout_s)

    @classmethod
    def postgresql(
        cls,
        url: str | PgUrl,
        *,
        max_size: int = 8,
        timeout_s: float = 15.0,
        application_name: str | None = None,
    ) -> Database:
        pg = url if isinstance(url, PgUrl) else PgUrl.parse(url)
        own = "-c TimeZone=UTC" + (f" -c search_path={pg.schema}" if pg.schema else "")
        options = f"{pg.params().get('options', '')} {own}".strip()  # the URL's (DBOS reads them) first
        name = application_name or f"tether:{pg.schema or 'public'}"
        engine = create_engine(
            pg.sqlalchemy(),
            pool_size=max_size,
            max_overflow=0,
            pool_timeout=timeout_s,
            pool_pre_ping=True,
            # Stores read what committed before each statement, whatever the role's default.
            isolation_level="READ COMMITTED",
            connect_args={
                "options": options,
                "connect_timeout": max(1, int(timeout_s)),
                "application_name": name,
            },
        )
        db = cls(engine, key=pg.redacted())
        db.url = pg
        db.application_name = name
        return db

    @property
    def schema(self) -> str | None:
        return self.url.schema if self.url is not None else None

    def __repr__(self) -> str:
        return f"Database({self._key!r})"

    async def write(self, fn: Callable[Concatenate[Connection, P], T], /, *args: P.args, **kw: P.kwargs) -> T:
        """``fn(conn, *args)`` in one write transaction, in a worker thread; once started it
        finishes (commit or rollback) even if the caller is cancelled."""
        return await anyio.to_thread.run_sync(self._transaction, True, lambda conn: fn(conn, *args, **kw))

    async def read(self, fn: Callable[Concatenate[Connection, P], T], /, *args: P.args, **kw: P.kwargs) -> T:
        """``fn(conn, *args)`` in one read transaction (a snapshot on SQLite), in a worker thread."""
        return await anyio.to_thread.run_sync(self._transaction, False, lambda conn: fn(conn, *args, **kw))

    def run(self, fn: Callable[Concatenate[Connection, P], T], /, *args: P.args, **kw: P.kwargs) -> T:
        """``write`` on the caller's thread (never the event loop's)."""
        return self._transaction(True, lambda conn: fn(conn, *args, **kw))

    def snapshot(self, fn: Callable[Concatenate[Connection, P], T], /, *args: P.args, **kw: P.kwargs) -> T:
        """``read`` on the caller's thread."""
        return self._transaction(False, lambda conn: fn(conn, *args, **kw))

    def close(self) -> None:
        """Close the pooled connections; a later operation raises (``sqlite3.ProgrammingError``
        on SQLite, ``StoreUnavailable`` on PostgreSQL)."""
        self._closed = True
        self.engine.dispose()

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)

    def migrate(self, concern: str, steps: Sequence[Migration] | None = None) -> list[str]:
        """Apply, in order and in one transaction, the concern's migrations (``steps``, by default
        ``MIGRATIONS[concern]``) not yet recorded; concurrent migrators are serialised. Returns
        the names applied."""
        if concern in self._migrated:
            return []
        if self.dialect == "postgresql":
            self._ensure_schema()
        todo = tuple(MIGRATIONS[concern] if steps is None else steps)
        check_own_marks(self._key, (n for n, _ in todo))  # before anything is applied
        for attempt in range(1, MIGRATION_TRIES + 1):
            try:
                migrate = functools.partial(_migrate, self.dialect, concern, todo, self._key)
                done = self._transaction(True, migrate)
                break
            except MigrationBusy as err:
                if attempt == MIGRATION_TRIES:
                    raise MigrationBusy(self._busy(str(err))) from None
        self._migrated.add(concern)
        return done

    def _busy(self, what: str) -> str:
        """Why a migration gave up: its table's lock, or the migration lock and who holds it."""
        tries = f"({MIGRATION_TRIES} tries of {MIGRATION_LOCK_WAIT_S:g} s)"
        if what != MIGRATION_LOCK:
            return (
                f"{self._key}: migration {what} could not take its table's lock {tries}: another"
                " session holds it (a worker of any release inside a transaction, or stopped in one:"
                " pg_stat_activity, state 'idle in transaction'); nothing of it was written"
            )
        holders = "pid not known"
        with suppress(Exception):  # who it is, if that can be read: the message stands without
            holders = self.snapshot(_lock_holders) or "a session now gone"
        return (
            f"{self._key}: another migrator held {what} {tries}: {holders} (a tether db init or a"
            " worker's start, of any release, stopped mid-migration: suspended with Ctrl-Z, frozen,"
            " in a debugger; or itself waiting for a table's lock); nothing was written"
        )

    def check_journal(self, *concerns: str | None) -> None:
        """Refuse (``SchemaTooNew``) a store whose ``concerns`` (``None``: any) a later release
        migrated past this one, for a caller that opens it without migrating it (``migrate``
        checks its own concern); once per ``Database`` and concern."""
        todo = [c for c in concerns if f"journal:{c}" not in self._migrated]
        if not todo:
            return

        def names(conn: Connection) -> list[str]:
            if not inspect_db(conn).has_table(migrations_table.name):
                return []  # no journal yet: a store of an earlier release, or a new one
            return list(conn.scalars(select(migrations_table.c.name)))

        refuse_later(self._key, self.snapshot(names), todo)
        self._migrated.update(f"journal:{c}" for c in todo)

    def _ensure_schema(self) -> None:
        if self.schema and "schema" not in self._migrated:
            assert self.url is not None
            ensure_schema(self.url, self._key)
            self._migrated.add("schema")

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Connection]:
        """The discipline of ``run``/``snapshot`` for a block of statements on this thread."""
        if self.dialect != "sqlite":
            with self._connect() as conn, conn.begin():
                yield conn
            return
        held: set[str] = _held.__dict__.setdefault("files", set())
        if self._key in held:
            # The inner one would wait for the outer one's lock, which waits for it.
            raise RuntimeError(f"nested transaction on {self.path}: pass the connection down instead")
        lock = self._serial
        if lock is None and write:
            with _WRITE_LOCKS_GUARD:
                lock = _WRITE_LOCKS.setdefault(self._key, threading.Lock())
        if lock is not None and not lock.acquire(timeout=self.busy_timeout_s):
            raise sqlite3.OperationalError(f"database is locked: {self.path} (in-process writer)")
        held.add(self._key)
        try:
            with self._connect().execution_options(tether_write=write) as conn, conn.begin():
                yield conn
        finally:
            held.discard(self._key)
            if lock is not None:
                lock.release()

    def _connect(self) -> Connection:
        if self._closed:
            if self.dialect == "sqlite":
                raise sqlite3.ProgrammingError(f"{self!r} is closed")
            raise StoreUnavailable(f"{self!r} is closed")
        if self._pid != os.getpid():
            # A connection must not cross a fork: the child starts its own pool.
            with self._lock:
                if self._pid != os.getpid():
                    self.engine.dispose(close=False)
                    self._pid = os.getpid()
        return self.engine.connect()

    def _transaction(self, write: bool, fn: Callable[[Connection], T]) -> T:
        if self.dialect == "sqlite":
            try:
                with self.transaction(write=write) as conn:
                    return fn(conn)
            except (StatementError, sqlite3.OperationalError) as err:
                raise self._named(err) from None
        for attempt in range(_RETRIES):
            try:
                return self._pg_attempt(fn)
            except _Lost as lost:
                if attempt == _RETRIES - 1:  # a statement the server cut at its bound: a wait, no loss
                    raise (StoreHeld if lost.cut else StoreUnavailable)(f"{self._key}: {lost}") from None
        raise AssertionError("unreachable")

    def _named(self, err: StatementError | sqlite3.OperationalError) -> BaseException:
        """The driver's own error; one for a file another writer held, or one the disk refused
        (full, read-only, an I/O error), names the file (SQLite's says only "database is locked",
        "disk I/O error": which of a deployment's stores?), as the same type and codes."""
        orig = _unwrapped(err) if isinstance(err, StatementError) else err
        if self.path is None or str(self.path) in str(orig) or not isinstance(orig, sqlite3.OperationalError):
            return orig
        if (no := read_only(self.path, orig)) is not None:  # a read-only mount: no retry changes it
            return no
        if held(orig):
            said = (
                f"database is locked: {self.path} (another connection held its write lock past the"
                f" {self.busy_timeout_s:g} s busy timeout)"
            )
        elif getattr(orig, "sqlite_errorcode", 0) & 0xFF in _DISK:
            said = f"{orig}: {self.path}"
        else:
            return orig
        named = sqlite3.OperationalError(said)
        named.sqlite_errorcode = getattr(orig, "sqlite_errorcode", 5)
        named.sqlite_errorname = getattr(orig, "sqlite_errorname", "SQLITE_BUSY")
        return named

    def _pg_attempt(self, fn: Callable[[Connection], T]) -> T:
        import psycopg

        try:
            conn = self._connect()
        except (DBAPIError, PoolTimeout) as err:
            raise _Lost(str(err)) from None
        with conn:
            trans = conn.begin()
            try:
                value = fn(conn)
            except StatementError as err:
                if isinstance(err, DBAPIError) and (
                    err.connection_invalidated or isinstance(err.orig, psycopg.OperationalError)
                ):
                    raise _Lost(str(err.orig), getattr(err.orig, "sqlstate", None) in CUT) from None
                trans.rollback()
                orig = _unwrapped(err)  # a role's or replica's refusal says so, typed
                raise (refused(self._key, orig) or orig) from None
            except BaseException:
                trans.rollback()
                raise
            try:
                trans.commit()
            except DBAPIError as err:
                raise StoreUnavailable(f"commit outcome unknown: {err.orig}") from None
            return value


class SqlStore:
    """What every store on a ``Database`` shares. ``db``: a ``Database`` (a deployment's, which
    ``close`` leaves open), or what to open and own: a SQLite path, a PostgreSQL URL, or ``None``
    (a private database in memory). Its concern is migrated when built, so an older file is
    upgraded in place."""

    concern: ClassVar[str]
    path: Path | None = None  # the SQLite file, when the store opened one

    def __init__(
        self,
        db: Database | str | Path | None = None,
        *,
        busy_timeout_s: float = 30.0,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        self._owns = not isinstance(db, Database)
        if isinstance(db, Database):
            self.db = db
        elif db is None:
            self.db = Database.memory()
        elif str(db).startswith(PG_SCHEMES):
            self.db = Database.postgresql(str(db))
        else:
            self.db = Database.sqlite(db, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
            self.path = Path(db)
        self.db.migrate(self.concern)

    def close(self) -> None:
        """Close the database if this store opened it (never a shared one)."""
        if self._owns:
            self.db.close()


def _create_file(file: Path) -> None:
    """Create ``file`` (and its folders) if missing. A new file (password and token hashes,
    proposals, checkpoints) is its owner's alone; SQLite gives -wal and -shm the same mode; an
    existing file keeps its operator's mode. A place that cannot hold it (a read-only or full
    file system, a parent that is a file, no permission) is a ``ConfigError`` naming the file."""
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        with suppress(FileExistsError):
            os.close(os.open(file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as err:
        why = err.strerror or str(err)
        where = f" ({err.filename})" if err.filename and str(err.filename) != str(file) else ""
        raise ConfigError(
            f"the SQLite database file {file} cannot be created: {why}{where}; nothing was written"
        ) from err


# SQLite's result codes for a file the disk refused: read-only, I/O error, full, cannot be opened.
_DISK = (8, 10, 13, 14)
# SQLite's result codes for a file that is no database (SQLITE_NOTADB) or a damaged one (SQLITE_CORRUPT).
_NOT_A_DATABASE = (26, 11)


def _unopened(file: Path, err: sqlite3.DatabaseError) -> str:
    """Why a SQLite file could not be opened, in words that fit: one the disk refused (full,
    read-only) is not called "not a SQLite database file" (an operator told so may delete a
    good store)."""
    code = getattr(err, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary in _NOT_A_DATABASE or (primary is None and "not a database" in str(err)):
        return f"{file} is not a SQLite database file ({err})"
    return f"{file} cannot be opened as a SQLite database ({err}); nothing was read or written"


def _unwrapped(err: StatementError) -> BaseException:
    """The driver's (or a type's) own error, not SQLAlchemy's wrapper of it."""
    return err.orig if isinstance(err.orig, BaseException) else err


class _Lost(Exception):
    """The connection died (or a statement was ``cut``) before the commit: nothing was written."""

    def __init__(self, message: str, cut: bool = False) -> None:
        super().__init__(message)
        self.cut = cut


def _too_new(key: str, concern: str, steps: tuple[Migration, ...], applied: set[str]) -> None:
    """Refuse a store a later release migrated past what this release can work beside."""
    refuse_later(key, applied - {name for name, _ in steps}, [concern])


def _migrate(
    dialect: str, concern: str, steps: tuple[Migration, ...], key: str, conn: Connection
) -> list[str]:
    if dialect == "postgresql":
        # Every wait is bounded (a DDL queued behind a transaction holds up every heartbeat, a
        # suspended migrator every start), not by a ``statement_timeout`` (it cut a long DDL).
        conn.execute(text(f"SET LOCAL lock_timeout = {int(MIGRATION_LOCK_WAIT_S * 1000)}"))
        conn.execute(text("SET LOCAL statement_timeout = 0"))
        _locked(conn, key, MIGRATION_LOCK, functools.partial(conn.execute, _TAKE_LOCK))
    METADATA.create_all(conn, tables=[migrations_table], checkfirst=True)
    applied = set(conn.scalars(select(migrations_table.c.name)))
    _too_new(key, concern, steps, applied)
    done = []
    for name, step in steps:
        if name not in applied:
            _locked(conn, key, name, functools.partial(step, conn))
            conn.execute(migrations_table.insert().values(name=name, applied_at=datetime.now(UTC)))
            done.append(name)
    return done


def _locked(conn: Connection, key: str, what: str, fn: Callable[[], Any]) -> None:
    """``fn()``; ``MigrationBusy(what)`` when a lock it waited for was not had in time,
    ``StoreRefused`` naming ``what`` when the role may not run it (or the server takes no DDL)."""
    try:
        fn()
    except DBAPIError as err:
        if getattr(err.orig, "sqlstate", None) == "55P03":  # lock_not_available
            raise MigrationBusy(what) from None
        if (no := refused(key, err.orig, f"migration {what}")) is not None:
            raise no from None
        raise


# The migrators' own lock (PostgreSQL's advisory lock, one per database, every release's).
MIGRATION_LOCK = "the migration lock"
_TAKE_LOCK = text(f"SELECT pg_advisory_xact_lock({pgsql.LOCK_KEY})")


def _lock_holders(conn: Connection) -> str:
    """Who holds the migration lock: "pid 12 (tether:init, idle in transaction for 40 s)", and
    whom a holder itself waits for (a table's lock another session holds)."""
    rows = conn.execute(text(pgsql.LOCK_HOLDERS)).all()
    return "; ".join(
        f"pid {p} ({name or 'no name'}, {state} for {s or 0:.0f} s"
        + (f", itself waiting for a lock held by {by}" if by else "")
        + ")"
        for p, name, state, s, by in rows
    )
