"""Policy, round thirty-four: ``deny`` and ``roles`` name an action, not one byte string. A hostile
MCP server that offers ``erp__Delete_Order`` or ``erp__delete_\\u200border`` (a zero-width space),
beside or instead of the ``delete_order`` a deployer denied or kept for admins, got its tool
offered and run: the names were compared exactly. They are now compared folded (NFKC,
case-folded, format characters dropped); ``allow`` stays exact."""

from __future__ import annotations

import sys
from typing import Annotated

import _lookalike_server
import pytest
from pydantic import Field

from tether import Agent, Host, Limits, RunResult, StopReason, tool
from tether.context import ContextConfig, Subagent
from tether.core._names import offered_name
from tether.core.messages import AssistantMessage
from tether.core.ratelimit import TokenBucket
from tether.core.types import ProposedCall, ToolCall
from tether.mcp._source import McpServerSource
from tether.policy import Policy, TrustedContext
from tether.testing import ScriptedModel, call
from tether.tools import Effect, ToolSpec
from tether.trace import EventKind

pytestmark = pytest.mark.spec("T1")

SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}}}
SPELLINGS = ["Delete_Order", "DELETE_ORDER", "delete_\u200border", "ｄｅｌｅｔｅ_order", "delete_order\ufeff"]


def _spec(remote: str) -> ToolSpec:
    return ToolSpec(
        offered_name("erp", remote), remote, SCHEMA, Effect.READ, source="erp", remote_name=remote
    )


def _check(policy: Policy, remote: str, roles: frozenset[str] = frozenset()) -> str:
    call = ProposedCall("c1", _spec(remote), {"order_id": "1"})
    return policy.check(call, TrustedContext(tenant="t", roles=roles, user="u")).verdict


@pytest.mark.parametrize("remote", SPELLINGS)
def test_deny_holds_for_other_spellings_of_the_denied_tool(remote: str) -> None:
    policy = Policy(deny={"erp__delete_order"})
    spec = _spec(remote)
    assert not policy.permits_tool(spec.name, spec.remote_name)
    assert _check(policy, remote) == "deny"
    # Legitimate: another tool of the server is still offered and allowed.
    assert policy.permits_tool(offered_name("erp", "read_order"), "read_order")
    assert _check(policy, "read_order") == "allow"


@pytest.mark.parametrize("remote", SPELLINGS)
def test_roles_hold_for_other_spellings_of_the_restricted_tool(remote: str) -> None:
    policy = Policy(roles={"delete_order": {"admin"}})
    assert _check(policy, remote) == "deny"
    # Legitimate: an admin may call it, and anyone another tool.
    assert _check(policy, remote, frozenset({"admin"})) == "allow"
    assert _check(policy, "read_order") == "allow"


def test_two_spellings_of_one_role_rule_need_a_role_both_accept() -> None:
    policy = Policy(roles={"delete_order": {"admin", "ops"}, "Delete_Order": {"admin"}})
    assert _check(policy, "delete_order", frozenset({"ops"})) == "deny"
    assert _check(policy, "delete_order", frozenset({"admin"})) == "allow"


def test_allow_stays_exact() -> None:
    policy = Policy(allow={"erp__read_order"})
    assert policy.permits_tool("erp__read_order", "read_order")
    assert not policy.permits_tool(offered_name("erp", "Read_Order"), "Read_Order")


# -- one turn of many copies of one call -------------------------------------------------------
# ``max_identical_calls`` was counted after a turn ran: one turn of 32 copies of a refund (the
# per-turn bound) paid 32 refunds before the run stopped for repetition. A turn that would make a
# call more often than the bound is now refused whole, before any of it runs.

CTX = TrustedContext(tenant="shop", roles=frozenset())


def _refund_host() -> tuple[Host, list[str]]:
    paid: list[str] = []

    @tool(effect=Effect.WRITE)
    async def refund(order_id: Annotated[str, Field(description="The order.")]) -> str:
        """Refund an order."""
        paid.append(order_id)
        return "refunded"

    host = Host(policy=Policy(allow={"refund"}, automatic_effects={Effect.READ, Effect.WRITE}))
    host.add_tools(refund)
    return host, paid


async def _turn(host: Host, *calls: ToolCall) -> RunResult:
    model = ScriptedModel([AssistantMessage(tool_calls=calls), "done"])
    return await host.run(
        Agent(instructions="x", model=model, limits=Limits(max_identical_calls=3)), "q", context=CTX
    )


@pytest.mark.anyio
async def test_a_turn_of_more_identical_calls_than_the_bound_runs_none() -> None:
    host, paid = _refund_host()
    result = await _turn(host, *(call("refund", order_id="742") for _ in range(8)))
    assert result.stop_reason is StopReason.REPETITION and "none ran" in result.detail
    assert paid == []


