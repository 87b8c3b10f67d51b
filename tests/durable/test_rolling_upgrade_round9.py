"""An operator's rolling upgrade, ninth round.

What did not hold, each fixed here and pinned below:

- a later release's migration adds a column to a console table (expand only, as every tether
  migration does: ``_add_columns``, nullable or with a default) while this release's console
  still serves the same user store: its writes named no columns (``INSERT INTO users VALUES
  (?, ?, ?, 0)``, grants and tokens alike), so once the table had one column more, adding a
  person, granting a role and making an API token failed (``table users has 5 columns but 4
  values were supplied``) for as long as both consoles served. Every write names its columns;
- ``tether db init`` (or any command) run while another process (a worker of the old release
  mid-transaction, another command) held a SQLite deployment's file past the busy timeout
  ended ``internal_error`` (exit 7, "report it"), naming no file: a lock is no bug. It exits 6
  (``store_busy``) naming the file where it is tether's, and saying the command may be run again;
- on PostgreSQL, ``tether db init`` (or a new worker's start, which migrates too) on a schema an
  earlier release set up, while a worker of that release sat inside a transaction on one of the
  tables a migration alters (stopped mid-heartbeat: a frozen container, a debugger): the
  ``ALTER TABLE`` waited for good, and every later statement on the table (every worker's
  heartbeat) queued behind it. A migration's DDL now waits ``MIGRATION_LOCK_WAIT_S`` per try,
  lets go in between, and after its tries says so (``MigrationBusy``: exit 6, ``store_busy``,
  the migration named), nothing of it written; run again once that session ends, it applies.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tether.cli import main
from tether.console._users import UserStore

# -- a console table a later release extended ---------------------------------------------------


def _accounts_work(path: Path, name: str) -> None:
    """This release's console writes and reads an account, its grant and its API token."""
    store = UserStore(path, scrypt_n=2**10)
    store.add_user(name, "a long enough password", {"acme": "reviewer"})
    store.grant(name, "globex", "viewer")
    secret, _ = store.create_token(name, label="ci")
    assert store.authenticate(name, "a long enough password") == name
    who = store.principal_for_token(secret)
    assert (who.name, dict(who.grants)) == (name, {"acme": "reviewer", "globex": "viewer"})
    session = store.create_session(name)
    assert store.principal_for_session(session) is not None


def test_a_user_store_a_later_release_extended_is_still_written_by_this_console(tmp_path: Path) -> None:
    path = tmp_path / "users.db"
    _accounts_work(path, "ada")  # the legitimate flow, on this release's own schema
    # A later release's migration, while this console still serves: a column more on each table.
    with sqlite3.connect(path) as db:
        for table, column in (("users", "locked_until"), ("grants", "granted_by"), ("tokens", "scopes")):
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")
        db.execute("ALTER TABLE sessions ADD COLUMN device TEXT NOT NULL DEFAULT ''")
    _accounts_work(path, "bea")
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT name, disabled, locked_until FROM users ORDER BY name").fetchall()
    assert rows == [("ada", 0, None), ("bea", 0, None)]


# -- a store another process holds ----------------------------------------------------------------

