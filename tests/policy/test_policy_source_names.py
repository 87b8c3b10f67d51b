"""``deny`` and ``roles`` written with the name a tool has at its source (``delete_order`` for the
``erp`` server's ``erp__delete_order``) apply to it: before, they matched only the offered name,
so a deployer who wrote the name from the server's own listing got no denial and no role check,
and nothing said so. ``allow`` still matches only the offered name: another source offering a
tool of the same name is not allowed by it."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tether import Agent, Host
from tether.policy import DictCatalog, Policy, TrustedContext
from tether.testing import FunctionModel, call, final, tool_results
from tether.tools import Effect, Target, ToolOutput, ToolSpec
from tether.trace import EventKind

pytestmark = [pytest.mark.anyio, pytest.mark.spec("T1")]

SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}


class Erp:
    """A source whose tools are offered as ``erp__<name>``, as an MCP server's are."""

    name = "erp"

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def list_tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(f"erp__{n}", n, SCHEMA, Effect.DELETE, source="erp", remote_name=n)
            for n in ("delete_order", "read_order")
        ]

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], context: Any) -> ToolOutput:
        self.received.append((spec.remote_name, arguments))
        return ToolOutput(text="done", data="done")


async def _run(policy: Policy, context: TrustedContext) -> tuple[Erp, list[str], list[str]]:
    erp = Erp()
    offered: list[str] = []

    def model(request: Any) -> Any:
        offered[:] = [t["function"]["name"] for t in request.tools]  # the wire form
        return call("erp__delete_order", order_id="742") if not tool_results(request) else final("ok")

    host = Host(policy=policy)
    host.add_source(erp)
    async with host:
        result = await host.run(Agent("act", FunctionModel(model)), "Delete order 742.", context=context)
    denied = [e.data["reason"] for e in result.events if e.kind is EventKind.POLICY_DENIED]
    return erp, offered, denied


async def test_a_denial_by_the_sources_name_denies_the_offered_tool() -> None:
    erp, offered, denied = await _run(
        Policy(deny={"delete_order"}, automatic_effects={Effect.DELETE}), TrustedContext(tenant="t")
    )
    assert erp.received == [] and denied == ["tool_not_allowed"]
    assert offered == ["erp__read_order"]  # not offered either
    # The legitimate flow: without the denial the same call runs.
    erp, offered, denied = await _run(Policy(automatic_effects={Effect.DELETE}), TrustedContext(tenant="t"))
    assert erp.received == [("delete_order", {"order_id": "742"})] and denied == []


async def test_a_role_required_by_the_sources_name_is_required() -> None:
    policy = Policy(roles={"delete_order": {"admin"}}, automatic_effects={Effect.DELETE})
    erp, _, denied = await _run(policy, TrustedContext(tenant="t", roles={"clerk"}))
    assert erp.received == [] and denied == ["role_missing"]
    erp, _, denied = await _run(policy, TrustedContext(tenant="t", roles={"admin"}))
    assert erp.received == [("delete_order", {"order_id": "742"})] and denied == []
    # Requirements under both names both apply.
    both = Policy(
        roles={"delete_order": {"admin"}, "erp__delete_order": {"ops"}}, automatic_effects={Effect.DELETE}
    )
    erp, _, denied = await _run(both, TrustedContext(tenant="t", roles={"admin"}))
    assert erp.received == [] and denied == ["role_missing"]
    erp, _, denied = await _run(both, TrustedContext(tenant="t", roles={"admin", "ops"}))
    assert erp.received == [("delete_order", {"order_id": "742"})]


async def test_an_allowance_by_the_sources_name_allows_nothing() -> None:
    erp, offered, denied = await _run(
        Policy(allow={"delete_order"}, automatic_effects={Effect.DELETE}), TrustedContext(tenant="t")
    )
    assert erp.received == [] and offered == [] and denied == ["tool_not_allowed"]


class _Orders:
    """A source whose delete tool declares its target (an order) as tenant-owned."""

    name = "orders"

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def list_tools(self) -> list[ToolSpec]:
        target = Target("order_id", "order")
        return [ToolSpec("delete_order", "Delete.", SCHEMA, Effect.DELETE, source="orders", target=target)]

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], context: Any) -> ToolOutput:
        return ToolOutput(text="done", data="done")


async def test_a_target_no_catalog_checks_is_said_at_start(caplog: pytest.LogCaptureFixture) -> None:
    """A tool that declares a tenant-owned target on a host whose policy has no catalog runs
    without an ownership check: the host says so when it starts, and is quiet with a catalog."""
    for policy, warned in ((Policy(), True), (Policy(catalog=DictCatalog({"order": {"742": "t"}})), False)):
        caplog.clear()
        host = Host(policy=policy)
        host.add_source(_Orders())
        with caplog.at_level(logging.WARNING, logger="tether.host"):
            async with host:
                assert [s.name for s in host.offered()] == ["delete_order"]
        said = [r.getMessage() for r in caplog.records if r.name == "tether.host"]
        assert bool(said) is warned
        assert not said or "delete_order declare a target but the policy has no catalog" in said[0]
