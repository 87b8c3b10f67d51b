"""SIGTERM drains a worker: no new step starts, the step in flight finishes (its effect is
recorded, so no person is needed), the worker exits, and a survivor finishes the run without
repeating anything. The worker's stderr carries one JSON object a line for the operator."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import durable_app
import pytest
from test_crash import ACME, Cluster, cluster_dir  # noqa: F401 - the fixture, shared

from tether.sql._database import blocking

pytestmark = pytest.mark.slow


def _events(folder: Path, name: str) -> list[dict[str, object]]:
    lines = (folder / f"{name}.log").read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def _until(what: str, probe: object, timeout_s: float = 60.0) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()  # type: ignore[operator]
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigterm_lets_the_step_in_flight_finish_and_a_survivor_continues(
    pg_url: str,
    cluster_dir: Path,  # noqa: F811
) -> None:
    from tether.durable import DurableClient
    from tether.durable._deploy import init_deployment

    init_deployment(pg_url)
    # Each effect lingers 2 s after it happened; `note` has no reconciler, so an effect cut in
    # that window would need a person (escalated): the drain must let it finish instead.
    cluster = Cluster(pg_url, cluster_dir, DURABLE_EFFECT_S="2")
    client = DurableClient(pg_url)
    try:
        cluster.start("w1")
        rid = client.submit(durable_app.APP, "dr-1: note a; note b", ACME)
        _until("the first effect", lambda: [r for r in durable_app.effects() if r[2] == "dr-1:a"])
        cluster.procs["w1"].send_signal(signal.SIGTERM)
        try:  # a generous deadline, never a timed assertion: the drain's grace is 30 s here
            assert cluster.procs["w1"].wait(90) == 0
        except subprocess.TimeoutExpired:
            raise AssertionError((cluster_dir / "w1.log").read_text()[-3000:]) from None
        # It waited for the effect's step (it finished: recorded below), not for the whole run:
        # the second effect never started on this worker.
        assert [r[2] for r in durable_app.effects() if r[2].startswith("dr-1:")] == ["dr-1:a"]
        view = client.run(rid)
        assert view.status == "running"  # handed back, not failed, not finished here
        [entry] = blocking(client.stores.approvals.ledger_for_run, rid)
        assert str(entry.status) == "done"  # the step in flight finished: nothing for a person
        events = _events(cluster_dir, "w1")
        kinds = [e["event"] for e in events]
        assert kinds[0] == "worker_started" and "run_claimed" in kinds
        assert kinds.index("worker_draining") < kinds.index("worker_stopped")
        [stopped_event] = [e for e in events if e["event"] == "worker_stopped"]
        assert stopped_event["cut_steps"] == 0 and stopped_event["parked_runs"] == 1
        assert "run_finished" not in kinds and "run_failed" not in kinds

        cluster.start("w2")  # the survivor: takes the handed-back run at once
        done = client.wait(rid, timeout_s=60)
        assert (done.status, done.stop_reason) == ("finished", "accepted")
        assert [r[2] for r in durable_app.effects() if r[2].startswith("dr-1:")] == ["dr-1:a", "dr-1:b"]
        assert {str(e.status) for e in blocking(client.stores.approvals.ledger_for_run, rid)} == {"done"}
        finished = [e for e in _events(cluster_dir, "w2") if e["event"] == "run_finished"]
        assert finished and finished[0]["run_id"] == rid and finished[0]["exit"] == 0
        w2 = _events(cluster_dir, "w2")
        recovered = [e for e in w2 if e["event"] == "executors_recovered"]
        assert recovered and recovered[0]["requeued"] == [rid]  # handed back by the survivor
        runs = [e for e in events + w2 if str(e["event"]).startswith("run_")]
        assert {e["tenant"] for e in runs} == {"acme"}  # every run line names the run's tenant
    finally:
        cluster.stop()
        client.close()