HOLD = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")  # a worker's write transaction, held
print("held", flush=True)
sys.stdin.read()  # until the test lets go
"""


def _holding(file: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _init(url: str, capsys: Any) -> tuple[int, dict[str, Any], str]:
    capsys.readouterr()
    code = main(["db", "init", "--db", url, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out.strip().splitlines()[-1]), err


SHORT_BUSY_S = 2.0  # what this process's SQLite connections wait on a held file, not 30 s
_BUSY_PRAGMA = re.compile(r"\s*PRAGMA\s+busy_timeout\s*=\s*\d+\s*;?\s*", re.IGNORECASE)


class _ShortBusy(sqlite3.Connection):
    """A connection whose busy timeout stays ``SHORT_BUSY_S``: a ``PRAGMA busy_timeout`` run on
    it (DBOS sets 30 s on each of its connections) sets that instead."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if _BUSY_PRAGMA.fullmatch(sql):
            sql = f"PRAGMA busy_timeout={int(SHORT_BUSY_S * 1000)}"
        return super().execute(sql, *args)


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every SQLite connection this process opens (tether's stores, SQLAlchemy's pool, DBOS's
    system database) waits ``SHORT_BUSY_S`` on a file another process holds, not the 30 s both
    tether and DBOS set: the lock is held until the test lets go, so each wait is waited out in
    full, and what is tested is what a command says once it ends, not how long it lasted."""
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs["timeout"] = SHORT_BUSY_S
        kwargs.setdefault("factory", _ShortBusy)
        conn: sqlite3.Connection = real(*args, **kwargs)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    monkeypatch.setattr(sqlite3.dbapi2, "connect", connect)  # the module SQLAlchemy's dialect calls


@pytest.mark.slow
@pytest.mark.parametrize("held", ["approvals.db", "dbos.sqlite"])
def test_db_init_while_another_process_holds_a_sqlite_store_says_so(
    tmp_path: Path, capsys: Any, held: str, short_busy_timeout: None
) -> None:
    url = f"sqlite:///{tmp_path / 'deployment'}"
    code, out, _ = _init(url, capsys)
    assert (code, out["ok"]) == (0, True), out  # the deployment as the old release set it up
    holder = _holding(tmp_path / "deployment" / held)
    try:
        code, out, err = _init(url, capsys)  # waits out the busy timeout (SHORT_BUSY_S)
    finally:
        holder.communicate("")
    assert (code, out["error"]) == (6, "store_busy"), out
    assert "database is locked" in out["message"] and "run the command again" in out["message"], out
    assert "unexpected error" not in err and "Traceback" not in err
    if held == "approvals.db":
        assert str(tmp_path / "deployment" / held) in out["message"], out  # tether's own file is named
    code, out, _ = _init(url, capsys)  # run again once the holder is gone: it finishes
    assert (code, out["ok"]) == (0, True), out
    assert main(["db", "check", "--db", url]) == 0


def _as_before_round_eight(url: str) -> Any:
    """The schema as a release before ``workers.003_owner`` left it, and a worker of that release
    stopped inside its heartbeat's transaction (the row lock held): the open connection."""
    import psycopg

    dsn, _, schema = url.partition("?schema=")
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f"SET search_path = {schema}")
        db.execute("ALTER TABLE tether_workers DROP COLUMN owner, DROP COLUMN owner_since")
        db.execute("DELETE FROM _migrations WHERE name = 'workers.003_owner'")
        db.execute(
            "INSERT INTO tether_workers (executor_id, host, pid, heartbeat_at) VALUES ('old', 'h', 7, now())"
        )
    frozen = psycopg.connect(dsn, options=f"-c search_path={schema}")
    frozen.execute("UPDATE tether_workers SET heartbeat_at = now() WHERE executor_id = 'old'")
    return frozen


def test_a_migration_beside_a_worker_stopped_mid_transaction_lets_go_and_says_so(
    pg_url: str, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tether.sql._database as database

    code, out, _ = _init(pg_url, capsys)
    assert (code, out["ok"]) == (0, True), out
    frozen = _as_before_round_eight(pg_url)
    monkeypatch.setattr(database, "MIGRATION_LOCK_WAIT_S", 0.5, raising=False)
    monkeypatch.setattr(database, "MIGRATION_TRIES", 2, raising=False)
    result: list[tuple[int, dict[str, Any], str]] = []
    upgrade = threading.Thread(target=lambda: result.append(_init(pg_url, capsys)), daemon=True)
    try:
        upgrade.start()
        upgrade.join(timeout=60)  # a safety net for the test itself: it waited for good
        assert result, "tether db init waited for good behind the stopped worker's transaction"
    finally:
        frozen.rollback()  # the stopped worker goes on (or is killed): its transaction ends
        upgrade.join()
    [(code, out, err)] = result[:1]
    assert (code, out["error"]) == (6, "store_busy"), out
    assert "workers.003_owner" in out["message"] and "run the command again" in out["message"], out
    assert "unexpected error" not in err
    frozen.execute("UPDATE tether_workers SET heartbeat_at = now() WHERE executor_id = 'old'")
    frozen.commit()  # the old worker's heartbeat was never cut short by the migration
    frozen.close()
    code, out, _ = _init(pg_url, capsys)  # run again once that session is gone: it applies
    assert (code, out["ok"]) == (0, True), out
    import psycopg

    dsn, _, schema = pg_url.partition("?schema=")
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f"SET search_path = {schema}")
        columns = "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
        cols = {r[0] for r in db.execute(columns + " AND table_name = 'tether_workers'", (schema,))}
        names = {r[0] for r in db.execute("SELECT name FROM _migrations")}
    assert {"owner", "owner_since"} <= cols and "workers.003_owner" in names
