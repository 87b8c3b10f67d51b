"""Case files: strict loading, clear errors, and the shipped maintenance set (SPEC E1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.evals._cases import CaseFileError, load_cases
from tether.evals._config import load_config
from tether_examples.scenarios.maintenance.evals import CASES_PATH, CONFIG_PATH, environment

CASE = {
    "id": "c1",
    "input": {"question": "q", "order_id": "742"},
    "context": {"tenant": "shopping-a"},
    "expect": {"stop_reason": ["accepted"]},
}


@pytest.mark.spec("E1")
def test_the_shipped_maintenance_set_covers_the_required_kinds_and_a_holdout() -> None:
    cases = load_cases(CASES_PATH)
    assert cases.scenario == "maintenance" and len(cases.cases) >= 16
    tags = set(cases.tags())
    for needed in (
        "complete-order",
        "missing-history",
        "tool-unavailable",
        "expired-memory",
        "conflicting-sources",
        "injection",
        "handoff-omission",
        "repetition",
        "success",
        "guardrail",
    ):
        assert needed in tags, needed
    assert {"injection", "false-memory"} <= set(
        next(c for c in cases.cases if c.id == "injection-memory-742").tags
    )
    holdout = cases.select(holdout=True)
    assert 3 <= len(holdout) < len(cases.cases)
    for case in cases.cases:
        environment(case)  # every environment fixture is valid for the scenario
    assert len(cases.digest) == 64


def test_json_and_yaml_case_files_load_the_same(tmp_path: Path) -> None:
    import json

    import yaml

    (tmp_path / "a.json").write_text(json.dumps({"scenario": "s", "cases": [CASE]}))
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"scenario": "s", "cases": [CASE]}))
    assert load_cases(tmp_path / "a.json").cases == load_cases(tmp_path / "a.yaml").cases


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("scenario: s\ncases: [{id: c1, input: {}, context: {tenant: t}, expect: {}, typo: 1}]", "typo"),
        ("scenario: s\ncases: []", "at least one case"),
        (
            "scenario: s\ncases:\n  - {id: c1, input: {}, context: {tenant: t}, expect: {}}\n"
            "  - {id: c1, input: {}, context: {tenant: t}, expect: {}}",
            "duplicate case id",
        ),
        (
            "scenario: s\ncases: [{id: c1, input: {}, context: {tenant: t},"
            " expect: {trajectory: {agent: {mode: IN_ORDER}}}}]",
            "passes anything",
        ),
        (
            "scenario: s\ncases: [{id: c1, input: {}, context: {tenant: t}, expect: {grounded_min: 2}}]",
            "grounded_min",
        ),
        ("scenario: [unclosed", "not valid YAML"),
        ("- just a list", "mapping"),
    ],
)
def test_bad_case_files_fail_with_a_precise_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "cases.yaml"
    path.write_text(content)
    with pytest.raises(CaseFileError, match=message):
        load_cases(path)


def test_unknown_extensions_and_missing_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "cases.txt").write_text("scenario: s")
    with pytest.raises(CaseFileError, match=r"\.yaml, \.yml or \.json"):
        load_cases(tmp_path / "cases.txt")
    with pytest.raises(CaseFileError, match="cannot read"):
        load_cases(tmp_path / "missing.yaml")


@pytest.mark.spec("E2")
def test_the_decision_rule_is_configuration_with_a_digest(tmp_path: Path) -> None:
    config = load_config(CONFIG_PATH)
    assert config.rule.max_cost_ratio == 4.0 and config.baseline == "workflow"
    assert {m.failure for m in config.premortem} >= {"endless loop", "false memory", "malicious MCP"}
    bad = tmp_path / "c.yaml"
    bad.write_text("rule: {max_cost_ratio: -1}")
    with pytest.raises(CaseFileError, match="max_cost_ratio"):
        load_config(bad)
