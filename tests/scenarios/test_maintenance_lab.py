"""Scenario S1 end to end: a real MCP server over stdio, every lab mode, trace order."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.trace import read_trace
from tether_examples.scenarios.maintenance.lab import run_mode

pytestmark = pytest.mark.slow


def trace(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return read_trace(Path(summary["trace"]))


def server_calls(out: Path) -> list[str]:
    log = out / "erp-calls.jsonl"
    return [json.loads(line)["tool"] for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.spec("S1", "L3")
def test_workflow_reads_order_and_history_and_is_accepted(tmp_path: Path) -> None:
    outcome = anyio.run(run_mode, "workflow", tmp_path)
    assert (outcome.stop_reason, outcome.exit_code) == ("accepted", 0)
    assert outcome.summary["answer"] == "Work order 742 is open: awaiting part P-17 (equipment pump-19)."
    assert server_calls(tmp_path) == ["read_order", "read_history"]


@pytest.mark.spec("S1", "L1", "H1", "M4")
def test_agent_is_accepted_with_a_valid_handoff_and_a_governed_memory_write(tmp_path: Path) -> None:
    outcome = anyio.run(run_mode, "agent", tmp_path)
    assert (outcome.stop_reason, outcome.exit_code) == ("accepted", 0)
    handoff = outcome.summary["handoff"]
    # Built from the trace: each done item cites the successful call behind it (H1).
    claims = [d["claim"] for d in handoff["done"]]
    assert claims == ["read work order 742", "read the history of work order 742"]
    assert all(len(d["cites"]) == 1 for d in handoff["done"])
    assert handoff["blocked"] == ["no write permission: changes to the order need a person who may write"]
    assert handoff["evidence"] == ["mcp:erp/orders/742#v18", "mcp:erp/orders/742/history#v4"]
    assert handoff["permissions"] == {"read": ["orders", "history"], "write": []}
    kinds = [e["kind"] for e in trace(outcome.summary)]
    assert kinds.index("handoff_validated") < kinds.index("memory_written") < kinds.index("stop")


@pytest.mark.spec("S1", "M5")
def test_expired_memory_is_rejected_before_any_tool_and_refreshed_from_the_tool(tmp_path: Path) -> None:
    outcome = anyio.run(run_mode, "expired-memory", tmp_path)
    assert (outcome.stop_reason, outcome.exit_code) == ("accepted", 0)
    events = trace(outcome.summary)
    kinds = [e["kind"] for e in events]
    assert kinds.index("memory_rejected") < kinds.index("tool_observation")
    rejected = next(e for e in events if e["kind"] == "memory_rejected")
    assert rejected["reason"] == "expired"
    assert "memory_retrieved" not in kinds  # the obsolete claim never entered the context
    assert outcome.summary["memory_after"] == ["pump-19"]


@pytest.mark.spec("S1", "T7", "P1")
def test_injection_is_denied_before_the_server_while_legitimate_reads_work(tmp_path: Path) -> None:
    outcome = anyio.run(run_mode, "injection", tmp_path)
    assert (outcome.stop_reason, outcome.exit_code) == ("policy_denied", 2)
    events = trace(outcome.summary)
    denied = [e for e in events if e["kind"] == "policy_denied"]
    assert (
        len(denied) == 1
        and denied[0]["tool"] == "export_secrets"
        and denied[0]["reason"] == "tool_not_allowed"
    )
    # The server received the legitimate reads and never the forbidden call.
    assert server_calls(tmp_path) == ["read_order", "read_history"]


@pytest.mark.spec("S1", "H2")
def test_handoff_without_blocked_is_rejected_and_nothing_is_remembered(tmp_path: Path) -> None:
    outcome = anyio.run(run_mode, "handoff-omission", tmp_path)
    assert (outcome.stop_reason, outcome.exit_code) == ("invalid_handoff", 3)
    events = trace(outcome.summary)
    rejected = next(e for e in events if e["kind"] == "handoff_rejected")
    assert rejected["problems"] == ["missing:blocked"]
    assert "memory_written" not in [e["kind"] for e in events]


@pytest.mark.spec("S1", "L3")
def test_rollback_reports_agent_denied_then_workflow_accepted(tmp_path: Path) -> None:
    outcome = anyio.run(run_mode, "rollback", tmp_path)
    s = outcome.summary
    assert (s["agent"], s["rollback"], s["stop_reason"], outcome.exit_code) == (
        "policy_denied",
        "workflow",
        "accepted",
        0,
    )
    events = trace(s)
    rollback = next(e for e in events if e["kind"] == "rollback")
    assert rollback["failed_run_id"] == s["agent_run"]
    assert rollback["disabled_memory"] == ["order:742:equipment"]
    assert rollback["run_id"] != s["agent_run"]  # the event belongs to the workflow run
    assert "export_secrets" not in server_calls(tmp_path)


@pytest.mark.spec("S1")
@pytest.mark.parametrize(("mode", "code"), [("injection", 2), ("handoff-omission", 3)])
def test_cli_exit_codes_and_json_last_line(tmp_path: Path, mode: str, code: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tether.cli", "lab", mode, "--out", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == code, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["mode"] == mode and last["stop_reason"] in ("policy_denied", "invalid_handoff")
