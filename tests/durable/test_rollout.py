"""A rolling upgrade while runs flow, as the README's "Scale out" documents it: three workers of
version 1 are replaced one by one (SIGTERM: they drain) by workers of version 2 (the app's code
changed); the last worker of version 1 stays until its version has nothing queued or running,
and the runs of version 1 still paused are moved to the new version (``tether runs move``). No
run is lost, none runs on the other version's code, and every effect happens once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import durable_app
import pytest
from test_crash import _TAGS, ACME, GLOBEX, _check_invariants, cluster_dir  # noqa: F401

from tether.policy import Approvals, Reviewer
from tether.policy._store import ProposalStatus
from tether.sql._database import blocking

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


class Workers:
    def __init__(self, url: str, folder: Path) -> None:
        self.url, self.folder = url, folder
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.suffix = uuid.uuid4().hex[:6]
        source = (HERE / "durable_app.py").read_text()
        self.code: dict[str, Path] = {}
        for version in ("v1", "v2"):  # the same app, its code changed between versions
            path = folder / f"code-{version}"
            path.mkdir()
            (path / "durable_app.py").write_text(source + f"\nCODE = {version!r}\n")
            self.code[version] = path

    def start(self, name: str, version: str) -> None:
        self.spawn(name, version)
        self.ready(name)

    def spawn(self, name: str, version: str) -> None:
        """Launch a worker; it serves the queue once ``ready`` read its line (launches overlap)."""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(self.code[version])]),
            "DURABLE_DIR": str(self.folder),
            "DURABLE_EFFECT_S": "0.1",
            "DURABLE_MODEL_S": "0.05",
        }
        cmd = [
            sys.executable, "-m", "tether.cli", "worker", "--db", self.url, "--app", durable_app.APP,
            "--executor-id", f"{name}-{self.suffix}", "--concurrency", "3", "--dead-after", "3",
            "--poll", "0.1", "--grace", "20",
        ]  # fmt: skip
        log = (self.folder / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, cwd=self.folder)

    def ready(self, name: str) -> None:
        proc = self.procs[name]
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line and json.loads(line)["ready"], (self.folder / f"{name}.log").read_text()[-3000:]

    def drain(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGTERM)
        try:  # the grace (20 s), then the exit's own bound: a generous deadline under load
            assert proc.wait(120) == 0
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError((self.folder / f"{name}.log").read_text()[-3000:]) from None

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_a_rolling_upgrade_of_three_workers_while_runs_flow_loses_none(
    pg_url: str,
    cluster_dir: Path,  # noqa: F811
    capsys: Any,
) -> None:
    from tether.cli import main
    from tether.durable import DurableClient
    from tether.durable._deploy import init_deployment

    init_deployment(pg_url)
    client = DurableClient(pg_url)
    workers = Workers(pg_url, cluster_dir)
    plans = [
        "log a; read b; log c",
        "both x; log y",
        "log pre; pay {n}; log post",  # pauses for a person
    ]
    runs: dict[str, str] = {}
    objectives: dict[str, str] = {}
    decided: set[str] = set()
    versions: dict[str, str] = {}
    held: set[str] = set()  # runs whose approval a person gives only after the upgrade

    def decide() -> None:
        store = client.stores.approvals
        desk = Approvals(store)
        for p in blocking(store.list_proposals, status=ProposalStatus.PENDING):
            if p.run_id not in held and p.id not in decided and p.run_id in _TAGS:
                decided.add(p.id)
                blocking(desk.approve, Reviewer.for_all_tenants("rita"), p.id)

    def submit(count: int) -> None:
        for _ in range(count):
            i = len(runs)
            tag = f"ru-{i}"
            objectives[tag] = f"{tag}: " + plans[i % len(plans)].format(n=100 + i)
            rid = client.submit(durable_app.APP, objectives[tag], ACME if i % 2 else GLOBEX)
            runs[tag], _TAGS[rid] = rid, tag
            versions[tag] = client.run(rid).version

    def cli(*argv: str) -> dict[str, Any]:
        capsys.readouterr()
        code = main(["runs", "--db", pg_url, *argv, "--json"])
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert code == 0, out
        return out

    def old_in_flight(v1: str) -> bool:
        listed = [
            cli("list", "--version", v1, "--status", s, "--limit", "500")["runs"]
            for s in ("queued", "running")
        ]
        return any(listed)

    try:
        for name in ("w1", "w2", "w3"):
            workers.spawn(name, "v1")
        for name in ("w1", "w2", "w3"):
            workers.ready(name)
        submit(8)
        held.add(runs["ru-2"])  # a payment of version 1, left for after the upgrade
        v1 = versions["ru-0"]
        # Version 1's other payment asks a person, who decides it before version 2 arrives.
        deadline = time.monotonic() + 90
        while not blocking(client.stores.approvals.list_proposals, run_id=runs["ru-5"]):
            assert time.monotonic() < deadline, client.run(runs["ru-5"])
            time.sleep(0.1)
        decide()
        # Version 2 arrives: new runs go to it; the old workers drain one by one.
        workers.start("n1", "v2")
        submit(6)
        workers.spawn("n2", "v2")  # launching while w1 drains; it serves the queue after
        workers.drain("w1")
        during = {
            w["executor_id"].split("-")[0]: (w["state"], w["app_version"]) for w in cli("workers")["workers"]
        }
        assert during["w1"] == ("stopped", v1) and during["w2"] == ("alive", v1)
        assert during["n1"][0] == "alive" and during["n1"][1] != v1
        decide()
        workers.ready("n2")
        submit(6)
        workers.drain("w2")
        v2 = versions[f"ru-{len(runs) - 1}"]
        assert v2 != v1 and {versions[f"ru-{i}"] for i in range(8)} == {v1}
        # The last old worker stays until its version has nothing queued or running.
        deadline = time.monotonic() + 120
        while old_in_flight(v1):
            assert time.monotonic() < deadline, "version 1 never emptied"
            decide()
            submit(1) if len(runs) < 26 else None
            time.sleep(0.3)
        # Its paused runs (nobody decided yet) move to the new version; then it goes.
        paused = cli("list", "--version", v1, "--status", "paused", "--limit", "500")["runs"]
        assert runs["ru-2"] in {r["run_id"] for r in paused}
        for row in paused:
            assert cli("move", row["run_id"], "--to", "latest")["to"] == v2
        workers.spawn("n3", "v2")
        workers.drain("w3")
        held.clear()  # the person approves now: the run resumes on version 2
        workers.ready("n3")
        submit(30 - len(runs))
        deadline = time.monotonic() + 180
        while True:
            decide()
            views = [client.run(rid) for rid in runs.values()]
            if all(v is not None and v.status == "finished" for v in views):
                break
            assert time.monotonic() < deadline, [
                (v.run_id, v.status, v.version) for v in views if v.status != "finished"
            ]
            time.sleep(0.3)
    finally:
        workers.stop()
    expected = {tag: "accepted" for tag in runs}
    figures = _check_invariants(client, runs, expected, objectives)
    assert figures["runs"] == 30
    # No run ran on the other version's code: each workflow's executor served its version.
    listed = cli("workers")["workers"]
    executors = {w["executor_id"]: w["app_version"] for w in listed}
    states = {w["executor_id"].split("-")[0]: w["state"] for w in listed}
    assert states == dict.fromkeys(("w1", "w2", "w3", "n1", "n2", "n3"), "stopped")
    for rid in runs.values():
        for w in client.run(rid).workflows:
            if w.executor in executors:
                assert executors[w.executor] == w.app_version, (rid, w)
    # The held run paused on version 1 and resumed, after the move, on version 2.
    assert [w.app_version for w in client.run(runs["ru-2"]).workflows] == [v1, v2]
    client.close()
