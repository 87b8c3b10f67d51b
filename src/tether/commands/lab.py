"""``tether lab MODE``: the maintenance-order lab (scenario S1)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

MODES = ("clean", "workflow", "agent", "expired-memory", "injection", "handoff-omission", "rollback", "all")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "lab",
        help="run the maintenance-order lab (S1)",
        description="Run one mode of the maintenance-order lab, or all of them. Exit codes: 0 accepted, "
        "2 policy_denied, 3 invalid_handoff, 4 budget/steps/deadline/repetition, 5 approval, "
        "6 dependency_unavailable, 7 model/internal error.",
    )
    p.add_argument("mode", choices=MODES)
    p.add_argument(
        "--out", type=Path, default=Path("tether-output"), help="output folder (default ./tether-output)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import anyio

    from tether.clisupport.output import emit_json, table
    from tether_examples.scenarios.maintenance.lab import EXPECTED, run_mode
    from tether_examples.scenarios.maintenance.lab import MODES as LAB_MODES

    out: Path = args.out
    if args.mode != "all":
        outcome = anyio.run(run_mode, args.mode, out)
        if args.json:
            emit_json(outcome.summary, exit=outcome.exit_code)
        else:
            s = outcome.summary
            print(f"mode: {outcome.mode}\nstop_reason: {outcome.stop_reason}")
            for key in ("answer", "detail", "agent", "rollback", "memory_after", "trace"):
                if s.get(key):
                    print(f"{key}: {s[key]}")
        return outcome.exit_code

    from tether.commands._progress import progress_wanted

    console = None
    if progress_wanted(args.json):
        from rich.console import Console

        console = Console(stderr=True, highlight=False)
    rows = []
    ok = True
    for mode in LAB_MODES:
        if mode == "clean":
            continue
        if console is not None:
            console.print(f"[dim]lab {mode} …[/dim]")
        outcome = anyio.run(run_mode, mode, out)
        expected_reason, expected_code = EXPECTED[mode]
        passed = outcome.as_expected
        ok &= passed
        rows.append(
            {
                "mode": mode,
                "stop_reason": outcome.stop_reason,
                "exit": outcome.exit_code,
                "expected": f"{expected_reason}/{expected_code}",
                "ok": "yes" if passed else "NO",
                **({"agent": outcome.summary["agent"]} if "agent" in outcome.summary else {}),
            }
        )
    if not args.json:
        print(table(rows, ["mode", "stop_reason", "exit", "expected", "ok"]))
        print("all modes as specified" if ok else "SOME MODES DID NOT END AS SPECIFIED")
    else:
        emit_json({"mode": "all", "ok": ok, "modes": rows}, exit=0 if ok else 1)
    return 0 if ok else 1
