"""Client overhead per step of tether's agent loop against a local chat-completions server.

A fake server (``tether.models.fake_server``, in its own process so it does not share the
GIL) scripts a tool loop: the model asks for ``lookup`` until N results are in, then answers.
Each tool result is 2 KB. tether runs the loop with policy, tracing (JSONL sink, flushed per
event) and the OpenAI-compatible backend; the overhead of one step is the session's wall
time minus the server's handler time, divided by the number of model calls (N + 1).

Printed: medians over repeats for 5-, 20- and 50-step sessions (streaming off and on), the
wall time of 100 concurrent 20-step sessions, the cold start of ``tether --help``, and the
same loop written by hand on two baselines that need nothing beyond tether[openai]: raw
``httpx2`` posting prebuilt bodies (the floor) and the openai client's typed
``chat.completions.create``. Peer frameworks (OpenAI Agents SDK, Pydantic AI, LangGraph,
LangChain, ADK) are reported as installed or not; none is a dependency.

The last line is one JSON object. Usage: ``python bench/overhead.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import httpx2
from pydantic import Field

from tether import Agent, Effect, Host, Limits, Policy, TrustedContext, tool
from tether.models.openai import OpenAICompatible

RESULT = "r" * 2048  # the 2 KB tool result of every step
PEERS = {
    "openai-agents": "agents",
    "pydantic-ai": "pydantic_ai",
    "langgraph": "langgraph",
    "langchain": "langchain",
    "google-adk": "google.adk",
}


@tool(effect=Effect.READ)
async def lookup(key: Annotated[str, Field(description="The key to look up, e.g. 'k3'.")]) -> str:
    """Look up one key and return its 2 KB record."""
    return RESULT


class Server:
    """The fake server in a subprocess; ``handler_s()`` reads and resets its handler time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether.models.fake_server"], stdout=subprocess.PIPE, text=True
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


def make_host(trace_dir: Path) -> Host:
    host = Host(policy=Policy(allow={"lookup"}), trace_dir=trace_dir)
    host.add_tools(lookup)
    return host


def make_agent(url: str, *, stream: bool) -> Agent:
    limits = Limits(max_steps=200, llm_calls=200, llm_calls_hard=201, deadline_s=600)
    model = OpenAICompatible("fake-model", base_url=url, stream=stream)
    return Agent(instructions="Look things up, then answer.", model=model, limits=limits)


Session = Callable[[int], Awaitable[None]]


async def measure(server: Server, session: Session, steps: int, repeats: int) -> float:
    """Median client overhead per model call, in microseconds."""
    await session(steps)  # warm-up: connections, caches, imports
    samples = []
    for _ in range(repeats):
        server.reset()
        started = time.perf_counter()
        await session(steps)
        wall = time.perf_counter() - started
        samples.append((wall - server.handler_s()) / (steps + 1) * 1e6)
    return statistics.median(samples)


def tether_session(server: Server, trace_dir: Path, *, stream: bool) -> Session:
    host = make_host(trace_dir)
    agent = make_agent(server.url, stream=stream)
    context = TrustedContext(tenant="bench")

    async def run(steps: int) -> None:
        result = await host.run(agent, f"Collect the records. steps={steps}", context=context)
        assert result.ok and result.llm_calls == steps + 1, (result.stop_reason, result.detail)

    return run


def _tool_call_turn(message: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    calls = message.get("tool_calls") or []
    messages.append(message)
    for c in calls:
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": RESULT})
    return bool(calls)


def raw_session(server: Server) -> Session:
    """The floor: a hand-written loop posting JSON bodies with httpx2."""
    client = httpx2.AsyncClient(base_url=server.url)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]

    async def run(steps: int) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "Look things up, then answer."},
            {"role": "user", "content": f"Collect the records. steps={steps}"},
        ]
        while True:
            body = json.dumps({"model": "fake-model", "tools": tools, "messages": messages})
            r = await client.post(
                "/chat/completions", content=body, headers={"content-type": "application/json"}
            )
            if not _tool_call_turn(r.json()["choices"][0]["message"], messages):
                return

    return run


def typed_session(server: Server) -> Session:
    """The openai client's typed ``chat.completions.create`` in a hand-written loop."""
    import openai

    client = openai.AsyncOpenAI(api_key="no-key", base_url=server.url, max_retries=0)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]

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


async def concurrent_wall(server: Server, trace_dir: Path, sessions: int, steps: int) -> float:
    run = tether_session(server, trace_dir, stream=False)
    await run(2)  # warm-up
    started = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for _ in range(sessions):
            tg.create_task(run(steps))
    return time.perf_counter() - started


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
    repeats = 3 if args.quick else 7
    server = Server()
    out: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            trace_dir = Path(tmp) / "traces"
            figures: dict[str, dict[int, float]] = {}
            runners: dict[str, Session] = {
                "tether": tether_session(server, trace_dir, stream=False),
                "tether_stream": tether_session(server, trace_dir, stream=True),
                "raw_httpx2": raw_session(server),
                "openai_typed_create": typed_session(server),
            }
            for name, session in runners.items():
                figures[name] = {}
                for steps in (5, 20, 50):
                    figures[name][steps] = await measure(server, session, steps, repeats)
                    print(f"{name:22s} {steps:3d} steps: {figures[name][steps]:8.0f} us/step", flush=True)
                shutil.rmtree(trace_dir, ignore_errors=True)
            concurrent = await concurrent_wall(server, trace_dir, 100, 20)
            print(f"100 concurrent 20-step tether sessions: {concurrent:.2f} s wall", flush=True)
    finally:
        server.close()
    cold = cold_start(3 if args.quick else 7)
    print(f"tether --help cold start: {cold * 1000:.0f} ms", flush=True)
    t = figures["tether"]
    out = {
        "overhead_us_per_step": round(t[20]),
        "overhead_us_per_step_by_steps": {str(k): round(v) for k, v in t.items()},
        "ratio_50_to_5": round(t[50] / t[5], 3),
        "streaming_us_per_step_by_steps": {str(k): round(v) for k, v in figures["tether_stream"].items()},
        "concurrent_100_wall_s": round(concurrent, 3),
        "cold_start_s": round(cold, 4),
        "baselines": {
            name: {str(k): round(v) for k, v in figures[name].items()}
            for name in ("raw_httpx2", "openai_typed_create")
        },
        "peers": {
            name: {"installed": importlib.util.find_spec(module.split(".")[0]) is not None, "measured": False}
            for name, module in PEERS.items()
        },
        "targets": {
            "us_per_step_20": 1800,
            "ratio_50_to_5": 1.3,
            "concurrent_100_wall_s": 6.0,
            "cold_start_s": 0.3,
        },
        "repeats": repeats,
        "cpus": os.cpu_count(),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
