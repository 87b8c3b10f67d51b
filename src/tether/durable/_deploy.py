"""Where a deployment lives, checked before anything touches it; and its one explicit creation.

Client commands never create anything (DBOS would create a missing database on first contact,
so a mistyped name or ``schema=`` would queue runs where no worker looks): ``check_deployment``
and ``check_stores`` connect once, briefly, and raise ``DeploymentUnavailable`` in one line
naming the host, the database and the cause. ``init_deployment`` (``tether db init``, ``tether
worker --init``) creates the database if missing and migrates DBOS's tables and tether's stores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.sql._postgres import PgUrl, StoreHeld, StoreUnavailable
from tether.stores._url import parse_url

INIT_HINT = "create it once with: tether db init --db URL"
# The stores every deployment has, by backend: ``tether db init`` and each worker's start migrate
# them. ``db check`` counts their migrations pending even where none is recorded yet (an init
# killed before it reached them); memory's and the console's stores only once they are there.
DEPLOYMENT_CONCERNS = {
    "sqlite": ("approvals", "pins", "pauses", "intake"),
    "postgresql": ("traces", "approvals", "pins", "pauses", "workers", "intake"),
}


class DeploymentUnavailable(StoreUnavailable):
    """A deployment that cannot be used as given. ``reason``: ``no_database``, ``auth``,
    ``unreachable``, ``not_initialized``; ``exit``: the CLI's code (1 configuration, 6 down)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.exit = 6 if reason == "unreachable" else 1


@dataclass(frozen=True)
class Target:
    """What a storage URL points at: a PostgreSQL database (``pg``, which says where it is and
    the schema of tether's own tables) or a SQLite deployment's folder (``path``)."""

    pg: PgUrl | None = None
    path: Path | None = None

    @property
    def backend(self) -> str:
        return "sqlite" if self.path is not None else "postgresql"

    @property
    def where(self) -> str:
        """``host:port`` (or the socket folder) of the server, or the deployment's folder."""
        return str(self.path) if self.path is not None else self._pg.where

    @property
    def database(self) -> str:
        return str(self.path / "dbos.sqlite") if self.path is not None else self._pg.database

    @property
    def schema(self) -> str | None:
        """The schema of tether's own tables (``None``: the database's default)."""
        return self.pg.schema if self.pg is not None else None

    @property
    def dbos_schema(self) -> str:
        return f"{self.schema}_dbos" if self.schema else "dbos"

    @property
    def _pg(self) -> PgUrl:
        assert self.pg is not None, "a PostgreSQL target has its URL"
        return self.pg

    def describe(self) -> str:
        if self.backend == "sqlite":
            return f"SQLite deployment {self.where}"
        return f"PostgreSQL database {self.database!r} on {self.where}"


def target(url: str) -> Target:
    """Raises ``ConfigError`` for an unsupported URL."""
    loc = parse_url(url)
    if loc.backend == "sqlite":
        assert loc.path is not None
        return Target(path=loc.path)
    return Target(pg=PgUrl.parse(url))


def _cause(err: BaseException) -> tuple[str, str]:
    """(reason, one-line cause) of a failed connection."""
    text = " ".join(str(err).split())
    # libpq nests the cause: 'connection failed: connection to server at "h", port p failed:
    # FATAL: database "x" does not exist' — the host and port are said already, the cause is last.
    text = text.rsplit("failed: ", 1)[-1].replace("FATAL: ", "").strip()
    text = text.replace(" Is the server running on that host and accepting TCP/IP connections?", "")
    low = text.lower()
    if "database" in low and "does not exist" in low:
        return "no_database", text
    if "password" in low or ("role" in low and "does not exist" in low) or "authentication" in low:
        return "auth", text
    if "no pg_hba.conf entry" in low or "permission denied" in low:
        return "auth", text
    return "unreachable", text or type(err).__name__


def _connect(
    t: Target, *, database: str | None = None, timeout_s: float = 5.0, search_path: str | None = None
) -> Any:
    import psycopg

    assert t.pg is not None, "connections are to PostgreSQL"
    own = t.pg.params().get("options", "")  # the URL's, kept as the stores keep them
    return psycopg.connect(
        t.pg.with_database(database or t.database),
        autocommit=True,
        connect_timeout=max(1, int(timeout_s)),
        application_name="tether:client",
        options=f"{own} -c search_path={search_path}".strip() if search_path else None,
    )


def check_deployment(url: str, *, initialized: bool = True, timeout_s: float = 5.0) -> Target:
    """Raise ``DeploymentUnavailable`` unless the database at ``url`` can be reached (with
    ``initialized``: and holds DBOS's tables). Creates nothing."""
    t, conn = open_deployment(url, initialized=initialized, timeout_s=timeout_s)
    if conn is not None:
        conn.close()
    return t


