"""`tether demo mcp`: the ERP under the config-driven host, injected call never reaching it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.cli import main


@pytest.mark.slow  # two stdio launches of the ERP
@pytest.mark.spec("X1", "X2")
def test_mcp_demo_blocks_the_injected_call_and_answers_from_the_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "mcp", "--out", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["ok"] is True and result["stop_reason"] == "accepted"
    assert result["offered"] == ["erp__read_history", "erp__read_order"]
    assert result["server_received"] == ["read_order", "read_history"]  # never export_secrets
    assert {c["tool"]: c["status"] for c in result["calls"]}["export_secrets"] == "rejected"
