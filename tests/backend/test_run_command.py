"""``tether run``: the maintenance scenario with the scripted stand-in, or a real model over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tether_testing.fake_server import FakeChatServer, Reply

Serve = Callable[[Sequence[Reply]], FakeChatServer]
QUESTION = "Why is work order 742 still open?"


def tether(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command in a subprocess (the MCP ERP server it starts needs real stdio)."""
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def last_json(out: str) -> dict[str, object]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_run_without_a_model_uses_the_scripted_stand_in(tmp_path: Path) -> None:
    done = tether("run", QUESTION, "--scenario", "maintenance", "--out", str(tmp_path), "--json")
    summary = last_json(done.stdout)
    assert done.returncode == 0 and summary["stop_reason"] == "accepted"
    assert summary["model"] == "investigator-standin"
    assert "awaiting part P-17" in str(summary["answer"])


@pytest.mark.slow
@pytest.mark.spec("L1")
def test_run_with_a_model_drives_the_scenario_through_a_chat_completions_server(
    serve: Serve, tmp_path: Path
) -> None:
    secret = "sk-run-command-secret-42"
    answer = "Work order 742 is open: awaiting part P-17."
    server = serve(
        [
            Reply.calls(("erp__read_order", '{"order_id": "742"}')),
            Reply.calls(("erp__read_history", '{"order_id": "742"}')),
            Reply.text(answer),
        ]
    )
    argv = [
        "run",
        QUESTION,
        "--scenario",
        "maintenance",
        "--model",
        "fake-model",
        "--base-url",
        server.url,
        "--api-key-env",
        "TETHER_RUN_KEY",
    ]
    done = tether(*argv, "--out", str(tmp_path), "--json", env={"TETHER_RUN_KEY": secret})
    summary = last_json(done.stdout)

    assert done.returncode == 0, done.stderr
    assert summary["stop_reason"] == "accepted" and summary["answer"] == answer
    assert summary["model"] == "fake-model" and summary["llm_calls"] == 3
    assert summary["handoff"] is not None  # the scenario's host-side checks ran unchanged
    assert server.received[0].headers["authorization"] == f"Bearer {secret}"
    assert server.bodies()[0]["messages"][1] == {"role": "user", "content": QUESTION}
    assert secret not in Path(str(summary["trace"])).read_text()


@pytest.mark.slow
@pytest.mark.spec("E5")
def test_a_cost_budget_for_an_unpriced_model_is_refused_before_running(serve: Serve, tmp_path: Path) -> None:
    server = serve([])
    argv = ["run", QUESTION, "--scenario", "maintenance", "--model", "unpriced-model"]
    argv += ["--base-url", server.url]
    argv += ["--max-cost", "0.5"]
    done = tether(*argv, "--out", str(tmp_path))
    assert done.returncode == 1
    assert "--max-cost needs a price for unpriced-model" in done.stderr
    assert server.received == []

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"unpriced-model": {"input": "2.5", "output": 10}}))
    done = tether(*argv, "--prices", str(prices), "--out", str(tmp_path))
    assert done.returncode == 1
    assert "input must be a non-negative number, got '2.5'" in done.stderr
