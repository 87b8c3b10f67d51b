"""Crash and load tests on real processes: PostgreSQL and several ``tether worker`` processes.

Workers are SIGKILLed — at random moments, and by a tool right after its effect happened and
before its outcome was recorded — and restarted; one worker's database connections are cut.
At the end every run has exactly one stop reason, every effect appears exactly once in the
tool's own log, no approval was applied twice, and no run was lost.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import durable_app
import pytest

from tether.policy import Approvals, Reviewer, TrustedContext
from tether.sql._database import blocking

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ACME = TrustedContext(tenant="acme", roles=frozenset({"ops"}))
GLOBEX = TrustedContext(tenant="globex")


class Cluster:
    """Worker processes on one deployment; each keeps its executor id across restarts."""

    def __init__(self, url: str, folder: Path, **env: str) -> None:
        self.url, self.folder = url, folder
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests" / "durable")]),
            "DURABLE_DIR": str(folder),
            **env,
        }
        # Executor ids unique to this test: other sessions may run the same tests on the same
        # server, and connections are labelled (and cut) by executor id.
        self.suffix = uuid.uuid4().hex[:6]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.spawned: list[subprocess.Popen[bytes]] = []  # every process started, for stop()
        self.starts: Counter[str] = Counter()
        self.kills = 0

    def start(self, name: str, *, wait: bool = True) -> None:
        log = (self.folder / f"{name}.log").open("ab")
        cmd = [
            sys.executable, "-m", "tether.cli", "worker", "--db", self.url, "--app", durable_app.APP,
            "--executor-id", self.executor(name), "--concurrency", "3", "--dead-after", "3", "--poll", "0.1",
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=log, cwd=self.folder)
        self.procs[name] = proc
        self.spawned.append(proc)
        self.starts[name] += 1
        if wait:
            self.ready(name)

    def executor(self, name: str) -> str:
        return f"{name}-{self.suffix}"

    def ready(self, name: str) -> None:
        proc = self.procs[name]
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the worker's JSON line once it serves the queue
        assert line and json.loads(line)["ready"], (self.folder / f"{name}.log").read_text()[-3000:]

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            self.kills += 1
        proc.wait()

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is not None]

    def stop(self) -> None:
        for proc in self.spawned:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.spawned:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "cluster"
    folder.mkdir()
    os.environ["DURABLE_DIR"] = str(folder)  # this process reads the tool's log too
    yield folder
    os.environ.pop("DURABLE_DIR", None)


def _decide_paused(client: Any, decided: set[str]) -> None:
    """The human: approve pay runs tagged pa-, deny those tagged pd-, once each."""
    store = client.stores.approvals
    desk = Approvals(store)
    for p in blocking(store.list_proposals):
        if str(p.status) != "pending" or p.id in decided:
            continue
        decided.add(p.id)
        reviewer = Reviewer.for_all_tenants("rita")
        if _TAGS.get(p.run_id, "").startswith("pd-"):
            blocking(desk.deny, reviewer, p.id, reason="no")
        else:
            blocking(desk.approve, reviewer, p.id)


_TAGS: dict[str, str] = {}  # run id -> the tag its objective starts with


def _check_invariants(
    client: Any, runs: dict[str, str], expected: dict[str, str], objectives: dict[str, str]
) -> dict[str, Any]:
    """Exactly one stop reason per run, every effect once, every approval applied once."""
    views = {tag: client.run(rid) for tag, rid in runs.items()}
    assert all(v is not None for v in views.values())
    status = {tag: (v.status, v.stop_reason) for tag, v in views.items()}
    assert status == {tag: ("finished", reason) for tag, reason in expected.items()}, status
    # The tool's own log: no key twice, and each run's planned effects exactly once.
    rows = durable_app.effects()
    keys = Counter(r[0] for r in rows)
    assert [k for k, n in keys.items() if n > 1] == [], "an effect happened twice"
    for tag in runs:
        _, turns = durable_app.plan(objectives[tag])
        planned = [
            args.get("entry") or args.get("amount")
            for turn in turns
            for name, args in turn
            if name in ("append_log", "send_payment")
        ]
        logged_by_run = [r[2] for r in rows if r[2].startswith(f"{tag}:")]
        if expected[tag] == "accepted":
            assert sorted(logged_by_run) == sorted(p for p in planned if p.startswith(f"{tag}:")), tag
        else:
            assert logged_by_run == [], tag
    store = client.stores.approvals
    entries = [e for rid in runs.values() for e in blocking(store.ledger_for_run, rid)]
    assert {str(e.status) for e in entries} <= {"done"}, [(e.key, e.status, e.note) for e in entries]
    assert sorted(e.key for e in entries) == sorted(keys), "ledger and the tool's log disagree"
    proposals = [p for rid in runs.values() for p in blocking(store.list_proposals, run_id=rid)]
    for p in proposals:
        decisions = [e.op for e in blocking(store.events, p.id) if e.op in ("approved", "denied")]
        assert len(decisions) == 1, (p.id, decisions)
        executed = [e for e in blocking(store.events, p.id) if e.op == "executed"]
        assert len(executed) <= 1, (p.id, executed)
    payments = sorted(r[2] for r in rows if r[1] == "send_payment")
    approved = [p for p in proposals if str(p.status) == "approved"]
    assert payments == sorted(json.loads(p.arguments)["amount"] for p in approved)
    replayed = sum(
        int(w.get("replayed_steps") or 0) for v in views.values() for w in v.summary()["workflows"]
    )
    return {"runs": len(runs), "effects": len(rows), "proposals": len(proposals), "replayed_steps": replayed}


def run_events(folder: Path) -> list[dict[str, Any]]:
    """What every worker logged about runs (one JSON object a line on its stderr)."""
    lines = [x for log in sorted(folder.glob("w*.log")) for x in log.read_text().splitlines()]
    events = [json.loads(x) for x in lines if x.startswith("{")]
    return [e for e in events if e["event"].startswith(("run_", "effect_", "resume_"))]


def _wait_all(client: Any, runs: dict[str, str], timeout_s: float, tick: Any) -> None:
    deadline = time.monotonic() + timeout_s
    decided: set[str] = set()
    while time.monotonic() < deadline:
        if tick is not None:
            tick()  # (a tick also reaps dead workers, as any supervisor does)
        _decide_paused(client, decided)
        views = [client.run(rid) for rid in runs.values()]
        if all(v is not None and v.status == "finished" for v in views):
            return
        time.sleep(0.3)
    pending = {t: client.run(r).summary() for t, r in runs.items() if client.run(r).status != "finished"}
    raise AssertionError(f"runs not finished in {timeout_s}s: {json.dumps(pending, default=str)[:3000]}")


@pytest.mark.spec("L2", "T5")
def test_killed_workers_lose_no_run_and_repeat_no_effect(pg_url: str, cluster_dir: Path) -> None:
    from tether.durable import DurableClient
    from tether.durable._deploy import init_deployment

    rng = random.Random(1414)
    cluster = Cluster(
        pg_url,
        cluster_dir,
        DURABLE_EFFECT_S="0.25",
        DURABLE_MODEL_S="0.15",
        DURABLE_CRASH_ON="lg-0:b,33",  # mid-effect deaths: a plain run, and a payment during its resume
    )
    names = ["w1", "w2", "w3"]
    init_deployment(pg_url)  # once, explicitly: a client creates nothing
    client = DurableClient(pg_url)
    plans = {
        **{f"ro-{i}": "read a1; read a2; read a3" for i in range(4)},
        **{f"lg-{i}": "log a; log b; both c; log d" for i in range(6)},
        **{f"pa-{i}": f"log pre; pay {30 + i}; log post" for i in range(4)},
        **{f"pd-{i}": f"pay {90 + i}; log never" for i in range(2)},
    }
    expected = {tag: "approval_denied" if tag.startswith("pd-") else "accepted" for tag in plans}
    objectives = {tag: f"{tag}: {plan}" for tag, plan in plans.items()}
    runs: dict[str, str] = {}
    try:
        for name in names:
            cluster.start(name, wait=False)
        for name in names:
            cluster.ready(name)
        for i, tag in enumerate(plans):
            rid = client.submit(durable_app.APP, objectives[tag], ACME if i % 2 else GLOBEX)
            runs[tag] = rid
            _TAGS[rid] = tag
        kills = {"next": time.monotonic() + rng.uniform(0.3, 0.8), "left": 6}
        down_until: dict[str, float] = {}

        def chaos() -> None:
            now = time.monotonic()
            for name in cluster.dead():  # killed by us, or by a tool mid-effect: restart it
                if now >= down_until.get(name, 0.0):
                    cluster.start(name, wait=False)  # it serves the queue once it has launched
            if kills["left"] and now >= kills["next"]:
                victim = rng.choice([n for n in names if n not in cluster.dead()] or names)
                cluster.kill(victim)
                # Half the victims stay down past --dead-after: a survivor recovers their runs;
                # the others restart at once and recover their own.
                down_until[victim] = now + (3.5 if kills["left"] % 2 else 0.0)
                kills["left"] -= 1
                kills["next"] = now + rng.uniform(0.6, 1.6)

        _wait_all(client, runs, timeout_s=100, tick=chaos)
        figures = _check_invariants(client, runs, expected, objectives)
    finally:
        cluster.stop()
        client.close()
    assert cluster.kills >= 6
    assert (cluster_dir / "crashed-lg-0_b").exists() and (cluster_dir / "crashed-33").exists()
    assert figures["replayed_steps"] > 0  # recovered runs replayed recorded steps, not re-ran them
    # The operator's log names the tenant of every run event, resumes and recoveries included.
    events = run_events(cluster_dir)
    tenants = {rid: "globex" if i % 2 == 0 else "acme" for i, rid in enumerate(runs.values())}
    assert {"run_claimed", "run_resumed", "run_paused", "run_finished"} <= {e["event"] for e in events}
    assert [e for e in events if e["tenant"] != tenants[e["run_id"]]] == []
    print(json.dumps({**figures, "kills": cluster.kills, "starts": dict(cluster.starts)}))


def test_a_survivor_recovers_a_dead_workers_run_without_asking_the_model_again(
    pg_url: str, cluster_dir: Path
) -> None:
    from tether.durable import DurableClient
    from tether.durable._deploy import init_deployment

    cluster = Cluster(pg_url, cluster_dir, DURABLE_CRASH_ON="cr-1:b", DURABLE_MODEL_S="0.05")
    init_deployment(pg_url)  # once, explicitly: a client creates nothing
    client = DurableClient(pg_url)
    try:
        cluster.start("w1", wait=False)
        cluster.start("w2", wait=False)
        cluster.ready("w1")
        cluster.ready("w2")
        rid = client.submit(durable_app.APP, "cr-1: log a; log b; log c", ACME)
        _TAGS[rid] = "cr-1"
        _wait_all(client, {"cr-1": rid}, timeout_s=60, tick=cluster.dead)  # nobody restarts it
        view = client.run(rid)
        dead = cluster.dead()
        ledger = blocking(client.stores.approvals.ledger_for_run, rid)
    finally:
        cluster.stop()
        client.close()
    assert view.stop_reason == "accepted" and len(dead) == 1
    [first] = view.workflows
    assert first.executor != cluster.executor(dead[0])  # finished by the survivor
    assert [r[2] for r in durable_app.effects()] == ["cr-1:a", "cr-1:b", "cr-1:c"]
    reconciled = [e for e in ledger if "reconciled: happened" in e.note]
    assert len(reconciled) == 1  # the effect cut before its outcome: found in the tool's log
    # model.log: one line per (run, step); the recovered run was not asked again for steps 0 and 1
    asked = Counter(line.split("\t")[1] for line in (cluster_dir / "model.log").read_text().splitlines())
    assert asked == {"0": 1, "1": 1, "2": 1, "3": 1}, asked
    assert (first.output or {}).get("replayed_steps") == 3  # model, turn, model; the cut turn ran again


def test_a_run_cancelled_while_its_worker_is_dead_is_not_handed_back_to_a_survivor(
    pg_url: str, cluster_dir: Path, capsys: Any
) -> None:
    """The operator cancels a run whose worker was killed mid-run; the survivor that takes over
    the dead worker's runs hands back only the others, and the cancelled one does nothing more."""
    from tether.cli import main
    from tether.durable import DurableClient
    from tether.durable._deploy import init_deployment

    cluster = Cluster(pg_url, cluster_dir, DURABLE_MODEL_S="0.4")
    init_deployment(pg_url)
    client = DurableClient(pg_url)
    try:
        cluster.start("w1")
        cancelled = client.submit(durable_app.APP, "kc-1: log a; log b; log c", ACME)
        kept = client.submit(durable_app.APP, "kc-2: log a; log b; log c", GLOBEX)
        deadline = time.monotonic() + 60
        while {r[2] for r in durable_app.effects()} < {"kc-1:a", "kc-2:a"}:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        cluster.kill("w1")
        assert {client.run(r).status for r in (cancelled, kept)} == {"running"}  # held by the dead
        assert main(["runs", "--db", pg_url, "cancel", cancelled, "--json"]) == 0
        capsys.readouterr()
        cluster.start("w2")  # the survivor: takes w1's runs once its heartbeat is 3 s old
        done = client.wait(kept, timeout_s=60)
        time.sleep(1.0)
        view = client.run(cancelled)
    finally:
        cluster.stop()
        client.close()
    assert (done.status, done.stop_reason) == ("finished", "accepted")
    assert (view.status, view.stop_reason) == ("cancelled", "cancelled")
    logged = [r[2] for r in durable_app.effects()]
    assert logged.count("kc-2:a") == 1 and "kc-2:c" in logged
    assert [x for x in logged if x.startswith("kc-1:")] == ["kc-1:a"]  # nothing after the cancel
    events = [json.loads(x) for x in (cluster_dir / "w2.log").read_text().splitlines() if x.startswith("{")]
    [taken] = [e for e in events if e["event"] == "executors_recovered"]
    assert taken["dead"] == [cluster.executor("w1")] and taken["requeued"] == [kept]


