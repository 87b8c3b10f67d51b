"""Client overhead per step of tether's agent loop against a local chat-completions server.

A fake server (``tether_testing.fake_server``, in its own process so it does not share the
GIL) scripts a tool loop: the model asks for ``lookup`` until N results are in, then answers.
Each tool result is 2 KB. tether runs the loop with its default settings (policy, JSONL trace
batched, the default context: no status bar) and the OpenAI-compatible backend; again with
``trace_flush="each_event"``, with no trace directory (no JSONL file), with the status bar
(and its TODO tools) on, streamed, and through the openai client's ``post``. The overhead of
one step is the wall time of back-to-back sessions (at least ``SAMPLE_CALLS`` model calls)
minus the server's handler time, divided by the number of model calls (N + 1 per session).
This process's CPU time per call is reported too: on a shared machine it is the steadier
figure.

Printed: medians over repeats for 5-, 20- and 50-step sessions (streaming off and on), the
wall and CPU time of 100 concurrent 20-step sessions (medians over the repeats), process RSS
after 1,000 sequential one-step runs, RSS per run with 1,000 idle runs in flight (each model
waits on an event), the cold start of ``tether --help``, each beside its target as a ratio to
the floor (targets are shown, never asserted), and the same loop written by hand on baselines
that need nothing beyond tether[openai]: raw ``httpx2`` posting prebuilt bodies (the floor),
the same loop sending each prebuilt ``Request`` with ``AsyncClient.send`` over four
16-connection pools as tether's backend does (``raw_httpx2_sharded``: what that path saves,
with no governance at all), and the openai client's typed ``chat.completions.create``. Peer
frameworks (OpenAI Agents SDK, Pydantic AI, LangGraph, LangChain, ADK) are reported as
installed or not; none is a dependency.

A/B rows for the machinery in the model path, each beside ``tether`` (the defaults):
``tether_one_pool`` (the backend's pool not split into shards of 16 connections; also timed
sequentially right after the concurrent burst, ``after_burst``, when every connection is
open), ``tether_no_message_cache`` (``cache_bytes=0``: every message encoded on every step),
``tether_no_item_memo`` (the context engine's per-session memo off: each request's token count
and prefix meter encode every message again) and ``tether_each_event`` (the trace written line
by line, no batching: what batching saves).

Per backend (``backends``): tether on each protocol's backend — ``openai-chat``,
``openai-responses``, ``anthropic`` — against that protocol's loopback server, as a ratio to a
raw ``httpx2`` loop speaking the same protocol, and the import time of each backend
(``bench/backends.py`` measures them; ``--no-backends`` skips them).

The last line is one JSON object. Usage: ``python bench/overhead.py [--quick | --smoke]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import httpx2
from pydantic import Field

from tether import Agent, Effect, Host, Limits, Policy, TrustedContext, tool
from tether.context import ContextConfig, StatusConfig
from tether.core.messages import AssistantMessage
from tether.models._base import ModelRequest, ModelResponse
from tether.models._openai import OpenAICompatible
from tether.trace._tracer import FlushMode

sys.path.insert(0, str(Path(__file__).parent))
import backends  # bench/backends.py, next to this script
import peers  # bench/peers.py, next to this script

RESULT = "r" * 2048  # the 2 KB tool result of every step


@tool(effect=Effect.READ)
async def lookup(key: Annotated[str, Field(description="The key to look up, e.g. 'k3'.")]) -> str:
    """Look up one key and return its 2 KB record."""
    return RESULT


class Server:
    """The fake server in a subprocess; ``handler_s()`` reads and resets its handler time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether_testing.fake_server"], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        self.http = httpx2.Client()

    def reset(self) -> None:
        self.http.post(self.url + "/stats/reset")

    def handler_s(self) -> float:
        return float(self.http.get(self.url + "/stats").json()["handler_s"])

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(10)


def make_host(trace_dir: Path | None, flush: FlushMode = "batched") -> Host:
    host = Host(policy=Policy(allow={"lookup"}), trace_dir=trace_dir, trace_flush=flush)
    host.add_tools(lookup)
    return host


