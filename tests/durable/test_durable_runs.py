"""Durable runs through one in-process worker on PostgreSQL: the queue, approvals given on
another connection resuming the run, the app allowlist, per-tenant limits, cancellation, and
the CLI that reads the shared state."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import durable_app
import pytest

from tether.cli import main
from tether.policy import Approvals, Reviewer, TrustedContext
from tether.sql._database import blocking
from tether.stores._url import open_stores

pytestmark = pytest.mark.slow  # a worker with DBOS: a few seconds to start

ACME = TrustedContext(tenant="acme", roles=frozenset({"ops"}), user="ana")
GLOBEX = TrustedContext(tenant="globex", user="bo")

CONSOLE_KEY = b"durable-console-key-0b7d4e91a2c6f358"


@pytest.fixture(scope="module")
def deployment(durable_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tether.durable import DurableClient, Worker, WorkerConfig

    folder = tmp_path_factory.mktemp("durable")
    os.environ["DURABLE_DIR"] = str(folder)
    config = WorkerConfig(
        durable_url,
        apps=(durable_app.APP,),
        executor_id="inproc-1",
        concurrency=4,
        tenant_concurrency=1,
        poll_s=0.1,
        heartbeat_s=0.2,
    )
    with Worker(config) as worker:
        client = DurableClient(durable_url)
        try:
            yield worker, client, folder
        finally:
            client.close()
    os.environ.pop("DURABLE_DIR", None)


def test_queued_runs_end_with_one_stop_reason_and_each_effect_happens_once(deployment: Any) -> None:
    worker, client, _ = deployment
    plans = {
        "ro-1": "ro-1: read a1; read a2",
        "wr-1": "wr-1: log hello; both a3; log bye",
    }
    ids = {tag: client.submit(durable_app.APP, text, ACME) for tag, text in plans.items()}
    views = {tag: client.wait(rid, timeout_s=60) for tag, rid in ids.items()}
    assert {tag: (v.status, v.stop_reason) for tag, v in views.items()} == {
        "ro-1": ("finished", "accepted"),
        "wr-1": ("finished", "accepted"),
    }
    assert views["wr-1"].summary()["answer"] == "wr-1 done after 4 results"
    # DBOS is one instance per process: a second worker here is refused, the first goes on.
    from tether.durable import Worker, WorkerConfig

    with pytest.raises(RuntimeError, match="already runs in this process"):
        Worker(WorkerConfig(worker.config.url, apps=(durable_app.APP,))).start()
    logged = [row[2] for row in durable_app.effects() if row[2].startswith("wr-1:")]
    assert logged == ["wr-1:hello", "wr-1:a3", "wr-1:bye"]
    assert not [row for row in durable_app.effects() if row[2].startswith("ro-1")]
    # The ledger of the shared store holds each effect once, done.
    entries = blocking(client.stores.approvals.ledger_for_run, ids["wr-1"])
    assert sorted(str(e.status) for e in entries) == ["done"] * 3
    assert worker.errors == []


@pytest.mark.spec("T5")
def test_an_approval_given_on_another_machine_resumes_the_run_on_a_worker(
    deployment: Any, durable_url: str
) -> None:
    _, client, _ = deployment
    approved = client.submit(durable_app.APP, "pay-ok: read a1; pay 25; log after-pay", ACME)
    denied = client.submit(durable_app.APP, "pay-no: pay 99; log never", GLOBEX)
    for rid in (approved, denied):
        paused = client.wait(rid, timeout_s=60)
        assert (paused.status, paused.stop_reason) == ("paused", "approval_required")
    assert not [r for r in durable_app.effects() if r[1] == "send_payment"]  # nothing ran before a person

    elsewhere = open_stores(durable_url)  # the reviewer's machine: its own connections
    try:
        desk = Approvals(elsewhere.approvals)
        [p_ok] = blocking(elsewhere.approvals.list_proposals, run_id=approved)
        [p_no] = blocking(elsewhere.approvals.list_proposals, run_id=denied)
        blocking(desk.approve, Reviewer("rita", tenants=frozenset({"acme"})), p_ok.id)
        blocking(desk.deny, Reviewer("gus", tenants=frozenset({"globex"})), p_no.id, reason="too much")
    finally:
        elsewhere.close()

    done = _wait_for(client, approved, "finished")
    refused = _wait_for(client, denied, "finished")
    assert (done.stop_reason, refused.stop_reason) == ("accepted", "approval_denied")
    assert [w.op for w in done.workflows] == ["start", "resume"]
    payments = [r[2] for r in durable_app.effects() if r[1] == "send_payment"]
    assert payments == ["25"]  # the approved one, once; the denied one never
    assert [r[2] for r in durable_app.effects() if r[2].startswith("pay-no")] == []
    # The trace index holds the whole run, the resume numbered after the pause, from any machine.
    events = client.stores.traces.events(approved)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    kinds = [e["kind"] for e in events]
    assert kinds.count("stop") == 2 and kinds.index("run_paused") < kinds.index("run_resumed")
    assert {"approval_granted", "effect_recorded"} <= set(kinds[kinds.index("run_resumed") :])
    # A second resume of the same (already finished) run changes nothing.
    from tether.errors import ApprovalError

    with pytest.raises(ApprovalError) as info:
        client.resume(approved)
    assert info.value.reason == "run_finished"


def test_a_worker_runs_only_the_apps_it_was_started_with(deployment: Any) -> None:
    import time

    from tether.durable._runtime import QUEUE, WORKFLOW, context_to_json

    worker, client, folder = deployment
    marker = folder / "imported"
    # Submitted: bound to a version no worker has (none serves that app), it is never taken.
    queued = client.submit("os:system", f"touch {marker}", ACME)
    time.sleep(1.0)
    assert client.run(queued).status == "queued" and client.run(queued).version != worker.version
    client.cancel(queued)
    # A queue row forged with this worker's version: the worker still refuses the app.
    rid = "forged-" + queued
    request = {"op": "start", "run_id": rid, "app": "os:system", "objective": f"touch {marker}",
               "context": context_to_json(ACME)}  # fmt: skip
    client.dbos.enqueue(
        {"workflow_name": WORKFLOW, "queue_name": QUEUE, "workflow_id": rid, "app_version": worker.version,
         "queue_partition_key": "acme", "attributes": {"run_id": rid, "op": "start", "tenant": "acme"}},
        request,
    )  # fmt: skip
    view = client.wait(rid, timeout_s=60)
    assert view.stop_reason == "policy_denied"
    assert "not served by this worker" in str(view.summary()["detail"])
    assert not marker.exists()
    ok = client.wait(client.submit(durable_app.APP, "legit: read a1", ACME), timeout_s=60)
    assert ok.stop_reason == "accepted"


def test_runs_of_one_tenant_never_overlap_under_a_per_tenant_limit_of_one(deployment: Any) -> None:
    _, client, _ = deployment
    os.environ["DURABLE_MODEL_S"] = "0.15"
    try:
        ids = [client.submit(durable_app.APP, f"lim-{i}: read a1; read a2", ACME) for i in range(3)]
        views = [client.wait(rid, timeout_s=60) for rid in ids]
    finally:
        os.environ.pop("DURABLE_MODEL_S", None)
    assert [v.stop_reason for v in views] == ["accepted"] * 3
    found = client.dbos.list_workflows(workflow_ids=ids)
    spans = sorted((w.dequeued_at, w.completed_at) for w in found)
    # Each run takes >= 0.45 s (three model calls of 0.15 s): without the limit the three would be
    # dequeued together and overlap by that much. DBOS stamps both ends with their transaction's
    # start time (SQL now()), so a few milliseconds of apparent overlap are noise.
    overlaps = [a_end - b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans)]
    assert all(ms < 100 for ms in overlaps), spans


def test_a_cancelled_run_stops_and_says_so(deployment: Any) -> None:
    _, client, _ = deployment
    os.environ["DURABLE_MODEL_S"] = "0.3"
    try:
        rid = client.submit(
            durable_app.APP, "cancel-me: " + "; ".join(f"log x{i}" for i in range(10)), GLOBEX
        )
        _wait_for(client, rid, "running")
        assert client.cancel(rid)["workflows"] == [rid]
        view = _wait_for(client, rid, "cancelled")
    finally:
        os.environ.pop("DURABLE_MODEL_S", None)
    assert view.stop_reason == "cancelled"
    assert len([r for r in durable_app.effects() if r[2].startswith("cancel-me")]) < 10


def test_the_cli_reads_the_shared_state(deployment: Any, durable_url: str, capsys: Any) -> None:
    _, _client, _ = deployment
    code = main(
        ["submit", "--db", durable_url, "--agent", durable_app.APP, "cli: read a1", "--wait", "60", "--json"]
    )
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out["stop_reason"] == "accepted"
    assert main(["runs", "--db", durable_url, "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["run_id"] in {r["run_id"] for r in listed["runs"]}
    assert main(["runs", "--db", durable_url, "show", out["run_id"], "--events", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert shown["status"] == "finished" and shown["workflows"][0]["executor"] == "inproc-1"
    assert [e["kind"] for e in shown["events"]][-1] == "stop"  # the trace index, read from here
    assert main(["runs", "--db", durable_url, "workers", "--json"]) == 0
    workers = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["workers"]
    assert "inproc-1" in {w["executor_id"] for w in workers}
    # tether resume on a durable run that is not paused: a clear refusal, exit 1
    assert main(["resume", out["run_id"], "--db", durable_url, "--json"]) == 1
    refusal = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert refusal["error"] in ("unknown_run", "run_finished")


def _wait_for(client: Any, run_id: str, status: str, timeout_s: float = 60.0) -> Any:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        view = client.run(run_id)
        if view is not None and view.status == status:
            return view
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never reached {status}: {client.run(run_id)}")


@pytest.mark.spec("T5")
def test_an_approval_in_the_console_on_the_shared_store_resumes_the_run_on_a_worker(
    deployment: Any, durable_url: str, tmp_path: Any
) -> None:
    import re

    pytest.importorskip("starlette", reason="the console extra is not installed")
    from starlette.testclient import TestClient

    from tether.console import create_app, deployment_sources
    from tether.console._users import UserStore

    _, client, _ = deployment
    rid = client.submit(durable_app.APP, "pay-console: pay 41; log after-console", ACME)
    assert client.wait(rid, timeout_s=60).status == "paused"
    [proposal] = blocking(client.stores.approvals.list_proposals, run_id=rid)

    users_db = tmp_path / "console.db"
    users = UserStore(users_db, scrypt_n=2**10)  # cheap hashes for a test
    sources = deployment_sources(url=durable_url, users_db=users_db, users=users)
    for name, tenant in (("rita", "acme"), ("gus", "globex")):
        sources.users.add_user(name, "correct horse battery")
        sources.users.grant(name, tenant, "reviewer")
    app = create_app(sources, secret_key=CONSOLE_KEY, allowed_hosts=("testserver",))

    def signed_in(name: str) -> TestClient:
        c = TestClient(app, base_url="http://testserver")
        token = re.search(r'name="csrf_login" value="([^"]+)"', c.get("/login").text)
        assert token is not None
        form = {"username": name, "password": "correct horse battery", "csrf_login": token.group(1)}
        assert c.post("/login", data={**form, "next": "/"}).status_code == 200
        return c

    try:
        # Attack: a reviewer of another tenant neither sees nor decides the proposal.
        gus = signed_in("gus")
        assert gus.get(f"/approvals/{proposal.id}").status_code == 404
        assert blocking(client.stores.approvals.get_proposal, proposal.id).status.value == "pending"
        # Legitimate: the tenant's reviewer approves the exact content; a worker resumes the run.
        rita = signed_in("rita")
        page = rita.get(f"/approvals/{proposal.id}").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
        digest = re.search(r'id="content-hash">([^<]+)<', page)
        assert csrf is not None and digest is not None and "41" in page
        done = rita.post(
            f"/approvals/{proposal.id}/approve",
            data={"csrf_token": csrf.group(1), "content_hash": digest.group(1), "reason": "ok"},
        )
        assert done.status_code == 200 and "Approved" in done.text
        view = _wait_for(client, rid, "finished")
    finally:
        sources.close()
    assert view.stop_reason == "accepted" and [w.op for w in view.workflows] == ["start", "resume"]
    assert [r[2] for r in durable_app.effects() if r[2] == "41"] == ["41"]  # paid once


@pytest.mark.parametrize(
    ("plan", "code", "kind"), [("ghost x1", 2, "rejected"), ("gone x2", 6, "unavailable")]
)
def test_an_accepted_run_with_a_call_undone_exits_as_tether_run_does(
    deployment: Any, durable_url: str, capsys: Any, plan: str, code: int, kind: str
) -> None:
    import anyio

    from tether.clisupport.output import run_payload

    _, client, _ = deployment
    objective = f"undone-{code}: read a1; {plan}; read a3"
    # The same app in process: what `tether run` reports for it.
    host, agent = durable_app.build(durable_url)

    async def go() -> Any:
        try:
            return await host.run(agent, objective, context=ACME)
        finally:
            await host.aclose()

    in_process = run_payload(anyio.run(go))
    assert (in_process["stop_reason"], in_process["exit"]) == ("accepted", code)

    argv = ["submit", "--db", durable_url, "--agent", durable_app.APP, objective, "--wait", "60", "--json"]
    assert main(argv) == code
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (out["stop_reason"], out["exit"], out["ok"]) == ("accepted", code, False)
    assert [p["kind"] for p in out["problems"]] == [kind]
    assert out["problems"] == in_process["problems"]
    assert out["error"] == in_process["error"] == "calls_not_completed"
    # runs show: the same exit; a clean run still exits 0.
    assert main(["runs", "--db", durable_url, "show", out["run_id"], "--json"]) == code
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["exit"] == code
    clean = client.submit(durable_app.APP, "clean: read a1", ACME)
    client.wait(clean, timeout_s=60)
    assert main(["runs", "--db", durable_url, "show", clean, "--json"]) == 0


def test_a_cancelled_paused_run_runs_nothing_when_approved_later(
    deployment: Any, durable_url: str, capsys: Any
) -> None:
    worker, client, _ = deployment
    rid = client.submit(durable_app.APP, "cx-pause: pay 77; log after-cancel", ACME)
    assert client.wait(rid, timeout_s=60).status == "paused"
    [proposal] = blocking(client.stores.approvals.list_proposals, run_id=rid)
    assert main(["runs", "--db", durable_url, "cancel", rid, "--json"]) == 0
    done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert done["proposals_invalidated"] == [proposal.id] and done["workflows"] == [f"{rid}.cancel"]
    view = client.run(rid)
    assert (view.status, view.stop_reason) == ("cancelled", "cancelled")
    # Attack: a reviewer approves it afterwards from the approvals desk; nothing runs.
    code = main(["approvals", "approve", proposal.id, "--db", durable_url, "--reviewer", "rita", "--json"])
    refused = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and refused["error"] == "already_invalidated"
    assert main(["runs", "--db", durable_url, "resume", rid, "--json"]) == 1
    capsys.readouterr()
    import time

    time.sleep(1.0)  # several rounds of the worker's resume duty
    assert client.run(rid).status == "cancelled" and len(client.workflows(rid)) == 2
    assert not [r for r in durable_app.effects() if r[2] in ("77", "cx-pause:after-cancel")]
    assert not [e for e in worker.errors if rid in e]
    # Legitimate: another paused run, approved, still runs (cancel touched only its own run).
    other = client.submit(durable_app.APP, "cx-keep: pay 78", ACME)
    assert client.wait(other, timeout_s=60).status == "paused"
    [p2] = blocking(client.stores.approvals.list_proposals, run_id=other)
    assert main(["approvals", "approve", p2.id, "--db", durable_url, "--reviewer", "rita", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["live_workers"] >= 1
    assert _wait_for(client, other, "finished").stop_reason == "accepted"
    assert [r[2] for r in durable_app.effects() if r[2] == "78"] == ["78"]


def test_a_queued_run_cancelled_never_starts(deployment: Any) -> None:
    _, client, folder = deployment
    os.environ["DURABLE_MODEL_S"] = "0.3"
    try:
        first = client.submit(durable_app.APP, "cq-1: read a1; read a2", GLOBEX)  # holds globex's one slot
        queued = client.submit(durable_app.APP, "cq-2: log never", GLOBEX)
        assert client.run(queued).status == "queued"
        assert client.cancel(queued)["workflows"] == [queued]
        assert client.wait(first, timeout_s=60).stop_reason == "accepted"
    finally:
        os.environ.pop("DURABLE_MODEL_S", None)
    assert client.run(queued).status == "cancelled"
    model_calls = (folder / "model.log").read_text().splitlines()
    assert not [line for line in model_calls if line.startswith("cq-2\t")]


def test_runs_cancelled_at_random_moments_run_nothing_after_and_approvals_from_another_shell_run_nothing(
    deployment: Any, durable_url: str, capsys: Any
) -> None:
    """The operator cancels runs at random moments (queued, in a step, paused), then a reviewer
    approves every proposal the runs made, from another shell: no cancelled run does anything
    after, no payment happens, each run ends ``cancelled``, and the tool's own log and the
    ledger agree on what happened before the cancel."""
    import random
    import time

    _, client, _ = deployment
    rng = random.Random(2626)
    os.environ["DURABLE_MODEL_S"], os.environ["DURABLE_EFFECT_S"] = "0.15", "0.1"
    runs: dict[str, str] = {}
    try:
        for i in range(8):  # a tenant each: the fixture's per-tenant limit of one holds none back
            tag = f"cxr{i}"
            ctx = TrustedContext(tenant=f"cx-{i}", roles=frozenset({"ops"}))
            runs[tag] = client.submit(durable_app.APP, f"{tag}: log a; pay 8{i}; log b", ctx)
            time.sleep(rng.uniform(0.0, 0.9))
            code = main(["runs", "--db", durable_url, "cancel", runs[tag], "--json"])
            assert code == 0, capsys.readouterr()
        capsys.readouterr()
        seen = {tag: client.run(rid).status for tag, rid in runs.items()}
        # The reviewer's shell: every proposal of these runs approved (or refused as void).
        for rid in runs.values():
            for p in blocking(client.stores.approvals.list_proposals, run_id=rid):
                main(["approvals", "approve", p.id, "--db", durable_url, "--reviewer", "rita", "--json"])
                # Refused as void, or (a pause written in the instant of the cancel) taken and
                # then voided by the worker that finds the run cancelled: nothing runs either way.
                out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
                assert out["ok"] or out["error"] == "already_invalidated", out
        time.sleep(1.5)  # several rounds of the worker's resume duty
    finally:
        os.environ.pop("DURABLE_MODEL_S", None)
        os.environ.pop("DURABLE_EFFECT_S", None)
    assert set(seen.values()) == {"cancelled"}, seen
    rows = [r for r in durable_app.effects() if r[2].startswith("cxr") or r[1] == "send_payment"]
    assert not [r for r in rows if r[1] == "send_payment" and r[2].startswith("8")], rows
    for tag, rid in runs.items():
        view = client.run(rid)
        assert (view.status, view.stop_reason) == ("cancelled", "cancelled")
        logged = [r for r in rows if r[2].startswith(f"{tag}:")]
        assert [r[2] for r in logged] in ([], [f"{tag}:a"]), logged  # before the pay, at most
        ledger = blocking(client.stores.approvals.ledger_for_run, rid)
        assert sorted(e.key for e in ledger) == sorted(r[0] for r in logged)
        assert all(str(e.status) == "done" for e in ledger)
        assert blocking(client.stores.approvals.load_checkpoint, rid) is None or (
            blocking(client.stores.approvals.load_checkpoint, rid).stop_reason == "cancelled"
        )
    # More than one kind of moment was hit (queued, in flight, paused).
    assert len({len(blocking(client.stores.approvals.list_proposals, run_id=r)) for r in runs.values()}) > 1
    # A run that ended is not "cancelled" after the fact: the operator is told it ended.
    ended = client.submit(durable_app.APP, "cxf: read a1", TrustedContext(tenant="cx-f"))
    assert client.wait(ended, timeout_s=60).status == "finished"
    assert main(["runs", "--db", durable_url, "cancel", ended, "--json"]) == 1
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"] == "run_finished"
    assert client.run(ended).status == "finished"


def test_runs_list_filters_and_workers_marks_the_dead(deployment: Any, durable_url: str, capsys: Any) -> None:
    import psycopg

    from tether.sql._postgres import PgUrl

    _, client, _ = deployment
    paused = client.submit(durable_app.APP, "vis-p: pay 5", GLOBEX)
    done = client.submit(durable_app.APP, "vis-f: read a1", GLOBEX)
    for rid in (paused, done):
        client.wait(rid, timeout_s=60)

    def listed(*flags: str) -> set[str]:
        assert main(["runs", "--db", durable_url, "list", *flags, "--json"]) == 0
        return {r["run_id"] for r in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["runs"]}

    assert {paused, done} <= listed()
    by_status = listed("--status", "paused", "--tenant", "globex")
    assert paused in by_status and done not in by_status
    assert not {paused, done} & listed("--tenant", "acme")
    assert not {paused, done} & listed("--older-than", "1h")
    assert {paused, done} <= listed("--older-than", "0s")
    assert main(["runs", "--db", durable_url, "list", "--older-than", "soon", "--json"]) == 1
    capsys.readouterr()
    client.cancel(paused)

    # A worker that was killed: its heartbeat stopped long ago.
    pg = PgUrl.parse(durable_url)
    with psycopg.connect(pg.conninfo, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {pg.schema}.tether_workers (executor_id, host, pid, heartbeat_at)"
            " VALUES ('ghost-1', 'gone', 1, now() - interval '10 minutes')"
        )
    assert main(["runs", "--db", durable_url, "workers", "--json"]) == 0
    workers = {
        w["executor_id"]: w for w in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["workers"]
    }
    assert workers["ghost-1"]["state"] == "dead" and workers["ghost-1"]["silent_s"] >= 600
    assert workers["inproc-1"]["state"] == "alive" and workers["inproc-1"]["silent_s"] < 15


def test_a_write_that_raised_is_listed_for_a_person_and_runs_resolve_accepts_it(
    deployment: Any, durable_url: str, capsys: Any
) -> None:
    _, client, _ = deployment
    rid = client.submit(durable_app.APP, "fl-1: flaky x; read a1", ACME)
    view = client.wait(rid, timeout_s=60)
    assert (view.stop_reason, view.exit_code) == ("internal_error", 7)  # a tool that raises ends the run
    [entry] = blocking(client.stores.approvals.ledger_for_run, rid)
    assert str(entry.status) == "reconciling"
    assert main(["runs", "--db", durable_url, "escalations", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["escalations"]
    [row] = [e for e in listed if e["run_id"] == rid]
    assert row["key"] == entry.key and row["resolve"].startswith(f"tether runs resolve {entry.key} ")
    argv = ["runs", "--db", durable_url, "resolve", entry.key, "--happened", "yes", "--reviewer", "ana"]
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["status"] == "done"
    assert main([*argv, "--json"]) == 1  # once: it is settled now
    capsys.readouterr()


def test_a_worker_records_opentelemetry_metrics_when_configured(deployment: Any) -> None:
    pytest.importorskip("opentelemetry.sdk.metrics", reason="the otel extra is not installed")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from tether.durable import _metrics as metrics

    worker, client, _ = deployment
    reader = InMemoryMetricReader()
    metrics.configure(MeterProvider(metric_readers=[reader]), queue_depth=worker.queue_depth)
    try:
        rid = client.submit(durable_app.APP, "otel-1: read a1; log m1", ACME)
        assert client.wait(rid, timeout_s=60).stop_reason == "accepted"
        data = reader.get_metrics_data()
    finally:
        metrics.configure(None)
    points: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                points[m.name] = list(m.data.data_points)
    assert {p.attributes["kind"]: p.count for p in points["tether.durable.step.duration"]} == {
        "model": 3,
        "turn": 2,
    }
    [run] = points["tether.durable.run.duration"]
    assert run.count == 1 and dict(run.attributes) == {"op": "start", "stop_reason": "accepted"}
    assert [p.value for p in points["tether.durable.runs.in_flight"]] == [0]  # started and ended
    assert [p.value for p in points["tether.durable.queue.depth"]] == [0]


def _console(durable_url: str, tmp_path: Any) -> tuple[Any, Any]:
    """The console on the deployment's shared stores (as ``tether serve --db URL``), with rita
    reviewing acme and gus reviewing globex; returns (sources, sign_in)."""
    import re

    pytest.importorskip("starlette", reason="the console extra is not installed")
    from starlette.testclient import TestClient

    from tether.console import create_app, deployment_sources
    from tether.console._users import UserStore

    users_db = tmp_path / "console.db"
    sources = deployment_sources(
        url=durable_url, users_db=users_db, users=UserStore(users_db, scrypt_n=2**10)
    )  # fmt: skip
    for name, tenant in (("rita", "acme"), ("gus", "globex")):
        sources.users.add_user(name, "correct horse battery")
        sources.users.grant(name, tenant, "reviewer")
    app = create_app(sources, secret_key=CONSOLE_KEY, allowed_hosts=("testserver",))

    def signed_in(name: str) -> Any:
        c = TestClient(app, base_url="http://testserver")
        token = re.search(r'name="csrf_login" value="([^"]+)"', c.get("/login").text)
        assert token is not None
        form = {"username": name, "password": "correct horse battery", "csrf_login": token.group(1)}
        assert c.post("/login", data={**form, "next": "/"}).status_code == 200
        return c

    return sources, signed_in


@pytest.mark.spec("T5")
def test_the_console_lists_opens_and_resumes_a_postgresql_deployments_run_stopped_on_a_model_error(
    deployment: Any, durable_url: str, tmp_path: Any
) -> None:
    import re

    _, client, _ = deployment
    rid = client.submit(durable_app.APP, "down-console: down c1; read a1; log after-down", ACME)
    stopped = client.wait(rid, timeout_s=60)
    assert stopped.stop_reason == "model_error"
    checkpoint = blocking(client.stores.approvals.load_checkpoint, rid)
    assert checkpoint is not None and checkpoint.status == "stopped"  # what tether resume continues
    client.stores.traces.flush()

    sources, signed_in = _console(durable_url, tmp_path)
    try:
        # Attack: another tenant's reviewer neither sees nor resumes the run (404 like an unknown id).
        gus = signed_in("gus")
        assert rid not in gus.get("/runs").text
        assert gus.get(f"/runs/{rid}").status_code == 404
        token = re.search(r'name="csrf_token" value="([^"]+)"', gus.get("/runs").text)
        assert token is not None
        assert (
            gus.post(f"/api/runs/{rid}/resume", headers={"x-csrf-token": token.group(1)}).status_code == 404
        )
        assert [w.op for w in client.workflows(rid)] == ["start"]  # nothing was enqueued

        # Legitimate: the tenant's reviewer finds the run, written by a worker, in the list ...
        rita = signed_in("rita")
        listed = rita.get("/runs").text
        assert rid in listed and "model_error" in listed
        assert any(
            r["run_id"] == rid and r["stop_reason"] == "model_error"
            for r in rita.get("/api/runs").json()["runs"]
        )
        # ... opens it (its timeline from the shared trace store) and resumes it: a worker continues.
        page = rita.get(f"/runs/{rid}").text
        assert "the model provider is down" in page and 'id="resume"' in page
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert csrf is not None
        done = rita.post(f"/runs/{rid}/resume", data={"csrf_token": csrf.group(1)})
        assert done.status_code == 200 and "a worker of the deployment resumes it" in done.text
        view = _wait_for(client, rid, "finished")
        assert view.stop_reason == "accepted" and [w.op for w in view.workflows] == ["start", "resume"]
        assert [r[2] for r in durable_app.effects() if r[2] == "down-console:after-down"] == [
            "down-console:after-down"
        ]
        # Resumed once: a second resume is refused as tether resume refuses it, and audited.
        again = rita.post(f"/api/runs/{rid}/resume", headers={"x-csrf-token": csrf.group(1)})
        assert again.status_code == 409 and again.json()["error"] == "run_finished"
        audit = [(e.actor, e.outcome) for e in sources.users.audit_log() if e.action == "resume"]
        assert ("session:rita", f"enqueued:{view.workflows[1].workflow_id}") in audit
        assert ("session:rita", "refused:run_finished") in audit
        assert ("session:gus", "refused:not_found") not in audit  # hidden: nothing to audit for gus
        client.stores.traces.flush()
        timeline = rita.get(f"/api/runs/{rid}").json()
        assert timeline["resumed"] and timeline["stop_reason"] == "accepted"
    finally:
        sources.close()