def test_a_worker_whose_database_connections_are_cut_goes_on_and_repeats_nothing(
    pg_url: str, cluster_dir: Path, pg_dsn: str
) -> None:
    import psycopg

    from tether.durable import DurableClient
    from tether.durable._deploy import init_deployment

    cluster = Cluster(pg_url, cluster_dir, DURABLE_EFFECT_S="0.1", DURABLE_MODEL_S="0.1")
    init_deployment(pg_url)  # once, explicitly: a client creates nothing
    client = DurableClient(pg_url)
    runs = {}
    try:
        cluster.start("w1", wait=False)
        cluster.start("w2", wait=False)
        cluster.ready("w1")
        cluster.ready("w2")
        objectives = {f"cut-{i}": f"cut-{i}: log a; both b; log c; log d" for i in range(6)}
        for tag, objective in objectives.items():
            runs[tag] = client.submit(durable_app.APP, objective, ACME)
        cuts = []

        def cut() -> None:
            if len(cuts) < 3 and durable_app.effects():
                with psycopg.connect(pg_dsn, autocommit=True) as admin:
                    w1 = cluster.executor("w1")
                    row = admin.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE application_name IN (%s, %s)",
                        (f"tether:{w1}", f"dbos:{w1}"),
                    ).fetchone()
                cuts.append(row[0] if row else 0)
                time.sleep(0.5)

        _wait_all(client, runs, timeout_s=90, tick=cut)
        figures = _check_invariants(client, runs, dict.fromkeys(runs, "accepted"), objectives)
        alive = cluster.dead() == []
    finally:
        cluster.stop()
        client.close()
    assert sum(cuts) >= 3, cuts  # connections of w1 were really cut
    assert alive  # w1 reconnected instead of dying
    assert figures["effects"] == 6 * 4


