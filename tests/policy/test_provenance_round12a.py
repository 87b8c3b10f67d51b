"""A twelfth round of attacks on provenance (helper ``attack12a``), aimed at child runs that wait
for a person while the run that started them goes on, and at runs continued twice at once.

1. **a subagent that pauses while its parent goes on**: a subagent's child run that paused for
   an approval came back to its parent as a failed tool result (``approval_required``), and the
   parent went on; the child was later resumed on its own, from its checkpoint, whose history of
   the request was the snapshot its parent handed it when it started: what the parent paid in
   the meantime counted nothing there. The child paid 100 and paused (a mail needing a
   reviewer); the parent paid 100; approved and resumed, the child paid 100 more: 300 paid
   against a bound of 200. Now a child that waits makes its parent wait too (the call is paused,
   as for a question an MCP server asks), and the child is resumed under an id derived from its
   parent's run, step and call, only through its parent's resume (resuming it on its own is
   refused, ``child_run``), so every bound reads one history; the parent gets the child's answer.
2. **a workflow's agent node resumed on its own**: the same for a node's child run: resumed by
   its run id while its workflow waited, its payments never reached the workflow.
3. **a helper asked beside one that paused**: the host's own tools of a turn ran after one of
   them paused, so a second helper paid while the first waited, from a history without the
   first's payment (a paused child's history is its own until it ends); they now wait with it.
4. **a helper's own payer, then the helper paused**: a resumed child folded into its parent only
   what came after the inherited history it was resumed with, which already held what its own
   child runs had done before the pause: a payer's 100 never reached the parent
   (``RunState.handed_down`` now says how much was handed down).
5. **a workflow continued twice at once, or again after it ended**: two continuations of the
   same paused workflow (a double click, a retry sent while the first still ran) each resumed the
   paused node's child run; and a continuation that ended left the workflow's checkpoint
   paused, so a retry of it started the node's finished child afresh, from the paused state:
   each paid the deposit again. Continuations of one workflow now take turns, and one that ends
   records its end (``finished``), which a later continuation starts from.

A durable parent recovered after its worker died is in ``test_provenance_round12a_durable``.

Each test runs a real host with the provenance policy, a real SQLite approval store and a
reviewer who approves, checks what the tools received (the attack did not run unreviewed) AND
that the legitimate version of the same task still runs end to end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from test_provenance_round6 import CTX, HOTEL_IBAN, RULES, TRUST, World
from test_provenance_round11b import FRONT_DESK, MAIL_CALL, PAID, PAY_ONCE, _obeys, _pay

from tether import Agent, Host
from tether.context import ContextConfig, Subagent
from tether.core.messages import AssistantMessage, ToolMessage
from tether.core.stop import StopReason
from tether.errors import ApprovalError
from tether.models._base import ModelRequest
from tether.policy._approvals import Approvals, Reviewer
from tether.policy._provenance_rules import ProvenancePolicy, ProvenanceRules, make_labeler
from tether.policy._sqlite_store import SqliteApprovalStore
from tether.policy._store import ProposalStatus
from tether.runners._workflow import AgentNode, Step, Workflow
from tether.testing import FunctionModel, call

pytestmark = [pytest.mark.anyio, pytest.mark.spec("P1", "P2", "T5")]

REQUEST = f"{PAY_ONCE} Then email the front desk."
DESK_MAIL = ("send_email", {"recipients": [FRONT_DESK], "body": "The deposit is paid."})
ANA = Reviewer("ana", frozenset({CTX.tenant}))


def _host(tmp_path: Path, world: World) -> tuple[Host, Approvals]:
    approvals = Approvals(SqliteApprovalStore(tmp_path / "approvals.db"))
    policy = ProvenancePolicy(ProvenanceRules(RULES, TRUST))
    host = Host(
        policy=policy,
        on_denied="continue",
        labeler=make_labeler(TRUST),
        approvals=approvals,
        trace_dir=tmp_path,
    )
    host.add_tools(world.get_hotels, world.pay_deposit, world.send_email)
    return host, approvals


async def _approve_pending(approvals: Approvals) -> list[str]:
    decided = []
    for proposal in await approvals.store.list_proposals():
        if proposal.status is ProposalStatus.PENDING:
            await approvals.approve(ANA, proposal.id)
            decided.append(proposal.tool)
    return decided


def _relays_conclusion(answer: str = "Done.") -> FunctionModel:
    """The parent: looks the hotel up, asks the helper, then (``after``) answers with what the
    helper concluded, as the tool result it read says it."""

    def reply(request: ModelRequest) -> AssistantMessage:
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return AssistantMessage(tool_calls=(call("get_hotels", city="Paris"),))
        if len(results) == 1:
            return AssistantMessage(tool_calls=(call("helper", task="Pay the Grand Hotel's deposit."),))
        return AssistantMessage(content=f"helper said: {results[-1].content}")

    return FunctionModel(reply)


def _parent(child: list[Any], parent: list[Any]) -> Agent:
    helper = Subagent(
        "helper", "Pays a deposit.", lambda: Agent("helper", _obeys(*child, answer="All paid."))
    )
    ask = call("helper", task="Pay the Grand Hotel's deposit.")
    model = _obeys(call("get_hotels", city="Paris"), ask, *parent, answer="Booked.")
    return Agent("act", model, context=ContextConfig(subagents=[helper]))


async def _delegated(tmp_path: Path, agent: Agent, *, rounds: int = 3) -> tuple[World, list[Any], list[str]]:
    """Runs ``agent``; while a run waits, a reviewer approves what waits and the run the reviewer
    was shown (the parent's) is resumed. What was paid, the results, what was approved."""
    world = World(account=HOTEL_IBAN)
    host, approvals = _host(tmp_path, world)
    results, approved = [], []
    async with host:
        result = await host.run(agent, REQUEST, context=CTX)
        results.append(result)
        for _ in range(rounds):
            if result.stop_reason is not StopReason.APPROVAL_REQUIRED:
                break
            approved += await _approve_pending(approvals)
            result = await host.resume(agent, result.run_id)
            results.append(result)
    return world, results, approved


# -- 1. a subagent that pauses while its parent goes on ---------------------------------------------


async def test_a_paused_subagent_pauses_its_parent_and_counts_what_it_paid_before(tmp_path: Path) -> None:
    # The helper pays 100, mails the desk (a reviewer's), pays 100; the parent then pays 100.
    agent = _parent([_pay(100.0), MAIL_CALL, _pay(100.0)], [_pay(100.0)])
    world, results, approved = await _delegated(tmp_path, agent, rounds=1)
    first, then = results
    # The parent waited with its helper (nothing of its own paid beside it), and said for what.
    assert first.stop_reason is StopReason.APPROVAL_REQUIRED and len(first.pending_proposals) == 1
    # Resumed through the parent: the helper sends its mail and pays the rest; the parent's own
    # third 100 is over the bound and waits for a person.
    assert approved == ["send_email"]
    assert [a.get("amount") for _, a in world.received] == [100.0, None, 100.0]
    assert then.stop_reason is StopReason.APPROVAL_REQUIRED and len(then.pending_proposals) == 1
    assert then.pending_proposals != first.pending_proposals


async def test_a_paused_subagent_is_resumed_only_through_its_parent(tmp_path: Path) -> None:
    world = World(account=HOTEL_IBAN)
    host, approvals = _host(tmp_path, world)
    agent = _parent([_pay(100.0), MAIL_CALL, _pay(100.0)], [_pay(100.0)])
    async with host:
        first = await host.run(agent, REQUEST, context=CTX)
        child = next(str(e.data["child_run_id"]) for e in first.events if str(e.kind) == "subagent_finished")
        await _approve_pending(approvals)
        helper = Agent("helper", _obeys(_pay(100.0), MAIL_CALL, _pay(100.0)))
        with pytest.raises(ApprovalError) as refused:
            await host.resume(helper, child)
        assert refused.value.reason == "child_run" and first.run_id in str(refused.value)
        assert [n for n, _ in world.received] == ["pay_deposit"]
        # Its parent's resume continues it.
        result = await host.resume(agent, first.run_id)
    assert [n for n, _ in world.received] == ["pay_deposit", "send_email", "pay_deposit"]
    assert result.stop_reason is StopReason.APPROVAL_REQUIRED  # the parent's own 100 more


async def test_a_subagent_that_pauses_is_approved_and_finishes_answers_its_parent(tmp_path: Path) -> None:
    helper = Subagent(
        "helper",
        "Pays a deposit.",
        lambda: Agent("helper", _obeys(_pay(120.0), MAIL_CALL, answer="All paid.")),
    )
    agent = Agent("act", _relays_conclusion(), context=ContextConfig(subagents=[helper]))
    world, results, approved = await _delegated(tmp_path, agent)
    assert [str(r.stop_reason) for r in results] == ["approval_required", "accepted"]
    assert approved == ["send_email"]
    assert world.received == [("pay_deposit", {"recipient": HOTEL_IBAN, "amount": 120.0}), DESK_MAIL]
    assert results[-1].answer is not None and "All paid." in results[-1].answer
    # What the parent paid after its helper counts the helper's 120: the other 80 still runs.
    agent = _parent([_pay(120.0), MAIL_CALL], [_pay(80.0)])
    world, results, _ = await _delegated(tmp_path / "rest", agent)
    assert [str(r.stop_reason) for r in results] == ["approval_required", "accepted"]
    assert [a.get("amount") for _, a in world.received] == [120.0, None, 80.0]


def _two_helpers(first: list[Any], second: list[Any]) -> Agent:
    """A parent that asks two helpers in one turn: ``helper`` proposes ``first``, ``payer``
    ``second``."""
    helper = Subagent("helper", "Handles a booking.", lambda: Agent("helper", _obeys(*first)))
    payer = Subagent("payer", "Pays a deposit.", lambda: Agent("payer", _obeys(*second)))
    both = (call("helper", task="Handle the Grand Hotel."), call("payer", task="Pay the Grand Hotel."))

    def reply(request: ModelRequest) -> AssistantMessage:
        n = sum(isinstance(m, ToolMessage) for m in request.messages)
        if n == 0:
            return AssistantMessage(tool_calls=(call("get_hotels", city="Paris"),))
        return AssistantMessage(tool_calls=both) if n == 1 else AssistantMessage(content="Booked.")

    return Agent("act", FunctionModel(reply), context=ContextConfig(subagents=[helper, payer]))


async def test_a_helper_asked_beside_a_paused_one_waits_for_it(tmp_path: Path) -> None:
    # The helper pays 100 and waits for its mail; the payer asked in the same turn would pay 100
    # while it waits, and the helper its other 100 once approved: it runs after, and waits.
    agent = _two_helpers([_pay(100.0), MAIL_CALL, _pay(100.0)], [_pay(100.0)])
    world, results, approved = await _delegated(tmp_path, agent, rounds=1)
    assert [a.get("amount") for _, a in world.received] == [100.0, None, 100.0]
    assert [str(r.stop_reason) for r in results] == ["approval_required", "approval_required"]
    assert approved == ["send_email"]
    # What the two leave within the bound still runs, each helper's answer reaching the parent.
    agent = _two_helpers([_pay(100.0), MAIL_CALL], [_pay(100.0)])
    world, results, _ = await _delegated(tmp_path / "within", agent)
    assert [a.get("amount") for _, a in world.received] == [100.0, None, 100.0]
    assert [str(r.stop_reason) for r in results] == ["approval_required", "accepted"]


def _helper_with_payer(parent_pays: float) -> Agent:
    """The parent's helper asks its own payer (who pays 100), then mails the desk (a reviewer's);
    the parent then pays ``parent_pays``."""
    payer = Subagent("payer", "Pays a deposit.", lambda: Agent("payer", _obeys(_pay(100.0))))
    helper = Subagent(
        "helper",
        "Handles a booking.",
        lambda: Agent(
            "helper",
            _obeys(call("payer", task="Pay part of the deposit."), MAIL_CALL),
            context=ContextConfig(subagents=[payer]),
        ),
    )
    ask = call("helper", task="Handle the Grand Hotel's deposit.")
    model = _obeys(call("get_hotels", city="Paris"), ask, _pay(parent_pays), answer="Booked.")
    return Agent("act", model, context=ContextConfig(subagents=[helper]))


async def test_what_a_paused_helpers_own_payer_paid_reaches_the_parent(tmp_path: Path) -> None:
    world, results, _ = await _delegated(tmp_path, _helper_with_payer(200.0), rounds=1)
    assert [a.get("amount") for _, a in world.received] == [100.0, None]
    assert [str(r.stop_reason) for r in results] == ["approval_required", "approval_required"]
    world, results, _ = await _delegated(tmp_path / "rest", _helper_with_payer(100.0), rounds=1)
    assert [a.get("amount") for _, a in world.received] == [100.0, None, 100.0]
    assert [str(r.stop_reason) for r in results] == ["approval_required", "accepted"]


# -- 2. a workflow's agent node resumed on its own --------------------------------------------------


def _node_workflow() -> Workflow:
    steps = [
        Step("hotels", "get_hotels", {"city": "Paris"}),
        AgentNode("pay", Agent("payer", _obeys(_pay(100.0), MAIL_CALL, _pay(100.0))), lambda out: "Pay."),
        AgentNode("rest", Agent("rest", _obeys(_pay(100.0))), lambda out: "Pay what is left."),
    ]
    return Workflow("book", steps, answer=lambda out: str(out["pay"]))


async def test_a_workflow_node_is_resumed_only_through_its_workflow(tmp_path: Path) -> None:
    world = World(account=HOTEL_IBAN)
    host, approvals = _host(tmp_path, world)
    workflow = _node_workflow()
    async with host:
        first = await host.run_workflow(workflow, REQUEST, context=CTX)
        assert first.stop_reason is StopReason.APPROVAL_REQUIRED
        await _approve_pending(approvals)
        with pytest.raises(ApprovalError) as refused:
            await host.resume(workflow.steps[1].agent, f"{first.run_id}-node2")  # type: ignore[union-attr]
        assert refused.value.reason == "child_run"
        again = await host.run_workflow(workflow, REQUEST, context=CTX, run_id=first.run_id)
    # The node finished its 200; the next node's 100 is over the bound and waits.
    assert [a.get("amount") for _, a in world.received] == [100.0, None, 100.0]
    assert again.stop_reason is StopReason.APPROVAL_REQUIRED


def _node_with_helper(helper_calls: list[Any]) -> Workflow:
    """A workflow whose first node delegates to a helper (``helper_calls``); the next pays 100."""
    helper = Subagent("helper", "Pays a deposit.", lambda: Agent("helper", _obeys(*helper_calls)))
    delegating = Agent(
        "booker",
        _obeys(call("helper", task="Pay the Grand Hotel's deposit."), answer="Helper done."),
        context=ContextConfig(subagents=[helper]),
    )
    steps = [
        Step("hotels", "get_hotels", {"city": "Paris"}),
        AgentNode("book", delegating, lambda out: "Book it."),
        AgentNode("rest", Agent("rest", _obeys(_pay(100.0))), lambda out: "Pay what is left."),
    ]
    return Workflow("book", steps, answer=lambda out: str(out["book"]))


@pytest.mark.parametrize(
    ("helper_calls", "paid", "stop"),
    [
        ([_pay(100.0), MAIL_CALL, _pay(100.0)], [100.0, None, 100.0], "approval_required"),
        ([_pay(100.0), MAIL_CALL], [100.0, None, 100.0], "accepted"),
    ],
)
async def test_a_workflow_nodes_paused_helper_is_resumed_through_the_workflow(
    tmp_path: Path, helper_calls: list[Any], paid: list[Any], stop: str
) -> None:
    world = World(account=HOTEL_IBAN)
    host, approvals = _host(tmp_path, world)
    workflow = _node_with_helper(helper_calls)
    async with host:
        first = await host.run_workflow(workflow, REQUEST, context=CTX)
        assert first.stop_reason is StopReason.APPROVAL_REQUIRED and len(first.pending_proposals) == 1
        assert await _approve_pending(approvals) == ["send_email"]
        again = await host.run_workflow(workflow, REQUEST, context=CTX, run_id=first.run_id)
    assert [a.get("amount") for _, a in world.received] == paid and str(again.stop_reason) == stop
    if stop == "accepted":
        assert again.answer == "Helper done."


# -- 3. a workflow continued twice at once ---------------------------------------------------------


class _Counting:
    """A node's model that pays, mails the desk, then answers; counts the turns it was asked.
    Each call it proposes has a fresh id, as a provider's have: asked again, it is a new call."""

    def __init__(self) -> None:
        self.asked = 0

    def model(self) -> FunctionModel:
        def reply(request: ModelRequest) -> AssistantMessage:
            self.asked += 1
            n = sum(isinstance(m, ToolMessage) for m in request.messages)
            calls = (_pay(), call("send_email", recipients=[FRONT_DESK], body="The deposit is paid."))
            return (
                AssistantMessage(tool_calls=(calls[n],))
                if n < len(calls)
                else AssistantMessage(content="paid")
            )

        return FunctionModel(reply)


async def test_a_workflow_continued_twice_at_once_resumes_its_node_once(tmp_path: Path) -> None:
    world = World(account=HOTEL_IBAN)
    host, approvals = _host(tmp_path, world)
    counting = _Counting()
    steps = [
        Step("hotels", "get_hotels", {"city": "Paris"}),
        AgentNode("pay", Agent("payer", counting.model()), lambda o: "Pay."),
    ]
    workflow = Workflow("book", steps, answer=lambda out: str(out["pay"]))
    stops: list[str] = []
    async with host:
        first = await host.run_workflow(workflow, REQUEST, context=CTX)
        assert first.stop_reason is StopReason.APPROVAL_REQUIRED and counting.asked == 2
        await _approve_pending(approvals)

        async def again() -> None:
            result = await host.run_workflow(workflow, REQUEST, context=CTX, run_id=first.run_id)
            stops.append(str(result.stop_reason))

        async with anyio.create_task_group() as tg:
            tg.start_soon(again)
            tg.start_soon(again)
    assert world.received == [PAID, DESK_MAIL]
    assert stops == ["accepted", "accepted"]
    assert counting.asked == 3  # the node's last turn, asked once


def test_the_cli_tells_a_person_what_a_paused_subagent_waits_for(tmp_path: Path) -> None:
    """``tether run``'s next steps for a parent waiting with its helper: approve the helper's
    proposal, then resume the parent (not ``tether mcp resume`` for the helper's run)."""
    from tether.cli._commands.run import next_steps

    agent = _parent([_pay(100.0), MAIL_CALL], [])

    async def first() -> Any:
        world = World(account=HOTEL_IBAN)
        host, _ = _host(tmp_path, world)
        async with host:
            return await host.run(agent, REQUEST, context=CTX)

    result = anyio.run(first)
    steps = next_steps(result, tmp_path / "approvals.db")
    [proposal] = result.pending_proposals
    assert steps == [
        f"tether approvals approve {proposal} --db {tmp_path / 'approvals.db'}",
        f"tether resume {result.run_id} --db {tmp_path / 'approvals.db'}",
    ]


async def test_a_workflow_continued_again_after_it_ended_runs_its_node_no_more(tmp_path: Path) -> None:
    # A retry of a continuation that had ended (its answer lost on the way back): the paused
    # node's child run had finished, so it was started afresh under its id, from nothing.
    world = World(account=HOTEL_IBAN)
    host, approvals = _host(tmp_path, world)
    counting = _Counting()
    pay = AgentNode("pay", Agent("payer", counting.model()), lambda o: "Pay.")
    workflow = Workflow("book", [Step("hotels", "get_hotels", {"city": "Paris"}), pay], answer=lambda o: "ok")
    async with host:
        first = await host.run_workflow(workflow, REQUEST, context=CTX)
        await _approve_pending(approvals)
        stops = [str(first.stop_reason)]
        for _ in range(2):
            again = await host.run_workflow(workflow, REQUEST, context=CTX, run_id=first.run_id)
            stops.append(str(again.stop_reason))
    assert stops == ["approval_required", "accepted", "accepted"]
    assert world.received == [PAID, DESK_MAIL] and counting.asked == 3
    assert again.answer == "ok"


async def test_a_plan_continued_twice_at_once_runs_its_approved_call_once(tmp_path: Path) -> None:
    from test_provenance_round11b import _Extractor, _Planner

    from tether.runners._plan import run_plan

    world = World(account=HOTEL_IBAN)
    host, approvals = _host(tmp_path, world)
    extractor = _Extractor(200.0, 200.0, 200.0)
    stops: list[str] = []
    async with host:
        first = await run_plan(host, _Planner(), extractor, REQUEST, context=CTX)
        assert first.stop_reason is StopReason.APPROVAL_REQUIRED
        await _approve_pending(approvals)

        async def again() -> None:
            result = await run_plan(host, _Planner(), extractor, REQUEST, context=CTX, run_id=first.run_id)
            stops.append(str(result.stop_reason))

        async with anyio.create_task_group() as tg:
            tg.start_soon(again)
            tg.start_soon(again)
        saved = await approvals.store.load_checkpoint(first.run_id)
    assert world.received == [PAID, DESK_MAIL] and stops == ["accepted", "accepted"]
    assert saved is not None and saved.status == "finished"
