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


@pytest.mark.slow
@pytest.mark.spec("X1")
def test_mcp_startup_bench_compares_review_with_the_servers_own_session() -> None:
    bench = BENCH.with_name("mcp_startup.py")
    out = subprocess.run(
        [sys.executable, str(bench), "--repeat", "1", "--servers", "2", "--profiles", "python -m"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["servers"] == 2 and isinstance(figures["confined"], bool)
    keys = ("server_start_ms", "server_session_ms", "review_ms", "review_over_server_session")
    assert all(figures[key] > 0 for key in keys) and figures["many_over_one"] > 0
    if figures["confined"]:
        assert figures["profiles"]["python -m"]["confined_over_unconfined"] > 0
        assert figures["network_allowlist"]["allowlist_over_none"] > 0
