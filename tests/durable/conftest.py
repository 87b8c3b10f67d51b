from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def durable_url(pg_dsn: str) -> Iterator[str]:
    """A deployment URL on a fresh schema for one test module (its DBOS tables in <schema>_dbos)."""
    import psycopg

    schema = f"d_{uuid.uuid4().hex[:10]}"
    yield f"{pg_dsn}?schema={schema}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '20s'")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema}_dbos CASCADE")
