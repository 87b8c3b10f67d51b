"""``tether lab MODE``: an installed scenario's lab (the reference one: the maintenance-order lab, S1).

The lab is the ``lab`` part of a scenario registered under the ``tether.scenarios`` entry
points (``tether.clisupport.scenarios``); its modes are the lab module's ``MODES``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    from tether.cli._commands._options import add_json, add_out, add_scenario
    from tether.clisupport.output import EXIT_HELP

    p = sub.add_parser(
        "lab",
        help="run a scenario's lab (the maintenance-order lab, S1)",
        description="Run one mode of an installed scenario's lab, or all of them (the reference lab: "
        f"pip install -e examples). {EXIT_HELP}",
    )
    p.add_argument(
        "mode",
        help="a mode of the lab, or all (maintenance: clean, workflow, agent, expired-memory, injection, "
        "handoff-omission, rollback)",
    )
    add_scenario(p, "whose lab (default: the only installed one)")
    add_out(p, "output folder (default ./tether-output)")
    add_json(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import anyio

    from tether.clisupport.output import emit_json, fail, table
    from tether.clisupport.scenarios import ScenarioUnavailable, resolve, scenario_with

    try:
        lab = resolve(scenario_with("lab", args.scenario)[1])
    except ScenarioUnavailable as err:
        return fail("tether lab", err, as_json=args.json)
    run_mode, modes = lab.run_mode, tuple(lab.MODES)
    if args.mode != "all" and args.mode not in modes:
        known = ", ".join((*modes, "all"))
        return fail("tether lab", f"unknown mode {args.mode!r}; one of: {known}", as_json=args.json)
    out: Path = args.out
    if args.mode != "all":
        outcome = anyio.run(run_mode, args.mode, out)
        if args.json:
            emit_json({**outcome.summary, **_failure(outcome)}, exit=outcome.exit_code)
        else:
            s = outcome.summary
            print(f"mode: {outcome.mode}\nstop_reason: {outcome.stop_reason}")
            for key in ("answer", "detail", "agent", "rollback", "memory_after", "trace"):
                if s.get(key):
                    print(f"{key}: {s[key]}")
        return int(outcome.exit_code)

    from tether.cli._commands._progress import progress_wanted

    console = None
    if progress_wanted(args.json):
        from rich.console import Console

        console = Console(stderr=True, highlight=False)
    rows = []
    ok = True
    for mode in modes:
        if mode == "clean":
            continue
        if console is not None:
            console.print(f"[dim]lab {mode} …[/dim]")
        outcome = anyio.run(run_mode, mode, out)
        expected_reason, expected_code = lab.EXPECTED[mode]
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
        failed = ", ".join(r["mode"] for r in rows if r["ok"] != "yes")
        why = {} if ok else {"error": "not_as_specified", "message": f"modes not as specified: {failed}"}
        emit_json({"mode": "all", "ok": ok, "modes": rows, **why}, exit=0 if ok else 1)
    return 0 if ok else 1


def _failure(outcome: Any) -> dict[str, Any]:
    """``error`` and ``message`` of a mode that did not exit 0, as for any run: its stop reason
    (or ``not_as_specified`` when an accepted run still failed the lab) and the detail."""
    if outcome.exit_code == 0:
        return {}
    stop, detail = outcome.stop_reason, outcome.summary.get("detail")
    error = stop if stop != "accepted" else "not_as_specified"
    return {"error": error, "message": f"{stop}: {detail}" if detail else stop}