def open_deployment(url: str, *, initialized: bool = True, timeout_s: float = 5.0) -> tuple[Target, Any]:
    """``check_deployment``, returning the connection it checked with (``schema=`` on its search
    path; ``None`` for SQLite), for the caller to use and close."""
    t = target(url)
    if t.backend == "sqlite":
        assert t.path is not None
        if initialized and not (t.path / "dbos.sqlite").exists():
            raise DeploymentUnavailable(
                "not_initialized", f"{t.describe()}: no deployment there ({INIT_HINT})"
            )
        if initialized and not _has_dbos_tables(t.path / "dbos.sqlite"):
            raise DeploymentUnavailable(
                "not_initialized",
                f"{t.describe()}: dbos.sqlite holds no DBOS tables (a tether db init or a worker's"
                f" start cut short before DBOS made them; {INIT_HINT})",
            )
        return t, None
    conn = _probe(t, f"{t.dbos_schema}.workflow_status" if initialized else None, timeout_s)
    if conn is None:
        raise DeploymentUnavailable(
            "not_initialized",
            f"{t.describe()}: no tether deployment (DBOS schema {t.dbos_schema!r} is missing; {INIT_HINT})",
        )
    return t, conn


def _has_dbos_tables(file: Path) -> bool:
    """Whether the SQLite file holds DBOS's table of workflows (PostgreSQL's is probed likewise):
    a file an init killed early may be there without it. Reads only."""
    from tether.sql._sqlite import connect

    with closing(connect(file, busy_timeout_s=5)) as db:
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workflow_status'"
        return db.execute(query).fetchone() is not None


def check_migrations(url: str, *, timeout_s: float = 5.0) -> dict[str, Any]:
    """``check_deployment``, then what this release reads of the deployment's journals
    (``_migrations``): ``pending``, its migrations of a store there not yet applied (``tether db
    init`` or a worker's start applies them), and ``later``, a later release's it does not know
    (worked beside). Raises ``SchemaTooNew`` when a later release marked one: no worker or
    command of this release would read or write there. Creates and writes nothing."""
    from tether.sql._database import MIGRATIONS
    from tether.sql._earlier import EARLIER_LAYOUT
    from tether.sql._journal import refuse_later

    t, conn = open_deployment(url, timeout_s=timeout_s)
    try:
        names = _journal_names(t, conn)
    finally:
        if conn is not None:
            conn.close()
    refuse_later(t.describe(), names, [None])
    there = {n.split(".", 1)[0] for n in names} | set(DEPLOYMENT_CONCERNS[t.backend])
    concerns = sorted(there & set(MIGRATIONS))
    pending = [n for c in concerns for n, _ in MIGRATIONS[c] if n not in names]
    known = {n for steps in MIGRATIONS.values() for n, _ in steps} | EARLIER_LAYOUT
    return {"target": t.describe(), "pending": pending, "later": sorted(set(names) - known)}


def _journal_names(t: Target, conn: Any) -> set[str]:
    """The migrations applied: PostgreSQL's journal in the URL's schema (``conn``'s search path),
    or every SQLite store file's of the deployment's folder."""
    from tether.sql._sqlite import connect

    if conn is not None:
        from psycopg.errors import UndefinedTable

        try:
            return {str(r[0]) for r in conn.execute("SELECT name FROM _migrations").fetchall()}
        except UndefinedTable:
            return set()  # an earlier release's stores, or none yet
    assert t.path is not None
    names: set[str] = set()
    for file in sorted(t.path.glob("*.db")):
        with closing(connect(file, busy_timeout_s=5)) as db:  # read only: nothing created
            if db.execute("SELECT 1 FROM sqlite_master WHERE name = '_migrations'").fetchone():
                names.update(str(r[0]) for r in db.execute("SELECT name FROM _migrations"))
    return names


def check_stores(url: str, *, timeout_s: float = 5.0) -> Target:
    """Raise ``DeploymentUnavailable`` unless tether's stores exist at ``url`` (its tables in the
    database's ``schema=``, or a SQLite deployment's approval store). Creates nothing."""
    t = target(url)
    if t.backend == "sqlite":
        assert t.path is not None
        if not (t.path / "approvals.db").exists():
            raise DeploymentUnavailable(
                "not_initialized", f"{t.describe()}: no tether stores there ({INIT_HINT})"
            )
        return t
    table = f"{t.schema}._migrations" if t.schema else "_migrations"
    conn = _probe(t, table, timeout_s)
    if conn is None:
        where = f"schema {t.schema!r}" if t.schema else "this database"
        raise DeploymentUnavailable(
            "not_initialized", f"{t.describe()}: no tether stores in {where} ({INIT_HINT})"
        )
    conn.close()
    return t


