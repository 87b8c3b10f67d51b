from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def durable_url(pg_dsn: str) -> Iterator[str]:
    """A deployment on a fresh schema for one test module (its DBOS tables in <schema>_dbos),
    created once as an operator does (``tether db init``): workers and clients create nothing."""
    import psycopg

    from tether.durable._deploy import init_deployment

    schema = f"d_{uuid.uuid4().hex[:10]}"
    url = f"{pg_dsn}?schema={schema}"
    init_deployment(url)
    yield url
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '20s'")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema}_dbos CASCADE")
