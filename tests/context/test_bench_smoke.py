"""The context benchmark runs end to end and reports its figures as one JSON object last."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "context.py"


@pytest.mark.slow
@pytest.mark.spec("C3", "C7")
def test_context_bench_prints_every_strategy_with_the_required_figures(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--out", str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    rows = figures["strategies"]
    assert set(rows) == {"none", "per_result_summary", "task_aware", "adaptive"}
    required = {
        "completed",
        "total_tokens",
        "max_request_tokens",
        "compressions",
        "prefix_reuse_mean",
        "prefix_reuse_append",
        "prefix_reuse_replace",
    }
    for row in rows.values():
        assert required <= set(row)
        assert row["max_request_tokens"] <= figures["window_tokens"]
    # what the mechanics guarantee, whatever the numbers: no compression cannot hold 2-150 KB
    # outputs in the window; the compressing strategies finish; appending the status never
    # breaks the prefix where replacing it does
    assert rows["none"]["completed"] is False and rows["none"]["stop_reason"] == "budget"
    for name in ("per_result_summary", "task_aware", "adaptive"):
        assert rows[name]["completed"] is True and rows[name]["compressions"] >= 1
    assert rows["task_aware"]["prefix_reuse_append"] == 1.0
    assert rows["task_aware"]["prefix_reuse_replace"] < 1.0
