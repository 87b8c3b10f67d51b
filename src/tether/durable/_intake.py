"""The intake: runs submitted and not yet on DBOS's queue.

``tether submit`` writes one ``tether_intake`` row per run with plain SQL on one driver
connection (no DBOS, no SQLAlchemy: most of its cost). The row holds the workflow's input, the
tenant and the application version the run is bound to (``_versions``).

A worker moves rows onto DBOS's queue (``move_batch``): in one transaction it locks a batch
(``FOR UPDATE SKIP LOCKED`` on PostgreSQL, the file's write lock on SQLite), enqueues each run
with workflow id = run id and deletes the rows. A mover that dies leaves the rows to be enqueued
again, and DBOS keeps the workflow it has for an id: nothing lost, nothing run twice. A
deployment created before the intake (no table) is served the old way (``IntakeMissing``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Connection

FILE = "intake.db"  # a SQLite deployment's intake, beside dbos.sqlite
MOVE_BATCH = 100

_COLUMNS = "run_id, app_version, tenant, request, submitted_at"
_INSERT = (
    f"INSERT INTO tether_intake ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING"
)


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


class IntakeMissing(Exception):
    """The deployment has no intake table (created before it): enqueue through DBOS instead."""


def sql(statement: str, dialect: str) -> str:
    """``statement`` (``%s`` placeholders) in the driver's parameter style."""
    return statement.replace("%s", "?") if dialect == "sqlite" else statement


def _stamp(at: datetime, dialect: str) -> Any:
    """A timestamp as ``tether_intake.submitted_at`` stores it (``Instant``)."""
    return at.astimezone(UTC).isoformat(timespec="microseconds") if dialect == "sqlite" else at


@dataclass(frozen=True)
class IntakeRow:
    """A run waiting in the intake."""

    run_id: str
    app_version: str
    tenant: str
    request: dict[str, Any]
    submitted_at: datetime

    @classmethod
    def of(cls, row: Any) -> IntakeRow:
        at = row[4] if isinstance(row[4], datetime) else datetime.fromisoformat(str(row[4]))
        return cls(str(row[0]), str(row[1]), str(row[2]), json.loads(row[3]), at)

    def values(self, dialect: str) -> tuple[Any, ...]:
        request = json.dumps(self.request, sort_keys=True)
        return (self.run_id, self.app_version, self.tenant, request, _stamp(self.submitted_at, dialect))


def start_row(
    run_id: str,
    app: str,
    objective: str,
    context: dict[str, Any],
    *,
    version: str,
    app_digest: str | None,
) -> IntakeRow:
    """The intake row of a new run (its request: the ``op: start`` workflow's input)."""
    request: dict[str, Any] = {
        "op": "start",
        "run_id": run_id,
        "app": app,
        "objective": objective,
        "context": context,
    }
    if app_digest:
        request["app_digest"] = app_digest
    return IntakeRow(run_id, version, str(context["tenant"]), request, datetime.now(UTC))


def bound_version(
    app: str, digest: str | None, live: Callable[[], list[tuple[Any, Any]]], *, postgres: bool = True
) -> tuple[str, str | None]:
    """(DBOS application version, app digest) a new run of ``app`` is bound to: the newest live
    worker serving it (that digest, if given; ``live``: ``LIVE_WORKERS`` rows), else the version
    of a worker serving that app alone. SQLite (not ``postgres``): one process, one version."""
    from tether.durable._config import APP_VERSION
    from tether.durable._versions import app_digest, serving, version_of

    if not postgres:
        return APP_VERSION, digest

    found = serving(live(), app, digest)
    own = digest or (None if found else app_digest(app))
    return found[0] if found else (version_of({app: own}), own)


def put(conn: Connection, rows: list[IntakeRow]) -> bool:
    """Store ``rows`` (a run id already there is kept as it is); True."""
    dialect = conn.dialect.name
    for row in rows:
        conn.exec_driver_sql(sql(_INSERT, dialect), row.values(dialect))
    return True


def ensure(url: str, db: Any = None) -> None:
    """Create the intake's table if missing: in ``db`` (PostgreSQL), else in ``intake.db``."""
    if db is not None:
        db.migrate("intake")
        return
    from tether.sql._database import Database
    from tether.stores._url import parse_url

    loc = parse_url(url)
    assert loc.path is not None
    made = Database.sqlite(loc.path / FILE)
    try:
        made.migrate("intake")
    finally:
        made.close()