@pytest.mark.spec("T5")
def test_an_effect_no_tool_can_reconcile_is_escalated_to_a_person_never_retried(
    pg_url: str, cluster_dir: Path, capsys: Any
) -> None:
    from tether.cli import main
    from tether.durable import DurableClient
    from tether.durable._deploy import init_deployment

    cluster = Cluster(pg_url, cluster_dir, DURABLE_CRASH_ON="esc-1:x")
    init_deployment(pg_url)  # once, explicitly: a client creates nothing
    client = DurableClient(pg_url)
    try:
        cluster.start("w1")
        rid = client.submit(durable_app.APP, "esc-1: note x; log after", ACME)

        def restart() -> None:
            for name in cluster.dead():
                cluster.start(name)

        deadline = time.monotonic() + 60
        while (view := client.run(rid)) is None or view.status != "paused":
            assert time.monotonic() < deadline, view
            restart()
            time.sleep(0.2)
        [entry] = blocking(client.stores.approvals.ledger_for_run, rid)
        assert str(entry.status) == "escalated" and "cannot be asked" in entry.note
        assert [r[2] for r in durable_app.effects()] == ["esc-1:x"]  # not retried
        # The operator's view: the listing names the entry and the command that resolves it, and
        # the worker logged it.
        capsys.readouterr()
        assert main(["runs", "--db", pg_url, "escalations", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["escalations"]
        assert [(e["key"], e["run_id"], e["tool"]) for e in listed] == [(entry.key, rid, "notify")]
        assert listed[0]["resolve"] == f"tether runs resolve {entry.key} --happened yes|no"
        logged = [
            json.loads(x) for x in (cluster_dir / "w1.log").read_text().splitlines() if x.startswith("{")
        ]
        assert [e["key"] for e in logged if e["event"] == "effect_escalated"] == [entry.key]
        # A person checks the tool's side and records it; the run continues from any machine.
        assert (
            main(["runs", "--db", pg_url, "resolve", entry.key, "--happened", "yes", "--reviewer", "ana"])
            == 0
        )
        assert main(["runs", "--db", pg_url, "resume", rid, "--wait", "60"]) == 0
        view = client.run(rid)
    finally:
        cluster.stop()
        client.close()
    assert (view.status, view.stop_reason) == ("finished", "accepted")
    assert [r[2] for r in durable_app.effects()] == ["esc-1:x", "esc-1:after"]
    events = run_events(cluster_dir)
    kinds = {e["event"] for e in events}
    assert {"run_claimed", "run_paused", "effect_escalated", "run_resumed", "run_finished"} <= kinds
    assert {e["tenant"] for e in events} == {"acme"}
    capsys.readouterr()
    assert main(["runs", "--db", pg_url, "escalations", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["escalations"] == []
