"""An operator's rolling upgrade, twenty-first round: a migration killed (-9) half-way, the
operator's ``tether db check`` after it, and a SQLite deployment on a read-only mount.

What did not hold, fixed here and pinned below:

- ``tether db check`` after a ``tether db init`` (or a worker's start) killed between two stores'
  migrations said "ready" with nothing ``pending``: it counted only the stores that had a migration
  recorded, so the stores the killed init never reached (PostgreSQL: the pins', pauses', workers'
  and intake's tables; SQLite: their files) were said to be there. It counts every store a
  deployment has (``DEPLOYMENT_CONCERNS``: what ``db init`` and a worker's start migrate) and lists
  what they lack; memory's and the console's stores only once they are there.
- on SQLite, an init killed before DBOS made its tables (``dbos.sqlite`` there, empty) was taken
  for a deployment: ``db check`` said ready, ``runs list`` and ``submit`` ended "unexpected error:
  OperationalError: no such table: main.workflow_status … report it" (exit 7). It is probed for
  DBOS's table of workflows, as PostgreSQL's schema is: ``not_initialized`` (exit 1) naming the
  cut-short init and ``tether db init`` as the fix.
- a SQLite deployment on a read-only mount (a backup mounted to look at, a volume mounted ``ro``
  by mistake after the upgrade): ``tether db check``, ``runs list`` and ``submit`` ended
  "unexpected error: OperationalError: unable to open database file … report it" (exit 7); the
  worker and ``approvals list`` said the file "cannot be opened as a SQLite database", no word
  of why. A store in write-ahead-log mode needs its ``-wal`` and ``-shm`` files beside it even to
  be read: every open says so now, ``store_read_only`` (exit 1), as PostgreSQL's read replica,
  the file named, nothing written.
- a worker serving an agent file on a read-only mount (its folder a ConfigMap, a read-only image
  layer), whose trace folder is beside it by default, started "ready", took each run and failed it
  (``OSError: Read-only file system: …/traces``, the run ``failed`` for good). The worker refuses
  to start (``bad_app``, exit 1) naming the trace folder and ``trace.dir`` as the fix; the runs
  wait in the queue for a worker that can write.
- two migrators at once with an older worker inside a transaction on the table the migration
  alters: the one that waited for the migration lock gave up naming its holder "active" with the
  words of a migrator "stopped mid-migration (suspended, frozen, in a debugger)"; the holder was
  itself waiting. It names whom the holder waits for (the session "idle in transaction").
- ``tether submit`` on a URL whose server takes no writes (a read replica, a role set
  ``default_transaction_read_only``) or whose role may not insert into the intake ended
  "unexpected error: ReadOnlySqlTransaction … report it" (exit 7), where round 19 had made the
  worker and ``approvals approve`` say so: it writes on its own driver connection, which now
  refuses as the stores do (``store_read_only`` / ``store_forbidden``, exit 1), nothing written.

Played and held (pinned): on PostgreSQL, a run paused under the release before is approved with
today's CLI (which applies the expand-only migration under the older worker) and the older
worker finishes it; another paused under the older worker is approved with the older CLI after
the upgrade (the older worker drained, today's started), and today's worker finishes it, every
effect once; the upgrade's migration (``approvals.003_ledger_tenant``, over the
release before it, ``UPGRADE_FROM`` as round 19) killed -9 inside its transaction leaves nothing of
it on SQLite and on PostgreSQL (no column, no journal row), and the next ``db init`` applies all
of it once.
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
from test_rolling_upgrade import Operator, _write_version
from test_rolling_upgrade_round6 import NEW_SRC, Mixed, _env, _every_run_once, old_tree
from test_rolling_upgrade_round19 import OLD_COMMITS, _as_role, _grant_rows, _role

pytestmark = pytest.mark.slow

# Today's ``db init``, with one named migration's step made to stop for good once its DDL ran
# (inside the migration's transaction): the process is killed (-9) there.
HALF_WAY = """
import sys, time
from tether.sql import _database

url, name = sys.argv[1], sys.argv[2]

