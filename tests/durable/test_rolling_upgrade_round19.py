"""An operator's rolling upgrade, nineteenth round: PostgreSQL roles as operators hand them out
(the schema's owner migrates, workers and people's CLIs run with a role that only reads and writes
rows) and a URL that points at a read replica.

What did not hold, fixed here and pinned below:

- a worker (or any command) whose role may read and write tether's rows but not create in the
  database (least privilege: ``tether db init`` run once by the schema's owner) never started, on
  any schema: every store's open ran ``CREATE SCHEMA IF NOT EXISTS``, which PostgreSQL checks
  against the database's CREATE right even where the schema is there. ``tether worker`` and ``db
  init`` ended "unexpected error: InsufficientPrivilege: permission denied for database … report
  it" (exit 7). The schema is looked up first; such a role serves a migrated deployment (kill -9
  and recovery included), and ``db init`` with it, nothing to apply, says ready.
- the upgrade's worker started with that role before the owner migrated (the previous release's
  schema, one migration behind) failed the same way, or once past the schema on the migration's
  ``ALTER TABLE`` ("must be owner of table effect_ledger"): exit 7, "report it", no word of which
  migration or what to do. It is ``StoreRefused`` now (``store_forbidden``, exit 1): the migration
  named, nothing of it written, the owner's ``tether db init`` named as the fix; the old release's
  workers serve on meanwhile, and after the owner's ``db init`` the same role's worker serves.
- a URL pointing at a read replica (a hot standby, or a role or database set
  ``default_transaction_read_only``): a worker's start and ``tether approvals approve`` ended
  "unexpected error: ReadOnlySqlTransaction … report it" (exit 7). They say the server takes no
  writes and to point the URL at the primary (``store_read_only``, exit 1), nothing written;
  reading commands (``approvals list``, ``runs list``) work there as before.
- ``tether db check``, the operator's look before and after the migration, said "ready" (exit 0)
  for a deployment a later release had contracted (a marked migration), where every worker and
  most commands of this release refuse (``schema_too_new``), and said nothing of migrations this
  release had yet to apply (the previous release's schema). It reads the journals now (the
  schema's, or each SQLite store file's) without writing: ``schema_too_new`` (exit 1) naming the
  migration; otherwise ready, with ``pending`` (what ``db init`` or a worker's start applies) and
  ``later`` (a later release's expand-only migrations, worked beside).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from test_rolling_upgrade import _write_version
from test_rolling_upgrade_round6 import NEW_SRC, Mixed, _env, _every_run_once, old_tree

pytestmark = pytest.mark.slow

# What ``db check`` lists to apply on a store of that release (``*_earlier_names``: round 25).
PENDING = [
    "approvals.003_ledger_tenant", "approvals.004_earlier_names", "pauses.002_earlier_names",
    "pins.002_earlier_names",
]  # fmt: skip
# The release before the last schema change (approvals.003_ledger_tenant, ce3e8946): its schema is
# one migration behind this one's (``UPGRADE_FROM``: commits of this repository, comma-separated).
OLD_COMMITS = [c for c in os.environ.get("UPGRADE_FROM", "9be30fb9").split(",") if c.strip()]


@pytest.fixture(scope="module", params=OLD_COMMITS)
def old_src(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``src`` tree of an older commit of this repository (skipped where it is not at hand)."""
    return old_tree(str(request.param), tmp_path_factory)


def _as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}"))


def _schemas(url: str) -> tuple[str, str]:
    from tether.sql._postgres import PgUrl

    schema = PgUrl.parse(url).schema
    assert schema is not None
    return schema, f"{schema}_dbos"


def _role(pg_dsn: str, *settings: str) -> Iterator[str]:
    import psycopg

    name = f"r19_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN")
        for setting in settings:
            conn.execute(f"ALTER ROLE {name} SET {setting}")
    try:
        yield name
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {name}")
            conn.execute(f"DROP ROLE {name}")


@pytest.fixture
def rows_role(pg_dsn: str) -> Iterator[str]:
    """A role that may log in and nothing else until granted rows (a worker's, least privilege)."""
    yield from _role(pg_dsn)


@pytest.fixture
def replica_role(pg_dsn: str) -> Iterator[str]:
    """A role whose every session is read-only, as on a read replica (a hot standby)."""
    yield from _role(pg_dsn, "default_transaction_read_only = on")


def _grant_rows(owner_url: str, role: str) -> None:
    """What an operator grants a worker's role: the schemas' use and their tables' rows."""
    import psycopg

    pg_dsn = owner_url.split("?")[0]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for schema in _schemas(owner_url):
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}")
            conn.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")


def _journal(owner_url: str) -> set[str]:
    import psycopg

    schema, _ = _schemas(owner_url)
    with psycopg.connect(owner_url.split("?")[0]) as conn:
        return {r[0] for r in conn.execute(f"SELECT name FROM {schema}._migrations")}


