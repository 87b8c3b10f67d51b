"""Strict intake (T3) applies to MCP tools through their input schema: a malformed proposal is
refused before the server sees it, and the legitimate call reaches the real server (stdio)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.core.messages import ToolCall
from tether.core.stop import Limits, StopReason
from tether.host import Host
from tether.policy import Policy, TrustedContext
from tether.runs._values import Agent
from tether.testing import ScriptedModel, call, final
from tether.tools import Effect
from tether_examples.scenarios.maintenance.lab import erp_command

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.spec("T3")
async def test_malformed_mcp_proposals_never_reach_the_server_and_the_valid_one_does(tmp_path: Path) -> None:
    log = tmp_path / "erp.jsonl"
    host = Host(policy=Policy(allow={"erp__read_order"}))
    host.add_mcp_server(
        "erp", command=erp_command(), env={"TETHER_ERP_LOG": str(log)}, effects={"read_order": Effect.READ}
    )
    model = ScriptedModel(
        [
            call("erp__read_order", order_id="742", sql="DROP TABLE orders"),  # extra field
            ToolCall("c-dup", "erp__read_order", '{"order_id": "742", "order_id": "999"}'),  # duplicate key
            call("erp__read_order", order_id=742),  # wrong type: no coercion to "742"
            call("erp__read_order", order_id="742"),
            final("Order 742 was read."),
        ]
    )
    agent = Agent(instructions="Read orders.", model=model, limits=Limits(max_malformed_turns=5))
    result = await host.run(agent, "Read order 742.", context=TrustedContext(tenant="shopping-a"))
    await host.aclose()
    assert result.stop_reason is StopReason.ACCEPTED
    errors = [e.data["message"].split(":")[0] for e in result.events if str(e.kind) == "tool_error"]
    assert errors == ["extra_field", "duplicate_key", "wrong_type"]
    received = [json.loads(line) for line in log.read_text().splitlines()]
    assert received == [{"tool": "read_order", "arguments": {"order_id": "742"}}]