def stopped(step):
    def run(conn):
        step(conn)
        print("half-way", flush=True)
        time.sleep(600)
    return run

for concern, steps in list(_database.MIGRATIONS.items()):
    _database.MIGRATIONS[concern] = tuple((n, stopped(s) if n == name else s) for n, s in steps)
from tether.durable._deploy import init_deployment
init_deployment(url)
"""


@pytest.fixture(scope="module", params=OLD_COMMITS)
def old_src(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``src`` tree of an older commit of this repository (skipped where it is not at hand)."""
    return old_tree(str(request.param), tmp_path_factory)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'deployment'}"
    else:
        yield str(request.getfixturevalue("pg_url"))


def _cli(src: Path, folder: Path, *argv: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", *argv, "--json"],
        env=_env(src), capture_output=True, cwd=folder, timeout=180,
    )  # fmt: skip
    lines = done.stdout.decode().strip().splitlines()
    return done.returncode, (json.loads(lines[-1]) if lines else {}), done.stderr.decode()


def _kill_half_way(url: str, name: str, folder: Path) -> None:
    """Today's ``db init`` at ``url``, killed (-9) inside migration ``name``'s transaction."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HALF_WAY, url, name],
        env=_env(NEW_SRC), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=folder,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != b"half-way":
        proc.kill()
        raise AssertionError(proc.communicate(timeout=30)[1].decode()[-3000:])
    proc.kill()
    proc.wait(30)


def _journal(url: str) -> list[str]:
    """Every migration recorded at ``url`` (each SQLite store file's, or the schema's)."""
    if url.startswith("sqlite"):
        names: list[str] = []
        for db in sorted(Path(url[len("sqlite:///") :]).glob("*.db")):
            conn = sqlite3.connect(db)
            try:
                names += [r[0] for r in conn.execute("SELECT name FROM _migrations").fetchall()]
            except sqlite3.OperationalError:
                pass
            finally:
                conn.close()
        return sorted(names)
    return sorted(r[0] for r in _pg(url, "SELECT name FROM _migrations"))


def _pg(url: str, query: str, *args: Any) -> list[Any]:
    import psycopg

    from tether.sql._postgres import PgUrl

    pg = PgUrl.parse(url)
    with psycopg.connect(pg.conninfo, autocommit=True, options=f"-c search_path={pg.schema}") as conn:
        return list(conn.execute(query, args).fetchall())


def _columns(url: str, table: str) -> set[str]:
    if url.startswith("sqlite"):
        with sqlite3.connect(Path(url[len("sqlite:///") :]) / "approvals.db") as conn:
            return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    query = (
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = %s"
    )
    return {r[0] for r in _pg(url, query, table)}


def _check(url: str, folder: Path) -> list[str]:
    code, out, err = _cli(NEW_SRC, folder, "db", "check", "--db", url)
    assert code == 0 and out["ok"], (out, err[-2000:])
    return list(out["pending"])


def test_an_init_killed_between_stores_leaves_db_check_naming_what_is_missing(
    url: str, tmp_path: Path
) -> None:
    """A fresh deployment's ``db init`` killed (-9) inside the pins' migration: nothing of the
    pins' tables or journal is left; ``db check`` lists the pins' migration and those of every
    store the init never reached as pending (it said nothing pending); the next ``db init``
    applies them, each once, and ``db check`` then lists none."""
    _kill_half_way(url, "pins.001_tables", tmp_path)
    assert not any(n.startswith("pins.") for n in _journal(url))
    pending = _check(url, tmp_path)
    assert {"pins.001_tables", "pauses.001_tables", "intake.001_tables"} <= set(pending), pending
    assert not any(n.startswith(("approvals.", "memory.", "users.")) for n in pending), pending
    code, out, err = _cli(NEW_SRC, tmp_path, "db", "init", "--db", url)
    assert code == 0, (out, err[-2000:])
    names = _journal(url)
    assert len(names) == len(set(names)) and set(pending) <= set(names), (names, pending)
    assert _check(url, tmp_path) == []


def test_the_upgrades_migration_killed_half_way_leaves_nothing_of_it_and_is_applied_whole(
    url: str, tmp_path: Path, old_src: Path
) -> None:
    """The release before's deployment; today's ``db init`` killed (-9) inside the upgrade's
    migration (``approvals.003_ledger_tenant``, after its ``ALTER TABLE``): no column, no journal
    row (SQLite and PostgreSQL both roll the DDL back); ``db check`` lists it pending; today's
    next ``db init`` applies it once. Played and held."""
    code, out, err = _cli(old_src, tmp_path, "db", "init", "--db", url)
    assert code == 0, (out, err[-2000:])
    assert "tenant" not in _columns(url, "effect_ledger")
    _kill_half_way(url, "approvals.003_ledger_tenant", tmp_path)
    assert "tenant" not in _columns(url, "effect_ledger")
    assert "approvals.003_ledger_tenant" not in _journal(url)
    pending = _check(url, tmp_path)  # besides: the *_earlier_names of round 25
    assert "approvals.003_ledger_tenant" in pending, pending
    assert all(n == "approvals.003_ledger_tenant" or n.endswith("_earlier_names") for n in pending)
    code, out, err = _cli(NEW_SRC, tmp_path, "db", "init", "--db", url)
    assert code == 0, (out, err[-2000:])
    assert "tenant" in _columns(url, "effect_ledger")
    assert _journal(url).count("approvals.003_ledger_tenant") == 1
    assert _check(url, tmp_path) == []


# -- a SQLite deployment on a read-only mount --------------------------------------------------------
# ``unshare`` gives the command a mount namespace of its own (no root needed) in which the
# deployment's folder is bind-mounted read-only at ``ro``: the files are real, the mount is.
MOUNT_RO = 'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && shift 2 && exec "$@"'
UNSHARE = ["unshare", "--user", "--map-root-user", "--mount"]


def _on_ro_mount(folder: Path, ro: Path, *argv: str, timeout: float = 180) -> tuple[int, str, str]:
    cmd = [
        *UNSHARE,
        "sh",
        "-c",
        MOUNT_RO,
        "sh",
        str(folder),
        str(ro),
        sys.executable,
        "-m",
        "tether.cli",
        *argv,
    ]
    done = subprocess.run(cmd, env=_env(NEW_SRC), capture_output=True, cwd=ro.parent, timeout=timeout)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.fixture
def ro_mountable(tmp_path: Path) -> Path:
    """An empty folder to mount on, where this system lets a process mount read-only (skipped)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    probe = subprocess.run(
        [*UNSHARE, "sh", "-c", MOUNT_RO, "sh", str(tmp_path), str(ro), "true"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"no read-only bind mount here: {probe.stderr.decode()[-300:]}")
    return ro


# A process on the read-write side holding every store open: their -wal and -shm files stay there.
HOLD_OPEN = """
import glob, sqlite3, sys, time
held = [sqlite3.connect(f) for f in glob.glob(sys.argv[1] + "/*.db") + glob.glob(sys.argv[1] + "/*.sqlite")]
for conn in held:
    conn.execute("SELECT 1 FROM sqlite_master").fetchall()
print("held", flush=True)
time.sleep(600)
"""


def _agent(tmp_path: Path, folder: Path) -> str:
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    code, out, err = _cli(NEW_SRC, tmp_path, "db", "init", "--db", f"sqlite:///{folder}")
    assert code == 0, (out, err[-2000:])
    return str(tmp_path / "agent" / "agent.yaml")


def _refused(folder: Path, ro: Path, *argv: str) -> None:
    """``argv`` at the read-only mount ends ``store_read_only`` (exit 1) naming a file there."""
    code, stdout, stderr = _on_ro_mount(folder, ro, *argv)
    said = stdout.strip().splitlines()[-1] if "--json" in argv else stderr
    if "--json" in argv:
        assert json.loads(said)["error"] == "store_read_only", (argv, said)
    assert code == 1 and "read-only file system" in said and str(ro) in said, (argv, code, stdout, stderr)
    assert "report it" not in stderr and "Traceback" not in stderr, stderr[-2000:]


def test_a_sqlite_deployment_on_a_read_only_mount_is_refused_by_name_and_serves_read_write(
    tmp_path: Path, ro_mountable: Path
) -> None:
    """The deployment's folder mounted read-only (its -wal and -shm gone with a clean stop):
    the worker, ``db check``, ``runs list``, ``approvals list`` and ``submit`` each end
    ``store_read_only`` (exit 1) naming a store file and the read-only file system, no traceback,
    no "report it"; mounted read-write, the same commands work."""
    folder, ro = tmp_path / "deployment", ro_mountable
    agent = _agent(tmp_path, folder)
    before = sorted(p.name for p in folder.iterdir())
    commands = [
        ("db", "check", "--db", f"sqlite:///{ro}", "--json"),
        ("runs", "list", "--db", f"sqlite:///{ro}", "--json"),
        ("approvals", "list", "--db", f"sqlite:///{ro}", "--json"),
        ("submit", "--db", f"sqlite:///{ro}", "--agent", agent, "note it", "--json"),
    ]
    for argv in commands:
        _refused(folder, ro, *argv)
    _refused(folder, ro, "worker", "--db", f"sqlite:///{ro}", "--app", agent, "--executor-id", "ro-1")
    assert sorted(p.name for p in folder.iterdir()) == before
    # The legitimate use: the same folder, read-write.
    for argv in commands:
        code, stdout, stderr = _cli(NEW_SRC, tmp_path, *(a.replace(str(ro), str(folder)) for a in argv[:-1]))
        assert code == 0, (argv, stdout, stderr[-2000:])


def test_a_read_only_mount_of_stores_held_open_elsewhere_reads_and_refuses_writes_by_name(
    tmp_path: Path, ro_mountable: Path
) -> None:
    """The folder mounted read-only while a process on the read-write side holds every store
    open (their -wal and -shm there: a second container on the volume): ``db check``, ``runs
    list`` and ``approvals list`` read it; ``submit`` (an intake row) and a worker (its lock
    file) end ``store_read_only`` (exit 1) naming the file, where they ended "report it"."""
    folder, ro = tmp_path / "deployment", ro_mountable
    agent = _agent(tmp_path, folder)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_OPEN, str(folder)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        for argv in (("db", "check"), ("runs", "list"), ("approvals", "list")):
            code, stdout, stderr = _on_ro_mount(folder, ro, *argv, "--db", f"sqlite:///{ro}", "--json")
            assert code == 0 and json.loads(stdout.strip().splitlines()[-1])["ok"], (argv, stdout, stderr)
        _refused(folder, ro, "submit", "--db", f"sqlite:///{ro}", "--agent", agent, "note it", "--json")
        _refused(folder, ro, "worker", "--db", f"sqlite:///{ro}", "--app", agent, "--executor-id", "ro-2")
    finally:
        holder.kill()
        holder.wait(30)
    assert not (folder / "workers").exists()


@pytest.fixture
def replica_role(pg_dsn: str) -> Iterator[str]:
    """A role whose every session is read-only, as on a read replica (a hot standby)."""
    yield from _role(pg_dsn, "default_transaction_read_only = on")


@pytest.fixture
def rows_role(pg_dsn: str) -> Iterator[str]:
    """A role that may log in and nothing else until granted rows."""
    yield from _role(pg_dsn)


def test_submit_on_a_read_replica_or_a_role_without_insert_says_so_and_writes_nothing(
    pg_url: str, replica_role: str, rows_role: str, tmp_path: Path
) -> None:
    """``tether submit`` on a read replica's URL (a role whose sessions are read-only) and with a
    role that may not insert into the intake: ``store_read_only`` / ``store_forbidden`` (exit 1)
    naming the fix, nothing in the intake; on the primary with the owner, the run is queued."""
    import psycopg

    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    agent = str(tmp_path / "agent" / "agent.yaml")
    code, out, err = _cli(NEW_SRC, tmp_path, "db", "init", "--db", pg_url)
    assert code == 0, (out, err[-2000:])
    for role in (replica_role, rows_role):
        _grant_rows(pg_url, role)
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"REVOKE INSERT ON {schema}.tether_intake FROM {rows_role}")
    for role, reason, fix in (
        (replica_role, "store_read_only", "primary"),
        (rows_role, "store_forbidden", "grant"),
    ):
        code, out, err = _cli(
            NEW_SRC, tmp_path, "submit", "--db", _as_role(pg_url, role), "--agent", agent, "note it"
        )
        assert (code, out.get("error")) == (1, reason), (role, out, err[-2000:])
        assert fix in out["message"] and "report it" not in err and "Traceback" not in err, (out, err)
    assert _pg(pg_url, "SELECT count(*) FROM tether_intake") == [(0,)]
    code, out, err = _cli(NEW_SRC, tmp_path, "submit", "--db", pg_url, "--agent", agent, "note it")
    assert code == 0 and out["run_id"], (out, err[-2000:])
    assert _pg(pg_url, "SELECT count(*) FROM tether_intake") == [(1,)]