def _probe(t: Target, table: str | None, timeout_s: float) -> Any:
    """An open connection if ``table`` exists (``None``: only connect), else ``None``; raises
    ``DeploymentUnavailable`` naming the cause when the database cannot be reached."""
    import psycopg

    conn = None
    try:
        conn = _connect(t, timeout_s=timeout_s, search_path=t.schema)
        found = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() if table else (True,)
    except psycopg.Error as err:
        if conn is not None:
            conn.close()
        reason, cause = _cause(err)
        hint = f" ({INIT_HINT})" if reason == "no_database" else ""
        raise DeploymentUnavailable(reason, f"{t.describe()}: {cause}{hint}") from None
    if found is None or found[0] is None:
        conn.close()
        return None
    return conn


def init_deployment(
    url: str, *, timeout_s: float = 5.0, stopping: threading.Event | None = None
) -> dict[str, Any]:
    """Create the database if missing, then DBOS's tables and tether's stores (idempotent);
    returns what it did. Raises ``DeploymentUnavailable``; ``StartAbandoned`` once ``stopping``
    is set while it waits for another init's DBOS migrations (a worker told to stop)."""
    from dbos import DBOS

    from tether.durable._config import dbos_config
    from tether.durable._intake import ensure as ensure_intake
    from tether.stores._url import open_stores

    t = target(url)
    created = False
    if t.backend == "postgresql":
        try:
            check_deployment(url, initialized=False, timeout_s=timeout_s)
        except DeploymentUnavailable as err:
            if err.reason != "no_database":
                raise
            created = _create_database(t, timeout_s)
    cfg = dbos_config(url, executor_id="init")
    with _one_dbos_migration(t, timeout_s, stopping):
        DBOS.migrate(cfg["system_database_url"], schema=cfg["dbos_system_schema"])
    stores = open_stores(url)
    try:
        if stores.db is not None:
            stores.db.migrate("workers")
        ensure_intake(url, stores.db)
    finally:
        stores.close()
    check_deployment(url, timeout_s=timeout_s)
    return {"target": t.describe(), "database_created": created, "dbos_schema": t.dbos_schema}


# DBOS's own migrations take no lock: two inits at once could both run a statement PostgreSQL
# will not run twice at the same instant (an internal "tuple concurrently updated" error, exit 7).
# They run one at a time under a session lock of their own (closing its connection lets go). It
# is asked for by short tries, never waited on inside a statement: a session waiting in a
# statement keeps a snapshot, which the holder's ``CREATE INDEX CONCURRENTLY`` would wait on.
DBOS_MIGRATION_WAIT_S = 120.0
_TRY_DBOS_LOCK = "SELECT pg_try_advisory_lock(hashtext('tether_dbos_migrations'))"


@contextmanager
def _one_dbos_migration(t: Target, timeout_s: float, stopping: threading.Event | None) -> Iterator[None]:
    if t.backend != "postgresql":
        yield
        return
    from tether.durable._local import StartAbandoned

    with closing(_connect(t, timeout_s=timeout_s)) as conn:
        deadline = time.monotonic() + DBOS_MIGRATION_WAIT_S
        while not conn.execute(_TRY_DBOS_LOCK).fetchone()[0]:
            if time.monotonic() > deadline:
                raise StoreHeld(
                    f"{t.describe()}: another init's DBOS migrations did not end within "
                    f"{DBOS_MIGRATION_WAIT_S:g} s; run tether db init again once it has"
                )
            if (stopping or threading.Event()).wait(0.2):  # a worker told to stop meanwhile
                raise StartAbandoned(f"asked to stop while another init ran DBOS's migrations at {t.where}")
        yield


def _create_database(t: Target, timeout_s: float) -> bool:
    import psycopg
    from psycopg import sql

    try:
        with _connect(t, database="postgres", timeout_s=timeout_s) as conn:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(t.database)))
            except psycopg.Error:
                # Another init created it at the same instant: PostgreSQL says so as a duplicate
                # database, or, when both wrote its catalog row at once, as a unique violation of
                # that row. Whatever the refusal, a database that is there now is not this
                # init's failure.
                if _database_there(conn, t.database):
                    return False
                raise
    except psycopg.Error as err:
        reason, cause = _cause(err)
        raise DeploymentUnavailable(reason, f"{t.describe()}: cannot create it: {cause}") from None
    return True


def _database_there(conn: Any, name: str) -> bool:
    """Whether the server lists database ``name`` (``False`` where it cannot be asked)."""
    import psycopg

    try:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    except psycopg.Error:
        return False
    return found is not None
