"""Suite-wide settings and fixtures."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

# -- PostgreSQL (the scale-out backend) ----------------------------------------------------------
# The Postgres half of the store suites runs against TETHER_TEST_PG_DSN. On CI (CI=true) an
# unreachable server fails those tests; elsewhere they are skipped with the DSN in the reason.

PG_DSN = os.environ.get("TETHER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def _on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """A reachable PostgreSQL DSN, or a skip (a failure on CI) naming the DSN tried."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the postgres extra is missing
        message = "psycopg is not installed (pip install 'tether[postgres]')"
        pytest.fail(message) if _on_ci() else pytest.skip(message)
    try:
        with psycopg.connect(PG_DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as err:
        message = f"PostgreSQL unreachable at {PG_DSN} (TETHER_TEST_PG_DSN): {err}"
        pytest.fail(message) if _on_ci() else pytest.skip(message)
    return PG_DSN


@pytest.fixture
def pg_url(pg_dsn: str) -> Iterator[str]:
    """A URL on a fresh schema of its own (``?schema=…``), dropped after the test."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in pg_dsn else "?"
    yield f"{pg_dsn}{sep}schema={schema}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '20s'")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema}_dbos CASCADE")


# Every tracer built during the tests checks each event against its kind's declared payload
# (names, required fields, types) and raises on a mismatch (tether/trace/events.py).
os.environ["TETHER_TRACE_STRICT"] = "1"


# -- order ---------------------------------------------------------------------------------------
# pytest-xdist's load scheduling hands tests out in collection order, so a long test collected last
# keeps one worker busy after the other has run out of work (the wheel's install into a fresh
# virtual environment, collected 141st of 143 files, took a worker 20-50 s while the other sat
# idle). The files holding the longest single tests run first; every other test keeps its order.
RUN_FIRST = ("test_wheel.py", "test_tool_typing.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name not in RUN_FIRST)  # a stable sort


# -- installs that wait on a registry --------------------------------------------------------------
# The published MCP servers' installs (tests/published_installs.py) begin in the background as the
# session's first test starts, when a collected test needs them: the tests run while they download.


@pytest.fixture(scope="session", autouse=True)
def _published_installs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    from published_installs import prefetch

    wanted = {name for item in request.session.items for name in getattr(item, "fixturenames", ())}
    threads = prefetch(tmp_path_factory, wanted)
    yield
    for thread in threads:
        thread.join()


@pytest.fixture
def quick_model_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent file's model retries after 10 ms, not its retry policy's 0.5 s: for tests that
    assert how a run ends, what each try ended with and how many were made, never how long the
    backoff is (the policy's delays are tested on the backends, test_openai_backend.py). A
    server's Retry-After still sets its own wait."""
    import functools

    from tether.models import _retrying

    monkeypatch.setattr(_retrying, "RetryPolicy", functools.partial(_retrying.RetryPolicy, base_delay_s=0.01))
