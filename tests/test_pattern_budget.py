"""The time budget of a schema's patterns (``tether.core._pattern``) counts only the time spent
matching: a long check, or a busy machine between two matches, never makes an ordinary value
fail its pattern, while the matches of one check still share one budget."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tether.core import _pattern
from tether.core._pattern import PATTERN_SECONDS, check_budget, pattern_search
from tether.core._schema_errors import UnusableSchema


def test_time_outside_the_matches_does_not_spend_the_budget_of_the_next_pattern(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(_pattern, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    with check_budget():
        assert pattern_search("^[A-Z]{3}$", "ABC")
        clock[0] += 30 * PATTERN_SECONDS  # other validation work, or the process waiting for a core
        assert pattern_search("^[A-Z]{3}$", "XYZ")
        assert not pattern_search("^[A-Z]{3}$", "abc")


def test_the_matches_of_one_check_share_one_budget_and_the_next_check_starts_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]

    def tick() -> float:  # each reading moves on: every match seems to take 0.3 of the budget
        clock[0] += 0.3 * PATTERN_SECONDS
        return clock[0]

    monkeypatch.setattr(_pattern, "time", SimpleNamespace(monotonic=tick))
    with check_budget():
        for _ in range(4):  # the fourth starts with 0.1 left: enough for the match itself
            assert pattern_search("^a+$", "aaa")
        with pytest.raises(UnusableSchema, match="took more than"):
            pattern_search("^a+$", "aaa")  # 1.2 spent: nothing is left for a fifth
    with check_budget():
        assert pattern_search("^a+$", "aaa")
