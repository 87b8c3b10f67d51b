"""Per-run figures computed from a trace: requests, tokens, prefix reuse, compression (C7)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tether.errors import ConfigError
from tether.trace._tracer import read_trace

__all__ = ["find_trace", "number", "trace_stats"]


def find_trace(run: str, directory: str | Path) -> Path:
    """``run`` is a trace file path or a run id looked up as ``<directory>/<run>.jsonl``."""
    candidate = Path(run)
    if candidate.suffix == ".jsonl" and candidate.is_file():
        return candidate
    if "/" in run or "\\" in run or run in ("", ".", ".."):
        raise ConfigError(f"no trace file {run!r}")
    path = Path(directory) / f"{run}.jsonl"
    if not path.is_file():
        where = "pass --dir: the agent file's trace.dir, or give the trace file's path"
        raise ConfigError(f"no trace for run {run!r} in {directory} ({where})")
    return path


def number(value: Any) -> float | None:
    """A trace field's number, or None where it is none (a word, a list, a flag, NaN, infinity,
    past a float): a trace file is read as written, by whatever wrote it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _numbers(events: Iterable[Mapping[str, Any]], key: str) -> list[float]:
    return [n for e in events if (n := number(e.get(key))) is not None]


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def trace_stats(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Summarise one run's events (as read from JSONL or ``TraceEvent.to_json()``)."""
    events = list(events)
    composed = [e for e in events if e.get("kind") == "context_composed"]
    reuse, cached = _numbers(composed, "prefix_reuse"), _numbers(composed, "cached_share")
    tokens = [int(n) for n in _numbers(composed, "request_tokens")]
    responses = [e for e in events if e.get("kind") == "model_response"]
    stop: Mapping[str, Any] = next((e for e in reversed(events) if e.get("kind") == "stop"), {})
    strategies = Counter(str(e["status_strategy"]) for e in composed if e.get("status_strategy"))

    def count(kind: str) -> int:
        return sum(1 for e in events if e.get("kind") == kind)

    return {
        "run_id": events[0].get("run_id") if events else None,
        "stop_reason": stop.get("reason"),
        "requests": len(composed),
        "prefix_reuse_mean": _mean(reuse),
        "prefix_reuse_min": round(min(reuse), 6) if reuse else None,
        "cached_share_mean": _mean(cached),
        "request_tokens_total": sum(tokens),
        "request_tokens_max": max(tokens) if tokens else 0,
        "reported_prompt_tokens": sum(int(n) for n in _numbers(responses, "prompt_tokens")),
        "reported_completion_tokens": sum(int(n) for n in _numbers(responses, "completion_tokens")),
        "compressions": count("context_compressed"),
        "compression_failures": count("compression_failed"),
        "compactions": count("context_compacted"),
        "outputs_stored": count("output_stored"),
        "skills_loaded": count("skill_loaded"),
        "tool_schema_loads": count("tool_schemas_loaded"),
        "status_strategies": dict(strategies),
    }


def stats_for(run: str, directory: str | Path) -> dict[str, Any]:
    path = find_trace(run, directory)
    return {**trace_stats(read_trace(path)), "trace": str(path)}