def _ledger_has_tenant(owner_url: str) -> bool:
    import psycopg

    schema, _ = _schemas(owner_url)
    query = (
        "SELECT 1 FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = %s AND column_name = %s"
    )
    with psycopg.connect(owner_url.split("?")[0]) as conn:
        return conn.execute(query, (schema, "effect_ledger", "tenant")).fetchone() is not None


def _cli(capsys: Any, *argv: str) -> tuple[int, dict[str, Any]]:
    from tether.cli import main

    capsys.readouterr()
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _refused_start(op: Mixed, url: str) -> tuple[int, dict[str, Any], str]:
    """This release's ``tether worker`` on ``url``, which must not start: exit, JSON, stderr."""
    cmd = [sys.executable, "-m", "tether.cli", "worker", "--db", url, "--app", str(op.agent), "--json"]
    done = subprocess.run(cmd, env=_env(NEW_SRC), capture_output=True, cwd=op.folder, timeout=120)
    out = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return done.returncode, out, done.stderr.decode()


def _old_status(op: Mixed, run_id: str) -> str:
    """The run's status by the older release's ``runs show`` (this release's CLI would migrate)."""
    cmd = [sys.executable, "-m", "tether.cli", "runs", "--db", op.url, "show", run_id, "--json"]
    done = subprocess.run(cmd, env=_env(op.old), capture_output=True, cwd=op.folder, timeout=120)
    return str(json.loads(done.stdout.decode().strip().splitlines()[-1]).get("status"))


def _operators(owner_url: str, role: str, folder: Path, capsys: Any, old: Path) -> tuple[Mixed, Mixed]:
    """The schema owner's operator and the worker role's, on one deployment and agent folder."""
    (folder / "agent").mkdir()
    _write_version(folder / "agent", "A")
    return Mixed(owner_url, folder, capsys, old), Mixed(_as_role(owner_url, role), folder, capsys, old)


def test_a_role_that_only_reads_and_writes_rows_serves_a_migrated_deployment(
    pg_url: str, rows_role: str, tmp_path: Path, capsys: Any
) -> None:
    """The owner ran ``db init``; workers and the CLI run with a role granted rows only: a worker
    starts, one killed (-9) inside its call is recovered by another, the run is approved on that
    role's CLI and finishes, its effect once. ``db init`` with the role (nothing to apply) is
    ready; it used to end exit 7 on ``CREATE SCHEMA``."""
    owner, op = _operators(pg_url, rows_role, tmp_path, capsys, NEW_SRC)
    owner.cli("db", "init", "--db", pg_url)
    _grant_rows(pg_url, rows_role)
    applied = _journal(pg_url)
    assert _cli(capsys, "db", "init", "--db", op.url)[0] == 0
    gate = tmp_path / "agent" / "gate-A"
    gate.write_text("")
    try:
        op.start("w1")
        run_id = op.submit()
        op.until("the run inside its call", lambda: run_id in {r[0] for r in op.lines("reads.log")}, 90)
        assert op.signal("w1", signal.SIGKILL) == -signal.SIGKILL
        op.start("w2")
        gate.unlink()
        op.until("the recovered run to pause", lambda: op.status(run_id) == ["paused"], 120)
        op.approve(run_id)
        op.until("the run to finish", lambda: op.status(run_id) == ["finished"], 120)
        _every_run_once(op, [run_id])
    finally:
        op.stop()
    assert _journal(pg_url) == applied


def test_the_upgrades_worker_on_a_role_without_ddl_rights_names_the_migration_then_serves(
    pg_url: str, rows_role: str, tmp_path: Path, capsys: Any, old_src: Path
) -> None:
    """The previous release's deployment (one migration behind) serves a run; this release's
    worker and ``db init`` on the rows-only role refuse typed (``store_forbidden``, exit 1, the
    migration named, nothing of it written) while the old worker serves on; the owner's ``db
    init`` applies it, the role's worker then serves, the old worker is killed (-9) inside a call,
    runs are decided on the other release's CLI: each run and effect once."""
    owner, op = _operators(pg_url, rows_role, tmp_path, capsys, old_src)
    owner.old_cli("db", "init", "--db", pg_url)
    _grant_rows(pg_url, rows_role)
    assert "approvals.003_ledger_tenant" not in _journal(pg_url)
    try:
        owner.start_on("o1", old_src)
        r1 = owner.old_submit()
        owner.until("the old run to pause", lambda: _old_status(owner, r1) == "paused", 90)
        code, out, err = _refused_start(op, op.url)
        assert (code, out["error"]) == (1, "store_forbidden"), (out, err[-2000:])
        assert "approvals.003_ledger_tenant" in out["message"] and "tether db init" in out["message"]
        assert "report it" not in err
        code, out = _cli(capsys, "db", "init", "--db", op.url)
        assert (code, out["error"]) == (1, "store_forbidden"), out
        assert "approvals.003_ledger_tenant" not in _journal(pg_url) and not _ledger_has_tenant(pg_url)
        owner.cli("db", "init", "--db", pg_url)  # the owner migrates, the old worker serving
        assert "approvals.003_ledger_tenant" in _journal(pg_url) and _ledger_has_tenant(pg_url)
        gate = tmp_path / "agent" / "gate-A"
        gate.write_text("")
        op.start_on("n1", NEW_SRC)
        runs = [owner.old_submit(), op.submit(), owner.old_submit()]
        op.until("every run inside its call", lambda: {r[0] for r in op.lines("reads.log")} >= set(runs), 90)
        assert owner.signal("o1", signal.SIGKILL) == -signal.SIGKILL
        gate.unlink()
        op.until("every run to pause", lambda: op.status(*runs) == ["paused"] * 3, 120)
        owner.approve(r1)  # the old worker's pause, decided on this release's CLI
        for n, run_id in enumerate(runs):
            (op.approve if n % 2 == 0 else owner.old_approve)(run_id)
        op.until("every run to finish", lambda: op.status(r1, *runs) == ["finished"] * 4, 120)
        _every_run_once(op, [r1, *runs])
    finally:
        owner.stop()
        op.stop()