def make_agent(
    url: str, *, stream: bool, transport: str = "http", status: bool = False, **model_options: Any
) -> Agent:
    limits = Limits(max_steps=200, llm_calls=200, llm_calls_hard=201, deadline_s=600)
    shards = model_options.pop("shard_connections", None)
    model = OpenAICompatible("fake-model", base_url=url, stream=stream, transport=transport, **model_options)  # type: ignore[arg-type]
    if shards is not None:
        model.shard_connections = shards
    # The default context (no status bar); ``status=True`` turns the status bar and its TODO tools on.
    context = ContextConfig(status=StatusConfig()) if status else None
    return Agent(instructions="Look things up, then answer.", model=model, limits=limits, context=context)


Session = Callable[[int], Awaitable[None]]


SAMPLE_CALLS = 100  # model calls per sample, at least: one 20-step session alone is too short to time here


async def sample(
    server: Server, session: Session, steps: int, calls: int = SAMPLE_CALLS
) -> tuple[float, float]:
    """Per model call of back-to-back sessions (at least ``calls`` calls), in microseconds: wall
    time minus the server's handler time, and this process's CPU time (the server runs in
    another process)."""
    sessions = -(-calls // (steps + 1))
    server.reset()
    gc.collect()  # untimed: garbage the runner before left is not collected on this sample's time
    cpu = time.process_time()
    started = time.perf_counter()
    for _ in range(sessions):
        await session(steps)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    calls = sessions * (steps + 1)
    return (wall - server.handler_s()) / calls * 1e6, cpu / calls * 1e6


def tether_session(
    server: Server,
    trace_dir: Path | None,
    *,
    stream: bool,
    transport: str = "http",
    flush: FlushMode = "batched",
    status: bool = False,
    **model_options: Any,
) -> Session:
    host = make_host(trace_dir, flush)
    agent = make_agent(server.url, stream=stream, transport=transport, status=status, **model_options)
    context = TrustedContext(tenant="bench")

    async def run(steps: int) -> None:
        result = await host.run(agent, f"Collect the records. steps={steps}", context=context)
        assert result.ok and result.llm_calls == steps + 1, (result.stop_reason, result.detail)

    return run


def without_item_memo(session: Session) -> Session:
    """``session`` with the context engine's per-session memo (``ItemMemo``) off while it runs:
    every item's value computed on every request, as it would be without the memo."""
    from tether.context._incremental import ItemMemo

    memo_values = ItemMemo.values

    def each_time(memo: ItemMemo[Any], items: Sequence[object]) -> list[Any]:
        owner = memo._owner
        return [memo._compute(i) if owner is None else memo._compute(owner(), i) for i in items]

    async def run(steps: int) -> None:
        setattr(ItemMemo, "values", each_time)  # noqa: B010 - this row's runs only
        try:
            await session(steps)
        finally:
            setattr(ItemMemo, "values", memo_values)  # noqa: B010

    return run


def _tool_call_turn(message: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    calls = message.get("tool_calls") or []
    messages.append(message)
    for c in calls:
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": RESULT})
    return bool(calls)


FLOOR_TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def floor_loop(post: Callable[[str], Awaitable[dict[str, Any]]]) -> Session:
    """The hand-written loop of the floors: post the whole history as JSON, append the answer
    and its tool results, until an answer has no tool calls. ``post`` returns the message."""

    async def run(steps: int) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "Look things up, then answer."},
            {"role": "user", "content": f"Collect the records. steps={steps}"},
        ]
        while True:
            body = json.dumps({"model": "fake-model", "tools": FLOOR_TOOLS, "messages": messages})
            if not _tool_call_turn(await post(body), messages):
                return

    return run


def raw_session(server: Server) -> Session:
    """The floor: a hand-written loop posting JSON bodies with httpx2."""
    limits = httpx2.Limits(max_connections=64, max_keepalive_connections=64)  # as tether's backend
    client = httpx2.AsyncClient(base_url=server.url, limits=limits)

    async def post(body: str) -> dict[str, Any]:
        r = await client.post("/chat/completions", content=body, headers={"content-type": "application/json"})
        return r.json()["choices"][0]["message"]  # type: ignore[no-any-return]

    return floor_loop(post)


