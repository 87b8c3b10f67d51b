"""Durable runs on 1, 2 and 4 worker processes, and what durability costs per step.

Against the local fake chat server (``tether_testing.fake_server`` in its own process, asking for
``lookup`` until ``steps=N`` results are in), on PostgreSQL (``--dsn``, default
``$TETHER_TEST_PG_DSN`` or ``postgresql://postgres@127.0.0.1:5432/test``; a fresh schema per
measurement, dropped after):

1. throughput: R runs submitted at once to N ``tether worker`` processes (N = 1, 2, 4; each
   ``--concurrency 4``); runs/s from the first submission to the last completion, and the
   time to first step (submission → the first model call recorded by DBOS) at p50 and p95,
   under that burst (it includes waiting in the queue);
2. the cost of durability: the same agent run one run at a time, in process (``Host.run``, its
   model's ``complete`` timed apart from the rest, which is the tool turns and the loop) and as
   a durable run on one worker (queue, DBOS steps on Postgres, the trace index), and the time to
   first step of a run submitted to an idle worker;
3. DBOS's own cost next to tether's, measured in alternating rounds (one bare DBOS workflow,
   then one durable run, so both meet the same load): the bare workflow (launched in this
   process on a fresh schema of the same database) has as many steps as the durable run (model
   calls + tool turns), each returning the same 512-character record; its cost per step is its
   duration over its steps. Tether's durable cost per step is (durable run - in-process run) /
   steps (the durable run from its dequeue to its completion, as DBOS records them); per model
   call and per tool turn, it is the median wall time DBOS's timestamps give each kind of step
   (from the end of the step before it, so the check before a step and the loop's code between
   steps count) minus the in-process time of that kind. The ratio is tether's per-step cost over
   the bare DBOS step's (target: at most 2). The same in CPU time: the bare workflow's
   (this process's, while it runs) per step, and the worker process's per durable run, less
   what the idle worker's queue polling uses in that time (sampled over 2 s), less the
   in-process run's, per step.

All figures come from one invocation on this machine (every process shares its cores), so the
ratios are the figures to compare. The last line is one JSON object.
Usage: ``python bench/distributed.py [--quick] [--cost-only] [--dsn DSN]`` (``--cost-only``: 2. and 3.).
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
            return list(found)
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


class BareDbos:
    """A bare DBOS workflow of ``steps`` steps, each returning a 512-character record, launched in
    this process on a fresh schema of the same database: ``time()`` runs one, in seconds."""

    def __init__(self, dsn: str, steps: int) -> None:
        from dbos import DBOS, StepOptions

        from tether.durable._config import dbos_config

        self.dsn, self.steps = dsn, steps
        self.schema = f"bench_bare_{uuid.uuid4().hex[:8]}"
        cfg = dbos_config(f"{dsn}?schema={self.schema}", executor_id="bench-bare")
        cfg["name"] = "tether-bench-bare"
        cfg["application_version"] = "bare"

        async def record() -> str:
            return distributed_app.RESULT

        @DBOS.workflow(name="bench.bare")
        async def bare(n: int) -> int:
            for _ in range(n):
                await DBOS.run_step_async(StepOptions(name="bench.step"), record)
            return n

        self._bare = bare
        DBOS(config=cfg)  # type: ignore[arg-type]
        DBOS.launch()

    def time(self) -> float:
        async def one() -> float:
            started = time.perf_counter()
            assert await self._bare(self.steps) == self.steps
            return time.perf_counter() - started

        return anyio.run(one)

    def close(self) -> None:
        import psycopg
        from dbos import DBOS

        DBOS.destroy(workflow_completion_timeout_sec=0)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {self.schema}_dbos CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")


def in_process(runs: int, steps: int) -> dict[str, float]:
    """The same agent run in process (``Host.run``, connection warm): ms per run, per model call
    (the model's own ``complete``) and per tool turn (the rest of the run, over its turns)."""
    calls = steps + 1

    async def local() -> dict[str, float]:
        host, agent = distributed_app.build_local()
        model = agent.model
        complete = model.complete
        spent = [0.0]

        async def timed(request: Any) -> Any:
            started = time.perf_counter()
            try:
                return await complete(request)
            finally:
                spent[0] += time.perf_counter() - started

        model.complete = timed  # type: ignore[method-assign]
        per_run, per_call, per_turn = [], [], []
        cpu = 0.0
        try:
            for i in range(runs + 1):
                spent[0] = 0.0
                started, cpu_started = time.perf_counter(), time.process_time()
                result = await host.run(agent, f"Collect the records. steps={steps}", context=CTX)
                took = time.perf_counter() - started
                cpu += (time.process_time() - cpu_started) if i else 0.0
                assert result.ok and result.llm_calls == calls, result.stop_reason
                if i:  # the first run warms the connection
                    per_run.append(took * 1000)
                    per_call.append(spent[0] * 1000 / calls)
                    per_turn.append((took - spent[0]) * 1000 / steps)
        finally:
            await host.aclose()
        return {
            "run_ms": statistics.median(per_run),
            "model_ms": statistics.median(per_call),
            "turn_ms": statistics.median(per_turn),
            "cpu_ms": cpu * 1000 / runs,
        }

    return anyio.run(local)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _slots(recorded: list[Any], since_ms: float) -> dict[str, list[float]]:
    """The wall time of each recorded step of a run (its kind's name to a list, in ms): from the
    end of the step before it (or the dequeue, for the first) to its own end, so DBOS's check
    before a step and the loop's own code between steps count with it."""
    out: dict[str, list[float]] = {}
    prev = since_ms
    for s in sorted(recorded, key=lambda r: r["function_id"]):
        end = s.get("completed_at_epoch_ms")
        if end is None:
            continue
        out.setdefault(s["function_name"], []).append(float(end - prev))
        prev = end
    return out


def durability_cost(dsn: str, model_url: str, runs: int, steps: int) -> dict[str, Any]:
    """Rounds of one bare DBOS workflow then one durable run (alternating, so both meet the same
    load), after the in-process baseline; every figure is a median over the rounds."""
    calls, turns = steps + 1, steps  # one tool turn per lookup; calls = turns + the answer
    os.environ["BENCH_MODEL_URL"] = model_url
    local = in_process(runs, steps)
    dep = Deployment(dsn, 1, concurrency=1, model_url=model_url)
    bare = BareDbos(dsn, calls + turns)
    try:
        per_run, bare_step, first_step = [], [], []
        cpu = {"bare": 0.0, "durable": 0.0}
        idle = 0.0
        slots: dict[str, list[float]] = {"tether.model": [], "tether.turn": []}
        for i in range(runs + 1):
            cpu_started = time.process_time()
            bare_s = bare.time()
            bare_cpu = time.process_time() - cpu_started
            worker_cpu, started = _cpu_s(dep.procs[0].pid), time.perf_counter()
            rid = dep.client.submit(distributed_app.APP, f"Collect the records. steps={steps}", CTX)
            [w] = _finished(dep.client, [rid], timeout_s=120)
            worker_cpu = _cpu_s(dep.procs[0].pid) - worker_cpu - idle * (time.perf_counter() - started)
            if not i:  # the first round warms the worker and the bare workflow's pool; then
                idle_from = _cpu_s(dep.procs[0].pid)  # how much CPU the idle worker's polling uses
                time.sleep(2.0)
                idle = (_cpu_s(dep.procs[0].pid) - idle_from) / 2.0
                continue
            cpu["bare"] += bare_cpu
            cpu["durable"] += worker_cpu
            bare_step.append(bare_s * 1000 / (calls + turns))
            per_run.append(float(w.completed_at - w.dequeued_at))
            recorded = dep.client.dbos.list_workflow_steps(rid)
            for kind, took in _slots(recorded, w.dequeued_at).items():
                slots.setdefault(kind, []).extend(took)
            first = min(recorded, key=lambda s: s["function_id"])
            first_step.append((first["completed_at_epoch_ms"] - w.created_at) / 1000)
    finally:
        bare.close()
        dep.close()
    run_ms, bare_ms = statistics.median(per_run), statistics.median(bare_step)
    per_step = (run_ms - local["run_ms"]) / (calls + turns)
    model_slot, turn_slot = statistics.median(slots["tether.model"]), statistics.median(slots["tether.turn"])
    n = calls + turns
    cpu_bare, cpu_durable = cpu["bare"] * 1000 / runs / n, cpu["durable"] * 1000 / runs
    cpu_step = (cpu_durable - local["cpu_ms"]) / n
    return {
        "durable_steps_per_run": calls + turns,
        "steps": steps,
        "bare_dbos_ms_per_step": round(bare_ms, 2),
        "durability_ms_per_step": round(per_step, 2),
        "tether_step_over_bare_dbos": round(per_step / bare_ms, 2),
        "bare_dbos_cpu_ms_per_step": round(cpu_bare, 2),
        "durability_cpu_ms_per_step": round(cpu_step, 2),
        "tether_step_cpu_over_bare_dbos": round(cpu_step / cpu_bare, 2),
        "durability_ms_per_model_call": round(model_slot - local["model_ms"], 2),
        "durability_ms_per_tool_turn": round(turn_slot - local["turn_ms"], 2),
        "model_step_slot_ms_p50": model_slot,
        "turn_step_slot_ms_p50": turn_slot,
        "in_process_ms_per_run": round(local["run_ms"], 2),
        "in_process_ms_per_model_call": round(local["model_ms"], 2),
        "in_process_ms_per_tool_turn": round(local["turn_ms"], 2),
        "durable_ms_per_run": run_ms,
        "in_process_cpu_ms_per_run": round(local["cpu_ms"], 2),
        "durable_worker_cpu_ms_per_run": round(cpu_durable, 2),
        "idle_worker_cpu_ms_per_s": round(idle * 1000, 2),
        "durable_over_in_process": round(run_ms / local["run_ms"], 2),
        "idle_first_step_p50_s": round(pct(first_step, 0.5), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke run)")
    parser.add_argument("--cost-only", action="store_true", help="only the cost of a durable step (3.)")
    parser.add_argument(
        "--dsn", default=os.environ.get("TETHER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    )
    args = parser.parse_args()
    runs, steps, cost_runs = (12, 3, 7) if args.quick else (48, 3, 21)
    server = FakeServer()
    try:
        counts = () if args.cost_only else (1, 2, 4)
        scale = [throughput(args.dsn, server.url, n, runs, steps) for n in counts]
        cost = durability_cost(args.dsn, server.url, cost_runs, steps=8)
    finally:
        server.close()
    if scale:
        print(f"{'workers':>7} {'runs/s':>8} {'first step p50':>15} {'p95':>8}")
    for row in scale:
        p50, p95 = row["first_step_p50_s"], row["first_step_p95_s"]
        print(f"{row['workers']:>7} {row['runs_per_s']:>8} {p50:>14}s {p95:>7}s")
    c = cost
    print(
        f"a run of {c['steps'] + 1} model calls and {c['steps']} tool turns: in process"
        f" {c['in_process_ms_per_run']} ms, durable {c['durable_ms_per_run']} ms"
        f" (x{c['durable_over_in_process']});"
        f" idle worker, first step after {c['idle_first_step_p50_s']} s"
    )
    print(
        f"per durable step: tether +{c['durability_ms_per_step']} ms, a bare DBOS step"
        f" {c['bare_dbos_ms_per_step']} ms (x{c['tether_step_over_bare_dbos']});"
        f" per model call +{c['durability_ms_per_model_call']} ms, per tool turn"
        f" +{c['durability_ms_per_tool_turn']} ms"
    )
    print(
        f"CPU per durable step: tether +{c['durability_cpu_ms_per_step']} ms (the worker's, over the"
        f" in-process run's), a bare DBOS step {c['bare_dbos_cpu_ms_per_step']} ms"
        f" (x{c['tether_step_cpu_over_bare_dbos']})"
    )
    base = scale[0]["runs_per_s"] if scale else None
    summary = {
        "bench": "distributed",
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0],
        "runs_per_worker_count": runs,
        "steps_per_run": steps,
        "scale": scale,
        "speedup_2_over_1": round(scale[1]["runs_per_s"] / base, 2) if base else None,
        "speedup_4_over_1": round(scale[2]["runs_per_s"] / base, 2) if base else None,
        "durability": cost,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
