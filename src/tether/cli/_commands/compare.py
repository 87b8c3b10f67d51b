"""``tether compare``: workflow versus agent on a scenario's case set (SPEC E1, E2, L3)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.cli._commands._options import add_json, add_out, add_scenario
from tether.clisupport.output import fail, outcome, table
from tether.errors import ConfigError, TetherError

if TYPE_CHECKING:
    from tether.evals._compare import Comparison


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="compare workflow and agent on a scenario's cases",
        description="Run every design on every case N times, grade each run, and write report.json, "
        "report.md and report.png. The decision rule comes from the config file, fixed before the run.",
    )
    add_scenario(
        p, "an installed scenario with a case set (default: the only one; the reference: maintenance)"
    )
    p.add_argument("--repeat", type=int, default=3, help="runs per case and design (default 3)")
    add_out(p, "report folder", default="tether-output/compare")
    p.add_argument("--cases", type=Path, help="case file (default: the scenario's own)")
    p.add_argument("--config", type=Path, help="decision rule and cost model (default: the scenario's own)")
    p.add_argument(
        "--model-factory",
        metavar="MODULE:FUNCTION",
        help="a function returning the agent's Model (default: the deterministic policy model)",
    )
    p.add_argument(
        "--judge-factory",
        metavar="MODULE:FUNCTION",
        help="a function returning a Model used as groundedness judge (must differ from the agent's)",
    )
    add_json(p)
    p.set_defaults(handler=run)


def _factory(option: str, spec: str | None) -> Any:
    """The function an import path ``MODULE:FUNCTION`` names; ``ConfigError`` saying what is wrong."""
    from tether.agents._file import _import  # the one reader of import paths, with its hints

    if spec is None:
        return None
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError(f"{option} must be MODULE:FUNCTION, got {spec!r}")
    found = _import(spec, f"{option} {spec}")
    if not callable(found):
        raise ConfigError(f"{option} {spec}: not a function")
    return found


_FIGURES = (
    "success_rate",
    "success_rate_spread",
    "pass_k",
    "holdout_success_rate",
    "mean_calls",
    "mean_cost_usd",
    "violations_blocked",
    "untrusted_instructions_followed",
)
_TABLE_COLUMNS = [
    "design",
    "success_rate",
    "pass_k",
    "holdout_success_rate",
    "mean_calls",
    "mean_cost_usd",
    "violations_blocked",
]


def run(args: argparse.Namespace) -> int:
    from tether.clisupport.scenarios import ScenarioUnavailable, resolve, scenario_with
    from tether.evals._cases import load_cases
    from tether.evals._config import load_config
    from tether.evals._report import write_report

    if args.repeat < 1:
        return fail("tether compare", "--repeat must be at least 1", as_json=args.json)
    try:
        name, spec = scenario_with("compare", args.scenario)
        scenario_class, defaults = resolve(spec), resolve(spec.partition(":")[0])
        config = load_config(args.config or defaults.CONFIG_PATH)  # fixed before any run
        cases = load_cases(args.cases or defaults.CASES_PATH)
        model_factory = _factory("--model-factory", args.model_factory)
        factories = (model_factory, _factory("--judge-factory", args.judge_factory))
    except (TetherError, ScenarioUnavailable) as err:
        return fail("tether compare", err, as_json=args.json)
    comparison = _compare(args, name, scenario_class, (config, cases), factories)
    if isinstance(comparison, int):
        return comparison
    summary = write_report(comparison, args.out)
    last = _last_line(summary, name, args.repeat)
    if summary.get("chart_error"):
        print(f"tether compare: no PNG chart: {summary['chart_error']}", file=sys.stderr)
    rows = [{"design": d, **last["designs"][d]} for d in summary["designs"]]
    decision = f"decision: {summary['decision']['decision']} — {summary['decision']['why']}"
    text = f"{table(rows, _TABLE_COLUMNS)}\n{decision}\nreport: {summary['files']['markdown']}"
    return outcome(last, text, as_json=args.json)


def _compare(
    args: argparse.Namespace, name: str, cls: Any, inputs: tuple[Any, Any], factories: tuple[Any, Any]
) -> Comparison | int:
    """Run every design on every case ``--repeat`` times (a progress bar on stderr); the exit code
    on an error. ``inputs``: rule and cases; ``factories``: the model's and the judge's."""
    from datetime import UTC, datetime

    import anyio
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tether.evals._compare import run_comparison
    from tether.evals._graders import ModelJudge

    loaded_at = datetime.now(UTC).isoformat(timespec="seconds")
    config, cases = inputs
    factory, judge_factory = factories
    judge = ModelJudge(judge_factory()) if judge_factory is not None else None
    scenario = cls(args.out / "runs")
    total = len(cases.cases) * len(scenario.designs) * args.repeat

    # mcp.client.stdio binds its default errlog to sys.stderr on first import: import it before
    # anything could replace sys.stderr, so the ERP subprocess inherits a real file.
    import mcp.client.stdio  # noqa: F401

    # The bar goes to stderr, unredirected: MCP stdio servers inherit it (a file descriptor).
    with Progress(
        TextColumn("[bold]compare[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        redirect_stdout=False,
        redirect_stderr=False,
    ) as progress:
        task = progress.add_task(name, total=total)

        def tick(row: Any) -> None:
            progress.update(task, advance=1, description=f"{row.case_id} · {row.design} #{row.repeat}")

        try:
            return anyio.run(
                lambda: run_comparison(
                    scenario,
                    cases,
                    config,
                    repeat=args.repeat,
                    model_factory=factory,
                    judge=judge,
                    progress=tick,
                    config_loaded_at=loaded_at,
                )
            )
        except TetherError as err:
            return fail("tether compare", err, as_json=args.json)


def _last_line(summary: dict[str, Any], name: str, repeat: int) -> dict[str, Any]:
    """The final JSON object: the decision and each design's figures."""
    fig, decision = summary["figures"], summary["decision"]
    designs = {d: {k: fig[d][k] for k in _FIGURES} for d in summary["designs"]}
    last: dict[str, Any] = {
        "scenario": name,
        "repeat": repeat,
        "decision": decision["decision"],
        "why": decision["why"],
        "designs": designs,
        "files": summary["files"],
    }
    last.update(designs)  # also per design at the top level: {"workflow": {...}, "agent": {...}}
    return last
