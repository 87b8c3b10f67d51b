"""bench/backends.py runs end to end and reports a row per backend as one JSON object last."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "backends.py"


def timed(value: object) -> bool:
    """A figure of wall time less the server's handler time (or a ratio of two): a finite number.
    Its sign says nothing in a smoke run on a loaded machine, where the server, descheduled after
    it answered, counts time the client had already gone on with."""
    return isinstance(value, int | float) and math.isfinite(value)


@pytest.mark.slow
def test_backends_bench_runs_and_prints_a_row_per_backend_last() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--smoke"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["smoke"] is True and figures["targets"] == {"ratio_to_raw_httpx2": 1.3}
    assert set(figures["backends"]) == {"openai-chat", "openai-responses", "anthropic"}
    for row in figures["backends"].values():
        assert timed(row["tether_us_per_step"]) and timed(row["raw_httpx2_us_per_step"])
        assert timed(row["ratio_to_raw_httpx2"]) and row["import_s"] >= 0
        # the backend alone, no host: what the backend costs apart from the host's governance
        assert timed(row["backend_us_per_step"]) and row["backend_cpu_ratio_to_raw_httpx2"] > 0
        assert timed(row["tether_sdk_us_per_step"]) and row["import_with_sdk_s"] >= 0  # the SDK transport
        # the raw SDK loop: what the SDK costs, and what tether adds on it, apart
        assert timed(row["raw_sdk_us_per_step"]) and timed(row["sdk_ratio_to_raw_sdk"])
        assert timed(row["raw_sdk_ratio_to_raw_httpx2"]) and row["cpu_sdk_ratio_to_raw_sdk"] > 0


def test_encode_bench_runs_and_prints_its_figures_last() -> None:
    bench = BENCH.with_name("encode.py")
    out = subprocess.run(
        [sys.executable, str(bench), "--steps", "2", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(figures["encode"]) == {"openai-chat", "openai-responses", "anthropic"}
    assert all(row["encode_us"] > 0 and row["json_dumps_us"] > 0 for row in figures["encode"].values())
    assert figures["emit_us"] > 0


def test_governance_bench_runs_and_prints_its_figures_last() -> None:
    bench = BENCH.with_name("governance.py")
    out = subprocess.run(
        [sys.executable, str(bench), "--steps", "3", "--runs", "2", "--repeats", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["steps"] == 3 and len(figures["samples_us"]) == 2
    assert figures["cpu_us_per_model_call"] > 0
