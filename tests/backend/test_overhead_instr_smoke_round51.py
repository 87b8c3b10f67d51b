"""bench/overhead_instr.py counts a run's work per model call, tether's and its floor's, and
prints the figures as one JSON object last (the bytecode count: no valgrind needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "overhead_instr.py"


@pytest.mark.slow
def test_overhead_instr_counts_tether_and_its_floor_and_prints_json_last() -> None:
    targets = ["floor", "tether", "anthropic:floor", "anthropic:tether"]
    command = [sys.executable, str(BENCH), "--opcodes", "--steps=2", "--sessions=1", *targets]
    out = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(figures) == set(targets)
    for target in targets:
        assert figures[target]["calls"] == 3 and figures[target]["opcodes_per_call"] > 1000
    assert figures["tether"]["ratio"] > 0 and figures["anthropic:tether"]["ratio"] > 0
    assert "ratio" not in figures["floor"]
