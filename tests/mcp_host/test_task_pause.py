"""A task that outlives its call (MCP 2025-11-25 tasks, ``long_tasks: pause``): the run pauses on
it like on an unanswered question, a resume before the task ends pauses again on the same task,
a resume after it ends gets the result cleaned and labelled like any other; the tool is called
once, whatever the number of resumes. Cancelling the paused run's tasks reaches the server.

The server (``task_server.py``, mode ``durable``) keeps its task on disk, so it outlives the
server process between runs, and completes it only when the test creates the signal file. It
runs under the default sandbox, writing only into the folder the config declares."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tether.core.messages import ToolMessage
from tether.core.stop import StopReason
from tether.errors import ApprovalError
from tether.host import Host
from tether.mcp._config import McpConfig
from tether.mcp._hosting import cancel_parked_tasks
from tether.mcp._pauses import PauseStore
from tether.mcphost._build import build_host
from tether.mcphost._runner import INSTRUCTIONS, ScriptStep, StandIn, answer_pause
from tether.policy import Approvals, SqliteApprovalStore, TrustedContext
from tether.runs._values import Agent, RunResult
from tether.testing import FunctionModel

from .conftest import approve, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.spec("X1", "X2")]

SERVER = Path(__file__).with_name("task_server.py")


def _config(tmp_path: Path, effect: str = "read") -> tuple[McpConfig, Path]:
    out = tmp_path / "out"
    out.mkdir()
    server = {"name": "t", "transport": "stdio", "command": [sys.executable, str(SERVER)], "mode": "legacy",
              "effects": {"research": effect}, "timeout_s": 2, "sandbox_write": [str(out)],
              "env": {"TASK_MODE": "durable", "TASK_LOG": str(out / "task.log"),
                      "TASK_SIGNAL": str(out / "done")}}  # fmt: skip
    return write_config(tmp_path, [server]), out


def _host(config: McpConfig, db: Path) -> Host:
    return build_host(config, responder=None, approvals=Approvals(SqliteApprovalStore(db)))


async def _go(config: McpConfig, db: Path, run_id: str | None = None) -> tuple[RunResult, list[str]]:
    """Start the run (or resume ``run_id``) in a fresh host, as another process would; returns
    what the model was shown of the task tool."""
    host = _host(config, db)
    steps = [] if run_id else [ScriptStep(calls=(("t__research", {"topic": "tides"}),))]
    model = FunctionModel(StandIn(steps), name="mcp-stand-in")
    agent = Agent(instructions=INSTRUCTIONS, model=model, name="mcp-agent")
    try:
        if run_id is None:
            context = TrustedContext(tenant=config.host.tenant)
            result = await host.run(agent, "Study the tides", context=context)
        else:
            result = await host.resume(agent, run_id)
    finally:
        await host.aclose()
    last = model.requests[-1].messages if model.requests else []
    return result, [m.content for m in last if isinstance(m, ToolMessage) and m.name == "t__research"]


async def _pauses(config: McpConfig, run_id: str) -> list[Any]:
    store = PauseStore(config.path(config.host.state))
    try:
        return await store.for_run(run_id)
    finally:
        store.close()


def _tasks(result: RunResult) -> list[str]:
    """The task actions of this run or resume (a resumed run's events begin with the earlier ones)."""
    kinds = [str(e.kind) for e in result.events]
    since = len(kinds) - kinds[::-1].index("run_resumed") if "run_resumed" in kinds else 0
    return [e.data["action"] for e in result.events[since:] if str(e.kind) == "mcp_task"]


def _log(out: Path) -> list[str]:
    return (out / "task.log").read_text(encoding="utf-8").split()


async def test_a_task_longer_than_its_call_pauses_the_run_and_resume_gets_its_result_once(
    tmp_path: Path,
) -> None:
    config, out = _config(tmp_path)
    await approve(config, "t")
    db = tmp_path / "approvals.db"

    first, seen = await _go(config, db)
    # The task outlived the call's 2 s: the run paused on it, saying which task of which server.
    assert first.stop_reason is StopReason.APPROVAL_REQUIRED, first.detail
    assert "t__research: paused for task t-1 of server t" in first.detail
    assert seen == []  # no result yet, and no error for the model to act on
    checkpoint = await SqliteApprovalStore(db).load_checkpoint(first.run_id)
    assert checkpoint is not None and checkpoint.status == "paused"
    [pause] = await _pauses(config, first.run_id)
    assert (pause.status, pause.task_id, pause.tool) == ("task", "t-1", "t__research")
    assert _tasks(first) == ["created", "parked"]
    assert "cancel" not in _log(out)  # left running on the server
    # Nobody answers a task: an answer given to its pause is refused and changes nothing.
    with pytest.raises(ApprovalError) as refused:
        await answer_pause(config, pause.id, "accept", {}, actor="ops")
    assert refused.value.reason == "not_a_question" and f"resume run {first.run_id}" in str(refused.value)

    # Resumed before it ends: the same task is polled again and the run pauses again, same pause.
    again, seen = await _go(config, db, first.run_id)
    assert again.stop_reason is StopReason.APPROVAL_REQUIRED and "paused for task t-1" in again.detail
    assert seen == [] and _tasks(again) == ["resumed", "parked"]
    assert [(p.id, p.status) for p in await _pauses(config, first.run_id)] == [(pause.id, "task")]

    (out / "done").touch()  # the task ends
    done, seen = await _go(config, db, first.run_id)
    assert done.stop_reason is StopReason.ACCEPTED, done.detail
    assert _tasks(done) == ["resumed", "finished"]
    # Its result is cleaned and labelled as untrusted server data, like any tool result.
    [text] = seen
    assert "FINDINGS: the long study is done" in text and 'source="t"' in text
    # Three runs of the call, one call of the tool: resumes waited on the task, never re-sent it.
    assert _log(out).count("call") == 1 and "cancel" not in _log(out)
    closed = [(p.status, p.outcome) for p in await _pauses(config, first.run_id)]
    assert closed == [("completed", "completed")]
    assert (await SqliteApprovalStore(db).load_checkpoint(first.run_id)).status == "finished"  # type: ignore[union-attr]


async def test_an_approved_side_effect_run_as_a_long_task_reaches_the_server_once(tmp_path: Path) -> None:
    from tether.policy import Reviewer

    config, out = _config(tmp_path, effect="write")
    await approve(config, "t")
    db = tmp_path / "approvals.db"
    first, _ = await _go(config, db)
    # A side effect waits for a reviewer first: nothing reached the server.
    assert first.stop_reason is StopReason.APPROVAL_REQUIRED and not (out / "task.log").exists()
    [pid] = [e.data["proposal_id"] for e in first.events if str(e.kind) == "approval_requested"]
    await Approvals(SqliteApprovalStore(db)).approve(Reviewer.for_all_tenants("ops"), pid)
    # Approved, it runs; its task outlives the call: the run pauses on the task.
    second, _ = await _go(config, db, first.run_id)
    assert second.stop_reason is StopReason.APPROVAL_REQUIRED and "paused for task t-1" in second.detail
    (out / "done").touch()
    done, seen = await _go(config, db, first.run_id)
    assert done.stop_reason is StopReason.ACCEPTED, done.detail
    assert "FINDINGS: the long study is done" in seen[0]
    # One effect on the server: the resume took the task's result through the ledger, never a
    # second tools/call, and no ledger entry is left with an unknown outcome.
    assert _log(out).count("call") == 1
    entries = await SqliteApprovalStore(db).ledger_for_run(first.run_id)
    assert entries and all(str(e.status) == "done" for e in entries)


async def test_cancelling_a_paused_runs_tasks_cancels_them_on_the_server(tmp_path: Path) -> None:
    config, out = _config(tmp_path)
    await approve(config, "t")
    db = tmp_path / "approvals.db"
    first, _ = await _go(config, db)
    assert first.stop_reason is StopReason.APPROVAL_REQUIRED

    other = build_host(config)
    try:
        await other.start()
        # Another run's cancellation touches nothing of this one.
        assert await cancel_parked_tasks(other, "some-other-run") == []
        assert "cancel" not in _log(out)
        assert await cancel_parked_tasks(other, first.run_id) == ["t-1"]
    finally:
        await other.aclose()
    assert _log(out)[-1] == "cancel"  # the server was told
    assert [(p.status, p.outcome) for p in await _pauses(config, first.run_id)] == [
        ("completed", "run cancelled")
    ]


async def test_with_long_tasks_cancel_a_task_longer_than_its_call_is_cancelled_not_parked(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    server = {"name": "t", "transport": "stdio", "command": [sys.executable, str(SERVER)], "mode": "legacy",
              "effects": {"research": "read"}, "timeout_s": 2, "sandbox_write": [str(out)],
              "long_tasks": "cancel",
              "env": {"TASK_MODE": "durable", "TASK_LOG": str(out / "task.log")}}  # fmt: skip
    config = write_config(tmp_path, [server])
    await approve(config, "t")
    first, seen = await _go(config, tmp_path / "approvals.db")
    assert first.stop_reason is StopReason.ACCEPTED and "timed out" in seen[0]
    assert _log(out)[-1] == "cancel" and await _pauses(config, first.run_id) == []
