"""Task-augmented tool calls (MCP 2025-11-25 tasks): a tool that runs only as a task is run
to its end within the call's limits and its result cleaned and labelled like any other; a
task that never ends is cancelled at the call's timeout, its status flood and 1 ms poll
requests costing nothing; a task that completes after its tool's definition changed has its
result refused. The reference server's own task tool is in test_reference_server.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace

from .conftest import approve, script, write_config

pytestmark = [pytest.mark.slow, pytest.mark.spec("X1", "X2")]

SERVER = Path(__file__).with_name("task_server.py")


async def _run(tmp_path: Path, mode: str, **extra: Any) -> tuple[Any, Path]:
    log = tmp_path / "task.log"
    server = {"name": "t", "transport": "stdio", "command": [sys.executable, str(SERVER)], "mode": "legacy",
              "effects": {"research": "read"}, "env": {"TASK_MODE": mode, "TASK_LOG": str(log)},
              "sandbox_write": [str(tmp_path / "out")], **extra}  # fmt: skip
    (tmp_path / "out").mkdir()
    server["env"]["TASK_LOG"] = str(tmp_path / "out" / "task.log")
    config = write_config(tmp_path, [server])
    await approve(config, "t")
    run = await run_question(config, "Q", script(("t__research", {"topic": "x"}), "done"))
    return run, tmp_path / "out" / "task.log"


def _task_events(run: Any) -> list[dict[str, Any]]:
    return [e for e in read_trace(run.result.trace_path) if e["kind"] == "mcp_task"]


@pytest.mark.anyio
async def test_a_task_only_tool_runs_to_its_end_and_its_result_is_labelled(tmp_path: Path) -> None:
    run, _ = await _run(tmp_path, "honest")
    (seen,) = run.seen("t__research")
    assert "FINDINGS: all quiet" in seen and 'source="t"' in seen  # wrapped as untrusted server data
    events = _task_events(run)
    assert [e["action"] for e in events] == ["created", "finished"] and events[-1]["status"] == "completed"


@pytest.mark.anyio
async def test_a_task_that_reports_its_end_by_notification_finishes_without_waiting_for_a_poll(
    tmp_path: Path,
) -> None:
    # The server asks to be polled every 5 s and says it is done after 0.3 s: the call ends on
    # its word, before the first poll; its decoy for another task id ended nothing early (its
    # tasks/result fails until the real end).
    run, log = await _run(tmp_path, "notify")
    (seen,) = run.seen("t__research")
    assert "FINDINGS: all quiet" in seen and 'source="t"' in seen
    assert "get" not in log.read_text(encoding="utf-8").split()  # never polled
    events = _task_events(run)
    assert [e["action"] for e in events] == ["created", "notified", "finished"]
    assert events[-1]["status"] == "completed" and events[-1]["polls"] == 0


@pytest.mark.anyio
async def test_a_task_that_never_ends_is_cancelled_at_the_timeout_and_its_flood_costs_nothing(
    tmp_path: Path,
) -> None:
    # A run with no approval store cannot checkpoint, so a long task is not parked: cancelled.
    run, log = await _run(tmp_path, "never", timeout_s=2)
    (seen,) = run.seen("t__research")
    assert "timed out" in seen
    lines = log.read_text(encoding="utf-8").split()
    assert lines[-1] == "cancel"  # the server was told
    # It asked to be polled every millisecond: the host polled at most every 50 ms.
    assert lines.count("get") <= 2 / 0.05 + 2
    assert [e["action"] for e in _task_events(run)] == ["created", "cancel_sent"]


@pytest.mark.anyio
async def test_a_task_that_completes_after_its_tool_changed_is_refused(tmp_path: Path) -> None:
    run, _ = await _run(tmp_path, "rugpull")
    (seen,) = run.seen("t__research")
    assert "FINDINGS" not in seen and "changed while its task ran" in seen
    blocked = [e for e in read_trace(run.result.trace_path) if e["kind"] == "mcp_capability_blocked"]
    assert blocked and blocked[0]["status"] == "changed"


@pytest.mark.anyio
async def test_a_tool_whose_task_support_is_optional_is_called_plainly(tmp_path: Path) -> None:
    run, _ = await _run(tmp_path, "optional")
    (seen,) = run.seen("t__research")
    assert "FINDINGS: answered at once" in seen and 'source="t"' in seen
    assert _task_events(run) == []  # no task was created: nothing to poll or cancel