def test_a_url_on_a_read_replica_says_so_and_writes_nothing(
    pg_url: str, replica_role: str, tmp_path: Path, capsys: Any
) -> None:
    """A worker started and an approval given on a URL whose server takes no writes (a read
    replica; played by a role whose sessions are read-only): ``store_read_only``, exit 1, the
    primary named as the fix, nothing written; they ended exit 7 ("report it"). Reading there
    works; the same approval on the primary's URL is taken."""
    from test_rolling_upgrade_round18 import _proposal

    owner, op = _operators(pg_url, replica_role, tmp_path, capsys, NEW_SRC)
    owner.cli("db", "init", "--db", pg_url)
    _grant_rows(pg_url, replica_role)
    pid = _proposal(pg_url)
    code, out, err = _refused_start(op, op.url)
    assert (code, out["error"]) == (1, "store_read_only"), (out, err[-2000:])
    assert "primary" in out["message"] and "report it" not in err
    code, out = _cli(capsys, "approvals", "approve", pid, "--db", op.url, "--reviewer", "rita")
    assert (code, out["error"]) == (1, "store_read_only"), out
    code, out = _cli(capsys, "approvals", "list", "--db", op.url)
    assert code == 0 and [(p["id"], p["status"]) for p in out["proposals"]] == [(pid, "pending")]
    assert _cli(capsys, "runs", "list", "--db", op.url)[0] == 0
    code, out = _cli(capsys, "approvals", "approve", pid, "--db", pg_url, "--reviewer", "rita")
    assert (code, out["status"]) == (0, "approved"), out


def _add_journal_row(url: str, name: str, tmp_path: Path) -> None:
    """A later release's migration recorded in the journal (PostgreSQL's, or approvals.db's)."""
    import sqlite3

    import psycopg

    if url.startswith("sqlite"):
        with closing(sqlite3.connect(tmp_path / "deployment" / "approvals.db")) as db:
            db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, '2027-01-01')", (name,))
            db.commit()
        return
    schema, _ = _schemas(url)
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"INSERT INTO {schema}._migrations (name, applied_at) VALUES (%s, now())", (name,))


def test_db_check_names_migrations_to_apply_and_refuses_a_store_a_later_release_contracted(
    pg_url: str, rows_role: str, tmp_path: Path, capsys: Any, old_src: Path
) -> None:
    """The previous release's deployment: ``db check`` (with the rows-only role too) lists the
    migration this release has to apply; after ``db init`` none. A later release's expand-only
    migration is listed as worked beside; its marked one makes ``db check`` refuse as the
    workers do (``schema_too_new``, exit 1), on PostgreSQL and SQLite alike; it said "ready"."""
    owner, op = _operators(pg_url, rows_role, tmp_path, capsys, old_src)
    owner.old_cli("db", "init", "--db", pg_url)
    _grant_rows(pg_url, rows_role)
    for url in (pg_url, op.url):
        code, out = _cli(capsys, "db", "check", "--db", url)
        assert (code, out["pending"], out["later"]) == (0, PENDING, []), out
    assert "approvals.003_ledger_tenant" not in _journal(pg_url)  # a check writes nothing
    sqlite_url = f"sqlite:///{tmp_path / 'deployment'}"
    for url in (pg_url, sqlite_url):
        assert _cli(capsys, "db", "init", "--db", url)[0] == 0
        _add_journal_row(url, "approvals.900_later_column", tmp_path)
        code, out = _cli(capsys, "db", "check", "--db", url)
        assert (code, out["pending"], out["later"]) == (0, [], ["approvals.900_later_column"]), out
        _add_journal_row(url, "approvals.901_later_rename!", tmp_path)
        code, out = _cli(capsys, "db", "check", "--db", url)
        assert (code, out["error"]) == (1, "schema_too_new"), out
        assert "approvals.901_later_rename!" in out["message"], out
        code, out = _cli(capsys, "approvals", "list", "--db", url)  # as every command of it does
        assert (code, out["error"]) == (1, "schema_too_new"), out
