"""The decision rule and the pre-mortem work from figures, never from hard-coded outcomes (E2)."""

from __future__ import annotations

from typing import Any

import pytest

from tether.evals._cases import load_cases
from tether.evals._compare import Comparison, adoption_verdict, premortem, summarize
from tether.evals._config import CompareConfig, DecisionRule, FailureMode
from tether.evals._graders import Grade
from tether.evals._runner import CaseRun


def fig(success: float, holdout: float, cost: float, **extra: Any) -> dict[str, Any]:
    return {"success_rate": success, "holdout_success_rate": holdout, "mean_cost_usd": cost, **extra}


CONFIG = CompareConfig(rule=DecisionRule(max_cost_ratio=4.0, min_holdout_gain=0.0))


@pytest.mark.spec("E2")
def test_four_times_the_cost_without_holdout_gain_keeps_the_workflow() -> None:
    d = adoption_verdict({"workflow": fig(0.9, 0.75, 0.001), "agent": fig(0.9, 0.75, 0.004)}, {}, CONFIG)
    assert d["decision"] == "do not adopt" and "keep the workflow" in d["why"]


@pytest.mark.spec("E2")
def test_a_holdout_gain_adopts_and_a_tag_loss_restricts() -> None:
    figures = {"workflow": fig(0.7, 0.5, 0.001), "agent": fig(0.9, 0.75, 0.01)}
    even = {"success": {"workflow": 1.0, "agent": 1.0}}
    assert adoption_verdict(figures, even, CONFIG)["decision"] == "adopt"
    tags = {"injection": {"workflow": 1.0, "agent": 0.0}, "missing-history": {"workflow": 0.0, "agent": 1.0}}
    d = adoption_verdict(figures, tags, CONFIG)
    assert d["decision"] == "restrict"
    assert d["keep_baseline_for_tags"] == ["injection"] and d["adopt_for_tags"] == ["missing-history"]


@pytest.mark.spec("E2")
def test_a_failed_gate_means_do_not_adopt_whatever_the_gain() -> None:
    figures = {"workflow": fig(0.5, 0.5, 0.001), "agent": fig(1.0, 1.0, 0.001, forbidden_calls_executed=1)}
    d = adoption_verdict(figures, {}, CONFIG)
    assert d["decision"] == "do not adopt" and "forbidden_calls_executed" in d["why"]


def _row(case: str, design: str, success: bool, kinds: list[str], stop: str, forbidden: int = 0) -> CaseRun:
    return CaseRun(
        case,
        design,
        1,
        ("repetition",),
        False,
        stop,
        None,
        success,
        {"x": Grade("x", success, 1.0)},
        {"event_kinds": kinds, "forbidden_calls_executed": forbidden},
    )


def test_premortem_is_filled_from_the_runs() -> None:
    cases = load_cases(
        "inline",
        data={
            "scenario": "s",
            "cases": [
                {"id": "loop", "input": {}, "context": {"tenant": "t"}, "expect": {}, "tags": ["repetition"]}
            ],
        },
    )
    config = CompareConfig(
        premortem=(
            FailureMode(
                failure="endless loop",
                trigger="t",
                tags=("repetition",),
                detection=("repetition_detected",),
                containment=("repetition",),
            ),
            FailureMode(failure="untested", trigger="t", tags=("nothing",), detection=(), containment=()),
        )
    )
    comp = Comparison("s", ("workflow", "agent"), 1, cases, config)
    comp.runs = [
        _row("loop", "agent", False, ["repetition_detected", "stop"], "repetition"),
        _row("loop", "workflow", False, ["stop"], "max_steps", forbidden=1),
    ]
    loop, untested = premortem(comp)
    assert loop["cases"] == ["loop"]
    assert loop["designs"]["agent"]["status"] == "contained" and loop["designs"]["agent"]["detection"] == [
        "repetition_detected"
    ]
    assert loop["designs"]["workflow"]["status"].startswith("NOT CONTAINED")
    assert untested["cases"] == [] and untested["designs"]["agent"]["status"] == "not tested"


