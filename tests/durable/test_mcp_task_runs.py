"""A durable run waiting on an MCP server's long task (``long_tasks: pause``), through one
in-process worker on PostgreSQL: the run pauses on the task, the worker resumes it by itself
once the task has ended (never calling the tool again), and ``tether runs cancel`` of a run
still waiting cancels its task on the server."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import mcp_task_app
import pytest

from tether.cli import main
from tether.policy import TrustedContext
from tether.sql._database import blocking

pytestmark = pytest.mark.slow  # a worker with DBOS, and MCP servers started per resume

ACME = TrustedContext(tenant="acme", user="ana")


@pytest.fixture(scope="module")
def deployment(durable_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tether.durable import DurableClient, Worker, WorkerConfig

    os.environ["DURABLE_DIR"] = str(tmp_path_factory.mktemp("durable-tasks"))
    config = WorkerConfig(
        durable_url, apps=(mcp_task_app.APP,), executor_id="tasks-1", poll_s=0.1, heartbeat_s=0.2
    )
    with Worker(config) as worker:
        client = DurableClient(durable_url)
        try:
            yield worker, client
        finally:
            client.close()
    os.environ.pop("DURABLE_DIR", None)


def _log(run_id: str) -> list[str]:
    return (mcp_task_app.folder(run_id) / "task.log").read_text(encoding="utf-8").split()


def _task_pauses(client: Any, run_id: str) -> list[tuple[str, str | None]]:
    return [(p.status, p.task_id) for p in blocking(client.stores.pauses.for_run, run_id)]


def _until(client: Any, run_id: str, status: str, timeout_s: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        view = client.run(run_id)
        if view is not None and view.status == status:
            return view
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} never reached {status}: {client.run(run_id)}")


def test_a_worker_resumes_a_run_once_its_task_has_ended_and_the_tool_ran_once(deployment: Any) -> None:
    worker, client = deployment
    rid = client.submit(mcp_task_app.APP, "Study the tides", ACME)
    assert _until(client, rid, "paused").stop_reason == "approval_required"
    assert _task_pauses(client, rid) == [("task", "t-1")]
    (mcp_task_app.folder(rid) / "done").touch()
    view = _until(client, rid, "finished")
    assert view.stop_reason == "accepted", view.summary()
    assert "FINDINGS: the long study is done" in view.summary()["answer"]
    # However many resumes polled it, the tool was called once and its task never cancelled.
    assert _log(rid).count("call") == 1 and "cancel" not in _log(rid)
    assert _task_pauses(client, rid) == [("completed", "t-1")]
    assert not [e for e in worker.errors if rid in e]


def test_cancelling_a_run_waiting_on_a_task_cancels_the_task_on_its_server(
    deployment: Any, durable_url: str, capsys: Any
) -> None:
    _, client = deployment
    rid = client.submit(mcp_task_app.APP, "Study the tides", ACME)
    assert _until(client, rid, "paused").stop_reason == "approval_required"
    assert main(["runs", "--db", durable_url, "cancel", rid, "--json"]) == 0
    done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert done["tasks_cancelled"] == ["t-1"] and done["tasks_not_cancelled"] == []
    # The server was told; the tool was called once; nothing waits on the task any more (a resume
    # the worker had started meanwhile never reopens it).
    assert "cancel" in _log(rid) and _log(rid).count("call") == 1
    assert _task_pauses(client, rid) == [("completed", "t-1")]
    assert client.run(rid).status == "cancelled"
