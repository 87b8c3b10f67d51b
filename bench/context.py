"""Context-engine benchmark: a long scripted research task under each compression strategy.

Tool outputs run from 2 KB to 150 KB; the window is 128K tokens (estimated at ~4 characters
a token). For each strategy (none, per-result summary, task-aware, adaptive) the task runs
three times: with the status bar's update strategy chosen by the cost model (the headline
figures), forced to append, and forced to replace (their prefix reuse is reported).

    python bench/context.py [--window TOKENS] [--out DIR]

The last line is one JSON object: {"strategies": {name: {...}}, ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tether import Agent, Host, Limits, Policy, TrustedContext
from tether.context import CallLimit, CompressionConfig, ContextConfig, StatusConfig
from tether.trace._stats import trace_stats
from tether_examples.scenarios.research.task import OBJECTIVE, Research, completed, system_prompt

STRATEGIES = {
    "none": "none",
    "per_result_summary": "per_result",
    "task_aware": "task_aware",
    "adaptive": "adaptive",
}


def run_once(strategy: str, status: str, window: int, out: Path) -> dict[str, Any]:
    env = Research()
    host = Host(policy=Policy(allow={"web_search"}), trace_dir=out / f"{strategy}-{status}")
    host.add_tools(*env.tools())
    config = ContextConfig(
        status=StatusConfig(strategy=status, limits=(CallLimit("web_search", 14),)),  # type: ignore[arg-type]
        compression=CompressionConfig(strategy=strategy, window_tokens=window),  # type: ignore[arg-type]
    )
    agent = Agent(
        instructions=system_prompt(),
        model=env.model(),
        limits=Limits(max_steps=30, llm_calls=40, llm_calls_hard=45, deadline_s=None),
        context=config,
    )
    started = time.perf_counter()
    result = host.run_sync(agent, OBJECTIVE, context=TrustedContext(tenant="bench"))
    elapsed = time.perf_counter() - started
    stats = trace_stats(e.to_json() for e in result.events)
    per_request = [e.data["request_tokens"] for e in result.events if str(e.kind) == "context_composed"]
    return {
        "completed": result.ok and completed(result.answer),
        "stop_reason": str(result.stop_reason),
        "iterations": result.llm_calls,
        "searches": len(env.searches),
        "total_tokens": result.usage.total_tokens,
        "max_request_tokens": stats["request_tokens_max"],
        "mean_request_tokens": round(sum(per_request) / len(per_request)) if per_request else 0,
        "request_tokens": per_request,
        "compressions": stats["compressions"],
        "summaries": env.summaries,
        "compactions": stats["compactions"],
        "prefix_reuse_mean": stats["prefix_reuse_mean"],
        "status_strategies": stats["status_strategies"],
        "elapsed_s": round(elapsed, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=128_000, help="context window in tokens")
    parser.add_argument("--out", type=Path, default=None, help="where traces go (default: a temp folder)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="tether-bench-context-"))
    figures: dict[str, Any] = {}
    header = (
        f"{'strategy':<20} {'done':<5} {'iter':>4} {'total_tok':>10} {'max_req_tok':>11} "
        f"{'compr':>5} {'reuse':>6} {'append':>6} {'replace':>7}"
    )
    print(f"research task, window {args.window} tokens, traces in {out}")
    print(header)
    for label, strategy in STRATEGIES.items():
        main_run = run_once(strategy, "auto", args.window, out)
        append = run_once(strategy, "append", args.window, out)
        replace = run_once(strategy, "replace", args.window, out)
        row = {
            **main_run,
            "prefix_reuse_append": append["prefix_reuse_mean"],
            "prefix_reuse_replace": replace["prefix_reuse_mean"],
            "total_tokens_append": append["total_tokens"],
            "total_tokens_replace": replace["total_tokens"],
        }
        figures[label] = row
        print(
            f"{label:<20} {'yes' if row['completed'] else 'NO':<5} {row['iterations']:>4} "
            f"{row['total_tokens']:>10} {row['max_request_tokens']:>11} {row['compressions']:>5} "
            f"{row['prefix_reuse_mean'] or 0:>6.3f} {row['prefix_reuse_append'] or 0:>6.3f} "
            f"{row['prefix_reuse_replace'] or 0:>7.3f}"
        )
    print("tokens per request (status auto):")
    for label, row in figures.items():
        print(f"  {label:<20} {row['request_tokens']}")
    base = figures["none"]["total_tokens"]
    ratios = {k: round(v["total_tokens"] / base, 3) for k, v in figures.items() if base}
    print("total tokens relative to no compression:", ratios)
    # The status bar's two update strategies, measured on the uncompressed run (the cleanest view).
    status_bar = {k: figures["none"][k] for k in ("prefix_reuse_append", "prefix_reuse_replace")}
    summary = {"window_tokens": args.window, "strategies": figures, "tokens_vs_none": ratios, **status_bar}
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
