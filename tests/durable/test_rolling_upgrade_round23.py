"""An operator's rolling upgrade, twenty-third round: new nodes brought up at once on a
deployment that does not exist yet, each running ``tether db init`` (or ``tether worker
--init``) as its start-up step.

What did not hold, fixed here and pinned below:

- two inits creating one PostgreSQL *database* at the same instant: PostgreSQL refuses the
  second ``CREATE DATABASE`` either as a duplicate database (handled) or, when both wrote the
  catalog row at once, as a unique violation of ``pg_database_datname_index``. That one ended the
  init exit 6 ``unreachable``, "cannot create it: duplicate key value …" — a node told the
  database cannot be reached while its neighbour had just made it (seen in one of three rounds of
  six inits). A refused ``CREATE DATABASE`` whose database is there now is another init's; only a
  refusal that leaves no database fails the init.
- a SQLite worker started under the executor id of a worker still running (a rollout replacing
  ``w1`` by a new ``w1`` before the old one is gone) waits for that worker's lock, and the wait
  could not be stopped: SIGTERM and SIGINT only flagged the stop, the interrupted ``flock`` was
  restarted, and the new worker waited on for as long as the old one ran — then started, recovered
  the executor's runs and only then drained. A stop asked during the wait now ends it at once
  (``worker_start_abandoned``): exit 0, no ready line, no ready file, nothing taken or run, the
  lock file left to the worker that holds it. The same for ``tether worker --init`` waiting (up
  to two minutes) for another init's DBOS migrations: it exits 0 at once, nothing of DBOS's made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _url(dsn: str, database: str, schema: str | None = None) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}", query=f"schema={schema}" if schema else ""))


@pytest.fixture
def fresh_database(pg_dsn: str) -> Iterator[str]:
    """A database name of this round's that does not exist yet, dropped after the test."""
    import psycopg

    name = f"u23_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class _Racing:
    """A connection whose ``CREATE DATABASE`` meets another init's: the other one (through a
    connection of its own) creates the database first, then this one's statement is refused as
    PostgreSQL refuses the slower of two at once: ``refusal``."""

    def __init__(self, conn: Any, dsn: str, refusal: Exception | None) -> None:
        self.conn, self.dsn, self.refusal = conn, dsn, refusal

    def __enter__(self) -> _Racing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    def execute(self, query: Any, params: Any = None) -> Any:
        import psycopg

        said = query if isinstance(query, str) else query.as_string(self.conn)
        if self.refusal is not None and said.startswith("CREATE DATABASE"):
            if not isinstance(self.refusal, psycopg.errors.InsufficientPrivilege):
                with psycopg.connect(self.dsn, autocommit=True) as other:
                    other.execute(query)  # the other init, a moment ahead
            raise self.refusal
        return self.conn.execute(query, params)


def _init_racing(monkeypatch: pytest.MonkeyPatch, url: str, dsn: str, refusal: Exception | None) -> Any:
    from tether.durable import _deploy

    real = _deploy._connect

    def connect(t: Any, *, database: str | None = None, **kw: Any) -> Any:
        conn = real(t, database=database, **kw)
        return _Racing(conn, dsn, refusal) if database == "postgres" else conn

    monkeypatch.setattr(_deploy, "_connect", connect)
    return _deploy.init_deployment(url)


def _refusal(kind: str) -> Exception:
    import psycopg

    return {
        "duplicate-database": psycopg.errors.DuplicateDatabase('database "x" already exists'),
        "unique-violation": psycopg.errors.UniqueViolation(
            'duplicate key value violates unique constraint "pg_database_datname_index"'
        ),
        "other": psycopg.errors.ObjectInUse('source database "template1" is being accessed by other users'),
    }[kind]


