"""bench/overhead.py runs end to end and reports its figures as one JSON object last."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_backends_bench_smoke import timed

BENCH = Path(__file__).resolve().parents[2] / "bench" / "overhead.py"


@pytest.mark.slow
def test_overhead_bench_runs_and_prints_the_required_figures_last() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--smoke"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    required = {
        "overhead_us_per_step",
        "concurrent_100_wall_s",
        "cold_start_s",
        "peers",
        "cpu_us_per_step_by_steps",
        "concurrent_100",
        "ratio_to_floor_at_20",
        "rss",
        "targets",
    }
    assert required <= set(figures) and figures["smoke"] is True
    assert timed(figures["overhead_us_per_step"])  # wall less the server's time: its sign says nothing here
    assert figures["concurrent_100_wall_s"] > 0 and figures["cold_start_s"] > 0
    variants = {"tether", "tether_each_event", "tether_no_trace", "raw_httpx2", "raw_httpx2_sharded"}
    ab = {"tether_one_pool", "tether_no_message_cache"}  # the A/B rows of the model path's machinery
    assert variants | ab <= set(figures["ratio_to_floor_at_20"])
    assert variants | ab == set(figures["concurrent_100"])
    assert set(figures["after_burst_us_per_step"]) == {"tether", "tether_one_pool"}
    assert set(figures["backends"]) == {"openai-chat", "openai-responses", "anthropic"}
    for row in figures["backends"].values():  # each protocol against its raw loop, and its import time
        assert timed(row["tether_us_per_step"]) and timed(row["ratio_to_raw_httpx2"]) and row["import_s"] >= 0
    assert "tether_status" in figures["ratio_to_floor_at_20"]  # the status bar on, beside the defaults
    assert set(figures["ratio_to_transport_floor_at_20"]) == {"wall", "cpu"}
    assert figures["rss"]["after_tether_runs_mb"] > 0
    assert isinstance(figures["rss"]["idle_kb_per_run"], float | int)
    assert set(figures["peers"]) == {"openai-agents", "pydantic-ai", "langgraph", "langchain", "google-adk"}
    assert all("installed" in p and "measured" in p for p in figures["peers"].values())
