"""``tether lab MODE``: the ``lab`` part of an installed scenario (``tether.clisupport.scenarios``;
the reference one: the maintenance-order lab, S1); its modes are the lab module's ``MODES``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tether.cli._commands._options import add_json, add_out, add_scenario
from tether.cli._commands._progress import progress_wanted
from tether.clisupport.output import EXIT_HELP, fail, outcome, table


def register(sub: Any) -> None:
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
        done = anyio.run(run_mode, args.mode, out)
        keys = ("answer", "detail", "agent", "rollback", "memory_after", "trace")
        lines = [f"mode: {done.mode}\nstop_reason: {done.stop_reason}"]
        lines += [f"{key}: {done.summary[key]}" for key in keys if done.summary.get(key)]
        summary = {**done.summary, **_failure(done)}
        return outcome(summary, "\n".join(lines), as_json=args.json, exit=int(done.exit_code))

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
        done = anyio.run(run_mode, mode, out)
        expected_reason, expected_code = lab.EXPECTED[mode]
        ok &= done.as_expected
        rows.append(
            {
                "mode": mode,
                "stop_reason": done.stop_reason,
                "exit": done.exit_code,
                "expected": f"{expected_reason}/{expected_code}",
                "ok": "yes" if done.as_expected else "NO",
                **({"agent": done.summary["agent"]} if "agent" in done.summary else {}),
            }
        )
    text = table(rows, ["mode", "stop_reason", "exit", "expected", "ok"])
    text += "\nall modes as specified" if ok else "\nSOME MODES DID NOT END AS SPECIFIED"
    failed = ", ".join(r["mode"] for r in rows if r["ok"] != "yes")
    why = {} if ok else {"error": "not_as_specified", "message": f"modes not as specified: {failed}"}
    summary = {"mode": "all", "ok": ok, "modes": rows, **why}
    return outcome(summary, text, as_json=args.json, exit=0 if ok else 1)


def _failure(outcome: Any) -> dict[str, Any]:
    """``error`` and ``message`` of a mode that did not exit 0 (``not_as_specified``: accepted)."""
    if outcome.exit_code == 0:
        return {}
    stop, detail = outcome.stop_reason, outcome.summary.get("detail")
    error = stop if stop != "accepted" else "not_as_specified"
    return {"error": error, "message": f"{stop}: {detail}" if detail else stop}
