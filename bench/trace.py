"""Benchmark: the tracer's cost per event with a JSONL file, ``each_event`` vs ``batched``.

    python bench/trace.py [--steps 2000] [--rounds 5]

Emits the five events of one agent tool step (request composed, model response, call
proposed, call allowed, observation; about 1.3 KB of JSON) ``--steps`` times into a tracer
with a memory sink and a JSONL file in a temporary directory, per mode, alternating modes per
round. Also times the tracer with the memory sink only (no file), and the encoding of one line
by ``json.dumps`` (what the sink used before) and by pydantic-core (what it uses now).

Prints one line per figure, then ONE JSON object on the last line: events per second per mode
and microseconds per event, wall and CPU (medians over the rounds), the batched/each_event
ratio, and write calls per step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_core import to_json

from tether.trace import JsonlSink, MemorySink, Redactor, Tracer
from tether.trace._events import EventKind

ARGS = json.dumps({"order_id": "order-742", "fields": ["status", "lines", "history"], "note": "x" * 60})
TEXT = "Checking the order status before answering. " * 10


def step(t: Tracer, i: int) -> None:
    call_id = f"call_{i}"
    t.emit(
        EventKind.CONTEXT_COMPOSED,
        messages=2 + 2 * (i % 20),
        tools=3,
        tools_enabled=True,
        request_tokens=1200 + i % 97,
        request_bytes=4800,
        common_prefix_bytes=4300,
        prefix_reuse=0.9,
        cached_share=None,
        status_strategy=None,
    )
    t.emit(
        EventKind.MODEL_RESPONSE,
        model="bench-model",
        text=TEXT,
        tool_calls=[{"id": call_id, "name": "read_order"}],
        prompt_tokens=1200,
        completion_tokens=40,
        cached_tokens=0,
        cost_usd=0.0012,
        finish_reason="tool_calls",
    )
    t.emit(EventKind.TOOL_PROPOSED, call_id=call_id, tool="read_order", arguments=ARGS)
    t.emit(EventKind.POLICY_ALLOWED, call_id=call_id, tool="read_order", rule="allowlist")
    t.emit(
        EventKind.TOOL_OBSERVATION,
        call_id=call_id,
        tool="read_order",
        source="erp",
        trust="untrusted",
        observed_at="2026-11-29T12:00:00+00:00",
        is_error=False,
        error_kind=None,
        chars=2048,
        truncated=False,
    )


EVENTS_PER_STEP = 5


class _CountingSink(JsonlSink):
    """A JSONL sink that counts the writes it hands to the OS."""

    writes = 0

    def _drain(self) -> None:
        if self._lines:
            type(self).writes += 1
        super()._drain()

    def write(self, event: Any) -> None:
        if self.mode == "each_event":
            type(self).writes += 1
        super().write(event)


def timed(make: Callable[[Path], Tracer], steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds for ``steps`` steps, closing included."""
    with tempfile.TemporaryDirectory() as tmp:
        t = make(Path(tmp) / "run.jsonl")
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(steps):
            step(t, i)
        t.close()
        return time.perf_counter() - wall, time.process_time() - cpu


def per_call_us(fn: Callable[[], object], n: int = 20000) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)

    def tracer(sinks: list[Any]) -> Tracer:
        return Tracer("run-bench", sinks, redactor=Redactor({"sk-bench-secret"}), strict=False)

    modes: dict[str, Callable[[Path], Tracer]] = {
        "each_event": lambda path: tracer([MemorySink(), JsonlSink(path, flush="each_event")]),
        "batched": lambda path: tracer([MemorySink(), JsonlSink(path, flush="batched")]),
        "memory_only": lambda path: tracer([MemorySink()]),
    }
    walls: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float]] = {m: [] for m in modes}
    timed(modes["batched"], 200)  # warm-up
    for r in range(args.rounds):
        for mode in list(modes) if r % 2 == 0 else list(reversed(modes)):
            wall, cpu = timed(modes[mode], args.steps)
            walls[mode].append(wall)
            cpus[mode].append(cpu)
    events = args.steps * EVENTS_PER_STEP
    per_s = {m: round(events / statistics.median(ts)) for m, ts in walls.items()}
    wall_us = {m: round(1e6 * statistics.median(ts) / events, 2) for m, ts in walls.items()}
    cpu_us = {m: round(1e6 * statistics.median(ts) / events, 2) for m, ts in cpus.items()}

    writes: dict[str, float] = {}
    for mode in ("each_event", "batched"):
        _CountingSink.writes = 0
        with tempfile.TemporaryDirectory() as tmp:
            t = tracer([_CountingSink(Path(tmp) / "run.jsonl", flush=mode)])  # type: ignore[arg-type]
            for i in range(200):
                step(t, i)
            t.close()
        writes[mode] = round(_CountingSink.writes / 200, 2)

    # Encoding one model_response line: the stdlib encoder the sink used before, and now.
    probe = tracer([MemorySink()])
    step(probe, 0)
    event = probe.events[1].to_json()
    encode = {
        "json_dumps": round(per_call_us(lambda: json.dumps(event, ensure_ascii=True)), 2),
        "pydantic_core": round(per_call_us(lambda: to_json(event, ensure_ascii=True)), 2),
    }

    for m in modes:
        print(f"{m:12s} {per_s[m]:>9,d} events/s  {wall_us[m]:6.2f} us/event wall  {cpu_us[m]:6.2f} us CPU")
    print(f"batched / each_event throughput: {per_s['batched'] / per_s['each_event']:.2f}x")
    print(f"OS writes per step (5 events): each_event {writes['each_event']}, batched {writes['batched']}")
    print(f"encode a line: json.dumps {encode['json_dumps']} us, pydantic-core {encode['pydantic_core']} us")
    print(
        json.dumps(
            {
                "events_per_s": per_s,
                "us_per_event_wall": wall_us,
                "us_per_event_cpu": cpu_us,
                "batched_over_each_event": round(per_s["batched"] / per_s["each_event"], 3),
                "os_writes_per_step": writes,
                "encode_us": encode,
                "steps": args.steps,
                "rounds": args.rounds,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
