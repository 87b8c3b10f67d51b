"""Policy, round thirty-six: tenant scope and isolation, by an attacker who has read the code
and controls text in tool results.

Large outputs: one folder (``<trace_dir>/outputs``) serves every run and tenant of a host, and
``read_output`` returned any stored output whose ref it was given, though a ref is only the first
64 bits of the text's SHA-256 (one shown in a tool result or a trace, or a known document's). A
run now reads an output only when it, or a run it descends from, stored it for its tenant: a
parent still hands its subagent a ref to read.

Child runs: a subagent's child run id was derived from its parent's run, step and the model's
call id, not from the subagent: a call to another subagent under the call id of a paused
child's call continued that child, under the other subagent's agent (its tools, instructions
and model), and the other subagent's task was never run. The id now names the subagent."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from tether import Agent, Host, RunResult, StopReason, tool
from tether.context import CompressionConfig, ContextConfig, Subagent
from tether.context._store import LargeOutputStore
from tether.core.messages import AssistantMessage, ToolMessage
from tether.core.types import ToolCall
from tether.errors import NotFoundError
from tether.models._base import ModelRequest
from tether.policy import Policy, TrustedContext
from tether.policy._approvals import Approvals
from tether.policy._sqlite_store import SqliteApprovalStore
from tether.runners._loop import _ChildRuns
from tether.runs._checkpoint import state_from_json
from tether.testing import FunctionModel, ScriptedModel, call
from tether.tools import Effect

pytestmark = [pytest.mark.spec("P4", "C3", "L3"), pytest.mark.anyio]

ACME = TrustedContext(tenant="acme", roles=frozenset())
RIVAL = TrustedContext(tenant="rival", roles=frozenset())
SECRET = "ACME-PAYROLL-7731 " + "salary row; " * 600  # over the result budget: stored outside
COMPRESSION = ContextConfig(compression=CompressionConfig(result_budget_chars=2_000, preview_chars=200))

# -- 1. large outputs across runs and tenants ---------------------------------------------------


def _host(tmp_path: Path) -> Host:
    @tool
    async def payroll() -> str:
        """The tenant's payroll export."""
        return SECRET

    host = Host(policy=Policy(allow={"payroll"}), trace_dir=tmp_path)
    host.add_tools(payroll)
    return host


def _ref(request: ModelRequest) -> str:
    preview = [m for m in request.messages if isinstance(m, ToolMessage)][-1].content
    return str(preview).split("ref=", 1)[1].split(" ", 1)[0]


def _pages(result: RunResult) -> list[Any]:
    return [o for o in result.observations if o.tool == "read_output"]


async def _store_payroll(host: Host) -> tuple[RunResult, str]:
    """An acme run that exports its payroll (stored outside the context) and reads it back."""
    refs: list[str] = []

    def turn(request: ModelRequest) -> AssistantMessage:
        step = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if step == 0:
            return AssistantMessage(tool_calls=(call("payroll"),))
        if step == 1:
            refs.append(_ref(request))
            return AssistantMessage(tool_calls=(call("read_output", ref=refs[0]),))
        return AssistantMessage(content="done")

    agent = Agent("clerk", FunctionModel(turn), context=COMPRESSION)
    return await host.run(agent, "Export the payroll.", context=ACME), refs[0]


async def _read(host: Host, ref: str, context: TrustedContext) -> RunResult:
    """A run steered (by a tool result naming ``ref``) to read a stored output."""
    model = ScriptedModel([call("read_output", ref=ref), "done"])
    return await host.run(Agent("reader", model, context=COMPRESSION), "Look around.", context=context)


async def test_another_tenant_cannot_read_an_output_by_its_ref(tmp_path: Path) -> None:
    host = _host(tmp_path)
    mine, ref = await _store_payroll(host)
    [page] = _pages(mine)
    assert not page.is_error and "ACME-PAYROLL-7731" in page.data["text"]  # the run reads its own
    stolen = await _read(host, ref, RIVAL)
    [page] = _pages(stolen)
    assert page.is_error and "ACME-PAYROLL" not in str(page.data)  # was the payroll
    # Nor does another run of the same tenant that did not store it, or descend from one that did.
    [page] = _pages(await _read(host, ref, ACME))
    assert page.is_error and "ACME-PAYROLL" not in str(page.data)


