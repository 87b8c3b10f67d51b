"""PostgreSQL plumbing for tether's Postgres stores: one URL, connection pools, versioned
migrations, and transactions written once for both faces (sync and async).

A store writes each operation as a generator that yields ``Sql`` statements and receives their
results (``tether.sqlops``), so its SQL is written once whoever drives it, SQLite included;
``PgDatabase.run`` drives it on one psycopg connection pool (scripts, the CLI),
``PgDatabase.arun`` does the same in a worker thread for code on the event loop, which must
never wait on the network. (psycopg's ``AsyncConnectionPool`` is not used: a pool belongs to
the event loop that opened it, and one left open keeps ``asyncio.run`` from returning — its
tasks do not end on cancellation.) Each operation is one transaction; an awaiting task that is
cancelled waits for it to end.

When the connection is lost *before* the commit is sent (the server restarted, an operator
ran ``pg_terminate_backend``) nothing was written and the operation is retried on a fresh
connection; a loss during the commit itself leaves the outcome unknown and is raised as
``StoreUnavailable``.

URLs are libpq URLs plus one tether parameter, ``schema``: ``postgresql://u@h/db?schema=t1``
puts every table in schema ``t1`` (created if missing), so one database can hold several
isolated deployments (and the tests a fresh schema each).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio

from tether.errors import ConfigError, TetherError
from tether.sqlops import POSTGRES, Dialect, Fetch, Op, Sql, ts

__all__ = ["Op", "PgDatabase", "PgMigration", "PgUrl", "Sql", "StoreUnavailable", "ts"]

T = TypeVar("T")

PgMigration = tuple[str, tuple[str, ...]]

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_RETRIES = 3


class StoreUnavailable(TetherError):
    """The database could not be reached, or a commit's outcome is unknown (connection lost)."""


@dataclass(frozen=True, slots=True)
class PgUrl:
    """A parsed ``postgresql://`` URL: what psycopg connects to, and tether's schema."""

    conninfo: str
    schema: str | None = None

    @classmethod
    def parse(cls, url: str) -> PgUrl:
        """Raises ``ConfigError`` for another scheme or a malformed schema name."""
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise ConfigError(f"not a PostgreSQL URL: {url!r}")
        query = parse_qsl(parts.query, keep_blank_values=True)
        schema = next((v for k, v in query if k == "schema"), None)
        if schema is not None and not _SCHEMA.match(schema):
            raise ConfigError(f"schema {schema!r} must be a lowercase identifier")
        rest = urlencode([(k, v) for k, v in query if k != "schema"])
        return cls(urlunsplit(("postgresql", parts.netloc, parts.path, rest, parts.fragment)), schema)

    def sqlalchemy(self) -> str:
        """The same database as a SQLAlchemy URL on psycopg 3 (what DBOS takes)."""
        return "postgresql+psycopg" + self.conninfo[len("postgresql") :]

    def redacted(self) -> str:
        """The URL without its password (for messages and logs)."""
        parts = urlsplit(self.conninfo)
        netloc = parts.netloc
        if "@" in netloc:
            cred, _, hostport = netloc.rpartition("@")
            netloc = f"{cred.partition(':')[0]}:***@{hostport}" if ":" in cred else netloc
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def _fetch(cur: Any, fetch: Fetch) -> Any:
    if fetch == "none":
        return None
    if fetch == "rowcount":
        return cur.rowcount
    if fetch == "one":
        return cur.fetchone()
    return cur.fetchall()


class _Lost(Exception):
    """The connection died before the commit: nothing was written, the operation may run again."""


