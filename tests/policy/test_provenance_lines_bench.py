"""``bench/provenance_lines.py`` runs and prints its figures as one JSON object on its last line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "provenance_lines.py"


def test_the_lines_bench_runs_both_ways_and_prints_its_figures_last() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--lines", "20", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["lines"] == 20 and set(figures["cpu_s"]) == {"memo", "no_memo"}
    assert all(v > 0 for v in figures["cpu_s"].values())