@pytest.fixture
def pg_mixed(pg_url: str, tmp_path: Path, capsys: Any, old_src: Path) -> Iterator[Mixed]:
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Mixed(pg_url, tmp_path, capsys, old_src)
    op.old_cli("db", "init", "--db", pg_url)  # the deployment as the release before set it up
    try:
        yield op
    finally:
        op.stop()


def test_approvals_across_the_upgrade_from_either_cli_resume_each_run_once(pg_mixed: Mixed) -> None:
    """PostgreSQL, the release before's schema and worker: a paused run approved with today's
    CLI (it applies ``approvals.003_ledger_tenant`` under the older worker) is finished by the
    older worker; a run paused under the older worker, approved with the older CLI once the
    older worker is drained and today's serves, is finished by today's; every effect once.
    Played and held."""
    op = pg_mixed
    op.start_on("old", op.old)
    r1 = op.old_submit()
    op.until("the run to pause", lambda: op.status(r1) == ["paused"])
    op.approve(r1)  # today's CLI
    assert "approvals.003_ledger_tenant" in _journal(op.url)
    op.until("the older worker to finish it", lambda: op.status(r1) == ["finished"])
    r2 = op.old_submit()
    op.until("the second run to pause", lambda: op.status(r2) == ["paused"])
    assert op.signal("old", signal.SIGTERM) == 0
    op.start_on("new", NEW_SRC)
    op.old_approve(r2)  # the older CLI, after the upgrade
    op.until("today's worker to finish it", lambda: op.status(r2) == ["finished"])
    _every_run_once(op, [r1, r2])
    for log in ("old.log", "new.log"):
        assert "Traceback" not in (op.folder / log).read_text(), log
    assert op.signal("new", signal.SIGTERM) == 0