class PgDatabase:
    """Pools on one PostgreSQL database (and schema), shared by every store of a deployment.

    The pool opens on first use; ``max_size`` caps its connections.
    """

    def __init__(
        self,
        url: str | PgUrl,
        *,
        max_size: int = 8,
        timeout_s: float = 15.0,
        application_name: str | None = None,
    ) -> None:
        self.url = url if isinstance(url, PgUrl) else PgUrl.parse(url)
        # What an operator sees in pg_stat_activity (and can terminate by).
        self.application_name = application_name or f"tether:{self.url.schema or 'public'}"
        self.max_size = max_size
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._pool: Any = None
        self._migrated: set[str] = set()

    @property
    def dialect(self) -> Dialect:
        return POSTGRES

    @property
    def schema(self) -> str | None:
        return self.url.schema

    def _kwargs(self) -> dict[str, Any]:
        options = "-c TimeZone=UTC"
        if self.schema:
            options += f" -c search_path={self.schema}"
        return {
            "options": options,
            "connect_timeout": max(1, int(self.timeout_s)),
            "application_name": self.application_name,
        }

    def _sync_pool(self) -> Any:
        with self._lock:
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                self._ensure_schema()
                self._pool = ConnectionPool(
                    self.url.conninfo,
                    kwargs=self._kwargs(),
                    min_size=1,
                    max_size=self.max_size,
                    check=ConnectionPool.check_connection,
                    num_workers=1,
                    timeout=self.timeout_s,
                    open=True,
                    name="tether-sync",
                )
            return self._pool

    def _ensure_schema(self) -> None:
        if not self.schema or "schema" in self._migrated:
            return
        import psycopg

        try:
            with psycopg.connect(self.url.conninfo, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateSchema):
            pass  # another process created it at the same instant (IF NOT EXISTS does not lock)
        except psycopg.OperationalError as err:
            raise StoreUnavailable(f"PostgreSQL at {self.url.redacted()} is unreachable: {err}") from None
        self._migrated.add("schema")

    # -- operations -------------------------------------------------------------------------

    def run(self, fn: Callable[..., Op[T]], *args: Any) -> T:
        """Run ``fn(*args)`` as one transaction on the sync pool (see the module docstring)."""
        import psycopg
        from psycopg_pool import PoolTimeout

        pool = self._sync_pool()
        for attempt in range(_RETRIES):
            try:
                with pool.connection() as conn:
                    try:
                        value = _drive(conn, fn(*args))
                    except psycopg.OperationalError as err:
                        raise _Lost(str(err)) from err
                    try:
                        conn.commit()
                    except psycopg.OperationalError as err:
                        raise StoreUnavailable(f"commit outcome unknown: {err}") from None
                    return value
            except (_Lost, psycopg.OperationalError, PoolTimeout) as err:
                if attempt == _RETRIES - 1:
                    raise StoreUnavailable(f"{self.url.redacted()}: {err}") from None
        raise AssertionError("unreachable")

    async def arun(self, fn: Callable[..., Op[T]], *args: Any) -> T:
        """``run`` in a worker thread, for code on the event loop (see the module docstring)."""
        return await anyio.to_thread.run_sync(functools.partial(self.run, fn, *args))

    # A read is a transaction like any other here (``tether.sqlops.OpDatabase``).
    read = run
    aread = arun

    # -- migrations -------------------------------------------------------------------------

    def migrate(self, store: str, migrations: Iterable[PgMigration]) -> list[str]:
        """Apply, in order and in one transaction, the named migrations not yet recorded in
        ``_migrations``. Concurrent migrators (several workers starting) are serialised by an
        advisory lock, so each migration runs once. Returns the names applied."""
        steps = tuple(migrations)
        if store in self._migrated:
            return []

        def op() -> Op[list[str]]:
            yield Sql("SELECT pg_advisory_xact_lock(hashtext('tether_migrations'))", fetch="none")
            yield Sql(
                "CREATE TABLE IF NOT EXISTS _migrations ("
                " name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                fetch="none",
            )
            applied = {r[0] for r in (yield Sql("SELECT name FROM _migrations"))}
            done = []
            for name, statements in steps:
                if name in applied:
                    continue
                for text in statements:
                    yield Sql(text, fetch="none")
                yield Sql("INSERT INTO _migrations (name) VALUES (%s)", (name,), fetch="none")
                done.append(name)
            return done

        done = self.run(op)
        self._migrated.add(store)
        return done

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)


def _drive(conn: Any, op: Op[T]) -> T:
    try:
        sql = op.send(None)
        while True:
            cur = conn.execute(sql.text, sql.params or None)
            sql = op.send(_fetch(cur, sql.fetch))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
