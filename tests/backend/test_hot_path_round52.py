"""Pins for perf round 52. Token counts: an integer in range is taken as it is, anything else
as before."""

from __future__ import annotations

import pytest

from tether.models._base import MAX_COUNT, count


def test_token_counts_as_before() -> None:
    assert count(0) == 0 and count(12) == 12 and count(MAX_COUNT) == MAX_COUNT
    assert count(None) == 0 and count(12.7) == 12 and count("12") == 12 and count("12.0") == 12
    for bad in (True, False, -1, MAX_COUNT + 1, 10**30, "-3", "x", [1], float("nan")):
        with pytest.raises(ValueError):
            count(bad)