def sharded_session(server: Server) -> Session:
    """The floor on the path tether's backend takes: the same hand-written loop, each POST a
    prebuilt ``Request`` sent with ``AsyncClient.send`` (no per-request URL and header
    merging), over four pools of 16 connections taken in turn. The gap between this and
    ``raw_httpx2`` is what that path saves, not governance."""
    limits = httpx2.Limits(max_connections=16, max_keepalive_connections=16)
    clients = [httpx2.AsyncClient(limits=limits) for _ in range(4)]
    url = httpx2.URL(server.url + "/chat/completions")
    headers = httpx2.Headers({**clients[0].headers, "content-type": "application/json"})
    turn = [0]

    async def post(body: str) -> dict[str, Any]:
        request = httpx2.Request("POST", url, headers=headers, content=body)
        turn[0] = (turn[0] + 1) % len(clients)
        response = await clients[turn[0]].send(request, stream=True)
        try:
            data = json.loads(await response.aread())
        finally:
            await response.aclose()
        return data["choices"][0]["message"]  # type: ignore[no-any-return]

    return floor_loop(post)


def typed_session(server: Server) -> Session:
    """The openai client's typed ``chat.completions.create`` in a hand-written loop."""
    import openai

    client = openai.AsyncOpenAI(api_key="no-key", base_url=server.url, max_retries=0)
    tools = FLOOR_TOOLS

    async def run(steps: int) -> None:
        messages: list[Any] = [
            {"role": "system", "content": "Look things up, then answer."},
            {"role": "user", "content": f"Collect the records. steps={steps}"},
        ]
        while True:
            r = await client.chat.completions.create(model="fake-model", messages=messages, tools=tools)
            if not _tool_call_turn(r.choices[0].message.model_dump(exclude_none=True), messages):
                return

    return run


async def concurrent_wall(run: Session, sessions: int, steps: int) -> float:
    return (await concurrent(run, sessions, steps))[0]


async def concurrent(run: Session, sessions: int, steps: int) -> tuple[float, float]:
    """Wall and this process's CPU seconds of ``sessions`` runs of ``steps`` steps at once."""
    await run(2)  # warm-up
    gc.collect()  # untimed: garbage the runner before left is not collected on this round's time
    cpu = time.process_time()
    started = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for _ in range(sessions):
            tg.create_task(run(steps))
    return time.perf_counter() - started, time.process_time() - cpu


