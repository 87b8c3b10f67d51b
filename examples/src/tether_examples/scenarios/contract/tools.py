"""Scenario S4's tools: a race-result tool in two versions of its contract.

Version 1 returns the points but drops the fastest-lap block the archive holds, so 26 points
for a win (a win is worth 25) is a number the output cannot explain. Version 2 returns the
fastest lap and its docstring states the rule, with the seasons it applied to. The data is a
small in-memory fixture of the 2024 São Paulo Grand Prix winner (seed 003).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from tether.errors import NotFoundError, ToolInputError
from tether.tools._contract import Tool, tool

__all__ = ["ARCHIVE", "FastestLap", "ResultV1", "ResultV2", "get_race_result_v1", "get_race_result_v2"]

FIRST_CHAMPIONSHIP = 1950

# (season, circuit_id, position) -> archive row
ARCHIVE: dict[tuple[int, str, int], dict[str, Any]] = {
    (2024, "interlagos", 1): {
        "race_name": "São Paulo Grand Prix",
        "round": 21,
        "driver": "Max Verstappen",
        "constructor": "Red Bull",
        "grid": 17,
        "position": 1,
        "laps": 69,
        "points": 26,
        "fastest_lap": {"rank": 1, "lap": 67, "time": "1:20.472"},
    },
}

Season = Annotated[int, Field(description="Championship year, for example 2024.", ge=FIRST_CHAMPIONSHIP)]
CircuitId = Annotated[
    str, Field(description="Ergast circuit id, for example interlagos or monza.", min_length=1)
]
Position = Annotated[int, Field(description="Finishing position to look up, 1 for the winner.", ge=1, le=30)]


class ResultV1(BaseModel):
    race_name: str
    season: int
    driver: str
    constructor: str
    grid: int
    position: int
    laps: int
    points: int


class FastestLap(BaseModel):
    rank: int
    lap: int
    time: str


class ResultV2(ResultV1):
    fastest_lap: FastestLap | None = None


def _row(season: int, circuit_id: str, position: int) -> dict[str, Any]:
    if circuit_id != circuit_id.strip().lower():
        raise ToolInputError(
            f"circuit_id {circuit_id!r} is not an Ergast id", hint="use the lower-case id, e.g. interlagos"
        )
    row = ARCHIVE.get((season, circuit_id, position))
    if row is None:
        raise NotFoundError(f"no classified result for position {position} at {circuit_id} in {season}")
    return {**row, "season": season}


@tool(name="get_race_result")
def get_race_result_v1(season: Season, circuit_id: CircuitId, position: Position) -> ResultV1:
    """Official classification of one driver in one Grand Prix: driver, constructor, grid
    slot, laps completed and points scored."""
    return ResultV1.model_validate(_row(season, circuit_id, position))


@tool(name="get_race_result")
def get_race_result_v2(season: Season, circuit_id: CircuitId, position: Position) -> ResultV2:
    """Official classification of one driver in one Grand Prix: driver, constructor, grid
    slot, laps completed, points scored and the driver's fastest lap.

    fastest_lap.rank 1 marks the fastest lap of the race; from 2019 to 2024 that driver scored
    one extra point when finishing in the top 10 (the extra point was abolished from 2025).
    fastest_lap is omitted when the archive has no timing for the driver."""
    return ResultV2.model_validate(_row(season, circuit_id, position))


VERSIONS: dict[str, Tool] = {"v1": get_race_result_v1, "v2": get_race_result_v2}
