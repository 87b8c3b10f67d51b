"""What a killed process leaves in its JSONL trace, per flush mode (a real SIGKILL).

``each_event`` loses nothing. ``batched`` (the default) may lose the lines written since the
last flush, such as a read-only tool's turn, but never a decision taken before a side effect
(the host calls ``Tracer.flush()`` before every side-effecting tool, the tracer flushes after
approvals and effect intents), nor what came before a model request (it flushes when the
request is composed), nor the stop event.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

APP = str(Path(__file__).with_name("_trace_crash_app.py"))
SRC = str(Path(__file__).resolve().parents[1] / "src")

DECIDED = ["run_started", "context_composed", "model_response", "tool_proposed", "policy_allowed"]


def killed_at(point: str, mode: str, tmp_path: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, APP, str(tmp_path), mode, point]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    traces = list(tmp_path.glob("*.jsonl"))  # none yet when it died before its first write
    assert len(traces) <= 1
    lines = traces[0].read_text(encoding="utf-8").splitlines() if traces else []
    return [json.loads(line)["kind"] for line in lines]


def test_each_event_loses_nothing_when_the_process_dies_mid_turn(tmp_path: Path) -> None:
    assert killed_at("model", "each_event", tmp_path) == [*DECIDED, "tool_observation", "context_composed"]


def test_batched_has_the_step_on_disk_when_the_process_dies_waiting_on_the_model(tmp_path: Path) -> None:
    # The composed request flushes: everything before the wait is on disk, as with each_event.
    assert killed_at("model", "batched", tmp_path) == [*DECIDED, "tool_observation", "context_composed"]


@pytest.mark.parametrize("mode", ["batched", "each_event"])
def test_every_decision_before_an_effect_is_on_disk_when_the_effect_kills_the_process(
    mode: str, tmp_path: Path
) -> None:
    assert killed_at("tool", mode, tmp_path) == DECIDED


def test_batched_may_lose_the_turn_of_a_read_only_tool_and_each_event_does_not(tmp_path: Path) -> None:
    # A read changes nothing outside: its decision is not worth a write of its own per step.
    assert killed_at("read_tool", "batched", tmp_path / "batched") == ["run_started", "context_composed"]
    assert killed_at("read_tool", "each_event", tmp_path / "each") == DECIDED


@pytest.mark.parametrize("mode", ["batched", "each_event"])
def test_the_stop_event_is_on_disk_when_the_process_dies_after_the_run(mode: str, tmp_path: Path) -> None:
    kinds = killed_at("after_stop", mode, tmp_path)
    assert kinds[-1] == "stop" and kinds[:5] == DECIDED


def test_tracer_flush_puts_what_waits_on_disk_and_without_it_batched_loses_it(tmp_path: Path) -> None:
    assert killed_at("after_flush", "batched", tmp_path / "flushed") == ["tool_proposed"]
    assert killed_at("no_flush", "batched", tmp_path / "unflushed") == []
    assert killed_at("no_flush", "each_event", tmp_path / "each") == ["tool_proposed"]