def rss_bytes() -> int:
    """This process's resident set size now (Linux /proc; elsewhere the peak, from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


async def rss_after_runs(run: Session, runs: int) -> int:
    """RSS after ``runs`` one-step runs one after another."""
    for _ in range(runs):
        await run(1)
    gc.collect()
    return rss_bytes()


class IdleModel:
    """A model that waits on an event before answering: an idle run in flight."""

    name = "idle"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.waiting = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.waiting += 1
        await self.release.wait()
        return ModelResponse(AssistantMessage("done"))


async def idle_rss_per_run(runs: int, trace_dir: Path | None) -> tuple[float, float]:
    """Bytes of RSS per run with ``runs`` runs in flight, all waiting on their model: the floor
    (a bare task holding its two messages) first, then tether with its default settings."""
    return await _idle(runs, None), await _idle(runs, make_host(trace_dir))


async def _idle(runs: int, host: Host | None) -> float:
    model = IdleModel()
    agent = Agent(instructions="Look things up, then answer.", model=model)
    context = TrustedContext(tenant="bench")

    async def tether_run() -> None:
        assert host is not None
        await host.run(agent, "Wait, then answer.", context=context)

    async def floor_run() -> None:
        messages = [
            {"role": "system", "content": "Look things up, then answer."},
            {"role": "user", "content": "Wait, then answer."},
        ]
        await model.complete(ModelRequest(messages=()))
        messages.append({"role": "assistant", "content": "done"})

    run = floor_run if host is None else tether_run
    gc.collect()
    before = rss_bytes()
    tasks = [asyncio.create_task(run()) for _ in range(runs)]
    while model.waiting < runs:
        await asyncio.sleep(0.01)
    gc.collect()
    per_run = (rss_bytes() - before) / runs
    model.release.set()
    await asyncio.gather(*tasks)
    return per_run


def file_create_us(folder: Path, count: int = 50) -> float:
    """Median microseconds to create (and close) one new file in ``folder``: each run creates
    its trace file, and on some filesystems this is kernel work worth a fraction of a step."""
    folder.mkdir(parents=True, exist_ok=True)
    times = []
    for i in range(count):
        started = time.perf_counter()
        os.close(os.open(folder / f"probe-{i}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
        times.append(time.perf_counter() - started)
    shutil.rmtree(folder, ignore_errors=True)
    return statistics.median(times) * 1e6


def cold_start(repeats: int) -> float:
    exe = shutil.which("tether", path=str(Path(sys.executable).parent)) or shutil.which("tether")
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "tether.cli", "--help"]
    subprocess.run(cmd, capture_output=True, check=True)  # warm the OS page cache
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    repeats = 1 if args.smoke else 3 if args.quick else 7
    lengths = (1, 2, 3) if args.smoke else (5, 20, 50)  # --smoke: proves the script runs, no figures
    short, mid, long = lengths
    sessions, session_steps = (5, 2) if args.smoke else (100, 20)
    many = 20 if args.smoke else 1000  # sequential runs for RSS, and idle runs in flight at once
    calls = 1 if args.smoke else SAMPLE_CALLS  # model calls per sample: --smoke times one session
    server = Server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            trace_dir = Path(tmp) / "traces"
            create_us = file_create_us(Path(tmp) / "probe")
            print(f"creating one file in the trace folder: {create_us:.0f} us (one per run)", flush=True)
            # Memory in fresh processes: freed memory this process keeps would hide new allocations.
            idle_floor, idle_tether = memory_child("idle", many, server.url)
            print(
                f"{many} idle runs in flight: {idle_tether / 1024:.1f} KB RSS per run"
                f" (floor {idle_floor / 1024:.1f} KB; target <= 100 KB)",
                flush=True,
            )
            runners: dict[str, Session] = {
                "tether": tether_session(server, trace_dir, stream=False),
                "tether_each_event": tether_session(server, trace_dir, stream=False, flush="each_event"),
                "tether_no_trace": tether_session(server, None, stream=False),
                "tether_status": tether_session(server, trace_dir, stream=False, status=True),
                "tether_stream": tether_session(server, trace_dir, stream=True),
                "tether_openai_post": tether_session(server, trace_dir, stream=False, transport="openai"),
                "tether_one_pool": tether_session(server, trace_dir, stream=False, shard_connections=64),
                "tether_no_message_cache": tether_session(server, trace_dir, stream=False, cache_bytes=0),
                "tether_no_item_memo": without_item_memo(tether_session(server, trace_dir, stream=False)),
                "raw_httpx2": raw_session(server),
                "raw_httpx2_sharded": sharded_session(server),
                "openai_typed_create": typed_session(server),
            }
            found, peer_report = peers.sessions(server.url, RESULT)
            for name, session in found.items():
                try:
                    await session(2)
                except Exception as err:  # a peer that cannot run this agent: report, do not fail
                    peer_report[name].update(measured=False, error=f"{type(err).__name__}: {err}"[:300])
                else:
                    runners[f"peer:{name}"] = session
            for session in runners.values():
                await session(2)  # warm-up: connections, caches, imports
            # Interleaved, so every figure sees the same machine load.
            samples: dict[str, dict[int, list[tuple[float, float]]]] = {
                n: {k: [] for k in lengths} for n in runners
            }
            for _ in range(repeats):
                for name, session in runners.items():
                    for steps in lengths:
                        samples[name][steps].append(await sample(server, session, steps, calls))
                shutil.rmtree(trace_dir, ignore_errors=True)
            figures = {
                n: {k: statistics.median(w for w, _ in v) for k, v in d.items()} for n, d in samples.items()
            }
            cpu = {
                n: {k: statistics.median(c for _, c in v) for k, v in d.items()} for n, d in samples.items()
            }
            for name, by_len in figures.items():
                row = "  ".join(f"{k:2d} steps {v:7.0f} ({cpu[name][k]:6.0f} cpu)" for k, v in by_len.items())
                print(f"{name:20s} us/step: {row}", flush=True)
            label = f"{sessions} concurrent {session_steps}-step sessions"
            names = (
                "raw_httpx2",
                "raw_httpx2_sharded",
                "tether",
                "tether_each_event",
                "tether_no_trace",
                "tether_one_pool",
                "tether_no_message_cache",
            )
            rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
            after_burst: dict[str, list[tuple[float, float]]] = {"tether": [], "tether_one_pool": []}
            for _ in range(repeats):  # interleaved like the rest; medians, as one pass is noisy here
                for name in names:
                    rounds[name].append(await concurrent(runners[name], sessions, session_steps))
                    if name in ("tether", "tether_one_pool"):  # every connection of its pool now open
                        after_burst[name].append(await sample(server, runners[name], mid, calls))
            together: dict[str, tuple[float, float]] = {
                name: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
                for name, r in rounds.items()
            }
            for name in names:
                wall_s, cpu_s = together[name]
                ratio = wall_s / together["raw_httpx2"][0]
                cpu_ratio = cpu_s / together["raw_httpx2"][1]
                print(
                    f"{label}, {name}: {wall_s:.2f} s wall ({ratio:.2f}x floor), {cpu_s:.2f} s cpu"
                    f" ({cpu_ratio:.2f}x){'; target <= 1.2x' if name == 'tether' else ''}",
                    flush=True,
                )
            burst = {n: statistics.median(w for w, _ in v) for n, v in after_burst.items()}
            print(
                f"{mid} steps right after the burst (every connection open):"
                f" tether {burst['tether']:.0f} us/step,"
                f" tether_one_pool {burst['tether_one_pool']:.0f} us/step",
                flush=True,
            )
            concurrent_s, concurrent_raw = together["tether"][0], together["raw_httpx2"][0]
            rss_start, rss_raw, rss_tether = memory_child("runs", many, server.url)
            print(
                f"RSS after {many} sequential 1-step runs (fresh process): start {rss_start / 2**20:.1f} MB,"
                f" after the floor's {rss_raw / 2**20:.1f} MB, after tether's {rss_tether / 2**20:.1f} MB"
                f" (+{(rss_tether - rss_raw) / 2**20:.1f} MB for tether's)",
                flush=True,
            )
            for name in (n for n in runners if n.startswith("peer:") and not (args.quick or args.smoke)):
                wall = await concurrent_wall(runners[name], sessions, session_steps)
                peer_report[name[5:]]["concurrent_100_wall_s"] = round(wall, 3)
                print(
                    f"{sessions} concurrent {session_steps}-step sessions, {name[5:]}: {wall:.2f} s wall",
                    flush=True,
                )
    finally:
        server.close()
    backend_rows: dict[str, Any] = {}
    if not args.no_backends:
        for provider in backends.SERVER_COMMAND:
            backend_rows[provider] = await backends.measure(
                provider, repeats, 2 if args.smoke else mid, calls
            )
    cold = cold_start(1 if args.smoke else 3 if args.quick else 7)
    print(f"tether --help cold start: {cold * 1000:.0f} ms", flush=True)
    t, raw = figures["tether"], figures["raw_httpx2"]
    craw = cpu["raw_httpx2"]
    print(f"per step at {mid} steps, ratio to the raw httpx2 floor (wall / cpu); target <= 1.3x for tether:")
    for name in (
        "tether",
        "tether_each_event",
        "tether_no_trace",
        "tether_status",
        "tether_openai_post",
        "tether_one_pool",
        "tether_no_message_cache",
        "tether_no_item_memo",
        "raw_httpx2_sharded",
        "openai_typed_create",
    ):
        print(f"  {name:20s} {figures[name][mid] / raw[mid]:5.2f}x / {cpu[name][mid] / craw[mid]:5.2f}x")
    lean = figures["raw_httpx2_sharded"][mid]
    print(
        f"  tether against raw_httpx2_sharded (governance alone, same HTTP path): "
        f"{t[mid] / lean:.2f}x wall, {cpu['tether'][mid] / cpu['raw_httpx2_sharded'][mid]:.2f}x cpu"
    )
    print(
        f"tether per step, {long} steps / {short} steps: {t[long] / t[short]:.2f}x wall,"
        f" {cpu['tether'][long] / cpu['tether'][short]:.2f}x cpu (target <= 1.1x)",
        flush=True,
    )
    runners_names = list(figures)
    for name in (n for n in figures if n.startswith("peer:")):
        peer_report[name[5:]].update(
            overhead_us_per_step=round(figures[name][mid]),
            overhead_us_per_step_by_steps={str(k): round(v) for k, v in figures[name].items()},
            cpu_us_per_step_by_steps={str(k): round(v) for k, v in cpu[name].items()},
            ratio_to_tether_at_20=round(figures[name][mid] / t[mid], 2),
        )

    def rounded(by_len: dict[int, float]) -> dict[str, int]:
        return {str(k): round(v) for k, v in by_len.items()}

    return {
        "overhead_us_per_step": round(t[mid]),
        "overhead_us_per_step_by_steps": rounded(t),
        "ratio_50_to_5": round(t[long] / t[short], 3),
        "ratio_to_raw_httpx2_at_20": round(t[mid] / raw[mid], 3),
        "ratio_to_transport_floor_at_20": {
            "wall": round(t[mid] / lean, 3),
            "cpu": round(cpu["tether"][mid] / cpu["raw_httpx2_sharded"][mid], 3),
        },
        "cpu_us_per_step_by_steps": {n: rounded(cpu[n]) for n in runners_names},
        "cpu_ratio_50_to_5": round(cpu["tether"][long] / cpu["tether"][short], 3),
        "streaming_us_per_step_by_steps": rounded(figures["tether_stream"]),
        "openai_post_us_per_step_by_steps": rounded(figures["tether_openai_post"]),
        "concurrent_100_wall_s": round(concurrent_s, 3),
        "concurrent_100_wall_s_raw_httpx2": round(concurrent_raw, 3),
        "concurrent_100": {
            n: {
                "wall_s": round(w, 3),
                "cpu_s": round(c, 3),
                "wall_ratio_to_floor": round(w / concurrent_raw, 3),
                "cpu_ratio_to_floor": round(c / together["raw_httpx2"][1], 3),
            }
            for n, (w, c) in together.items()
        },
        "ratio_to_floor_at_20": {
            n: {"wall": round(figures[n][mid] / raw[mid], 3), "cpu": round(cpu[n][mid] / craw[mid], 3)}
            for n in runners_names
            if not n.startswith("peer:")
        },
        "rss": {
            "runs": many,
            "start_mb": round(rss_start / 2**20, 1),
            "after_floor_runs_mb": round(rss_raw / 2**20, 1),
            "after_tether_runs_mb": round(rss_tether / 2**20, 1),
            "tether_ratio_to_floor": round(rss_tether / rss_raw, 3),
            "tether_growth_mb": round((rss_tether - rss_raw) / 2**20, 1),
            "floor_growth_mb": round((rss_raw - rss_start) / 2**20, 1),
            "idle_kb_per_run": round(idle_tether / 1024, 1),
            "idle_kb_per_run_floor": round(idle_floor / 1024, 1),
        },
        "cold_start_s": round(cold, 4),
        "file_create_us": round(create_us, 1),
        "baselines": {
            n: rounded(figures[n]) for n in ("raw_httpx2", "raw_httpx2_sharded", "openai_typed_create")
        },
        "after_burst_us_per_step": {n: round(v) for n, v in burst.items()},
        "backends": backend_rows,
        "peers": peer_report,
        "targets": {  # shown beside the figures, never asserted
            "ratio_to_floor_at_20": 1.3,
            "ratio_50_to_5": 1.1,
            "concurrent_100_ratio_to_floor": 1.2,
            "backend_ratio_to_raw_httpx2": 1.3,
            "idle_kb_per_run": 100,
            "cold_start_s": 0.3,
        },
        "repeats": repeats,
        "smoke": args.smoke,
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def memory_child(kind: str, runs: int, url: str) -> list[float]:
    """Run one memory measurement in a fresh interpreter (``--memory``); its figures."""
    out = subprocess.run(
        [sys.executable, __file__, "--memory", kind, "--runs", str(runs), "--url", url],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return [float(x) for x in json.loads(out.stdout.strip().splitlines()[-1])]


async def memory_async(kind: str, runs: int, url: str) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        trace_dir = Path(tmp) / "traces"
        if kind == "idle":
            return list(await idle_rss_per_run(runs, trace_dir))
        server = Server.__new__(Server)  # the parent's server: only its URL is needed here
        server.url = url
        floor, tether = raw_session(server), tether_session(server, trace_dir, stream=False)
        await floor(1)
        await tether(1)  # imports, connections and first-use caches before the start figure
        gc.collect()
        start = rss_bytes()
        return [start, await rss_after_runs(floor, runs), await rss_after_runs(tether, runs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks the script runs, figures mean nothing"
    )
    parser.add_argument("--no-backends", action="store_true", help="skip the per-backend rows")
    parser.add_argument("--memory", choices=("idle", "runs"), help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory:
        print(json.dumps(asyncio.run(memory_async(args.memory, args.runs, args.url))))
        return
    result = asyncio.run(main_async(args))
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
