"""Scenario S4: the groundedness grader catches the sentence, and the fix is in the tool."""

from __future__ import annotations

import json

import pytest

from tether.cli import main
from tether.errors import NotFoundError, ToolInputError
from tether.evals._cases import load_cases
from tether_examples.scenarios.contract.demo import CASES_PATH, run_version
from tether_examples.scenarios.contract.tools import get_race_result_v1, get_race_result_v2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.spec("S4", "E3")
@pytest.mark.anyio
async def test_the_same_answer_fails_on_tool_v1_and_passes_on_tool_v2() -> None:
    case = load_cases(CASES_PATH).cases[0]
    v1 = await run_version("v1", case)
    assert not v1["passed"] and v1["groundedness"] == pytest.approx(0.67)
    assert v1["unsupported"] == ["He also set the fastest lap of the race, 1:20.472 on lap 67."]
    # Trajectory and reference alone would have passed it.
    assert v1["trajectory"] and v1["final_response"]
    v2 = await run_version("v2", case)
    assert v2["passed"] and v2["groundedness"] == 1.0 and v2["unsupported"] == []


@pytest.mark.spec("T1", "S4")
def test_the_fixed_contract_explains_its_numbers_and_every_argument_is_described() -> None:
    assert "fastest_lap" not in json.dumps(get_race_result_v1.spec.parameters)
    assert "abolished from 2025" in get_race_result_v2.spec.description
    assert "one extra point" not in get_race_result_v1.spec.description
    for spec in (get_race_result_v1.spec, get_race_result_v2.spec):
        assert all(p.get("description") for p in spec.parameters["properties"].values())


@pytest.mark.anyio
async def test_tool_errors_are_written_for_the_model() -> None:
    with pytest.raises(ToolInputError, match="not an Ergast id") as err:
        await get_race_result_v2.invoke({"season": 2024, "circuit_id": "Interlagos", "position": 1})
    assert err.value.to_result()["hint"] == "use the lower-case id, e.g. interlagos"
    with pytest.raises(NotFoundError, match="position 2"):
        await get_race_result_v2.invoke({"season": 2024, "circuit_id": "interlagos", "position": 2})
    with pytest.raises(ToolInputError):
        await get_race_result_v2.invoke({"season": "2024", "circuit_id": "interlagos", "position": 1})


@pytest.mark.spec("S4")
def test_tether_demo_contract_json_shows_v1_failing_and_v2_passing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "contract", "--json"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["v1"]["passed"] is False and last["v2"]["passed"] is True and last["fixed_by_tool"] is True
