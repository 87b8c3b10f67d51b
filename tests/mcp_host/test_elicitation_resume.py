"""X5 with no person at the keyboard: an elicitation becomes a checkpointed pause of the *run*
(like an approval), and ``host.resume`` continues it with the validated answer from the store.
The model stand-in obeys; the servers are real (official SDK over Streamable HTTP on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.core.messages import ToolMessage
from tether.core.stop import StopReason
from tether.errors import ApprovalError
from tether.host import Host
from tether.mcp._config import McpConfig
from tether.mcp._pauses import PauseStore
from tether.mcphost._build import build_host
from tether.mcphost._runner import INSTRUCTIONS, ScriptStep, StandIn, answer_pause
from tether.policy import Approvals, SqliteApprovalStore, TrustedContext
from tether.runs._values import Agent, RunResult
from tether.testing import FunctionModel

from .conftest import approve_all, web_server, write_config

pytestmark = pytest.mark.anyio

EFFECTS = {"ask_colour": "read", "ask_password": "read", "lookup": "read"}


def _host(config: McpConfig, db: Path) -> Host:
    # No responder: nobody is at the keyboard. The approval store lets the run checkpoint.
    return build_host(config, responder=None, approvals=Approvals(SqliteApprovalStore(db)))


def _agent(steps: list[Any]) -> tuple[Agent, FunctionModel]:
    model = FunctionModel(StandIn(steps), name="mcp-stand-in")
    return Agent(instructions=INSTRUCTIONS, model=model, name="mcp-agent"), model


async def _start(config: McpConfig, db: Path, steps: list[Any]) -> RunResult:
    host = _host(config, db)
    agent, _ = _agent(steps)
    try:
        return await host.run(agent, "Which colour?", context=TrustedContext(tenant=config.host.tenant))
    finally:
        await host.aclose()


async def _resume(config: McpConfig, db: Path, run_id: str) -> tuple[RunResult, dict[str, list[str]]]:
    """Resume in a fresh host (as another process would); returns what the model was shown."""
    host = _host(config, db)
    agent, model = _agent([])  # the stand-in then answers with what it observed
    try:
        result = await host.resume(agent, run_id)
    finally:
        await host.aclose()
    seen: dict[str, list[str]] = {}
    if model.requests:
        for m in model.requests[-1].messages:
            if isinstance(m, ToolMessage):
                seen.setdefault(m.name, []).append(m.content)
    return result, seen


async def _pending(config: McpConfig) -> list[Any]:
    store = PauseStore(config.path(config.host.state))
    try:
        return await store.pending()
    finally:
        store.close()


def _elicitations(result: RunResult) -> list[dict[str, Any]]:
    return [e.data for e in result.events if str(e.kind) == "mcp_elicitation"]


@pytest.mark.spec("X5")
@pytest.mark.parametrize("mode", ["auto", "legacy"])  # both protocol eras ask differently
async def test_an_unanswered_question_checkpoints_the_run_and_resume_hands_the_server_the_answer(
    tmp_path: Path, http_url: str, mode: str
) -> None:
    config = write_config(
        tmp_path, [web_server("h", http_url, mode=mode, effects=EFFECTS, elicitation={"enabled": True})]
    )
    await approve_all(config)
    db = tmp_path / "approvals.db"
    # The obeying model calls a credential-phishing tool, then the legitimate one.
    first = await _start(
        config, db, [ScriptStep(calls=(("h__ask_password", {}),)), ScriptStep(calls=(("h__ask_colour", {}),))]
    )

    assert first.stop_reason is StopReason.APPROVAL_REQUIRED and "paused for input" in first.detail
    checkpoint = await SqliteApprovalStore(db).load_checkpoint(first.run_id)
    assert checkpoint is not None and checkpoint.status == "paused"
    # Attack: the credential-shaped question was refused outright; it never became a pause.
    refused = [e for e in _elicitations(first) if e["outcome"] == "refused"]
    assert [e["tool"] for e in refused] == ["h__ask_password"]
    assert refused[0]["reason"].startswith("credential_shaped")
    pauses = await _pending(config)
    assert [(p.tool, p.run_id) for p in pauses] == [("h__ask_colour", first.run_id)]

    # Attack: an answer outside the schema is refused at answer time and changes nothing.
    with pytest.raises(ApprovalError) as info:
        await answer_pause(config, pauses[0].id, "accept", {"colour": "green"}, actor="ops")
    assert info.value.reason == "invalid_answer"
    assert [p.id for p in await _pending(config)] == [pauses[0].id]

    # Legitimate: a valid answer is stored, the run resumes and the server receives it.
    await answer_pause(config, pauses[0].id, "accept", {"colour": "red"}, actor="ops")
    second, seen = await _resume(config, db, first.run_id)
    assert second.stop_reason is StopReason.ACCEPTED, second.detail
    assert (
        len(seen["h__ask_colour"]) == 1
        and "action=accept content={'colour': 'red'}" in seen["h__ask_colour"][0]
    )
    # The password call already had its (declined) result: it is not run again on resume.
    assert len(seen["h__ask_password"]) == 1 and "action=decline" in seen["h__ask_password"][0]
    assert await _pending(config) == []
    assert (await SqliteApprovalStore(db).load_checkpoint(first.run_id)).status == "finished"  # type: ignore[union-attr]
    with pytest.raises(ApprovalError, match="already ended"):
        await _resume(config, db, first.run_id)


@pytest.mark.spec("X5")
async def test_a_resumed_run_without_an_answer_pauses_again_and_a_decline_reaches_the_server(
    tmp_path: Path, http_url: str
) -> None:
    # Two servers (same endpoint), so each has one call in flight and the question is attributable.
    servers = [
        web_server("h", http_url, effects=EFFECTS, elicitation={"enabled": True}),
        web_server("g", http_url, effects=EFFECTS),
    ]
    config = write_config(tmp_path, servers)
    await approve_all(config)
    db = tmp_path / "approvals.db"
    first = await _start(
        config, db, [ScriptStep(calls=(("g__lookup", {"key": "alpha"}), ("h__ask_colour", {})))]
    )
    assert first.stop_reason is StopReason.APPROVAL_REQUIRED
    [pause] = await _pending(config)

    # Nobody answered yet: resuming asks the same question again and pauses again, same pause.
    again, _ = await _resume(config, db, first.run_id)
    assert again.stop_reason is StopReason.APPROVAL_REQUIRED
    assert [p.id for p in await _pending(config)] == [pause.id]

    await answer_pause(config, pause.id, "decline", None, actor="ops")
    done, seen = await _resume(config, db, first.run_id)
    assert done.stop_reason is StopReason.ACCEPTED, done.detail
    assert "action=decline" in seen["h__ask_colour"][0]
    assert len(seen["g__lookup"]) == 1 and "value-of-alpha" in seen["g__lookup"][0]


@pytest.mark.spec("X5")
async def test_a_destructive_tool_asking_to_confirm_runs_once_approved_and_once_confirmed(
    tmp_path: Path, http_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.policy import Reviewer

    log = tmp_path / "calls.log"
    monkeypatch.setenv("HOSTILE_LOG", str(log))
    effects = {"delete_record": "write"}
    config = write_config(
        tmp_path, [web_server("h", http_url, effects=effects, elicitation={"enabled": True})]
    )
    await approve_all(config)
    db = tmp_path / "approvals.db"
    first = await _start(config, db, [ScriptStep(calls=(("h__delete_record", {"record_id": "r1"}),))])
    # First the side effect waits for a reviewer: nothing was sent to the server.
    assert first.stop_reason is StopReason.APPROVAL_REQUIRED and not log.exists()
    [pid] = [e.data["proposal_id"] for e in first.events if str(e.kind) == "approval_requested"]
    await Approvals(SqliteApprovalStore(db)).approve(Reviewer.for_all_tenants("ops"), pid)
    # Approved, the call runs; the server asks "are you sure?" and nobody is there: paused again.
    second, _ = await _resume(config, db, first.run_id)
    assert second.stop_reason is StopReason.APPROVAL_REQUIRED and "paused for input" in second.detail
    [pause] = await _pending(config)
    with pytest.raises(ApprovalError):
        await answer_pause(config, pause.id, "accept", {"confirm": "yes"}, actor="ops")  # no coercion
    await answer_pause(config, pause.id, "accept", {"confirm": True}, actor="ops")
    done, seen = await _resume(config, db, first.run_id)
    assert done.stop_reason is StopReason.ACCEPTED, done.detail
    assert "record r1 deleted" in seen["h__delete_record"][0]
    # The server saw the cancelled attempt and the confirmed one: no replay of the pause, no third.
    assert log.read_text().split() == ["delete_record", "delete_record"]
    with pytest.raises(ApprovalError, match="already ended"):
        await _resume(config, db, first.run_id)


@pytest.mark.spec("X5")
async def test_a_question_pauses_its_turn_and_resume_runs_only_the_call_that_asked(
    tmp_path: Path, http_url: str
) -> None:
    # Two connections to the server: the question handler tells calls apart per connection (two
    # concurrent calls on one connection can leave a question unattributed, and declined).
    config = write_config(
        tmp_path,
        [
            web_server("h", http_url, effects=EFFECTS, elicitation={"enabled": True}),
            web_server("g", http_url, effects=EFFECTS),
        ],
    )
    await approve_all(config)
    db = tmp_path / "approvals.db"
    # One turn of two calls: a plain read, and a question nobody is there to answer.
    first = await _start(
        config, db, [ScriptStep(calls=(("g__lookup", {"key": "alpha"}), ("h__ask_colour", {})))]
    )
    assert first.stop_reason is StopReason.APPROVAL_REQUIRED and "paused for input" in first.detail
    [pause] = await _pending(config)
    await answer_pause(config, pause.id, "accept", {"colour": "blue"}, actor="ops")
    second, seen = await _resume(config, db, first.run_id)
    assert second.stop_reason is StopReason.ACCEPTED, second.detail
    # The read's result was checkpointed with the pause: the model reads it once, it ran once.
    assert len(seen["g__lookup"]) == 1 and len(seen["h__ask_colour"]) == 1
    assert "colour': 'blue'" in seen["h__ask_colour"][0]
    ran = [e for e in second.events if str(e.kind) == "tool_observation" and e.data["tool"] == "g__lookup"]
    assert len(ran) == 1
