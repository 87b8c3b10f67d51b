"""Handoffs that cannot lie (SPEC H1): what a handoff says was done is checked against the run.

A real agent loop on a real host: the model stand-ins here either call no tool, or call tools
that succeed, fail or are denied; the handoff hook is either the scenario's (built from the
trace) or a template that claims work regardless. Only claims backed by successful calls pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from tether import Agent, Host, Policy, StopReason, TrustedContext, tool
from tether.core.handoff import resolve_from_trace
from tether.errors import NotFoundError
from tether.policy._trusted import Permissions
from tether.testing import ScriptedModel, call
from tether_examples.scenarios.maintenance.lab import handoff_from_trace

pytestmark = [pytest.mark.anyio, pytest.mark.spec("H1")]

CONTEXT = TrustedContext(
    tenant="shopping-a", permissions=Permissions(read=frozenset({"orders", "history"}), write=frozenset())
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@tool(name="erp__read_order")
def read_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict[str, Any]:
    """Read one work order."""
    if order_id != "742":
        raise NotFoundError(f"no work order {order_id}")
    return {"order_id": order_id, "status": "open", "ref": f"mcp:erp/orders/{order_id}#v18"}


@tool(name="erp__read_history")
def read_history(order_id: Annotated[str, Field(description="Work order id.")]) -> dict[str, Any]:
    """Read the history of one work order."""
    return {
        "order_id": order_id,
        "note": "awaiting part P-17",
        "ref": f"mcp:erp/orders/{order_id}/history#v3",
    }


def host(tmp_path: Path, allow: set[str] | None = None) -> Host:
    h = Host(policy=Policy(allow=allow), trace_dir=tmp_path / "traces", on_denied="continue")
    h.add_tools(read_order, read_history)
    return h


def agent(turns: list[Any], handoff: Any) -> Agent:
    return Agent(
        instructions="Investigate.",
        model=ScriptedModel(turns),
        handoff=handoff,
        resolve_evidence=resolve_from_trace,
    )


def from_trace(state: Any, answer: str) -> dict[str, Any]:
    return handoff_from_trace(state, answer, "742")


def template(state: Any, answer: str) -> dict[str, Any]:
    """The old way: a fixed story, whatever happened (here citing a call id the model might use)."""
    data = from_trace(state, answer)
    data["done"] = [{"claim": "order and history read", "cites": ["call_1"]}]
    data["evidence"] = ["mcp:erp/orders/742#v18"]
    return data


async def test_a_model_that_calls_no_tool_cannot_hand_off_that_it_read_anything(tmp_path: Path) -> None:
    lying = await host(tmp_path).run(agent(["Order 742 is open."], template), "Why?", context=CONTEXT)
    assert lying.stop_reason is StopReason.INVALID_HANDOFF
    assert "done:unbacked 0 call_1" in lying.detail
    assert "evidence:unresolved mcp:erp/orders/742#v18" in lying.detail

    honest = await host(tmp_path).run(agent(["Order 742 is open."], from_trace), "Why?", context=CONTEXT)
    assert honest.stop_reason is StopReason.ACCEPTED and honest.handoff is not None
    assert honest.handoff.done == [] and honest.handoff.evidence == []  # it claims nothing read
    assert honest.handoff.next.startswith("not yet read: read work order 742")


async def test_only_successful_calls_back_a_claim_denied_and_failed_ones_are_blocked(tmp_path: Path) -> None:
    turns = [
        call("erp__read_order", order_id="999"),  # fails: not found
        call("erp__read_order", order_id="742"),  # succeeds
        call("erp__read_history", order_id="742"),  # denied: not on the allowlist
        "Order 742 is open.",
    ]
    result = await host(tmp_path, allow={"erp__read_order"}).run(
        agent(turns, from_trace), "Why?", context=CONTEXT
    )

    assert result.stop_reason is StopReason.ACCEPTED and result.handoff is not None
    ok = [c.call_id for c in result.calls if c.status == "ok"]
    assert [(i.claim, i.cites) for i in result.handoff.done] == [("read work order 742", ok)]
    assert [str(e) for e in result.handoff.evidence] == ["mcp:erp/orders/742#v18"]
    assert any(b.startswith("erp__read_order: error (not_found)") for b in result.handoff.blocked)
    assert any(b.startswith("erp__read_history: denied") for b in result.handoff.blocked)
    assert result.handoff.next == "not yet read: read the history of work order 742"

    # The same run with a template that claims the denied read as done is refused.
    denied = next(c.call_id for c in result.calls if c.status == "denied")

    def claims_denied(state: Any, answer: str) -> dict[str, Any]:
        data = from_trace(state, answer)
        data["done"].append({"claim": "read the history of work order 742", "cites": [denied]})
        return data

    again = await host(tmp_path, allow={"erp__read_order"}).run(
        agent(turns, claims_denied), "Why?", context=CONTEXT
    )
    assert again.stop_reason is StopReason.INVALID_HANDOFF
    assert f"done:unbacked 1 {denied}" in again.detail
