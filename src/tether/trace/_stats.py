"""Per-run figures computed from a trace: requests, tokens, prefix reuse, compression (C7)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tether.errors import ConfigError
from tether.trace._tracer import read_trace

__all__ = ["find_trace", "trace_stats"]


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


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def trace_stats(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Summarise one run's events (as read from JSONL or ``TraceEvent.to_json()``)."""
    events = list(events)
    composed = [e for e in events if e.get("kind") == "context_composed"]
    reuse = [float(e["prefix_reuse"]) for e in composed if e.get("prefix_reuse") is not None]
    cached = [float(e["cached_share"]) for e in composed if e.get("cached_share") is not None]
    tokens = [int(e["request_tokens"]) for e in composed if e.get("request_tokens") is not None]
    responses = [e for e in events if e.get("kind") == "model_response"]
    stop: Mapping[str, Any] = next((e for e in reversed(events) if e.get("kind") == "stop"), {})
    strategies = Counter(e["status_strategy"] for e in composed if e.get("status_strategy"))

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
        "reported_prompt_tokens": sum(int(e.get("prompt_tokens") or 0) for e in responses),
        "reported_completion_tokens": sum(int(e.get("completion_tokens") or 0) for e in responses),
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
