"""PostgreSQL URLs in every form libpq reads reach the same database through every part of
tether that connects: its stores (SQLAlchemy), the deployment checks (psycopg) and DBOS (its
own SQLAlchemy engine, on the URL tether gives it). Operators write socket folders and several
hosts; those URLs used to lose their '//' or their host on the way (real PostgreSQL here)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from tether.cli import main
from tether.errors import ConfigError
from tether.sql._postgres import PgUrl

pytestmark = pytest.mark.spec("T5")


def _socket_folder(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        folders = str(conn.execute("SHOW unix_socket_directories").fetchone()[0])
    folder = next((f.strip() for f in folders.split(",") if f.strip().startswith("/")), "")
    if not folder or not (Path(folder) / f".s.PGSQL.{urlsplit(dsn).port or 5432}").exists():
        pytest.skip(f"the server listens on no Unix socket here ({folders!r})")
    return folder


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute(f"DROP SCHEMA IF EXISTS {name}_dbos CASCADE")


def _forms(dsn: str) -> dict[str, str]:
    parts = urlsplit(dsn)
    user = f"{parts.username}@" if parts.username else ""
    host, port, db = parts.hostname or "127.0.0.1", parts.port or 5432, parts.path.lstrip("/")
    folder = _socket_folder(dsn)
    return {
        # No host part at all (libpq's own example): everything in the parameters.
        "socket as a parameter": f"postgresql:///{db}?host={folder}&port={port}"
        + (f"&user={parts.username}" if parts.username else ""),
        "socket in the host part": f"postgresql://{user}{quote(folder, safe='')}:{port}/{db}",
        "a dead host, then the live one": f"postgresql://{user}{host}:1,{host}:{port}/{db}",
    }


def _cli(capsys: Any, *argv: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(list(argv))
    lines = capsys.readouterr().out.strip().splitlines()
    return code, json.loads(lines[-1]) if lines else {}


FORMS = ["socket as a parameter", "socket in the host part", "a dead host, then the live one"]


@pytest.mark.parametrize("form", FORMS)
def test_a_url_in_any_form_libpq_reads_deploys_queues_and_lists(
    pg_dsn: str, schema: str, form: str, tmp_path: Path, capsys: Any
) -> None:
    url = _forms(pg_dsn)[form]
    url += f"{'&' if '?' in url else '?'}schema={schema}"
    agent = tmp_path / "agent.yaml"
    agent.write_text("name: a\ninstructions: x\nmodel: {name: m, api_key_env: K}\npolicy: {tenant: acme}\n")
    code, out = _cli(capsys, "db", "init", "--db", url, "--json")
    assert code == 0 and out["ok"], out
    code, out = _cli(capsys, "submit", "--db", url, "--agent", str(agent), "hello", "--json")
    assert code == 0 and out["status"] == "queued", out
    code, listed = _cli(capsys, "runs", "--db", url, "list", "--json")
    assert code == 0 and [r["tenant"] for r in listed["runs"]] == ["acme"]
    # The same rows are in the schema of the plain TCP URL: one database, reached two ways.
    plain_url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={schema}"
    code, plain = _cli(capsys, "runs", "--db", plain_url, "list", "--json")
    assert [r["run_id"] for r in plain["runs"]] == [r["run_id"] for r in listed["runs"]]


def test_messages_never_show_a_password_and_a_url_libpq_cannot_read_is_a_config_error() -> None:
    for url in (
        "postgresql://u:s3cret@/db?host=/run/postgresql",
        "postgresql://u@h1:5432,h2/db?password=s3cret&sslmode=require",
    ):
        shown = PgUrl.parse(url).redacted()
        assert "s3cret" not in shown and "u" in shown, shown
    # Legitimate: what a message names is still the server and the database.
    pg = PgUrl.parse("postgresql://u:s3cret@db.internal:6432/orders?schema=t1")
    assert (pg.where, pg.database, pg.schema) == ("db.internal:6432", "orders", "t1")
    assert PgUrl.parse("postgresql:///orders?host=/run/postgresql").where == "/run/postgresql"
    with pytest.raises(ConfigError, match="libpq cannot read") as bad:
        PgUrl.parse("postgresql://u:s3cret@db/orders?sslmode=require&sslmod=disable")
    assert "s3cret" not in str(bad.value)