def pending(conn: Connection, run_id: str | None = None, tenant: str | None = None) -> list[IntakeRow]:
    """The runs in the intake (of ``run_id``, of ``tenant``), oldest first."""
    return _select(conn, {"run_id": run_id, "tenant": tenant})


def _select(conn: Connection, match: dict[str, str | None], tail: str = "", *extra: Any) -> list[IntakeRow]:
    where = [f"{column} = %s" for column, value in match.items() if value is not None]
    query = f"SELECT {_COLUMNS} FROM tether_intake" + (f" WHERE {' AND '.join(where)}" if where else "")
    params = (*(v for v in match.values() if v is not None), *extra)
    rows = conn.exec_driver_sql(
        sql(query + " ORDER BY submitted_at, run_id" + tail, conn.dialect.name), params
    )
    return [IntakeRow.of(r) for r in rows]


def waiting_count(conn: Connection) -> int:
    return int(conn.exec_driver_sql("SELECT count(*) FROM tether_intake").scalar() or 0)


def move_batch(
    conn: Connection,
    enqueue: Callable[[IntakeRow], None],
    *,
    run_id: str | None = None,
    limit: int = MOVE_BATCH,
) -> list[str]:
    """Enqueue (``enqueue``: idempotent per run id) and delete up to ``limit`` intake rows (only
    ``run_id``'s, when given), in ``conn``'s transaction: rows locked by another mover are left
    to it. Returns the run ids moved, which count once the transaction commits."""
    dialect = conn.dialect.name
    tail = " LIMIT %s"
    if dialect == "postgresql":
        # A cancel waits for the row (it must see it moved or not); movers skip each other's rows.
        tail += " FOR UPDATE" if run_id is not None else " FOR UPDATE SKIP LOCKED"
    rows = _select(conn, {"run_id": run_id}, tail, limit)
    for row in rows:
        enqueue(row)
        conn.exec_driver_sql(sql("DELETE FROM tether_intake WHERE run_id = %s", dialect), (row.run_id,))
    return [row.run_id for row in rows]


class Submitter:
    """Puts new runs in the intake at ``url`` on one driver connection (``tether submit``).
    Raises ``DeploymentUnavailable`` (nothing is created), ``IntakeMissing``."""

    def __init__(self, url: str) -> None:
        from tether.durable._deploy import open_deployment
        from tether.sql._journal import check_driver

        t, conn = open_deployment(url)
        self.dialect, where = t.backend, t.describe()
        if conn is None:
            from tether.sql._sqlite import connect

            assert t.path is not None
            path = t.path / FILE
            if not path.exists():
                raise IntakeMissing(str(path))
            conn, where = connect(path), str(path)
        self._conn: Any = conn
        self._where = where
        try:
            # Written unmigrated, on the driver's connection: a store a later release contracted
            # (and, on PostgreSQL, the workers' table it binds a run by) is refused before a row.
            check_driver(conn, where, self._concerns())
        except BaseException:
            conn.close()
            raise

    def _concerns(self) -> tuple[str, ...]:
        return ("intake", "workers") if self.dialect == "postgresql" else ("intake",)

    def close(self) -> None:
        self._conn.close()

    def version_for(self, app: str, digest: str | None) -> tuple[str, str | None]:
        from tether.durable._versions import LIVE_S, LIVE_WORKERS

        postgres = self.dialect == "postgresql"
        return bound_version(
            app, digest, lambda: list(self._conn.execute(LIVE_WORKERS, (LIVE_S,))), postgres=postgres
        )

    def put(self, rows: list[IntakeRow]) -> None:
        """Store ``rows`` in one transaction (all of them or none)."""
        statement = sql(_INSERT, self.dialect)
        values = [row.values(self.dialect) for row in rows]
        if self.dialect == "postgresql":
            import psycopg

            try:
                with self._conn.transaction(), self._conn.cursor() as cur:
                    cur.executemany(statement, values)
            except psycopg.errors.UndefinedTable:
                raise IntakeMissing("tether_intake") from None
            except psycopg.Error as err:  # a read replica's or a role's refusal says so, typed
                from tether.sql._postgres import refused

                raise (refused(self._where, err) or err) from None
            return
        import sqlite3

        try:
            self._conn.execute("BEGIN IMMEDIATE")
            with self._conn:  # commits, or rolls back what raised
                self._conn.executemany(statement, values)
        except sqlite3.OperationalError as err:
            if "no such table" in str(err):
                raise IntakeMissing(str(err)) from None
            from tether.sql._sqlite import read_only

            raise (read_only(self._where, err) or err) from None
