"""An operator's rolling upgrade, twentieth round: today's CLI on a SQLite deployment an older
release's worker still holds, ``tether db init`` racing itself on a fresh PostgreSQL schema, and
a checkpoint today's worker wrote resumed by the older release's worker (a rollback).

Played against the release one migration behind (``UPGRADE_FROM``, default ``9be30fb9``, as round
19) and held; pinned here so that a later change keeps them:

- today's ``runs list`` / ``approvals approve`` on SQLite store files an older worker holds apply
  only the expand-only migration (``approvals.003_ledger_tenant``: a nullable column); the older
  worker resumes the approved run, serves new ones, every effect once, no traceback.
- today's worker finishes one run and pauses another, is killed (-9); the older release's worker
  resumes today's checkpoint once approved and serves a new run, every effect once.
- two ``tether db init`` processes on one fresh schema both exit 0, each migration recorded once.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_rolling_upgrade import _write_version
from test_rolling_upgrade_round6 import NEW_SRC, Mixed, _env, _every_run_once, old_tree
from test_rolling_upgrade_round19 import OLD_COMMITS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=OLD_COMMITS)
def old_src(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``src`` tree of an older commit of this repository (skipped where it is not at hand)."""
    return old_tree(str(request.param), tmp_path_factory)


def _new_cli(folder: Path, *argv: str) -> tuple[int, dict[str, Any], str]:
    """Today's CLI in its own process, as a person on an upgraded machine types it."""
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", *argv, "--json"],
        env=_env(NEW_SRC), capture_output=True, cwd=folder, timeout=120,
    )  # fmt: skip
    lines = done.stdout.decode().strip().splitlines()
    return done.returncode, (json.loads(lines[-1]) if lines else {}), done.stderr.decode()


def _journals(folder: Path) -> dict[str, list[str]]:
    """Each SQLite store file's migration journal."""
    out: dict[str, list[str]] = {}
    for db in sorted(folder.glob("*.db")) + sorted(folder.glob("*.sqlite")):
        conn = sqlite3.connect(db)
        try:
            rows = conn.execute("SELECT name FROM _migrations ORDER BY name").fetchall()
        except sqlite3.OperationalError:
            rows = []
        finally:
            conn.close()
        out[db.name] = [r[0] for r in rows]
    return out


@pytest.fixture
def sqlite_mixed(tmp_path: Path, capsys: Any, old_src: Path) -> Iterator[Mixed]:
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    url = f"sqlite:///{tmp_path / 'deployment'}"
    op = Mixed(url, tmp_path, capsys, old_src)
    op.old_cli("db", "init", "--db", url)
    try:
        yield op
    finally:
        op.stop()


def _old_pending(op: Mixed, run_id: str) -> list[dict[str, Any]]:
    """The run's pending proposals as the older release's CLI lists them (it migrates nothing)."""
    return [p for p in op.old_cli("approvals", "list", "--db", op.url)["proposals"] if p["run"] == run_id]


def test_todays_cli_on_a_sqlite_store_an_older_worker_holds_leaves_it_serving(
    sqlite_mixed: Mixed,
) -> None:
    """Today's ``runs list`` and ``approvals approve`` on store files a worker of the release one
    migration behind holds: they apply only the expand-only migration (a nullable column), never
    a marked (contracting) one; the older worker resumes the approved run and serves new ones,
    every run's effect once. Played and held."""
    op = sqlite_mixed
    store = op.folder / "deployment"
    op.start_on("old", op.old)
    r1 = op.old_submit()
    [p] = op.until("the run to pause", lambda: _old_pending(op, r1))
    assert "approvals.003_ledger_tenant" not in _journals(store)["approvals.db"]
    code, listed, err = _new_cli(op.folder, "runs", "list", "--db", op.url)
    assert code == 0 and r1 in json.dumps(listed), (listed, err[-2000:])
    code, out, err = _new_cli(
        op.folder, "approvals", "approve", p["id"], "--db", op.url, "--reviewer", "rita"
    )
    assert code == 0, (out, err[-2000:])
    journals = _journals(store)
    last = ["approvals.003_ledger_tenant", "approvals.004_earlier_names"]  # the latter: round 25
    assert journals["approvals.db"][-2:] == last, journals
    op.until("the older worker to finish the run", lambda: op.status(r1) == ["finished"])
    r2 = op.old_submit()
    op.until("the second run to pause", lambda: _old_pending(op, r2))
    op.old_approve(r2)
    op.until("the second run to finish", lambda: op.status(r2) == ["finished"])
    _every_run_once(op, [r1, r2])
    assert "Traceback" not in (op.folder / "old.log").read_text()
    assert op.signal("old", signal.SIGTERM) == 0


def test_a_rollback_worker_resumes_what_todays_worker_checkpointed_and_killed_left(
    sqlite_mixed: Mixed,
) -> None:
    """Today's worker finishes one run (its ledger row holds a tenant column the older release
    lacks) and pauses another, then is killed (-9); the older release's worker, started on the
    same files, resumes the paused run from today's checkpoint once approved, and serves a new
    one: every run's effect once, no traceback. Played and held."""
    op = sqlite_mixed
    op.start_on("new", NEW_SRC)
    r1, r2 = op.submit(), op.submit()
    op.until("the runs to pause", lambda: op.status(r1, r2) == ["paused", "paused"])
    op.approve(r1)
    op.until("today's worker to finish one", lambda: op.status(r1) == ["finished"])
    assert op.signal("new", signal.SIGKILL) == -signal.SIGKILL
    op.start_on("old", op.old)
    op.old_approve(r2)
    op.until("the older worker to finish today's paused run", lambda: op.status(r2) == ["finished"])
    r3 = op.old_submit()
    op.until("the third run to pause", lambda: _old_pending(op, r3))
    op.old_approve(r3)
    op.until("the third run to finish", lambda: op.status(r3) == ["finished"])
    _every_run_once(op, [r1, r2, r3])
    assert "Traceback" not in (op.folder / "old.log").read_text()
    assert op.signal("old", signal.SIGTERM) == 0


def test_two_db_inits_racing_on_a_fresh_schema_both_succeed_and_apply_each_migration_once(
    pg_url: str, tmp_path: Path
) -> None:
    """Two ``tether db init`` processes on one fresh PostgreSQL schema at once: both exit 0, the
    schema made once, each migration recorded once. Played and held."""
    import psycopg

    from tether.sql._postgres import PgUrl

    cmd = [sys.executable, "-m", "tether.cli", "db", "--db", pg_url, "init", "--json"]
    procs = [
        subprocess.Popen(cmd, env=_env(NEW_SRC), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, (out.decode()[-1000:], err.decode()[-2000:])
    pg = PgUrl.parse(pg_url)
    with psycopg.connect(pg.conninfo, autocommit=True) as conn:
        names = [r[0] for r in conn.execute(f'SELECT name FROM "{pg.schema}"._migrations').fetchall()]
    assert names and len(names) == len(set(names)), names
    assert "approvals.003_ledger_tenant" in names
