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
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