def test_a_sqlite_init_killed_before_dbos_made_its_tables_is_not_taken_for_a_deployment(
    tmp_path: Path,
) -> None:
    """A SQLite deployment's folder as a ``db init`` killed (-9) inside DBOS's migration leaves it:
    ``dbos.sqlite`` made, empty. ``db check``, ``runs list`` and ``submit`` end
    ``not_initialized`` (exit 1) naming ``tether db init``; they said ready, or "report it"
    (exit 7). The next ``db init`` makes the deployment, and the same commands work."""
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    folder = tmp_path / "deployment"
    folder.mkdir()
    (folder / "dbos.sqlite").touch()
    url = f"sqlite:///{folder}"
    commands = [
        ("db", "check", "--db", url),
        ("runs", "list", "--db", url),
        ("submit", "--db", url, "--agent", str(tmp_path / "agent" / "agent.yaml"), "note it"),
    ]
    for argv in commands:
        code, out, err = _cli(NEW_SRC, tmp_path, *argv)
        assert (code, out.get("error")) == (1, "not_initialized"), (argv, out, err[-2000:])
        assert "tether db init" in out["message"] and "Traceback" not in err, (out, err[-2000:])
    code, out, err = _cli(NEW_SRC, tmp_path, "db", "init", "--db", url)
    assert code == 0, (out, err[-2000:])
    for argv in commands:
        code, out, err = _cli(NEW_SRC, tmp_path, *argv)
        assert code == 0 and out["ok"], (argv, out, err[-2000:])
    assert _check(url, tmp_path) == []