async def test_a_subagent_reads_the_ref_its_parent_hands_it(tmp_path: Path) -> None:
    host = _host(tmp_path)
    seen: list[str] = []

    def child_turn(request: ModelRequest) -> AssistantMessage:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            task = str(request.messages[-1].content)
            return AssistantMessage(tool_calls=(call("read_output", ref=task.split("ref ", 1)[1][:20]),))
        seen.append(str([m for m in request.messages if isinstance(m, ToolMessage)][-1].content))
        return AssistantMessage(content="read it")

    def parent_turn(request: ModelRequest) -> AssistantMessage:
        step = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if step == 0:
            return AssistantMessage(tool_calls=(call("payroll"),))
        if step == 1:
            return AssistantMessage(tool_calls=(call("helper", task=f"Check ref {_ref(request)}"),))
        return AssistantMessage(content="done")

    helper = Subagent(
        "helper", "Reads outputs.", lambda: Agent("child", FunctionModel(child_turn), context=COMPRESSION)
    )
    config = ContextConfig(compression=COMPRESSION.compression, subagents=[helper])
    result = await host.run(Agent("parent", FunctionModel(parent_turn), context=config), "Go.", context=ACME)
    assert result.stop_reason is StopReason.ACCEPTED, result.detail
    assert len(seen) == 1 and "ACME-PAYROLL-7731" in seen[0]
    # The page names the parent's call it repeats: it is judged as the payroll's output.
    [payroll] = [c for c in result.calls if c.tool == "payroll"]
    assert payroll.call_id in seen[0]


def test_the_store_reads_only_its_runs_and_tenants_outputs(tmp_path: Path) -> None:
    root = tmp_path / "outputs"
    parent = LargeOutputStore(root, run="r1", tenant="acme")
    ref = parent.put(SECRET, origin="c1")
    assert parent.read(ref)["relays"] == ["c1"]
    # The same run id under another tenant (a caller's own run id) reads nothing.
    for other in (
        LargeOutputStore(root, run="r1", tenant="rival"),
        LargeOutputStore(root, run="r2", tenant="acme"),
    ):
        with pytest.raises(NotFoundError):
            other.get(ref)
        assert other.origins(ref) == []
    # A grandchild reads what its grandparent stored, once shared down the line; not another tenant's.
    child = LargeOutputStore(root, run="r1-sub1", tenant="acme")
    child.share(parent.readable)
    grandchild = LargeOutputStore(root, run="r1-sub1-sub1", tenant="acme")
    grandchild.share(child.readable)
    assert grandchild.read(ref)["relays"] == ["c1"]
    rival = LargeOutputStore(root, run="r1-sub1-sub1", tenant="rival")
    rival.share(child.readable)
    with pytest.raises(NotFoundError):
        rival.get(ref)
    # Storing the same text makes it the other tenant's too (it had it), under its own origins.
    assert rival.read(rival.put(SECRET, origin="x9"))["relays"] == ["x9"]
    # In memory as on disk.
    memory = LargeOutputStore(run="r1", tenant="acme")
    ref = memory.put("y" * 100)
    memory.tenant = "rival"
    with pytest.raises(NotFoundError):
        memory.get(ref)


# -- 3. a child run bound to its subagent -------------------------------------------------------


def _refunding(tmp_path: Path) -> tuple[Host, list[str]]:
    paid: list[str] = []

    @tool(effect=Effect.WRITE)
    async def refund(order_id: Annotated[str, Field(description="The order.")]) -> str:
        """Refund an order."""
        paid.append(order_id)
        return "refunded"

    approvals = Approvals(SqliteApprovalStore(tmp_path / "approvals.db"))
    host = Host(policy=Policy(allow={"refund"}), approvals=approvals, trace_dir=tmp_path)
    host.add_tools(refund)
    return host, paid


