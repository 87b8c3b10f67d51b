"""The intake (tether.durable._intake), on a real SQLite deployment and the real PostgreSQL:
``tether submit`` stores a run in tether's own table without loading DBOS or SQLAlchemy, a
mover puts it on DBOS's queue with the version it was bound to, a mover killed half-way loses
and duplicates nothing, a run cancelled before it was moved never reaches the workers' queue,
an oversized objective stores nothing, and a deployment made before the intake still takes runs."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import durable_app
import psycopg
import pytest

from tether.cli import main
from tether.cli._commands.submit import MAX_OBJECTIVE_CHARS
from tether.durable import APP_VERSION, QUEUE, DurableClient
from tether.durable._deploy import init_deployment
from tether.durable._versions import app_digest, version_of
from tether.policy import TrustedContext

ACME = TrustedContext(tenant="acme", user="ana")
APP = durable_app.APP


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh deployment, created as an operator does (``tether db init``)."""
    if request.param == "sqlite":
        made = f"sqlite:///{tmp_path / 'deployment'}"
        init_deployment(made)
        yield made
        return
    dsn: str = request.getfixturevalue("pg_dsn")
    schema = f"i_{uuid.uuid4().hex[:10]}"
    made = f"{dsn}?schema={schema}"
    init_deployment(made)
    yield made
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema}_dbos CASCADE")


@pytest.fixture
def client(url: str) -> Iterator[DurableClient]:
    c = DurableClient(url)
    try:
        yield c
    finally:
        c.close()


def _sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    """``statement`` on the intake's own database, by the driver alone."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(Path(url[len("sqlite:///") :]) / "intake.db") as conn:
            return list(conn.execute(statement))
    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base, autocommit=True, options=f"-c search_path={schema}") as conn:
        cur = conn.execute(statement)
        return list(cur) if cur.description else []


def _waiting(url: str) -> list[str]:
    return sorted(r[0] for r in _sql(url, "SELECT run_id FROM tether_intake"))


def _queued(client: DurableClient) -> dict[str, list[Any]]:
    """Every run workflow on DBOS's queues, by workflow id (a list: one each, or a duplicate)."""
    found: dict[str, list[Any]] = {}
    for w in client.dbos.list_workflows(load_input=False, load_output=False):
        found.setdefault(w.workflow_id, []).append(w)
    return found


def _bound(url: str) -> str:
    """The version a run of APP is bound to with no worker live."""
    return APP_VERSION if url.startswith("sqlite") else version_of({APP: app_digest(APP)})


def test_tether_submit_stores_the_run_without_loading_dbos_and_a_mover_queues_it_bound(
    url: str, client: DurableClient
) -> None:
    code = (
        "import json, sys\n"
        "from tether.cli._main import main\n"
        "rc = main(sys.argv[1:])\n"
        "print(json.dumps({'rc': rc, 'loaded': [m for m in ('dbos', 'sqlalchemy') if m in sys.modules]}))\n"
    )
    argv = ["submit", "--db", url, "--agent", APP, "hello: read a1", "--tenant", "acme", "--json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines[-1] == {"rc": 0, "loaded": []}, done.stderr
    rid = lines[0]["run_id"]
    assert _waiting(url) == [rid] and rid not in _queued(client)
    view = client.run(rid)
    assert view is not None and (view.status, view.tenant, view.version) == ("queued", "acme", _bound(url))
    assert [v.run_id for v in client.runs(status="queued")] == [rid]

    assert client.move_intake() == [rid]
    assert _waiting(url) == []
    [flow] = _queued(client)[rid]
    assert (flow.status, flow.queue_name, flow.app_version) == ("ENQUEUED", QUEUE, _bound(url))
    view = client.run(rid)
    assert view is not None and view.status == "queued" and len(view.workflows) == 1
    assert [v.run_id for v in client.runs()] == [rid]  # listed once, from DBOS's queue now
    assert client.move_intake() == []


KILLED_MOVER = """
import os, sys
from tether.durable import DurableClient

client = DurableClient(sys.argv[1])
real = client.enqueue_row
done = []


def enqueue_then_die(row, queue):
    real(row, queue)  # committed in DBOS's tables
    done.append(row.run_id)
    if len(done) == 2:
        os._exit(9)  # the worker dies before the intake's deletes commit


client.enqueue_row = enqueue_then_die
client.move_intake()
"""


def test_a_mover_killed_between_enqueueing_and_deleting_loses_and_duplicates_nothing(
    url: str, client: DurableClient
) -> None:
    ids = sorted(client.submit(APP, f"crash-{i}: read a1", ACME) for i in range(3))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MOVER, url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == 9, killed.stderr
    assert _waiting(url) == ids  # nothing lost: every row is still there
    assert len(set(_queued(client)) & set(ids)) == 2  # two had reached DBOS's queue

    assert sorted(client.move_intake()) == ids
    assert _waiting(url) == []
    queued = _queued(client)
    for rid in ids:
        [flow] = queued[rid]  # one workflow per run: none twice
        assert (flow.status, flow.queue_name, flow.app_version) == ("ENQUEUED", QUEUE, _bound(url))
    assert sorted(v.run_id for v in client.runs()) == ids


def test_a_run_cancelled_in_the_intake_never_reaches_the_workers_queue(
    url: str, client: DurableClient
) -> None:
    doomed = client.submit(APP, "cx: log never", ACME)
    kept = client.submit(APP, "keep: read a1", ACME)
    out = client.cancel(doomed)
    assert out["workflows"] == [doomed]
    view = client.run(doomed)
    assert view is not None and view.status == "cancelled"
    assert _waiting(url) == [kept]
    assert client.move_intake() == [kept]  # the legitimate run still goes to the workers
    queued = _queued(client)
    [gone] = queued[doomed]
    assert gone.status == "CANCELLED"  # (DBOS forgets the queue of a cancelled workflow)
    [live] = queued[kept]
    assert (live.status, live.queue_name) == ("ENQUEUED", QUEUE)
    assert client.cancel(doomed)["workflows"] == []  # idempotent
    statuses = {v.run_id: v.status for v in client.runs()}
    assert statuses == {doomed: "cancelled", kept: "queued"}


def test_a_cancel_racing_a_mover_on_postgresql_leaves_the_run_cancelled(pg_dsn: str) -> None:
    """The mover holds the run's row (enqueued, not yet deleted) while the cancel comes: the
    cancel waits for it, then finds the run on the queue and cancels it there."""
    schema = f"i_{uuid.uuid4().hex[:10]}"
    url = f"{pg_dsn}?schema={schema}"
    init_deployment(url)
    mover, canceller = DurableClient(url), DurableClient(url)
    try:
        rid = canceller.submit(APP, "race: log never", ACME)
        holding, go = threading.Event(), threading.Event()
        real = mover.enqueue_row

        def enqueue_and_hold(row: Any, queue: str) -> None:
            real(row, queue)
            holding.set()
            go.wait(30)

        mover.enqueue_row = enqueue_and_hold  # type: ignore[method-assign,assignment]
        moved: list[str] = []
        thread = threading.Thread(target=lambda: moved.extend(mover.move_intake()))
        thread.start()
        assert holding.wait(30)
        result: dict[str, Any] = {}
        cancel = threading.Thread(target=lambda: result.update(canceller.cancel(rid)))
        cancel.start()
        go.set()
        thread.join(30)
        cancel.join(30)
        assert moved == [rid] and result["workflows"] == [rid]
        view = canceller.run(rid)
        assert view is not None and view.status == "cancelled"
        [flow] = _queued(canceller)[rid]
        assert flow.status == "CANCELLED"
        assert _waiting(url) == []
    finally:
        mover.close()
        canceller.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema}_dbos CASCADE")


