"""Microbenchmark of the per-step request encoding of each HTTP backend: microseconds per
``encode`` over the steps of a tool loop (each step: the previous request, one assistant tool
call and its 2 KB result appended, the status line replaced), beside ``json.dumps`` of the
same protocol's body built as plain dicts (the raw loop's floor), and the microseconds per
trace ``emit`` of a typical model-call event. Less noisy than the end-to-end benchmarks
(``bench/backends.py``): a figure to compare before and after a change to an encoder.

The last line is one JSON object. Usage: ``python bench/encode.py [--steps N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from tether.core.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from tether.models._anthropic import AnthropicMessages
from tether.models._base import ModelRequest
from tether.models._openai import OpenAICompatible
from tether.models._responses import OpenAIResponses
from tether.trace._events import EventKind
from tether.trace._tracer import Tracer

RESULT = "r" * 2048
SCHEMA = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
TOOLS = ({"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}},)
URL = "http://127.0.0.1:9"


def requests(steps: int) -> list[ModelRequest]:
    """A session's requests: append-only history, the status line replaced on every step."""
    history: list[Message] = [SystemMessage("Look things up, then answer."), UserMessage("Collect.")]
    out = []
    for i in range(steps + 1):
        status = UserMessage(f"<agent_status>step {i}</agent_status>", origin="harness")
        out.append(ModelRequest((*history, status), TOOLS))
        history += [
            AssistantMessage(tool_calls=(ToolCall(f"call_{i}", "lookup", json.dumps({"key": f"k{i}"})),)),
            ToolMessage(f"call_{i}", RESULT),
        ]
    return out


def floor_bodies(provider: str, steps: int) -> list[dict[str, Any]]:
    """The raw loop's bodies for the same conversation (bench/backends.py's floor)."""
    bodies = []
    if provider == "anthropic":
        turns: list[dict[str, Any]] = [{"role": "user", "content": "Collect."}]
        for i in range(steps + 1):
            bodies.append(
                {"model": "m", "max_tokens": 4096, "system": "s", "tools": [SCHEMA], "messages": list(turns)}
            )
            turns.append(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": f"c{i}", "name": "lookup", "input": {"key": "k"}}],
                }
            )
            turns.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": f"c{i}", "content": RESULT}],
                }
            )
    elif provider == "openai-responses":
        items: list[dict[str, Any]] = [{"role": "user", "content": "Collect."}]
        for i in range(steps + 1):
            bodies.append({"model": "m", "instructions": "s", "tools": [SCHEMA], "input": list(items)})
            items.append({"type": "function_call", "call_id": f"c{i}", "name": "lookup", "arguments": "{}"})
            items.append({"type": "function_call_output", "call_id": f"c{i}", "output": RESULT})
    else:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "Collect."},
        ]
        for i in range(steps + 1):
            bodies.append({"model": "m", "tools": [SCHEMA], "messages": list(messages)})
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": f"c{i}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": RESULT})
    return bodies


def per_call_us(make: Callable[[], Callable[[], object]], calls: int, repeats: int) -> float:
    """Median over ``repeats`` of the microseconds per call of a fresh ``make()``'s ``calls`` calls."""
    times = []
    for _ in range(repeats):
        once = make()
        started = time.perf_counter()
        once()
        times.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=201)
    args = parser.parse_args()
    steps, repeats = args.steps, args.repeats
    reqs = requests(steps)
    kinds = {
        "anthropic": AnthropicMessages,
        "openai-responses": OpenAIResponses,
        "openai-chat": OpenAICompatible,
    }
    rows: dict[str, Any] = {}
    for name, kind in kinds.items():

        def make(kind: Any = kind) -> Callable[[], object]:
            backend = kind("bench-model", base_url=URL, transport="http")
            encode = backend.encode
            return lambda: [encode(r) for r in reqs]

        bodies = floor_bodies(name, steps)

        def floor(bodies: list[dict[str, Any]] = bodies) -> Callable[[], object]:
            return lambda: [json.dumps(x).encode() for x in bodies]

        tether_us = per_call_us(make, len(reqs), repeats)
        floor_us = per_call_us(floor, len(reqs), repeats)
        rows[name] = {
            "encode_us": round(tether_us, 2),
            "json_dumps_us": round(floor_us, 2),
            "ratio": round(tether_us / floor_us, 3),
        }
        print(f"{name:17s} encode {tether_us:6.2f} us/step, json.dumps floor {floor_us:6.2f} us", flush=True)

    def emitting() -> Callable[[], object]:
        tracer = Tracer("run-bench", [], strict=False)
        emit = tracer.emit
        data = {
            "model": "bench-model",
            "text": "",
            "tool_calls": [{"id": "call_1", "name": "lookup"}],
            "prompt_tokens": 1200,
            "completion_tokens": 30,
            "cached_tokens": 0,
            "cost_usd": 0.0,
            "finish_reason": "tool_calls",
            "finish": "tool_calls",
            "provider": "openai-chat",
        }
        return lambda: [emit(EventKind.MODEL_RESPONSE, **data) for _ in range(200)]

    emit_us = per_call_us(emitting, 200, repeats)
    print(f"trace emit {emit_us:.2f} us/event", flush=True)
    print(
        json.dumps(
            {
                "encode": rows,
                "emit_us": round(emit_us, 2),
                "steps": steps,
                "repeats": repeats,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