def test_a_worker_whose_agents_trace_folder_is_on_a_read_only_mount_refuses_to_start(
    tmp_path: Path, ro_mountable: Path, capsys: Any
) -> None:
    """The agent file's folder mounted read-only (its trace folder beside it by default): the
    worker refuses to start (``bad_app``, exit 1) naming the trace folder, no traceback; it took
    each run and failed it. The same agent file on a read-write folder serves a run once."""
    op = Operator(f"sqlite:///{tmp_path / 'deployment'}", tmp_path, capsys)
    agent = Path(_agent(tmp_path, tmp_path / "deployment"))
    ro = ro_mountable
    code, stdout, stderr = _on_ro_mount(
        agent.parent, ro, "worker", "--db", op.url, "--app", str(ro / "agent.yaml"), "--json", timeout=90
    )  # a worker that starts serves until stopped: the timeout says it did
    said = json.loads(stdout.strip().splitlines()[-1])
    assert (code, said["error"]) == (1, "bad_app"), (stdout, stderr[-2000:])
    assert str(ro / "traces") in said["message"] and "read-only file system" in said["message"], said
    assert "Traceback" not in stderr and not (agent.parent / "traces").exists()
    try:
        op.start("new")
        run_id = op.submit()
        op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
        op.approve(run_id)
        op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
        _every_run_once(op, [run_id])
    finally:
        op.stop()