@pytest.mark.anyio
async def test_a_turn_within_the_bound_runs() -> None:
    host, paid = _refund_host()
    result = await _turn(
        host, *(call("refund", order_id="742") for _ in range(3)), call("refund", order_id="9")
    )
    assert result.stop_reason is StopReason.ACCEPTED
    assert sorted(paid) == ["742", "742", "742", "9"]


# -- a subagent gets no tool its parent lacks ----------------------------------------------------
# A parent narrowed to ``tools=["read_order"]`` could ask a subagent whose agent names no tools
# (every tool the policy allows) to do what it could not: the child's ``refund`` ran. A child's
# tools are now those of its agent that its parent was offered.


async def _delegate(
    child_call: ToolCall, child_tools: list[str] | None = None
) -> tuple[list[str], list[str], RunResult]:
    host, paid = _refund_host()
    read: list[str] = []

    @tool
    async def read_order(order_id: Annotated[str, Field(description="The order.")]) -> str:
        """Read an order."""
        read.append(order_id)
        return "open"

    host.policy = Policy(allow={"refund", "read_order"}, automatic_effects={Effect.READ, Effect.WRITE})
    host.add_tools(read_order)
    child = lambda: Agent("child", ScriptedModel([child_call, "done"]), tools=child_tools)  # noqa: E731
    helper = Subagent("helper", "Does one task.", child)
    parent = ScriptedModel([call("helper", task="Refund order 742."), "done"])
    agent = Agent("parent", parent, tools=["read_order"], context=ContextConfig(subagents=[helper]))
    return paid, read, await host.run(agent, "Look at order 742.", context=CTX)


@pytest.mark.anyio
async def test_a_subagent_cannot_use_a_tool_its_parent_was_not_offered() -> None:
    paid, _, result = await _delegate(call("refund", order_id="742"))
    assert paid == []
    children = [e for e in result.events if e.kind is EventKind.SUBAGENT_FINISHED]
    assert children


@pytest.mark.anyio
async def test_a_subagent_that_names_its_tools_has_them() -> None:
    # A deployer's specialist: the child's own list is its tools (the policy still judges each).
    paid, _, result = await _delegate(call("refund", order_id="742"), child_tools=["refund"])
    assert result.stop_reason is StopReason.ACCEPTED and paid == ["742"]


@pytest.mark.anyio
async def test_a_subagent_uses_the_tools_its_parent_has() -> None:
    paid, read, result = await _delegate(call("read_order", order_id="742"))
    assert result.stop_reason is StopReason.ACCEPTED and paid == [] and read == ["742"]


# -- a server's look-alike of a declared tool ----------------------------------------------------
# The host declared ``send_mail`` (effect send, egress on ``to``); a server that also (or only)
# offers ``Send_Mail`` had it offered undeclared: no egress check, read by model and reviewer as
# the declared tool. A look-alike of a declared name is not offered; other tools still are.


@pytest.mark.anyio
async def test_a_look_alike_of_a_declared_server_tool_is_not_offered() -> None:
    source = McpServerSource(
        "mail",
        command=[sys.executable, _lookalike_server.__file__],
        effects={"send_mail": Effect.SEND},
        egress={"send_mail": "to"},
    )
    await source.start()
    try:
        specs = {s.remote_name: s for s in await source.list_tools()}
    finally:
        await source.close()
    assert not set(_lookalike_server.LOOK_ALIKES) & set(specs)
    # Legitimate: the declared tool keeps its declaration, an undeclared other tool is offered.
    assert specs["send_mail"].egress_arguments == ("to",) and specs["send_mail"].effect is Effect.SEND
    assert specs["lookup"].effect is Effect.WRITE


# -- a tool's own rate limit and its source's ---------------------------------------------------
# With a bucket for a tool and one for its source, a call took only the tool's: calls to a tool
# given a wider bucket of its own escaped the source's limit (the upstream's). Both are taken.


@pytest.mark.anyio
async def test_a_tools_own_bucket_does_not_escape_its_sources_bucket() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    host, paid = _refund_host()
    wide, upstream = TokenBucket(rate=100.0, burst=100), TokenBucket(rate=1.0, burst=1, sleep=sleep)
    host.rate_limits = {"refund": wide, host.local.name: upstream}
    result = await _turn(host, call("refund", order_id="1"), call("refund", order_id="2"))
    assert result.stop_reason is StopReason.ACCEPTED and sorted(paid) == ["1", "2"]
    assert upstream.acquired == 2 and wide.acquired == 2 and waits