def test_an_oversized_objective_stores_nothing_and_a_batch_is_stored_whole_or_not_at_all(
    url: str, tmp_path: Path, capsys: Any
) -> None:
    big = "x" * (MAX_OBJECTIVE_CHARS + 1)
    assert main(["submit", "--db", url, "--agent", APP, big]) == 1
    assert "limit" in capsys.readouterr().err
    batch = tmp_path / "runs.jsonl"
    legit = [json.dumps({"objective": f"b{i}: read a1", "agent": APP}) for i in range(2)]
    batch.write_text("\n".join([*legit, json.dumps({"objective": big, "agent": APP})]) + "\n")
    assert main(["submit", "--db", url, "--batch", str(batch)]) == 1
    assert "line 3" in capsys.readouterr().err
    assert _waiting(url) == []
    batch.write_text("\n".join(legit) + "\n")
    assert main(["submit", "--db", url, "--batch", str(batch)]) == 0
    ids = [json.loads(line)["run_id"] for line in capsys.readouterr().out.splitlines()]
    assert len(ids) == 2 and _waiting(url) == sorted(ids)


def test_a_deployment_made_before_the_intake_still_takes_runs(
    url: str, client: DurableClient, capsys: Any
) -> None:
    if url.startswith("sqlite"):
        for leftover in Path(url[len("sqlite:///") :]).glob("intake.db*"):
            leftover.unlink()
    else:
        _sql(url, "DROP TABLE tether_intake")
    assert main(["submit", "--db", url, "--agent", APP, "old: read a1", "--tenant", "acme"]) == 0
    rid = capsys.readouterr().out.strip()
    [flow] = _queued(client)[rid]  # straight onto DBOS's queue, bound as before
    assert (flow.status, flow.queue_name, flow.app_version) == ("ENQUEUED", QUEUE, _bound(url))
    other = client.submit(APP, "old-2: read a1", ACME)
    assert sorted(v.run_id for v in client.runs()) == sorted([rid, other])
    assert client.move_intake() == []


def test_a_run_moved_while_it_is_being_read_is_seen_once(url: str, client: DurableClient) -> None:
    """A worker moves the run between the client's read of DBOS's queue and of the intake: it
    is still seen (queued), once, by ``run`` and ``runs``."""
    rid = client.submit(APP, "moving: read a1", ACME)
    mover = DurableClient(url)
    read_workflows, read_runs = client.workflows, client._list_runs

    def workflows_then_move(run_id: str) -> Any:
        found = read_workflows(run_id)
        mover.move_intake()
        return found

    def list_then_move(*args: Any, **kw: Any) -> Any:
        found = read_runs(*args, **kw)
        mover.move_intake()
        return found

    try:
        client.workflows = workflows_then_move  # type: ignore[method-assign]
        view = client.run(rid)
        assert view is not None and view.status == "queued"
        assert _waiting(url) == [] and rid in _queued(client)
        other = client.submit(APP, "moving-2: read a1", ACME)
        client._list_runs = list_then_move  # type: ignore[method-assign]
        listed = [v.run_id for v in client.runs()]
        assert sorted(listed) == sorted([rid, other])
    finally:
        mover.close()
