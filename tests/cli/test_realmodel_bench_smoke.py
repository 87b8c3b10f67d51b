"""bench/realmodel.py says clearly when it cannot run, and still ends with one JSON object."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_real_model_bench_skips_with_a_reason_when_there_is_no_model(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "realmodel.py"), "--gguf", str(tmp_path / "none.gguf"),
         "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert done.returncode == 0
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert last["skipped"] is True and "no GGUF found" in last["reason"]
    assert "SKIPPED" in done.stderr
