"""What tether's governance costs per step, with no HTTP and no model: the CPU time of a tool loop
on a scripted model (``FunctionModel``), so the chokepoint, policy, context composition, trace
and checkpointing are all that is timed.

The model asks for ``lookup`` until ``--steps`` results are in, then answers; each result is
2 KB. After a warm-up, ``--repeats`` samples each time ``--runs`` runs back to back and report
this process's CPU time per model call (steps + the final answer). Other processes on a shared
machine do not count in CPU time, so this figure is the one to compare across commits: run it
with ``PYTHONPATH=<tree>/src`` for each tree, alternating. The last line is one JSON object.
Usage: ``python bench/governance.py [--steps 20] [--runs 10] [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from typing import Annotated, Any

from pydantic import Field

from tether import Agent, Effect, Host, Limits, Policy, TrustedContext, tool
from tether.testing import FunctionModel, call, final, tool_results

RESULT = "r" * 2048


@tool(effect=Effect.READ)
async def lookup(key: Annotated[str, Field(description="The key to look up, e.g. 'k3'.")]) -> str:
    """Look up one key and return its 2 KB record."""
    return RESULT


async def _measure(steps: int, runs: int, repeats: int) -> dict[str, Any]:
    def model(request: Any) -> Any:
        done = len(tool_results(request))
        return call("lookup", key=f"k{done}") if done < steps else final("done")

    host = Host(policy=Policy(allow={"lookup"}), trace_dir=tempfile.mkdtemp(prefix="tether-bench-"))
    host.add_tools(lookup)
    limits = Limits(max_steps=steps + 2, llm_calls=steps + 2, llm_calls_hard=steps + 4)
    agent = Agent(instructions="Look things up, then answer.", model=FunctionModel(model), limits=limits)
    context = TrustedContext(tenant="bench")
    try:
        for _ in range(3):  # warm-up: imports, caches, the first trace file
            await host.run(agent, "Look up the keys.", context=context)
        samples = []
        for _ in range(repeats):
            started = time.process_time()
            for _ in range(runs):
                await host.run(agent, "Look up the keys.", context=context)
            samples.append((time.process_time() - started) / (runs * (steps + 1)) * 1e6)
    finally:
        await host.aclose()
    return {
        "steps": steps,
        "runs_per_sample": runs,
        "cpu_us_per_model_call": round(statistics.median(samples), 1),
        "samples_us": [round(s, 1) for s in samples],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    figures = asyncio.run(_measure(args.steps, args.runs, args.repeats))
    print(f"governance only, {args.steps} steps: {figures['cpu_us_per_model_call']} µs CPU per model call")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
