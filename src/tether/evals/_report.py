"""Writing a comparison: ``report.json`` (everything), ``report.md`` (the matrix a person reads)
and ``report.png`` (success and cost per design; needs the ``evals`` extra: matplotlib)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tether.evals._compare import Comparison

__all__ = ["markdown", "write_chart", "write_report"]

_ROWS = (
    ("success rate", "success_rate"),
    ("spread over repeats (sd)", "success_rate_spread"),
    ("pass^k", "pass_k"),
    ("holdout success", "holdout_success_rate"),
    ("mean tool calls", "mean_calls"),
    ("mean steps", "mean_steps"),
    ("mean LLM calls", "mean_llm_calls"),
    ("mean latency (s)", "mean_latency_s"),
    ("mean est. cost (USD)", "mean_cost_usd"),
    ("violations blocked", "violations_blocked"),
    ("policy denials", "policy_denials"),
    ("untrusted instructions followed", "untrusted_instructions_followed"),
    ("approvals bypassed", "approvals_bypassed"),
    ("forbidden calls executed", "forbidden_calls_executed"),
    ("rollbacks to the workflow", "rollbacks"),
    ("valid handoffs", "valid_handoffs"),
    ("rejected handoffs", "rejected_handoffs"),
    ("human interventions", "human_interventions"),
    ("recovery rate (faulted cases)", "recovery_rate"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value).replace("|", "\\|")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def markdown(summary: dict[str, Any]) -> str:
    designs = summary["designs"]
    fig, dec = summary["figures"], summary["decision"]
    lines = [
        f"# Comparison: {summary['scenario']}",
        "",
        f"{summary['cases']['count']} cases ({summary['cases']['holdout']} holdout) × "
        f"{len(designs)} designs × "
        f"{summary['repeat']} repeats. Agent model: `{summary['agent_model']}`. Judge: "
        f"{summary['judge'] or 'none (deterministic fact check)'}.",
        f"Cases `{summary['cases']['source']}` (sha256 {summary['cases']['digest'][:12]}); rule "
        f"`{summary['config']['source']}` (sha256 {summary['config']['digest'][:12]}), loaded "
        f"{summary['config']['loaded_at']}, before the first run at {summary['started_at']}.",
        "",
        f"## Decision: **{dec['decision']}**",
        "",
        f"{dec['why']}. Holdout gain of {dec['candidate']} over {dec['baseline']}: {dec['holdout_gain']:+}; "
        f"cost ratio: {dec['cost_ratio']}.",
        "",
        "## Per design",
        "",
    ]
    lines += _table(["measure", *designs], [[label, *(fig[d][key] for d in designs)] for label, key in _ROWS])
    lines += ["", "Stop reasons: " + "; ".join(f"{d}: {_cell(fig[d]['stop_reasons'])}" for d in designs), ""]
    lines += ["## Success rate per tag", ""]
    lines += _table(["tag", *designs], [[t, *(by[d] for d in designs)] for t, by in summary["tags"].items()])
    lines += ["", "## Per case (passed/runs, stop reasons, failed grades)", ""]
    rows = []
    for cid, c in summary["per_case"].items():
        cells = []
        for d in designs:
            x = c[d]
            fails = f" ✗{','.join(x['failed_grades'])}" if x["failed_grades"] else ""
            cells.append(f"{x['passed']}/{x['runs']} {','.join(x['stop_reasons'])}{fails}")
        rows.append([cid + (" (holdout)" if c["holdout"] else ""), ", ".join(c["tags"]), *cells])
    lines += _table(["case", "tags", *designs], rows)
    lines += ["", "## Pre-mortem (filled from this run)", ""]
    pm_rows = [
        [
            m["failure"],
            m["trigger"],
            d,
            ", ".join(x["detection"]) or "none seen",
            ", ".join(x["containment"]) or "–",
            ", ".join(m["cases"]) or "NO CASE",
            f"{x['status']} ({x['contained_runs']}/{x['runs']}; triggered {x['triggered_runs']})",
        ]
        for m in summary["premortem"]
        for d, x in m["designs"].items()
    ]
    lines += _table(["failure", "trigger", "design", "detection", "stopped as", "cases", "status"], pm_rows)
    lines.append("")
    return "\n".join(lines)


def write_chart(summary: dict[str, Any], path: Path) -> Path:
    """Success rate per tag and per design, and mean cost per design. Needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise RuntimeError("the PNG chart needs matplotlib: pip install 'tether[evals]'") from err

    designs = summary["designs"]
    tags, groups = _success_groups(summary)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [4, 1]})
    width = 0.8 / len(designs)
    for i, d in enumerate(designs):
        ax1.bar([x + i * width for x in range(len(tags))], [g[i] for g in groups], width, label=d)
        ax2.bar([i], [summary["figures"][d]["mean_cost_usd"]], 0.6, label=d)
    ax1.set_xticks([x + width * (len(designs) - 1) / 2 for x in range(len(tags))])
    ax1.set_xticklabels(tags, rotation=40, ha="right", fontsize=8)
    ax1.set_ylim(0, 1.05)
    ax1.set_ylabel("success rate")
    ax1.set_title(f"{summary['scenario']}: success by tag ({summary['repeat']} repeats)")
    ax1.legend()
    ax2.set_xticks(range(len(designs)))
    ax2.set_xticklabels(designs)
    ax2.set_title("mean est. cost (USD)")
    fig.suptitle(f"decision: {summary['decision']['decision']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_plain_chart(summary: dict[str, Any], path: Path) -> Path:
    """The same success bars (all, holdout, then each tag; one colour per design), unlabelled."""
    from tether.evals._png import bar_chart_png

    names, groups = _success_groups(summary)
    colours = dict(zip(summary["designs"], ["blue", "orange", "green", "red"], strict=False))
    summary["chart_legend"] = {"groups": names, "colours": colours}
    return bar_chart_png(groups, path)


def _success_groups(summary: dict[str, Any]) -> tuple[list[str], list[list[float]]]:
    """The chart's groups (all, holdout, then each tag), each with one success rate per design."""
    designs, fig = summary["designs"], summary["figures"]
    groups = [
        [fig[d]["success_rate"] for d in designs],
        [fig[d]["holdout_success_rate"] or 0.0 for d in designs],
    ]
    groups += [[summary["tags"][t][d] or 0.0 for d in designs] for t in summary["tags"]]
    return ["all", "holdout", *summary["tags"]], groups


def write_report(comparison: Comparison, out: Path) -> dict[str, Any]:
    """Write JSON, Markdown and PNG under ``out``; return the summary with the file paths."""
    out.mkdir(parents=True, exist_ok=True)
    summary = comparison.summary()
    paths = {"json": out / "report.json", "markdown": out / "report.md", "chart": out / "report.png"}
    try:
        write_chart(summary, paths["chart"])
    except RuntimeError as err:  # matplotlib missing: a plain chart without labels, and the gap is said
        summary["chart_error"] = str(err)
        write_plain_chart(summary, paths["chart"])
    text = markdown(summary)
    if legend := summary.get("chart_legend"):
        colours = ", ".join(f"{d}: {c}" for d, c in legend["colours"].items())
        text += (
            f"\nChart (plain, {summary['chart_error']}): success rate per group "
            f"({', '.join(legend['groups'])}), one bar per design ({colours}).\n"
        )
    paths["markdown"].write_text(text, encoding="utf-8")
    full = {**summary, "runs": [r.as_dict() for r in comparison.runs]}
    paths["json"].write_text(json.dumps(full, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    return {**summary, "files": {k: str(v) for k, v in paths.items()}}
