"""The MCP host benchmark runs end to end and reports its figures as one JSON object last."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "mcp_host.py"


@pytest.mark.slow
@pytest.mark.spec("X2")
def test_mcp_host_bench_reports_the_cost_of_rechecking_pins() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--calls", "5"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["calls"] == 5
    for key in (
        "each_call_median_ms",
        "on_change_median_ms",
        "each_call_over_on_change",
        "pin_check_of_one_listing_us",
    ):
        assert figures[key] > 0
