"""Scope and aliases, round twenty-two: ``deny`` and ``roles`` written as ``server__tool`` for a
server tool whose offered name had to be made to fit (``files__read.file`` is offered as
``files__read_file_<sha>``, a tool name no provider takes otherwise) now apply to it. Before,
they matched only the hashed offered name and the server's own name (``read.file``), so a deployer
who wrote the namespaced name — the form provenance rules accept for the same tool — got no
denial and no role check: the tool was offered and ran."""

from __future__ import annotations

from typing import Any

import pytest

from tether import Agent, Host
from tether.core._names import offered_name
from tether.policy import Policy, TrustedContext
from tether.testing import FunctionModel, call, final, tool_results
from tether.tools import Effect, ToolOutput, ToolSpec
from tether.trace import EventKind

pytestmark = [pytest.mark.anyio, pytest.mark.spec("T1")]

SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
REMOTE = "orders.delete"  # a dot: no provider takes it, so the offered name is hashed
OFFERED = offered_name("erp", REMOTE)


class Erp:
    """A source whose tools are offered as MCP servers' are: ``erp__<name>``, made to fit."""

    name = "erp"

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def list_tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(offered_name("erp", n), n, SCHEMA, Effect.DELETE, source="erp", remote_name=n)
            for n in (REMOTE, "orders.read")
        ]

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], context: Any) -> ToolOutput:
        self.received.append((spec.remote_name, arguments))
        return ToolOutput(text="done", data="done")


async def _run(policy: Policy, context: TrustedContext) -> tuple[Erp, list[str], list[str]]:
    erp = Erp()
    offered: list[str] = []

    def model(request: Any) -> Any:
        offered[:] = [t["function"]["name"] for t in request.tools]
        return call(OFFERED, order_id="742") if not tool_results(request) else final("ok")

    host = Host(policy=policy)
    host.add_source(erp)
    async with host:
        result = await host.run(Agent("act", FunctionModel(model)), "Delete order 742.", context=context)
    denied = [e.data["reason"] for e in result.events if e.kind is EventKind.POLICY_DENIED]
    return erp, offered, denied


def test_the_offered_name_is_hashed() -> None:
    assert f"erp__{REMOTE}" != OFFERED and OFFERED.startswith("erp__orders_delete_")


async def test_a_denial_by_the_namespaced_name_denies_a_hashed_tool() -> None:
    erp, offered, denied = await _run(
        Policy(deny={f"erp__{REMOTE}"}, automatic_effects={Effect.DELETE}), TrustedContext(tenant="t")
    )
    assert erp.received == [] and denied == ["tool_not_allowed"]
    assert offered == [offered_name("erp", "orders.read")]  # not offered either
    # The legitimate flow: without the denial the same call runs.
    erp, offered, denied = await _run(Policy(automatic_effects={Effect.DELETE}), TrustedContext(tenant="t"))
    assert erp.received == [(REMOTE, {"order_id": "742"})] and denied == []
    assert OFFERED in offered


async def test_a_role_by_the_namespaced_name_is_required_of_a_hashed_tool() -> None:
    policy = Policy(roles={f"erp__{REMOTE}": {"admin"}}, automatic_effects={Effect.DELETE})
    erp, _, denied = await _run(policy, TrustedContext(tenant="t", roles={"clerk"}))
    assert erp.received == [] and denied == ["role_missing"]
    erp, _, denied = await _run(policy, TrustedContext(tenant="t", roles={"admin"}))
    assert erp.received == [(REMOTE, {"order_id": "742"})] and denied == []


async def test_a_namespaced_denial_names_only_its_own_server() -> None:
    """``other__orders.delete`` is another server's tool: it denies nothing of ``erp``."""
    erp, _, denied = await _run(
        Policy(deny={f"other__{REMOTE}"}, automatic_effects={Effect.DELETE}), TrustedContext(tenant="t")
    )
    assert erp.received == [(REMOTE, {"order_id": "742"})] and denied == []


async def test_an_allowance_by_the_namespaced_name_allows_nothing_more() -> None:
    """``allow`` keeps matching only the offered name."""
    erp, offered, denied = await _run(
        Policy(allow={f"erp__{REMOTE}"}, automatic_effects={Effect.DELETE}), TrustedContext(tenant="t")
    )
    assert erp.received == [] and offered == [] and denied == ["tool_not_allowed"]