@pytest.mark.parametrize("kind", ["duplicate-database", "unique-violation", "other"])
def test_an_init_whose_create_database_meets_another_inits_goes_on(
    pg_dsn: str, fresh_database: str, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """However PostgreSQL refuses the slower ``CREATE DATABASE``, the database another init made
    at that instant is this init's too: it goes on, makes the deployment (``database_created``
    false: it did not make it), and ``db check`` finds it ready."""
    from tether.durable._deploy import check_migrations

    url = _url(pg_dsn, fresh_database, "s23")
    out = _init_racing(monkeypatch, url, _url(pg_dsn, "postgres"), _refusal(kind))
    assert out["database_created"] is False, out
    checked = check_migrations(url)
    assert checked["pending"] == [] and checked["later"] == [], checked


def test_a_create_database_refused_with_no_database_made_still_fails_named(
    pg_dsn: str, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal that leaves no database (a role without CREATEDB) is the init's failure, said
    with its cause; and with nothing in the way the init creates the database itself."""
    import psycopg

    from tether.durable._deploy import DeploymentUnavailable

    url = _url(pg_dsn, fresh_database, "s23")
    denied = psycopg.errors.InsufficientPrivilege("permission denied to create database")
    with pytest.raises(DeploymentUnavailable) as caught:
        _init_racing(monkeypatch, url, _url(pg_dsn, "postgres"), denied)
    assert "cannot create it: permission denied to create database" in str(caught.value)
    monkeypatch.undo()
    assert _init_racing(monkeypatch, url, _url(pg_dsn, "postgres"), None)["database_created"] is True


@pytest.mark.slow
def test_four_nodes_initialising_one_new_database_at_once_all_succeed(pg_dsn: str, tmp_path: Path) -> None:
    """Four ``tether db init`` processes on one database that does not exist: every one exits 0,
    one says it created the database, each migration is journalled once and ``db check`` finds
    the deployment ready."""
    import psycopg

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    database = f"u23_{uuid.uuid4().hex[:10]}"
    url = _url(pg_dsn, database, "s23")
    try:
        init = [sys.executable, "-m", "tether.cli", "db", "init", "--db", url, "--json"]
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        racing = [subprocess.Popen(init, env=env, cwd=tmp_path, **pipes) for _ in range(4)]
        outs = [(p.wait(120), p.communicate()) for p in racing]
        assert [rc for rc, _ in outs] == [0] * 4, [o[1][0].decode()[-400:] for o in outs]
        made = [json.loads(o[1][0].decode().splitlines()[-1])["database_created"] for o in outs]
        assert made.count(True) == 1, made
        with psycopg.connect(_url(pg_dsn, database), autocommit=True) as conn:
            names = [r[0] for r in conn.execute("SELECT name FROM s23._migrations")]
        assert names and len(names) == len(set(names)), names
        check = subprocess.run(
            [sys.executable, "-m", "tether.cli", "db", "check", "--db", url, "--json"],
            env=env, cwd=tmp_path, capture_output=True, timeout=120,
        )  # fmt: skip
        assert check.returncode == 0, check.stdout.decode()[-400:]
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


# -- a worker waiting to start under a live worker's executor id --------------------------------


def test_a_wait_for_another_workers_executor_lock_ends_once_a_stop_is_asked(tmp_path: Path) -> None:
    """``hold`` waits while another process holds the executor's lock file; a stop asked in the
    wait ends it (``StartAbandoned``) with its file descriptor closed; without a stop, it takes
    the lock once the holder lets go."""
    import fcntl
    import threading

    from tether.durable import _local

    deployment = tmp_path / "deployment"
    (deployment / "workers").mkdir(parents=True)
    other = os.open(deployment / "workers" / "w1.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(other, fcntl.LOCK_EX)  # the worker still running under w1
    stopping, out = threading.Event(), {}

    def start() -> None:
        try:
            out["fd"] = _local.hold(deployment, "w1", stopping)
        except _local.StartAbandoned as err:
            out["abandoned"] = err

    waiting = threading.Thread(target=start)
    open_before = len(os.listdir("/proc/self/fd"))
    waiting.start()
    waiting.join(1.0)
    assert waiting.is_alive() and out == {}  # it waits for the live worker …
    stopping.set()  # … until the rollout stops it
    waiting.join(60)
    assert not waiting.is_alive() and isinstance(out.get("abandoned"), _local.StartAbandoned), out
    assert len(os.listdir("/proc/self/fd")) == open_before  # its descriptor closed
    # Unstopped, the wait ends when the holder lets go, and the lock is this worker's.
    waiting = threading.Thread(target=start)
    out.clear()
    stopping.clear()
    waiting.start()
    fcntl.flock(other, fcntl.LOCK_UN)
    waiting.join(60)
    assert isinstance(out.get("fd"), int), out
    os.close(out["fd"])
    os.close(other)


@pytest.mark.slow
def test_a_worker_waiting_for_a_live_workers_executor_id_stops_when_told(tmp_path: Path) -> None:
    """On a SQLite deployment, worker ``w1`` serves; a second ``w1`` (the rollout's replacement)
    starts and waits (``executor_busy``). The rollout stops it (SIGTERM): it exits 0 without
    waiting for the first, never said ready (no line, no file), and took nothing: the first
    ``w1`` still serves, its lock file as it wrote it."""
    import signal

    folder = tmp_path / "fleet"
    folder.mkdir()
    url = f"sqlite:///{tmp_path / 'deployment'}"
    paths = [str(ROOT / "src"), str(ROOT / "tests" / "durable")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "DURABLE_DIR": str(folder)}
    procs: list[subprocess.Popen[bytes]] = []

    def cli(*argv: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "tether.cli", *argv, "--db", url, "--json"],
            env=env, capture_output=True, cwd=folder, timeout=180,
        )  # fmt: skip
        out: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
        return out

    def worker(name: str) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable, "-m", "tether.cli", "worker", "--db", url, "--app", "durable_app:build",
            "--executor-id", "w1", "--poll", "0.1", "--ready-file", str(folder / f"{name}.ready"),
            "--json",
        ]  # fmt: skip
        log = (folder / f"{name}.log").open("ab")
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, cwd=folder))
        return procs[-1]

    def events(name: str) -> list[str]:
        lines = (folder / f"{name}.log").read_text().splitlines()
        return [json.loads(line)["event"] for line in lines if line.startswith("{")]

    assert cli("db", "init")["ok"]
    try:
        first = worker("first")
        assert first.stdout is not None and json.loads(first.stdout.readline())["ready"]
        second = worker("second")
        deadline = time.monotonic() + 120
        while "executor_busy" not in events("second"):
            assert second.poll() is None and time.monotonic() < deadline, events("second")
            time.sleep(0.1)
        second.send_signal(signal.SIGTERM)
        try:
            code = second.wait(60)  # without the fix it waits for the first worker, which serves on
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the waiting worker ignored SIGTERM: {events('second')}") from None
        assert code == 0
        assert second.stdout is not None and second.stdout.read() == b""  # never said ready
        assert not (folder / "second.ready").exists()
        assert "worker_start_abandoned" in events("second") and "worker_started" not in events("second")
        assert (folder / "first.ready").exists() and first.poll() is None  # the first serves on
        lock = tmp_path / "deployment" / "workers" / "w1.lock"
        assert lock.read_text() == str(first.pid)  # its lock file as it wrote it
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@pytest.mark.slow
def test_a_worker_init_waiting_for_another_inits_dbos_migrations_stops_when_told(
    pg_dsn: str, fresh_database: str, tmp_path: Path
) -> None:
    """``tether worker --init`` on PostgreSQL waits (up to two minutes) while another init runs
    DBOS's migrations (held here by its lock). Stopped in that wait (SIGTERM), it exits 0 at
    once, never said ready, created nothing of DBOS's; the deployment is still made by the next
    init."""
    import signal

    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {fresh_database}")
    url = _url(pg_dsn, fresh_database, "s23")
    paths = [str(ROOT / "src"), str(ROOT / "tests" / "durable")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "DURABLE_DIR": str(tmp_path)}
    ready = tmp_path / "w.ready"
    cmd = [
        sys.executable, "-m", "tether.cli", "worker", "--init", "--db", url, "--app", "durable_app:build",
        "--executor-id", "w23", "--ready-file", str(ready), "--json",
    ]  # fmt: skip
    with psycopg.connect(_url(pg_dsn, fresh_database), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext('tether_dbos_migrations'))")  # another init
        log = (tmp_path / "w.log").open("ab")
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=log)
        try:
            deadline = time.monotonic() + 120
            asking = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
                " AND query LIKE '%%pg_try_advisory_lock%%'"
            )
            while not holder.execute(asking, (fresh_database,)).fetchone()[0]:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "w.log").read_text()
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(60)  # without the fix: two minutes' wait, then store_busy
            except subprocess.TimeoutExpired:
                raise AssertionError("the worker waiting for the init ignored SIGTERM") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert code == 0, (tmp_path / "w.log").read_text()[-2000:]
        assert proc.stdout is not None and proc.stdout.read() == b"" and not ready.exists()
        events = [json.loads(x) for x in (tmp_path / "w.log").read_text().splitlines() if x.startswith("{")]
        assert [e["event"] for e in events if e["event"].startswith("worker_")] == ["worker_start_abandoned"]
        dbos = holder.execute("SELECT to_regnamespace('s23_dbos')").fetchone()
        assert dbos is not None and dbos[0] is None  # nothing of DBOS's made
    init = [sys.executable, "-m", "tether.cli", "db", "init", "--db", url, "--json"]
    assert subprocess.run(init, env=env, cwd=tmp_path, capture_output=True, timeout=180).returncode == 0
