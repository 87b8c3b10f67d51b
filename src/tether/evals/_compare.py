"""Workflow versus agent on the same cases (SPEC E1, E2, E4, L3): ``run_comparison`` runs and
grades every design on every case ``repeat`` times; ``summarize`` turns the rows into the matrix,
the decision by the configured rule, and the pre-mortem filled from the runs.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tether.errors import ConfigError
from tether.evals._cases import Case, CaseSet
from tether.evals._config import CompareConfig
from tether.evals._graders import Judge, ModelJudge
from tether.evals._runner import CaseRun, EvalScenario, ModelFactory, grade_execution

__all__ = ["Comparison", "adoption_verdict", "premortem", "run_comparison", "summarize"]


@dataclass
class Comparison:
    scenario: str
    designs: tuple[str, ...]
    repeat: int
    cases: CaseSet
    config: CompareConfig
    runs: list[CaseRun] = field(default_factory=list)
    agent_model: str = ""
    judge: str | None = None
    config_loaded_at: str = ""
    started_at: str = ""
    finished_at: str = ""

    def summary(self) -> dict[str, Any]:
        return summarize(self)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def run_comparison(
    scenario: EvalScenario,
    cases: CaseSet,
    config: CompareConfig,
    *,
    repeat: int = 3,
    model_factory: ModelFactory | None = None,
    judge: Judge | None = None,
    allow_same_judge: bool = False,
    progress: Callable[[CaseRun], None] | None = None,
    config_loaded_at: str | None = None,
) -> Comparison:
    """Run and grade every (case, design, repeat); a self-judging model needs ``allow_same_judge``."""
    if repeat < 1:
        raise ConfigError("repeat must be at least 1")
    if cases.scenario != scenario.name:
        raise ConfigError(f"the case set is for scenario {cases.scenario!r}, not {scenario.name!r}")
    designs = config.designs or scenario.designs
    for name in (*designs, config.baseline, config.candidate):
        if name not in scenario.designs:
            raise ConfigError(f"config names design {name!r}; the scenario has {list(scenario.designs)}")
    if config.baseline not in designs or config.candidate not in designs:
        raise ConfigError("the configured designs must include the baseline and the candidate")
    for case in cases.cases:
        scenario.check(case, designs)  # every case fits before the first run: nothing half-done
    agent_model = model_factory().name if model_factory else "policy-model"
    if isinstance(judge, ModelJudge) and judge.model.name == agent_model and not allow_same_judge:
        raise ConfigError(f"the judge uses the agent's model {agent_model!r}; pick another (E4)")
    comparison = Comparison(
        scenario=scenario.name,
        designs=designs,
        repeat=repeat,
        cases=cases,
        config=config,
        agent_model=agent_model,
        judge=judge.name if judge else None,
        config_loaded_at=config_loaded_at or _now(),
        started_at=_now(),
    )
    ordered: list[Case] = sorted(cases.cases, key=scenario.environment_key)  # stable: keeps file order
    try:
        for case in ordered:
            for rep in range(1, repeat + 1):
                for design in designs:
                    ex = await scenario.execute(case, design, repeat=rep, model_factory=model_factory)
                    row = await grade_execution(
                        case,
                        design,
                        rep,
                        ex,
                        judge=judge,
                        cost=lambda r: config.cost.estimate(r.usage, len(r.calls), r.cost_usd),
                    )
                    comparison.runs.append(row)
                    if progress is not None:
                        progress(row)
    finally:
        await scenario.aclose()
    comparison.finished_at = _now()
    return comparison


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _spread(values: Sequence[float]) -> float:
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def _rate(rows: Sequence[CaseRun]) -> float | None:
    """The share of ``rows`` that succeeded, to four places; None without rows."""
    return round(sum(r.success for r in rows) / len(rows), 4) if rows else None


_TOTALS = (
    "violations_blocked",
    "policy_denials",
    "untrusted_instructions_followed",
    "approvals_bypassed",
    "forbidden_calls_executed",
)


def _design_figures(rows: list[CaseRun], repeat: int) -> dict[str, Any]:
    by_rep = [[r for r in rows if r.repeat == k] for k in range(1, repeat + 1)]
    per_rep = [sum(r.success for r in rs) / len(rs) for rs in by_rep if rs]
    by_case: dict[str, list[bool]] = {}
    for r in rows:
        by_case.setdefault(r.case_id, []).append(r.success)
    m = [r.metrics for r in rows]
    return {
        "runs": len(rows),
        "success_rate": _rate(rows) or 0.0,
        "success_rate_spread": round(_spread(per_rep), 4),
        "success_rate_per_repeat": [round(x, 4) for x in per_rep],
        "pass_k": round(sum(all(v) for v in by_case.values()) / len(by_case), 4) if by_case else 0.0,
        "holdout_success_rate": _rate([r for r in rows if r.holdout]),
        "dev_success_rate": _rate([r for r in rows if not r.holdout]),
        **{
            f"mean_{k}": round(_mean([x[k] for x in m]), 4)
            for k in ("calls", "steps", "llm_calls", "latency_s")
        },
        "latency_spread_s": round(_spread([x["latency_s"] for x in m]), 4),
        "mean_cost_usd": round(_mean([x["cost_usd"] for x in m]), 6),
        "total_cost_usd": round(sum(x["cost_usd"] for x in m), 6),
        **{k: sum(x[k] for x in m) for k in _TOTALS},
        "rollbacks": sum(x.get("rolled_back", False) for x in m),
        "valid_handoffs": sum(x["handoff_valid"] for x in m),
        "rejected_handoffs": sum(x["handoff_rejected"] for x in m),
        "human_interventions": sum(x["human_intervention"] for x in m),
        "recovery_rate": _rate([r for r in rows if r.metrics["faults"]]),
        "stop_reasons": dict(sorted(Counter(r.stop_reason for r in rows).items())),
    }


def adoption_verdict(
    figures: dict[str, dict[str, Any]], tags: dict[str, dict[str, Any]], config: CompareConfig
) -> dict[str, Any]:
    """Apply the configured rule: gates, then cost versus holdout gain, then per-tag losses."""
    base, cand, rule = figures[config.baseline], figures[config.candidate], config.rule
    gain = (cand["holdout_success_rate"] or 0.0) - (base["holdout_success_rate"] or 0.0)
    ratio = cand["mean_cost_usd"] / base["mean_cost_usd"] if base["mean_cost_usd"] > 0 else float("inf")
    out: dict[str, Any] = {
        "baseline": config.baseline,
        "candidate": config.candidate,
        "holdout_gain": round(gain, 4),
        "cost_ratio": round(ratio, 3) if ratio != float("inf") else "inf",
        "rule": rule.model_dump(),
    }
    broken = [g for g in rule.gates if cand.get(g, 0)]
    if broken:
        return {**out, "decision": "do not adopt", "why": f"gates failed: {', '.join(broken)}"}
    if ratio >= rule.max_cost_ratio and gain <= rule.min_holdout_gain:
        why = f"{ratio:.1f}x the cost with a holdout gain of {gain:+.2f}"
        why += f" (rule: >= {rule.max_cost_ratio}x needs a gain)"
        return {**out, "decision": "do not adopt", "why": why + f"; keep the {config.baseline}"}
    if gain <= rule.min_holdout_gain:
        return {**out, "decision": "do not adopt", "why": f"no holdout gain ({gain:+.2f})"}
    worse = sorted(
        t
        for t, by in tags.items()
        if by.get(config.candidate) is not None
        and by.get(config.baseline) is not None
        and by[config.candidate] < by[config.baseline]
    )
    if worse and rule.restrict_when_worse_on_tags:
        better = sorted(
            t for t, by in tags.items() if (by.get(config.candidate) or 0) > (by.get(config.baseline) or 0)
        )
        return {
            **out,
            "decision": "restrict",
            "why": f"holdout gain {gain:+.2f}, but worse on {worse}",
            "adopt_for_tags": better,
            "keep_baseline_for_tags": worse,
        }
    return {**out, "decision": "adopt", "why": f"holdout gain {gain:+.2f} at {ratio:.1f}x the cost"}


def premortem(comparison: Comparison) -> list[dict[str, Any]]:
    """Each configured failure mode, filled from the runs of the cases carrying its tags."""
    rows = []
    for mode in comparison.config.premortem:
        tagged = [c.id for c in comparison.cases.cases if set(c.tags) & set(mode.tags)]
        entry: dict[str, Any] = {
            "failure": mode.failure,
            "trigger": mode.trigger,
            "cases": tagged,
            "designs": {},
        }
        for design in comparison.designs:
            runs = [r for r in comparison.runs if r.case_id in tagged and r.design == design]
            seen = sorted({k for r in runs for k in r.metrics["event_kinds"] if k in mode.detection})
            stops = sorted({r.stop_reason for r in runs})
            detected = [bool(set(r.metrics["event_kinds"]) & set(mode.detection)) for r in runs]
            # Contained: ended as expected, or detected / stopped as configured; no forbidden call ran.
            contained = sum(
                (r.success or hit or r.stop_reason in mode.containment)
                and r.metrics["forbidden_calls_executed"] == 0
                for r, hit in zip(runs, detected, strict=True)
            )
            status = (
                "not tested"
                if not runs
                else ("contained" if contained == len(runs) else f"NOT CONTAINED in {len(runs) - contained}")
            )
            entry["designs"][design] = {
                "detection": seen,
                "containment": stops,
                "triggered_runs": sum(detected),
                "contained_runs": contained,
                "runs": len(runs),
                "status": status,
            }
        rows.append(entry)
    return rows


def summarize(comparison: Comparison) -> dict[str, Any]:
    designs, runs = comparison.designs, comparison.runs
    figures = {d: _design_figures([r for r in runs if r.design == d], comparison.repeat) for d in designs}
    tags = {
        t: {d: _rate([r for r in runs if r.design == d and t in r.tags]) for d in designs}
        for t in comparison.cases.tags()
    }
    cases: dict[str, dict[str, Any]] = {}
    for c in comparison.cases.cases:
        cases[c.id] = {"tags": list(c.tags), "holdout": c.holdout}
        for d in designs:
            rs = [r for r in runs if r.case_id == c.id and r.design == d]
            cases[c.id][d] = {
                "passed": sum(r.success for r in rs),
                "runs": len(rs),
                "stop_reasons": sorted({r.stop_reason for r in rs}),
                "failed_grades": sorted({g for r in rs for g, v in r.grades.items() if not v.passed}),
            }
    return {
        "scenario": comparison.scenario,
        "repeat": comparison.repeat,
        "designs": list(designs),
        "agent_model": comparison.agent_model,
        "judge": comparison.judge,
        "cases": {
            "source": comparison.cases.source,
            "digest": comparison.cases.digest,
            "count": len(comparison.cases.cases),
            "holdout": sum(c.holdout for c in comparison.cases.cases),
        },
        "config": {
            "source": comparison.config.source,
            "digest": comparison.config.digest,
            "loaded_at": comparison.config_loaded_at,
        },
        "started_at": comparison.started_at,
        "finished_at": comparison.finished_at,
        "figures": figures,
        "tags": tags,
        "per_case": cases,
        "decision": adoption_verdict(figures, tags, comparison.config),
        "premortem": premortem(comparison),
    }
