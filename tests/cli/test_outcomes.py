"""Exit codes and JSON that say what happened (SPEC L2): never `accepted`/0 for a run whose model
server failed mid-answer, or whose requested calls were denied, refused, failed or unavailable;
the same top-level JSON keys from every command; errors a user can act on."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.cli import main
from tether.clisupport.output import ENVELOPE
from tether_testing.fake_server import FakeChatServer, Reply, scripted

TOOLS = '''
from typing import Annotated
from pydantic import Field
from tether import Effect, tool
from tether.errors import NotFoundError


@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Read one work order."""
    if order_id != "742":
        raise NotFoundError(f"no work order {order_id}")
    return {"order_id": order_id, "status": "open"}


@tool(effect=Effect.WRITE)
def close_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Close a work order (a side effect)."""
    raise AssertionError("never runs here: no approval store")
'''


def last_json(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def agent_file(tmp_path: Path, module: str, url: str, **extra: Any) -> Path:
    (tmp_path / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    spec: dict[str, Any] = {
        "instructions": "Investigate work orders.",
        "model": {"name": "fake-model", "base_url": url, "max_retries": 1, "timeout_s": 10},
        "tools": [f"{module}:read_order", f"{module}:close_order"],
        "policy": {"tenant": "shop-a", "on_denied": "continue"},
        "trace": {"dir": "traces"},
        **extra,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def run(path: Path, capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, dict[str, Any]]:
    code = main(["run", "Why is 742 open?", "--agent", str(path), "--json", *more])
    return code, last_json(capsys.readouterr().out)


@pytest.mark.spec("L2")
@pytest.mark.parametrize("stream", [True, False])
def test_a_model_server_that_dies_mid_answer_exits_7_not_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stream: bool
) -> None:
    cut = "before_finish" if stream else "mid_chunk"
    with FakeChatServer(scripted([Reply.text("Order 742 is", cut=cut)] * 2)) as chat:
        path = agent_file(tmp_path, f"tools_o{int(stream)}", chat.url)
        code, out = run(path, capsys, *([] if stream else ["--no-stream"]))
    assert code == 7 and out["exit"] == 7 and out["ok"] is False
    assert out["stop_reason"] == "model_error" and out["answer"] is None
    assert "gave up after 2 attempts" in out["message"]


@pytest.mark.spec("L2", "T7")
def test_an_answer_after_a_denied_or_failed_call_is_not_a_clean_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replies = [
        Reply.calls(("close_order", '{"order_id": "742"}')),  # needs approval; no store here
        Reply.text("Closed."),
    ]
    with FakeChatServer(scripted(replies)) as chat:
        code, out = run(agent_file(tmp_path, "tools_p", chat.url), capsys)
    assert code == 2 and out["stop_reason"] == "accepted" and out["ok"] is False
    [problem] = out["problems"]
    assert problem["kind"] == "denied" and "approval_unavailable" in problem["reason"]
    # The hint gives the run an approval store; it never suggests declaring a write as a read.
    assert "policy.approvals_db" in problem["hint"] and "read" not in problem["hint"]

    replies = [Reply.calls(("read_order", '{"order_id": "999"}')), Reply.text("No such order.")]
    with FakeChatServer(scripted(replies)) as chat:
        code, out = run(agent_file(tmp_path, "tools_q", chat.url), capsys)
    assert code == 6 and out["stop_reason"] == "accepted" and out["error"] == "calls_not_completed"
    assert [(p["tool"], p["kind"], p["reason"]) for p in out["problems"]] == [
        ("read_order", "failed", "not_found")
    ]

    replies = [Reply.calls(("read_order", '{"order_id": "742"}')), Reply.text("Open.")]
    with FakeChatServer(scripted(replies)) as chat:
        code, out = run(agent_file(tmp_path, "tools_r", chat.url), capsys)
    assert code == 0 and out["ok"] is True and out["problems"] == []  # the clean case still exits 0


@pytest.mark.slow
@pytest.mark.spec("L2", "X1")
def test_a_call_to_a_server_that_never_started_says_so_and_exits_6(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = {
        "name": "broken",
        "transport": "stdio",
        "command": [sys.executable, "-c", "raise SystemExit(3)"],
    }
    replies = [Reply.calls(("broken__lookup", '{"key": "a"}')), Reply.text("I could not look it up.")]
    with FakeChatServer(scripted(replies)) as chat:
        path = agent_file(
            tmp_path, "tools_s", chat.url, mcp={"servers": [broken], "host": {"pins": "pins.db"}}
        )
        code, out = run(path, capsys)
    assert code == 6 and out["stop_reason"] == "accepted"
    assert "broken" in out["unavailable_servers"]
    [problem] = out["problems"]
    assert problem["kind"] == "unavailable" and problem["reason"].startswith("server broken is unavailable")


def test_tether_mcp_run_needs_a_model_and_says_how_to_give_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "mcp.yaml"
    config.write_text(
        yaml.safe_dump({"servers": [{"name": "a", "transport": "http", "url": "http://127.0.0.1:9/mcp"}]})
    )
    assert main(["mcp", "run", "Q", "--config", str(config), "--json"]) == 1
    out = last_json(capsys.readouterr().out)
    assert "--model NAME --base-url URL" in out["message"] and "--model scripted:STEPS.yaml" in out["message"]

    assert main(["mcp", "run", "Q", "--config", str(config), "--call", "a__x", "not json", "--json"]) == 1
    out = last_json(capsys.readouterr().out)
    assert out["message"].startswith(
        "--call a__x: the arguments are not JSON (Expecting value at character 0)"
    )

    steps = tmp_path / "steps.yaml"
    steps.write_text("[]")
    argv = ["mcp", "run", "Q", "--config", str(config), "--model", f"scripted:{steps}", "--sampler", "model"]
    assert main([*argv, "--json"]) == 1
    assert "mcp.sampling: model needs a real model" in last_json(capsys.readouterr().out)["message"]


def test_approvals_take_db_after_the_action_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tether.policy import SqliteApprovalStore

    db = tmp_path / "a.db"
    SqliteApprovalStore(db).close()
    assert main(["approvals", "list", "--db", str(db), "--json"]) == 0
    assert last_json(capsys.readouterr().out)["db"] == str(db)
    assert main(["approvals", "--db", str(db), "list", "--json"]) == 0
    assert last_json(capsys.readouterr().out)["db"] == str(db)


@pytest.mark.spec("L2")
def test_every_json_output_has_the_same_top_level_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeChatServer(scripted([Reply.text("Open.")])) as chat:
        path = agent_file(tmp_path, "tools_t", chat.url)
        ran = main(["run", "Why?", "--agent", str(path), "--json"])
    outputs = {"run": (ran, last_json(capsys.readouterr().out))}
    trace = outputs["run"][1]["trace"]
    config = tmp_path / "mcp.yaml"
    config.write_text(
        yaml.safe_dump({"servers": [{"name": "a", "transport": "http", "url": "http://127.0.0.1:9/mcp"}]})
    )
    commands = {
        "run-usage-error": ["run", "Q"],
        "approvals-list": ["approvals", "list", "--db", str(tmp_path / "none.db")],
        "approvals-show-missing-db": ["approvals", "show", "x", "--db", str(tmp_path / "none.db")],
        "resume-missing": ["resume", "nope", "--db", str(tmp_path / "none.db")],
        "trace-stats": ["trace", "stats", trace],
        "mcp-pauses": ["mcp", "pauses", "--config", str(config)],
        "skills-missing": ["skills", "review", str(tmp_path / "nope")],
        "demo-contract": ["demo", "contract"],
    }
    for name, argv in commands.items():
        code = main([*argv, "--json"])
        outputs[name] = (code, last_json(capsys.readouterr().out))
    for name, (code, out) in outputs.items():
        assert set(ENVELOPE) <= set(out), f"{name}: {sorted(out)}"
        assert out["exit"] == code, name
        assert out["ok"] is (code == 0), name
    assert (
        outputs["run"][1]["stop_reason"] == "accepted" and outputs["approvals-list"][1]["stop_reason"] is None
    )
