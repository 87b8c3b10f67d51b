"""How long the deterministic graders take per run graded (groundedness, trajectory, reference).

Prints figures, then one JSON object on the last line. Usage: python bench/bench_graders.py [N]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from tether.context._untrusted import Observation
from tether.core.stop import StopReason
from tether.evals._cases import ExpectedCall, TrajectoryExpectation
from tether.evals._graders import evidence_of, grade_final_response, grade_trajectory, groundedness
from tether.runs._values import CallRecord, RunResult


def sample(i: int) -> RunResult:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    order = {"order_id": str(700 + i), "status": "open", "equipment": f"pump-{i}", "version": i}
    history = {"order_id": str(700 + i), "events": i, "note": f"awaiting part P-{i}"}
    return RunResult(
        f"r{i}",
        StopReason.ACCEPTED,
        f"Work order {700 + i} is open: awaiting part P-{i} (equipment pump-{i}). It has {i} events. "
        f"The supplier named Acme Parts promised delivery on 2026-09-{1 + i % 28:02d}.",
        calls=[
            CallRecord("a", "erp__read_order", {"order_id": str(700 + i)}, "ok"),
            CallRecord("b", "erp__read_history", {"order_id": str(700 + i)}, "ok"),
        ],
        observations=[
            Observation("a", "erp__read_order", "erp", now, json.dumps(order)),
            Observation("b", "erp__read_history", "erp", now, json.dumps(history)),
        ],
    )


def main(n: int) -> dict[str, float]:
    runs = [sample(i) for i in range(n)]
    spec = TrajectoryExpectation(
        mode="EXACT",
        calls=(
            ExpectedCall(tool="erp__read_order", args={"order_id": "0"}, compare={"order_id": "ignore"}),
            ExpectedCall(tool="erp__read_history", args={"order_id": "0"}, compare={"order_id": "ignore"}),
        ),
    )
    timings: dict[str, list[float]] = {"groundedness": [], "trajectory": [], "final_response": []}
    unsupported = 0
    for r in runs:
        t0 = time.perf_counter()
        g = groundedness(r.answer, evidence_of(r))
        t1 = time.perf_counter()
        grade_trajectory(r, spec)
        t2 = time.perf_counter()
        grade_final_response(r.answer, f"Work order {r.calls[0].arguments['order_id']} is open.")
        t3 = time.perf_counter()
        timings["groundedness"].append(t1 - t0)
        timings["trajectory"].append(t2 - t1)
        timings["final_response"].append(t3 - t2)
        unsupported += len(g.data["unsupported"])
    out: dict[str, float] = {"runs": n, "unsupported_sentences": unsupported}
    for name, values in timings.items():
        out[f"{name}_median_us"] = round(statistics.median(values) * 1e6, 1)
        print(f"{name:15s} median {out[f'{name}_median_us']:8.1f} µs per run graded")
    out["graded_runs_per_s"] = round(n / sum(sum(v) for v in timings.values()), 1)
    print(f"{n} runs, {unsupported} unsupported sentences (the supplier sentence is made up: one per run)")
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)))
