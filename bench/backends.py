"""Client overhead per step of each model backend, against a raw ``httpx2`` loop speaking the
same protocol, and the import time of each backend.

For each protocol — chat completions (``openai-chat``), the OpenAI Responses API
(``openai-responses``) and the Anthropic Messages API (``anthropic``) — a loopback server that
speaks it (``tether_testing.fake_server`` / ``tether_testing.servers``, in its own process so it
does not share the GIL) scripts a tool loop: the model asks for ``lookup`` until N results are
in, then answers; each result is 2 KB. tether runs the loop with its default settings on the
backend for that protocol (whole responses; on its default transport, and on its official SDK
client: ``tether_sdk``), and a hand-written loop posts the same conversation as JSON with
``httpx2`` (the floor) and through the official SDK client's documented ``post`` (``raw_sdk``:
the floor of the SDK transport, so the SDK's own cost and what tether adds on it show apart);
the backend alone (``backend``: its default transport driven by the same hand-written loop, no
host) shows what the backend costs a step apart from what the host's governance adds. The
overhead of one step is the wall time of back-to-back sessions (at least 100 model calls)
minus the server's handler time, divided by the model calls; this process's CPU time per call
is reported too (the steadier figure on a shared machine). Import time: a fresh interpreter
importing the backend module (all its default transport needs), and the module with its SDK.

The last line is one JSON object; targets are shown, never asserted. Usage:
``python bench/backends.py [--quick | --smoke]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import httpx2
from pydantic import Field

from tether import Agent, Effect, Host, Limits, Policy, TrustedContext, tool

RESULT = "r" * 2048
SAMPLE_CALLS = 100
INSTRUCTIONS = "Look things up, then answer."
SCHEMA = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
Session = Callable[[int], Awaitable[None]]

_LOOP = "from tether_testing.servers import serve_tool_loop; serve_tool_loop()"
SERVER_COMMAND = {
    "openai-chat": ["-m", "tether_testing.fake_server"],
    "openai-responses": ["-c", _LOOP, "responses"],
    "anthropic": ["-c", _LOOP, "anthropic"],
}
MODULES = {
    "openai-chat": "tether.models._openai",
    "openai-responses": "tether.models._responses",
    "anthropic": "tether.models._anthropic",
}
SDKS = {"openai-chat": "openai", "openai-responses": "openai", "anthropic": "anthropic"}


@tool(effect=Effect.READ)
async def lookup(key: Annotated[str, Field(description="The key to look up, e.g. 'k3'.")]) -> str:
    """Look up one key and return its 2 KB record."""
    return RESULT


class Server:
    """A loopback server for one protocol in a subprocess; ``handler_s`` reads its handler time."""

    def __init__(self, provider: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *SERVER_COMMAND[provider]], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        self.root = self.url.removesuffix("/v1")
        self.http = httpx2.Client()

    def reset(self) -> None:
        self.http.post(self.root + "/stats/reset")

    def handler_s(self) -> float:
        return float(self.http.get(self.root + "/stats").json()["handler_s"])

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(10)


def backend(provider: str, url: str, transport: str) -> Any:
    if provider == "anthropic":
        from tether.models._anthropic import AnthropicMessages

        return AnthropicMessages("bench-model", base_url=url, stream=False, transport=transport)  # type: ignore[arg-type]
    if provider == "openai-responses":
        from tether.models._responses import OpenAIResponses

        return OpenAIResponses("bench-model", base_url=url, stream=False, transport=transport)  # type: ignore[arg-type]
    from tether.models._openai import OpenAICompatible

    return OpenAICompatible("bench-model", base_url=url, stream=False, transport=transport)  # type: ignore[arg-type]


def tether_session(provider: str, server: Server, transport: str = "http") -> Session:
    host = Host(policy=Policy(allow={"lookup"}), trace_dir=None)
    host.add_tools(lookup)
    limits = Limits(max_steps=200, llm_calls=200, llm_calls_hard=201, deadline_s=600)
    agent = Agent(instructions=INSTRUCTIONS, model=backend(provider, server.url, transport), limits=limits)
    context = TrustedContext(tenant="bench")

    async def run(steps: int) -> None:
        result = await host.run(agent, f"Collect the records. steps={steps}", context=context)
        assert result.ok and result.llm_calls == steps + 1, (result.stop_reason, result.detail)

    return run


def backend_session(provider: str, server: Server) -> Session:
    """tether's backend alone (its default transport), driven by the same hand-written loop as
    the floor, no host: the messages the host would send (the instructions, the task, each
    answer and its results, appended), each call ``complete``. Against the floor, what the
    backend itself costs a step; against ``tether``, what the host's governance adds."""
    from tether.core.messages import Message, SystemMessage, ToolMessage, UserMessage
    from tether.models._base import ModelRequest

    model = backend(provider, server.url, "http")
    tools = ({"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}},)
    calls = [0]

    async def run(steps: int) -> None:
        calls[0] = 0
        messages: tuple[Message, ...] = (
            SystemMessage(INSTRUCTIONS),
            UserMessage(f"Collect the records. steps={steps}"),
        )
        while True:
            calls[0] += 1
            answer = (await model.complete(ModelRequest(messages, tools=tools))).message
            messages = (*messages, answer, *(ToolMessage(c.id, RESULT) for c in answer.tool_calls))
            if not answer.tool_calls:
                break
        assert calls[0] == steps + 1, (provider, calls[0], steps)

    return run


def raw_session(provider: str, server: Server, *, sdk: bool = False) -> Session:
    """The floor: the same loop by hand, whole JSON bodies posted with httpx2 — or, with ``sdk``,
    through the official SDK client's documented ``post`` (the path of tether's ``"sdk"``
    transport; its retries off), so what the SDK costs and what tether adds on it show apart."""
    limits = httpx2.Limits(max_connections=64, max_keepalive_connections=64)
    client = httpx2.AsyncClient(limits=limits, headers={"content-type": "application/json"})
    if sdk:
        module = importlib.import_module(SDKS[provider])
        name = "AsyncAnthropic" if provider == "anthropic" else "AsyncOpenAI"
        official = getattr(module, name)(
            api_key="no-key", base_url=server.url, max_retries=0, http_client=client
        )

    posts = [0]

    async def post(path: str, body: dict[str, Any]) -> Any:
        posts[0] += 1
        if sdk:
            r = await official.post(path, cast_to=httpx2.Response, content=json.dumps(body))
        else:
            r = await client.post(server.url + path, content=json.dumps(body))
        return r.json()

    async def chat(steps: int) -> None:
        tools = [{"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": f"Collect the records. steps={steps}"},
        ]
        while True:
            data = await post("/chat/completions", {"model": "m", "tools": tools, "messages": messages})
            message = data["choices"][0]["message"]
            messages.append(message)
            if not message.get("tool_calls"):
                return
            for c in message["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": RESULT})

    async def responses(steps: int) -> None:
        tools = [{"type": "function", "name": "lookup", "parameters": SCHEMA}]
        items: list[dict[str, Any]] = [{"role": "user", "content": f"Collect the records. steps={steps}"}]
        while True:
            body = {"model": "m", "instructions": INSTRUCTIONS, "tools": tools, "input": items}
            output = (await post("/responses", body))["output"]
            calls = [i for i in output if i["type"] == "function_call"]
            items.extend(output)
            if not calls:
                return
            items.extend(
                {"type": "function_call_output", "call_id": c["call_id"], "output": RESULT} for c in calls
            )

    async def anthropic(steps: int) -> None:
        tools = [{"name": "lookup", "input_schema": SCHEMA}]
        turns: list[dict[str, Any]] = [{"role": "user", "content": f"Collect the records. steps={steps}"}]
        while True:
            body = {
                "model": "m",
                "max_tokens": 4096,
                "system": INSTRUCTIONS,
                "tools": tools,
                "messages": turns,
            }
            content = (await post("/v1/messages", body))["content"]
            turns.append({"role": "assistant", "content": content})
            uses = [b for b in content if b["type"] == "tool_use"]
            if not uses:
                return
            results = [{"type": "tool_result", "tool_use_id": b["id"], "content": RESULT} for b in uses]
            turns.append({"role": "user", "content": results})

    loop = {"openai-chat": chat, "openai-responses": responses, "anthropic": anthropic}[provider]

    async def run(steps: int) -> None:  # the floor makes exactly the calls tether makes
        posts[0] = 0
        await loop(steps)
        assert posts[0] == steps + 1, (provider, posts[0], steps)

    return run


async def sample(
    server: Server, session: Session, steps: int, calls: int = SAMPLE_CALLS
) -> tuple[float, float]:
    """Per model call (of at least ``calls``), in microseconds: wall minus the server's handler
    time, and CPU."""
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


def import_time(statement: str, repeats: int) -> float:
    """Median seconds for a fresh interpreter to run ``statement`` (interpreter start subtracted)."""

    def once(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        return time.perf_counter() - started

    base = statistics.median(once("pass") for _ in range(repeats))
    return max(0.0, statistics.median(once(statement) for _ in range(repeats)) - base)


async def measure(provider: str, repeats: int, steps: int, calls: int = SAMPLE_CALLS) -> dict[str, Any]:
    """One protocol's row: tether's backend (its default transport, and its official SDK's) and
    the raw loop, interleaved, against its server; and the import time of the backend, alone
    (all the default transport needs) and with its SDK."""
    server = Server(provider)
    try:
        runners = {
            "tether": tether_session(provider, server),
            "tether_sdk": tether_session(provider, server, "sdk"),
            "backend": backend_session(provider, server),
            "raw_httpx2": raw_session(provider, server),
            "raw_sdk": raw_session(provider, server, sdk=True),
        }
        for run in runners.values():
            await run(2)  # warm-up: connections, imports, first-use caches
        got: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
        for _ in range(repeats):  # interleaved: both see the same machine load
            for name, run in runners.items():
                got[name].append(await sample(server, run, steps, calls))
    finally:
        server.close()
    wall = {n: statistics.median(w for w, _ in v) for n, v in got.items()}
    cpu = {n: statistics.median(c for _, c in v) for n, v in got.items()}
    times = max(1, min(repeats, 3))
    seconds = import_time(f"import {MODULES[provider]}", times)
    with_sdk = import_time(f"import {MODULES[provider]}, {SDKS[provider]}", times)
    raw = wall["raw_httpx2"]
    row = {
        "tether_us_per_step": round(wall["tether"]),
        "tether_sdk_us_per_step": round(wall["tether_sdk"]),
        "raw_httpx2_us_per_step": round(raw),
        "ratio_to_raw_httpx2": round(wall["tether"] / raw, 3),
        "cpu_ratio_to_raw_httpx2": round(cpu["tether"] / cpu["raw_httpx2"], 3),
        "backend_us_per_step": round(wall["backend"]),
        "backend_cpu_ratio_to_raw_httpx2": round(cpu["backend"] / cpu["raw_httpx2"], 3),
        "sdk_ratio_to_raw_httpx2": round(wall["tether_sdk"] / raw, 3),
        "raw_sdk_us_per_step": round(wall["raw_sdk"]),
        "raw_sdk_ratio_to_raw_httpx2": round(wall["raw_sdk"] / raw, 3),
        "sdk_ratio_to_raw_sdk": round(wall["tether_sdk"] / wall["raw_sdk"], 3),
        "cpu_sdk_ratio_to_raw_sdk": round(cpu["tether_sdk"] / cpu["raw_sdk"], 3),
        "import_s": round(seconds, 3),
        "import_with_sdk_s": round(with_sdk, 3),
    }
    print(
        f"{provider:17s} {steps} steps: tether {wall['tether']:5.0f} us/step, on the SDK"
        f" {wall['tether_sdk']:5.0f}, raw httpx2 {raw:5.0f} ({row['ratio_to_raw_httpx2']:.2f}x wall,"
        f" {row['cpu_ratio_to_raw_httpx2']:.2f}x cpu; target <= 1.3x); the backend alone, no host"
        f" {row['backend_cpu_ratio_to_raw_httpx2']:.2f}x cpu; on the SDK"
        f" {row['sdk_ratio_to_raw_httpx2']:.2f}x raw httpx2, {row['sdk_ratio_to_raw_sdk']:.2f}x"
        f" ({row['cpu_sdk_ratio_to_raw_sdk']:.2f}x cpu) a raw SDK loop {wall['raw_sdk']:5.0f}"
        f" ({row['raw_sdk_ratio_to_raw_httpx2']:.2f}x raw httpx2); import {seconds * 1000:.0f} ms,"
        f" with the SDK {with_sdk * 1000:.0f} ms",
        flush=True,
    )
    return row


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    repeats = 1 if args.smoke else 3 if args.quick else 5
    steps = 2 if args.smoke else 20
    calls = 1 if args.smoke else SAMPLE_CALLS  # --smoke: one session per sample
    rows = {provider: await measure(provider, repeats, steps, calls) for provider in SERVER_COMMAND}
    return {
        "backends": rows,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "steps": steps,
        "repeats": repeats,
        "smoke": args.smoke,
        "targets": {"ratio_to_raw_httpx2": 1.3},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: the script runs, figures mean nothing"
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args)), sort_keys=True))


if __name__ == "__main__":
    main()