async def test_another_subagent_under_the_same_call_id_does_not_continue_a_paused_child(
    tmp_path: Path,
) -> None:
    host, paid = _refunding(tmp_path)
    refunder = lambda: Agent("child", ScriptedModel([call("refund", order_id="742"), "done"]))  # noqa: E731
    helpers = [Subagent("refunder", "Refunds orders.", refunder)]
    turn = AssistantMessage(
        tool_calls=(ToolCall(id="c1", name="refunder", arguments='{"task": "Refund order 742."}'),)
    )
    parent = Agent("parent", ScriptedModel([turn, "done"]), context=ContextConfig(subagents=helpers))
    paused = await host.run(parent, "Look after order 742.", context=ACME)
    assert paused.stop_reason is StopReason.APPROVAL_REQUIRED and paid == []
    assert host.approvals is not None
    checkpoint = await host.approvals.store.load_checkpoint(paused.run_id)
    assert checkpoint is not None
    state = state_from_json(checkpoint.state)

    asked: list[str] = []

    def writer_turn(request: ModelRequest) -> AssistantMessage:
        asked.append("\n".join(str(m.content) for m in request.messages))
        return AssistantMessage(content="written")

    # The model calls another subagent (a writer) under the paused call's id, in the same step.
    writer = Agent("child", FunctionModel(writer_turn))
    result = await _ChildRuns(host, state, "c1", ("refund",), name="writer").run(
        writer, "Write a note.", context=ACME
    )
    assert result.stop_reason is StopReason.ACCEPTED  # its own task, from the start
    assert asked and "Write a note." in asked[0] and "Refund order 742." not in asked[0]  # was the refunder's
    # The refunder's child, continued through its own subagent, is the paused one.
    again = Agent("child", ScriptedModel(["done"]))
    resumed = await _ChildRuns(host, state, "c1", ("refund",), name="refunder").run(
        again, "Refund order 742.", context=ACME
    )
    assert resumed.stop_reason is StopReason.APPROVAL_REQUIRED and paid == []
    assert resumed.run_id != result.run_id and resumed.pending_proposals == paused.pending_proposals


# -- what an earlier release stored: continued, and read, after the upgrade -----------------------


async def test_a_child_an_earlier_release_paused_is_continued_by_its_own_subagent_after_the_upgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before this release a subagent's child run id held only the call id: a run paused inside a
    # subagent then (an operator's rolling upgrade) must be continued, not started again.
    from tether.runners import _child_ids

    named = _child_ids.child_run_id
    monkeypatch.setattr(
        _child_ids, "child_run_id", lambda parent, part, call_id=None, agent="": named(parent, part, call_id)
    )
    host, paid = _refunding(tmp_path)
    refunder = lambda: Agent("child", ScriptedModel([call("refund", order_id="742"), "done"]))  # noqa: E731
    turn = AssistantMessage(
        tool_calls=(ToolCall(id="c1", name="refunder", arguments='{"task": "Refund order 742."}'),)
    )
    helpers = [Subagent("refunder", "Refunds orders.", refunder)]
    parent = Agent("parent", ScriptedModel([turn, "done"]), context=ContextConfig(subagents=helpers))
    paused = await host.run(parent, "Look after order 742.", context=ACME)
    assert paused.stop_reason is StopReason.APPROVAL_REQUIRED and paid == []
    monkeypatch.undo()  # this release
    assert host.approvals is not None
    checkpoint = await host.approvals.store.load_checkpoint(paused.run_id)
    assert checkpoint is not None
    state = state_from_json(checkpoint.state)
    earlier = named(state, f"sub{state.steps}", "c1")
    assert named(state, f"sub{state.steps}", "c1", "refunder") != earlier
    again = Agent("child", ScriptedModel(["done"]))  # a child started afresh would answer at once
    resumed = await _ChildRuns(host, state, "c1", ("refund",), name="refunder").run(
        again, "Refund order 742.", context=ACME
    )
    assert resumed.run_id == earlier and resumed.stop_reason is StopReason.APPROVAL_REQUIRED
    assert resumed.pending_proposals == paused.pending_proposals and paid == []
    # A child this release stored is found under its own id: the earlier one is not looked for.
    fresh = await _ChildRuns(host, state, "c2", ("refund",), name="refunder").run(
        Agent("child", ScriptedModel(["done"])), "Refund order 9.", context=ACME
    )
    assert fresh.run_id == named(state, f"sub{state.steps}", "c2", "refunder") and fresh.ok


def test_an_output_an_earlier_release_stored_is_read_by_its_own_run_alone(tmp_path: Path) -> None:
    # An earlier release's owner line names its run and origin, no tenant.
    root = tmp_path / "outputs"
    ref = LargeOutputStore(root, run="r1", tenant="acme").put(SECRET, origin="c1")
    (root / f"{ref}.origins").write_text('\n{"run": "r1", "origin": "c1"}', encoding="utf-8")
    assert LargeOutputStore(root, run="r1", tenant="acme").read(ref)["relays"] == ["c1"]
    with pytest.raises(NotFoundError):
        LargeOutputStore(root, run="r2", tenant="acme").get(ref)