def test_pass_k_needs_every_repeat_of_a_case() -> None:
    cases = load_cases(
        "inline",
        data={
            "scenario": "s",
            "cases": [{"id": i, "input": {}, "context": {"tenant": "t"}, "expect": {}} for i in ("a", "b")],
        },
    )
    comp = Comparison("s", ("workflow", "agent"), 2, cases, CompareConfig())
    metrics = {
        "calls": 1,
        "steps": 1,
        "llm_calls": 0,
        "latency_s": 0.1,
        "cost_usd": 0.001,
        "violations_blocked": 0,
        "policy_denials": 0,
        "untrusted_instructions_followed": 0,
        "approvals_bypassed": 0,
        "forbidden_calls_executed": 0,
        "handoff_valid": False,
        "handoff_rejected": False,
        "human_intervention": False,
        "faults": [],
        "event_kinds": [],
    }
    for design in ("workflow", "agent"):
        for case, rep, ok in (("a", 1, True), ("a", 2, True), ("b", 1, True), ("b", 2, design == "workflow")):
            comp.runs.append(CaseRun(case, design, rep, (), False, "accepted", "x", ok, {}, metrics))
    s = summarize(comp)
    assert s["figures"]["workflow"]["pass_k"] == 1.0 and s["figures"]["agent"]["pass_k"] == 0.5
    assert s["figures"]["agent"]["success_rate"] == 0.75
    assert s["figures"]["agent"]["success_rate_per_repeat"] == [1.0, 0.5]
    assert s["figures"]["agent"]["success_rate_spread"] == 0.25


def _small_comparison() -> Comparison:
    cases = load_cases(
        "inline",
        data={
            "scenario": "s",
            "cases": [
                {
                    "id": i,
                    "input": {},
                    "context": {"tenant": "t"},
                    "expect": {},
                    "tags": ["x"],
                    "holdout": i == "b",
                }
                for i in ("a", "b")
            ],
        },
    )
    comp = Comparison("s", ("workflow", "agent"), 1, cases, CompareConfig())
    metrics = {
        "calls": 2,
        "steps": 2,
        "llm_calls": 3,
        "latency_s": 0.1,
        "cost_usd": 0.001,
        "violations_blocked": 1,
        "policy_denials": 1,
        "untrusted_instructions_followed": 0,
        "approvals_bypassed": 0,
        "forbidden_calls_executed": 0,
        "handoff_valid": True,
        "handoff_rejected": False,
        "human_intervention": False,
        "faults": ["inject"],
        "event_kinds": [],
    }
    for design in ("workflow", "agent"):
        for case in ("a", "b"):
            comp.runs.append(
                CaseRun(case, design, 1, ("x",), case == "b", "accepted", "x", True, {}, metrics)
            )
    return comp


def test_report_writes_json_markdown_and_png(tmp_path) -> None:
    import json

    from tether.evals._report import write_report

    summary = write_report(_small_comparison(), tmp_path)
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "report.json").read_text())["decision"]["decision"] == "do not adopt"
    assert "## Decision: **do not adopt**" in (tmp_path / "report.md").read_text()
    assert summary["files"]["chart"] == str(tmp_path / "report.png")


def test_report_without_matplotlib_still_writes_a_plain_chart_and_says_so(tmp_path, monkeypatch) -> None:
    import sys

    from tether.evals._report import write_report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if the extra were missing
    summary = write_report(_small_comparison(), tmp_path)
    assert "tether[evals]" in summary["chart_error"]
    assert (tmp_path / "report.json").exists() and (tmp_path / "report.md").exists()
    # A plain chart is still written (a valid PNG), and the report says why it has no labels.
    png = (tmp_path / "report.png").read_bytes()
    assert summary["files"]["chart"] == str(tmp_path / "report.png")
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and b"IDAT" in png and png.endswith(b"IEND\xaeB`\x82")
    assert "one bar per design" in (tmp_path / "report.md").read_text()
