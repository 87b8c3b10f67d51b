"""What one ``tether submit`` costs, as an operator runs it: a fresh ``tether`` process per call
(interpreter start, imports, connecting, enqueueing, exit), on PostgreSQL (``--dsn``, default
``$TETHER_TEST_PG_DSN`` or ``postgresql://postgres@127.0.0.1:5432/test``; a fresh schema,
initialised with ``tether db init`` and dropped after) and on a SQLite deployment (a fresh
folder; ``--backends`` chooses: ``postgresql,sqlite`` by default).

Two apps: ``module:factory`` (``distributed_app:build``, nothing to read) and an agent file
(read, checked and digested: its tools module and instructions included), ``--calls`` calls
each, interleaved; seconds per call at p50 and p90 (wall clock), the CPU seconds of the call's
process at p50 (user + system: what the call costs on a loaded machine, where the wall clock also
counts waiting for a core), and, for the batch form, seconds per run of one ``tether submit
--batch`` of ``--calls`` runs. No worker runs: only the submission is timed. Bytecode is written
and read as an installed tether's would be (``PYTHONDONTWRITEBYTECODE`` is dropped for the calls).
The last line is one JSON object: PostgreSQL's figures under their plain names
(``module_factory_p50_s``…), SQLite's prefixed ``sqlite_``. Usage: ``python bench/submit.py
[--calls N] [--dsn DSN] [--backends postgresql,sqlite]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent

TOOLS = '''
from typing import Annotated
from pydantic import Field
from tether import Effect, tool


@tool(effect=Effect.READ)
def lookup(key: Annotated[str, Field(description="The key to look up.")]) -> str:
    """Look up one key."""
    return key
'''

AGENT = """name: bench-submit
instructions: Look things up, then answer.
model: {name: fake-model, base_url: "http://127.0.0.1:9/v1", api_key_env: BENCH_SUBMIT_KEY}
tools: ["bench_submit_tools:lookup"]
policy: {tenant: bench}
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("TETHER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--backends", default="postgresql,sqlite")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-submit-"))
    (folder / "bench_submit_tools.py").write_text(TOOLS, encoding="utf-8")
    (folder / "agent.yaml").write_text(AGENT, encoding="utf-8")
    out: dict[str, object] = {"bench": "submit", "calls": args.calls, "cpus": os.cpu_count()}
    for backend in args.backends.split(","):
        prefix = "" if backend == "postgresql" else f"{backend}_"
        if backend == "postgresql":
            figures = _on_postgresql(args.dsn, folder, args.calls)
        else:
            figures = _bench(f"sqlite:///{folder / 'deployment'}", folder, args.calls, backend)
        out.update({prefix + key: value for key, value in figures.items()})
    out["loadavg"] = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
    print(json.dumps(out))


def _on_postgresql(dsn: str, folder: Path, calls: int) -> dict[str, float]:
    import psycopg

    schema = f"bench_submit_{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in dsn else "?"
    try:
        return _bench(f"{dsn}{sep}schema={schema}", folder, calls, "postgresql")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema}_dbos CASCADE")


def _bench(url: str, folder: Path, calls: int, backend: str) -> dict[str, float]:
    """Seconds per ``tether submit`` on the deployment at ``url`` (created here)."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "PYTHONPATH": os.pathsep.join([str(HERE), str(folder), os.environ.get("PYTHONPATH", "")]),
        "BENCH_SUBMIT_KEY": "sk-bench",
    }
    tether = [sys.executable, "-m", "tether.cli"]
    cpu: dict[str, list[float]] = {}

    def call(*words: str, stdin: str | None = None, name: str | None = None) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            [*tether, *words], env=env, cwd=folder, input=stdin, capture_output=True, text=True, check=False
        )
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if name is not None:
            used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            cpu.setdefault(name, []).append(used)
        if done.returncode != 0:
            raise SystemExit(
                f"{' '.join(words[:3])} failed ({done.returncode}): {done.stderr or done.stdout}"
            )
        return elapsed

    apps = {"module_factory": "distributed_app:build", "agent_file": str(folder / "agent.yaml")}
    call("db", "init", url)
    for app in apps.values():  # warm: bytecode caches written, the version looked up once
        call("submit", "warm-up", "--agent", app, "--db", url)
    times: dict[str, list[float]] = {name: [] for name in apps}
    for i in range(calls):
        for name, app in apps.items():
            objective = f"Collect the records. steps=2 #{i}"
            times[name].append(call("submit", objective, "--agent", app, "--db", url, name=name))
    lines = "".join(
        json.dumps({"objective": f"batch run {i}", "agent": apps["agent_file"]}) + "\n" for i in range(calls)
    )
    batch_s = call("submit", "--batch", "-", "--db", url, stdin=lines)
    out: dict[str, float] = {}
    for name, values in times.items():
        out[f"{name}_p50_s"] = round(statistics.median(values), 3)
        out[f"{name}_p90_s"] = round(pct(values, 0.9), 3)
        out[f"{name}_cpu_p50_s"] = round(statistics.median(cpu[name]), 3)
        print(
            f"{backend}: tether submit --agent {apps[name]}: p50 {out[f'{name}_p50_s']} s,"
            f" p90 {out[f'{name}_p90_s']} s, CPU p50 {out[f'{name}_cpu_p50_s']} s"
        )
    out["batch_per_run_s"] = round(batch_s / calls, 4)
    print(f"{backend}: tether submit --batch ({calls} runs, agent file): {out['batch_per_run_s']} s per run")
    return out


if __name__ == "__main__":
    main()
