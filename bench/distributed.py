"""Durable runs on 1, 2 and 4 worker processes, and what durability costs per step.

Against the local fake chat server (``tether_testing.fake_server`` in its own process, asking for
``lookup`` until ``steps=N`` results are in), on PostgreSQL (``--dsn``, default
``$TETHER_TEST_PG_DSN`` or ``postgresql://postgres@127.0.0.1:5432/test``; a fresh schema per
measurement, dropped after):

1. throughput: R runs submitted at once to N ``tether worker`` processes (N = 1, 2, 4; each
   ``--concurrency 4``); runs/s from the first submission to the last completion, and the
   time to first step (submission → the first model call recorded by DBOS) at p50 and p95,
   under that burst (it includes waiting in the queue);
2. the cost of durability: the same agent run one run at a time, in process (``Host.run``)
   and as a durable run on one worker (queue, DBOS steps on Postgres, the trace index), per
   model call, and their ratio (both include the fake server's own time); and the time to
   first step of a run submitted to an idle worker;
3. DBOS's own cost next to tether's: a bare DBOS workflow (in this process, on a fresh schema of
   the same database) of as many steps as the durable run has (model calls + tool turns), each
   step returning the same 512-character record; its cost per step, next to tether's durable cost
   per step ((durable run - in-process run) / steps), per model call and per tool turn (the
   median duration DBOS recorded for each kind of step, minus the in-process run's time per
   model call for a model step), and the ratio of tether's per-step cost to DBOS's.

All figures come from one invocation on this machine (every process shares its cores), so the
ratios are the figures to compare. The last line is one JSON object.
Usage: ``python bench/distributed.py [--quick] [--dsn DSN]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import distributed_app  # bench/distributed_app.py, next to this script  # noqa: E402

from tether import TrustedContext  # noqa: E402

CTX = TrustedContext(tenant="bench")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class FakeServer:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether_testing.fake_server"], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class Deployment:
    """A fresh schema and N worker processes serving it."""

    def __init__(self, dsn: str, workers: int, concurrency: int, model_url: str) -> None:
        self.dsn = dsn
        self.schema = f"bench_{uuid.uuid4().hex[:8]}"
        self.url = f"{dsn}?schema={self.schema}"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(HERE), os.environ.get("PYTHONPATH", "")]),
            "BENCH_MODEL_URL": model_url,
        }
        from tether.durable import DurableClient
        from tether.durable._deploy import init_deployment

        init_deployment(self.url)  # the schemas, once, before the workers race to create them
        self.client = DurableClient(self.url)
        self.procs = []
        for i in range(workers):
            cmd = [
                sys.executable, "-m", "tether.cli", "worker", "--db", self.url, "--app", distributed_app.APP,
                "--executor-id", f"bench-{i}", "--concurrency", str(concurrency), "--poll", "0.05",
            ]  # fmt: skip
            self.procs.append(
                subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            )
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("a worker did not start")

    def close(self) -> None:
        import psycopg

        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(30)
        self.client.close()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {self.schema}_dbos CASCADE")


def _finished(client: Any, ids: list[str], timeout_s: float) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = client.dbos.list_workflows(workflow_ids=ids, load_input=False, load_output=True)
        done = [w for w in found if w.status in ("SUCCESS", "ERROR", "CANCELLED")]
        if len(done) == len(ids):
            bad = [
                w.workflow_id for w in done if w.status != "SUCCESS" or w.output["stop_reason"] != "accepted"
            ]
            if bad:
                raise RuntimeError(f"runs did not end accepted: {bad[:3]}")
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(done)}/{len(ids)} runs finished in {timeout_s}s")
        time.sleep(0.1)


def throughput(dsn: str, model_url: str, workers: int, runs: int, steps: int) -> dict[str, Any]:
    dep = Deployment(dsn, workers, concurrency=4, model_url=model_url)
    try:
        ids = [
            dep.client.submit(distributed_app.APP, f"Collect the records. steps={steps}", CTX)
            for _ in range(runs)
        ]
        found = _finished(dep.client, ids, timeout_s=600)
        first_steps = []
        for w in found:
            recorded = dep.client.dbos.list_workflow_steps(w.workflow_id)
            first = min(recorded, key=lambda s: s["function_id"])
            first_steps.append((first["completed_at_epoch_ms"] - w.created_at) / 1000)
        span = (max(w.completed_at for w in found) - min(w.created_at for w in found)) / 1000
        executors = sorted({w.executor_id for w in found})
    finally:
        dep.close()
    return {
        "workers": workers,
        "runs": runs,
        "runs_per_s": round(runs / span, 2),
        "first_step_p50_s": round(pct(first_steps, 0.5), 3),
        "first_step_p95_s": round(pct(first_steps, 0.95), 3),
        "executors_used": len(executors),
    }


def bare_dbos(dsn: str, runs: int, steps: int) -> dict[str, Any]:
    """A bare DBOS workflow of ``steps`` steps, each returning a 512-character record: ms/step."""
    import psycopg
    from dbos import DBOS, StepOptions

    from tether.durable._config import dbos_config

    schema = f"bench_bare_{uuid.uuid4().hex[:8]}"
    cfg = dbos_config(f"{dsn}?schema={schema}", executor_id="bench-bare")
    cfg["name"] = "tether-bench-bare"
    cfg["application_version"] = "bare"

    async def record() -> str:
        return distributed_app.RESULT

    @DBOS.workflow(name="bench.bare")
    async def bare(n: int) -> int:
        for _ in range(n):
            await DBOS.run_step_async(StepOptions(name="bench.step"), record)
        return n

    DBOS(config=cfg)  # type: ignore[arg-type]
    DBOS.launch()
    try:

        async def timed() -> list[float]:
            out = []
            for _ in range(runs + 1):
                started = time.perf_counter()
                assert await bare(steps) == steps
                out.append((time.perf_counter() - started) / steps)
            return out[1:]  # the first warms the pool

        per_step = anyio.run(timed)
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=0)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema}_dbos CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return {"steps": steps, "ms_per_step": round(statistics.median(per_step) * 1000, 2)}


def durability_cost(dsn: str, model_url: str, runs: int, steps: int) -> dict[str, Any]:
    calls = steps + 1
    os.environ["BENCH_MODEL_URL"] = model_url

    async def local() -> list[float]:
        host, agent = distributed_app.build_local()
        out = []
        try:
            for _ in range(runs + 1):
                started = time.perf_counter()
                result = await host.run(agent, f"Collect the records. steps={steps}", context=CTX)
                assert result.ok and result.llm_calls == calls, result.stop_reason
                out.append((time.perf_counter() - started) / calls)
        finally:
            await host.aclose()
        return out[1:]  # the first run warms the connection

    in_process = anyio.run(local)
    dep = Deployment(dsn, 1, concurrency=1, model_url=model_url)
    try:
        durable, first_step, per_run = [], [], []
        step_ms: dict[str, list[float]] = {"tether.model": [], "tether.turn": []}
        for i in range(runs + 1):
            rid = dep.client.submit(distributed_app.APP, f"Collect the records. steps={steps}", CTX)
            [w] = _finished(dep.client, [rid], timeout_s=120)
            if i:  # the first run warms the worker
                durable.append((w.completed_at - w.dequeued_at) / 1000 / calls)
                per_run.append((w.completed_at - w.dequeued_at) / 1000)
                recorded = dep.client.dbos.list_workflow_steps(rid)
                for s in recorded:
                    if s["function_name"] in step_ms and s.get("started_at_epoch_ms"):
                        took = s["completed_at_epoch_ms"] - s["started_at_epoch_ms"]
                        step_ms[s["function_name"]].append(float(took))
                first = min(recorded, key=lambda s: s["function_id"])
                first_step.append((first["completed_at_epoch_ms"] - w.created_at) / 1000)
    finally:
        dep.close()
    local_ms, durable_ms = statistics.median(in_process) * 1000, statistics.median(durable) * 1000
    turns = steps  # one tool turn per lookup; calls = turns + the answer
    run_overhead_ms = statistics.median(per_run) * 1000 - local_ms * calls
    return {
        "durable_steps_per_run": calls + turns,
        "durability_ms_per_step": round(run_overhead_ms / (calls + turns), 2),
        "model_step_ms_p50": round(statistics.median(step_ms["tether.model"]), 2)
        if step_ms["tether.model"]
        else None,
        "turn_step_ms_p50": round(statistics.median(step_ms["tether.turn"]), 2)
        if step_ms["tether.turn"]
        else None,
        "steps": steps,
        "in_process_ms_per_call": round(local_ms, 2),
        "durable_ms_per_call": round(durable_ms, 2),
        "durability_ms_per_call": round(durable_ms - local_ms, 2),
        "durable_over_in_process": round(durable_ms / local_ms, 2),
        "idle_first_step_p50_s": round(pct(first_step, 0.5), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke run)")
    parser.add_argument(
        "--dsn", default=os.environ.get("TETHER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    )
    args = parser.parse_args()
    runs, steps, cost_runs = (12, 3, 5) if args.quick else (48, 3, 15)
    server = FakeServer()
    try:
        scale = [throughput(args.dsn, server.url, n, runs, steps) for n in (1, 2, 4)]
        cost = durability_cost(args.dsn, server.url, cost_runs, steps=8)
    finally:
        server.close()
    bare = bare_dbos(args.dsn, cost_runs, steps=cost["durable_steps_per_run"])
    cost["bare_dbos_ms_per_step"] = bare["ms_per_step"]
    cost["tether_step_over_bare_dbos"] = round(cost["durability_ms_per_step"] / bare["ms_per_step"], 2)
    print(f"{'workers':>7} {'runs/s':>8} {'first step p50':>15} {'p95':>8}")
    for row in scale:
        p50, p95 = row["first_step_p50_s"], row["first_step_p95_s"]
        print(f"{row['workers']:>7} {row['runs_per_s']:>8} {p50:>14}s {p95:>7}s")
    local, durable = cost["in_process_ms_per_call"], cost["durable_ms_per_call"]
    print(
        f"per model call: in process {local} ms, durable {durable} ms"
        f" (+{cost['durability_ms_per_call']} ms, x{cost['durable_over_in_process']});"
        f" idle worker, first step after {cost['idle_first_step_p50_s']} s"
    )
    print(
        f"per durable step: tether +{cost['durability_ms_per_step']} ms, a bare DBOS step"
        f" {cost['bare_dbos_ms_per_step']} ms (x{cost['tether_step_over_bare_dbos']});"
        f" recorded step p50: model {cost['model_step_ms_p50']} ms, tool turn {cost['turn_step_ms_p50']} ms"
    )
    base = scale[0]["runs_per_s"]
    summary = {
        "bench": "distributed",
        "cpus": os.cpu_count(),
        "runs_per_worker_count": runs,
        "steps_per_run": steps,
        "scale": scale,
        "speedup_2_over_1": round(scale[1]["runs_per_s"] / base, 2),
        "speedup_4_over_1": round(scale[2]["runs_per_s"] / base, 2),
        "durability": cost,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