@pytest.fixture
def own_database(pg_dsn: str) -> Iterator[str]:
    """A URL on a database of its own (the migration lock is one per database: holding it here
    holds up no other test), dropped after the test."""
    import uuid

    import psycopg

    name = f"u21_{uuid.uuid4().hex[:10]}"
    base, _, query = pg_dsn.partition("?")
    yield f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_a_migrator_waiting_behind_another_that_waits_for_a_table_names_both(
    own_database: str, tmp_path: Path
) -> None:
    """An older worker's session inside a transaction on ``effect_ledger``; a migrator holding
    the migration lock waits for that table; a third ``db init`` gives up on the migration lock
    (``store_busy``, exit 6) naming the holder and the idle session it waits for, nothing written."""
    import threading

    import psycopg

    url = own_database
    code, out, err = _cli(NEW_SRC, tmp_path, "db", "init", "--db", url)
    assert code == 0, (out, err[-2000:])
    conninfo = url.split("?")[0]
    idle = psycopg.connect(conninfo, application_name="older-worker")
    idle.execute("SELECT count(*) FROM effect_ledger").fetchall()  # inside a transaction, held
    migrator = psycopg.connect(conninfo, application_name="other-migrator")
    migrator.execute("SELECT pg_advisory_xact_lock(hashtext('tether_migrations'))")
    waiting = threading.Thread(
        target=lambda: migrator.execute("LOCK TABLE effect_ledger IN ACCESS EXCLUSIVE MODE"), daemon=True
    )
    waiting.start()
    try:
        code, out, err = _cli(NEW_SRC, tmp_path, "db", "init", "--db", url)
        assert (code, out.get("error")) == (6, "store_busy"), (out, err[-2000:])
        said = out["message"]
        assert "other-migrator" in said and "older-worker" in said and "idle in transaction" in said, said
        assert "nothing was written" in said and "Traceback" not in err, (said, err[-2000:])
    finally:
        idle.close()  # the table is let go: the waiting migrator takes it, then lets go
        waiting.join(30)
        migrator.close()
    code, out, err = _cli(NEW_SRC, tmp_path, "db", "init", "--db", url)
    assert code == 0, (out, err[-2000:])
