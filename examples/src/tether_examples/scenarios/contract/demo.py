"""``tether demo contract``: the groundedness grader catches a sentence the tool could not
support, and the fix is in the tool's output, not the prompt (SPEC S4).

The same scripted model (same calls, same answer, same instructions) runs against version 1
and version 2 of the tool. Only the tool's contract changes between the two runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from tether.evals._cases import Case, load_cases
from tether.evals._runner import Execution, grade_execution
from tether.host import Host
from tether.policy._rules import Policy
from tether.policy._trusted import TrustedContext
from tether.runs._values import Agent
from tether.testing import ScriptedModel, call
from tether_examples.scenarios.contract.tools import VERSIONS

__all__ = ["ANSWER", "CASES_PATH", "main", "run_version"]

CASES_PATH = Path(__file__).with_name("cases.yaml")
INSTRUCTIONS = "You answer questions about Formula 1 results. Every number you cite must come from a tool."
# What the model answers in both runs: it explains the 26 points with the fastest lap.
ANSWER = (
    "Max Verstappen won the 2024 São Paulo Grand Prix for Red Bull. "
    "He started 17th on the grid, completed 69 laps and scored 26 points. "
    "He also set the fastest lap of the race, 1:20.472 on lap 67."
)


async def run_version(version: str, case: Case) -> dict[str, Any]:
    """Run the scripted agent against one tool version and grade the run."""
    host = Host(policy=Policy(allow={"get_race_result"}))
    host.add_tools(VERSIONS[version])
    model = ScriptedModel(
        [call("get_race_result", season=2024, circuit_id="interlagos", position=1), ANSWER],
        name="scripted-pit-wall",
    )
    async with host:
        result = await host.run(
            Agent(instructions=INSTRUCTIONS, model=model, name="pit-wall"),
            str(case.input["question"]),
            context=TrustedContext(tenant=case.context.tenant),
        )
        row = await grade_execution(case, "agent", 1, Execution(result=result, specs=host.offered()))
    g = row.grades
    return {
        "version": version,
        "stop_reason": row.stop_reason,
        "passed": row.success,
        "groundedness": round(g["groundedness"].score, 2),
        "unsupported": [u["sentence"] for u in g["groundedness"].data["unsupported"]],
        "trajectory": g["trajectory"].passed,
        "final_response": g["final_response"].passed,
        "tool_output": result.observations[0].text if result.observations else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether demo contract", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(list(argv or []))
    from tether.clisupport.output import emit_json

    case = load_cases(CASES_PATH).cases[0]
    rows = [anyio.run(run_version, v, case) for v in ("v1", "v2")]
    v1, v2 = rows
    as_expected = not v1["passed"] and v2["passed"]
    if not args.json:
        for r in rows:
            verdict = "PASS" if r["passed"] else "FAIL"
            print(
                f"tool {r['version']}: {verdict}  groundedness {r['groundedness']:.2f}  "
                f"trajectory {r['trajectory']}  reference {r['final_response']}"
            )
            print(f"  tool output: {r['tool_output']}")
            for s in r["unsupported"]:
                print(f"  unsupported: {s}")
        print("the grader failed v1 and passed v2: the fix was in the tool" if as_expected else "UNEXPECTED")
    else:
        emit_json(
            {
                "demo": "contract",
                "v1": {
                    k: v1[k]
                    for k in ("passed", "groundedness", "unsupported", "trajectory", "final_response")
                },
                "v2": {
                    k: v2[k]
                    for k in ("passed", "groundedness", "unsupported", "trajectory", "final_response")
                },
                "fixed_by_tool": as_expected,
            },
            exit=0 if as_expected else 1,
        )
    return 0 if as_expected else 1
