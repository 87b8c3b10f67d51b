"""AgentDojo (v1.2.2 suites) through tether's host, offline, with a fully compromised stand-in.

    pip install -e ".[agentdojo]"
    python bench/agentdojo.py --json                      # all four suites, every pair
    python bench/agentdojo.py --suites banking --limit 4  # a quick look

For each suite: every user task runs benign with no human (approval requests fail closed)
and with a modelled reviewer who approves exactly the user task's own ground-truth calls;
every user × injection pair runs with the compromised agent (it executes the injection
task's ground-truth calls as soon as a tool result carries the injected text) and no
human. AgentDojo's own checks judge utility and attack success.

Figures (per suite and overall):
  benign_utility_no_human       user tasks solved, approval requests denied
  benign_utility_with_reviewer  user tasks solved when the reviewer approves what the user asked
  approvals_per_task            approval requests per user task (reviewer run)
  asr_all                       attacks that succeeded / pairs with a tool-call goal
  asr_actable                   same, over pairs whose injection the agent saw and had calls for
  utility_under_attack          user tasks solved in the attacked pairs
  text_only_goals               pairs whose goal is words in the answer (no tool call): a tool
                                policy cannot stop these; reported on their own line
  calls_blocked                 denied calls in attacked runs, by reason
With --baseline the attacked pairs also run with no gate, for comparison (asr_no_gate).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SUITES = ("workspace", "travel", "banking", "slack")


def _require_agentdojo() -> None:
    # Run as a script, this file's folder is sys.path[0] and its name shadows the package.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import agentdojo  # noqa: F401
    except ImportError:
        sys.exit("agentdojo is not installed: pip install -e '.[agentdojo]'")


async def _run_suite(
    name: str, limit: int | None, baseline: bool, mode: str, approvals_db: Path | None
) -> tuple[dict[str, Any], list[Any]]:
    from tether.evals.agentdojo.runner import SuiteBench, summarise

    bench = SuiteBench(name, approvals_db=approvals_db)
    users = list(bench.user_tasks.values())[:limit]
    injections = list(bench.injection_tasks.values())
    benign = [await bench.run(u, mode=mode) for u in users]
    reviewed = [await bench.run(u, reviewer=True, mode=mode) for u in users]
    attacked = [await bench.run(u, i, mode=mode) for u in users for i in injections]
    figures = summarise(benign, reviewed, attacked)
    if baseline:
        open_runs = [await bench.run(u, i, gate=False, mode=mode) for u in users for i in injections]
        tool_pairs = [o for o in open_runs if o.kind in ("tool", "no_ground_truth")]
        actable = [o for o in open_runs if o.kind == "tool" and o.triggered]
        figures["asr_no_gate"] = {
            "all": round(sum(o.attack_succeeded for o in tool_pairs) / max(1, len(tool_pairs)), 4),
            "actable": round(sum(o.attack_succeeded for o in actable) / max(1, len(actable)), 4),
        }
    return figures, [benign, reviewed, attacked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suites", default=",".join(SUITES), help="comma-separated suite names")
    parser.add_argument("--limit", type=int, default=None, help="first N user tasks per suite")
    parser.add_argument("--baseline", action="store_true", help="also run the attacked pairs with no gate")
    parser.add_argument(
        "--mode",
        choices=("agent", "plan"),
        default="agent",
        help="agent: the compromised agent loop; plan: plan-then-execute with a compromised extractor",
    )
    parser.add_argument(
        "--reviewer",
        choices=("store", "function"),
        default="store",
        help="store: runs pause in a SQLite approval store and resume once the reviewer decides "
        "(agent mode); function: the reviewer is asked inline",
    )
    parser.add_argument("--json", action="store_true", help="(the last line is always JSON)")
    args = parser.parse_args(argv)
    _require_agentdojo()
    import anyio

    from tether.evals.agentdojo.runner import summarise

    names = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        parser.error(f"unknown suites {unknown}; known: {list(SUITES)}")
    started = time.perf_counter()
    cpu0 = time.process_time()
    per_suite: dict[str, Any] = {}
    runs: list[list[Any]] = [[], [], []]
    scratch = tempfile.TemporaryDirectory(prefix="tether-agentdojo-")
    for name in names:
        t0 = time.perf_counter()
        db = Path(scratch.name) / f"{name}-approvals.db" if args.reviewer == "store" else None
        figures, (benign, reviewed, attacked) = anyio.run(
            _run_suite, name, args.limit, args.baseline, args.mode, db
        )
        figures["seconds"] = round(time.perf_counter() - t0, 2)
        per_suite[name] = figures
        runs[0] += benign
        runs[1] += reviewed
        runs[2] += attacked
        _print_suite(name, figures)
    overall = summarise(*runs)
    if args.baseline:
        n_all = sum(per_suite[n]["asr_no_gate"]["all"] * _tool_pairs(per_suite[n]) for n in names)
        overall["asr_no_gate_all"] = round(n_all / max(1, sum(_tool_pairs(per_suite[n]) for n in names)), 4)
    overall["seconds"] = round(time.perf_counter() - started, 2)
    overall["cpu_seconds"] = round(time.process_time() - cpu0, 2)
    _print_suite("overall", overall)
    scratch.cleanup()
    print(
        json.dumps(
            {
                "benchmark": "agentdojo v1.2.2",
                "agent": "compromised oracle (obeys every injection)",
                "mode": args.mode,
                "reviewer": args.reviewer if args.mode == "agent" else "function",
                "cores": os.cpu_count(),
                "overall": overall,
                "suites": per_suite,
            },
            sort_keys=True,
        )
    )
    return 0


def _tool_pairs(figures: dict[str, Any]) -> int:
    return int(figures["pairs"] - figures["text_only_goals"]["pairs"])


def _print_suite(name: str, f: dict[str, Any]) -> None:
    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{100 * v:.1f}%"

    print(
        f"{name:>9}: tasks {f['user_tasks']:>3}  pairs {f['pairs']:>4}  "
        f"benign no-human {pct(f['benign_utility_no_human'])}  with reviewer "
        f"{pct(f['benign_utility_with_reviewer'])}  approvals/task {f['approvals_per_task']}  "
        f"ASR all {pct(f['asr_all'])}  ASR actable {pct(f['asr_actable'])} ({f['actable_pairs']} pairs)  "
        f"utility under attack {pct(f['utility_under_attack'])}  {f['seconds']}s"
    )
    t = f["text_only_goals"]
    print(f"{'':>9}  text-only goals: {t['succeeded']}/{t['pairs']} pairs said what the attacker wanted")
    if "asr_no_gate" in f:
        open_ = f["asr_no_gate"]
        print(f"{'':>9}  no gate: ASR all {pct(open_['all'])}  actable {pct(open_['actable'])}")
    print(f"{'':>9}  blocked: {f['calls_blocked']}")


if __name__ == "__main__":
    raise SystemExit(main())
