"""A seventeenth round of attacks (helper ``attack17``), aimed at the runners other than the agent
loop and at the seams between them: workflows, plans, the proposal desk, resumes and child runs.

1. **another tenant's run id**: a run id can be chosen (``run_workflow(run_id=...)``,
   ``run_plan(run_id=...)``, ``tether submit --run-id``), and the effect ledger's key was the run
   id, step, call id, tool and arguments, none of them the tenant's: a second tenant running the
   same workflow under the first one's run id had the first tenant's recorded outcome replayed
   to it (the export of the first tenant's ledger, its data), and its own export never ran. The
   ledger now keeps each entry's tenant (``effect_ledger.tenant``, migration
   ``approvals.003_ledger_tenant``): another tenant's call under that key is refused
   (``run_id_taken``), never replayed; the same tenant's continuation still replays. The key
   itself is unchanged, so entries earlier releases wrote are found after an upgrade.
2. **a proposal the policy let through, executed by another**: ``ProposalDesk.propose`` stores a
   call that needs no approval as approved by ``policy:automatic``, and ``execute`` applies the
   policy again, in the executor's context; but when the policy now asked a person (an intern's
   payment of 5,000, which a treasurer's needs no review; a rule tightened since), settlement
   took the automatic approval for a person's, and the payment ran unreviewed. An automatic
   approval settles nothing the policy sends to a person (``not_reviewed``): proposed again, it
   waits for a reviewer; the treasurer's own execution still runs at once.
3. **a rollback after a run whose helper paid**: ``Host.rollback`` hands the workflow what the
   failed agent run did, so its bounds count it; it handed ``failed.calls``, the run's own calls,
   and what its subagent's child run did (folded into the run's inherited history) was lost: a
   helper paid the 200 deposit, the run failed, and the workflow paid 200 again, unreviewed.
   ``RunResult`` now carries the run's inherited history (``history()``), and a rollback counts it.
4. **another tenant's paused run, squatted**: a workflow or a plan run under a chosen run id
   whose checkpoint was another tenant's started as a new run under that id: its events went
   into that run's trace, and its own pause or refusal overwrote the paused run's checkpoint
   (the other tenant's continuation then started afresh, forgetting what its run had done and
   paid). Such a run stops ``approval_denied`` (``run_id_taken``), traced apart, saving nothing; the
   tenant's own continuation goes on as before.

Each test runs a real host with a real SQLite approval store, checks what the tools received (the
attack did not get through) AND that the legitimate version of the same flow still works.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field
from test_provenance_round6 import CTX, HOTEL_IBAN, World
from test_provenance_round11b import PAY_ONCE, _obeys, _pay
from test_provenance_round11b import _host as _provenance_host

from tether import Agent, Host, tool
from tether.context import ContextConfig, Subagent
from tether.core.stop import Limits, StopReason
from tether.core.types import Effect
from tether.errors import ApprovalError
from tether.policy._approvals import Approvals, Reviewer
from tether.policy._rules import Decision, Policy, ProposedCall
from tether.policy._sqlite_store import SqliteApprovalStore
from tether.policy._store import ProposalStatus
from tether.policy._trusted import TrustedContext
from tether.runners._desk import ProposalDesk
from tether.runners._plan import ExtractionRequest, Plan, PlannedCall, run_plan
from tether.runners._workflow import Step, Workflow
from tether.testing import call
from tether.tools._contract import ToolContext

pytestmark = [pytest.mark.anyio, pytest.mark.spec("T4", "T5")]

ACME = TrustedContext(tenant="acme")
GLOBEX = TrustedContext(tenant="globex")
MONTH = "2026-11"


class Books:
    """Each tenant's ledger: an export is a side effect (it is logged, and sent to the tenant)."""

    def __init__(self) -> None:
        self.exports: list[tuple[str, str]] = []

    def tools(self) -> list[Any]:
        @tool(effect=Effect.WRITE)
        async def export_ledger(
            month: Annotated[str, Field(description="The month, YYYY-MM.")], ctx: ToolContext
        ) -> dict[str, str]:
            """Export the tenant's ledger for a month."""
            self.exports.append((ctx.tenant, month))
            return {"tenant": ctx.tenant, "rows": f"the books of {ctx.tenant}"}

        return [export_ledger]


def _host(tmp_path: Path, books: Books) -> Host:
    approvals = Approvals(SqliteApprovalStore(tmp_path / "approvals.db"))
    policy = Policy(automatic_effects=(Effect.READ, Effect.WRITE))  # exports need no reviewer
    host = Host(policy=policy, approvals=approvals, trace_dir=tmp_path)
    host.add_tools(*books.tools())
    return host


class _PlanOnce:
    async def plan(self, objective: str, tools: Sequence[dict[str, Any]]) -> Plan:
        return Plan((PlannedCall("export_ledger", {"month": MONTH}),))


class _NoExtractor:
    async def extract(self, request: ExtractionRequest) -> Any:
        raise AssertionError("nothing to extract")


async def _export(
    host: Host, runner: str, context: TrustedContext, run_id: str, stop: StopReason = StopReason.ACCEPTED
) -> Any:
    """Export the books by a workflow or a plan under ``run_id``; the export's data when it ran."""
    if runner == "workflow":
        workflow = Workflow(
            "export", [Step("books", "export_ledger", {"month": MONTH})], answer=lambda out: str(out["books"])
        )
        result = await host.run_workflow(workflow, "Export the books.", context=context, run_id=run_id)
    else:
        result = await run_plan(
            host, _PlanOnce(), _NoExtractor(), "Export the books.", context=context, run_id=run_id
        )
    assert result.stop_reason is stop, result.detail
    exported = [o for o in result.observations if o.tool == "export_ledger"]
    return exported[-1].data if exported else None


# -- 1. another tenant's run id -----------------------------------------------------------------------


@pytest.mark.parametrize("runner", ["workflow", "plan"])
async def test_another_tenants_run_id_never_replays_their_effect(tmp_path: Path, runner: str) -> None:
    books = Books()
    host = _host(tmp_path, books)
    async with host:
        theirs = await _export(host, runner, ACME, "books-1")
        # The same tenant's continuation of its run replays the recorded export: no second one.
        again = await _export(host, runner, ACME, "books-1")
        assert again == theirs == {"tenant": "acme", "rows": "the books of acme"}
        assert books.exports == [("acme", MONTH)]
        # Another tenant under the same run id: refused at the ledger (the key is acme's effect,
        # kept with its tenant), never handed acme's books; keys stay what earlier releases
        # wrote, so a rolling upgrade still finds every recorded effect.
        refused = await _export(host, runner, GLOBEX, "books-1", StopReason.APPROVAL_REQUIRED)
        assert refused is None and books.exports == [("acme", MONTH)]
        # Under a run id of its own, globex exports its own books.
        ours = await _export(host, runner, GLOBEX, "books-2")
    assert ours == {"tenant": "globex", "rows": "the books of globex"}
    assert books.exports == [("acme", MONTH), ("globex", MONTH)]


# -- 2. a proposal the policy let through, executed by another ------------------------------------

TREASURER = TrustedContext(tenant="acme", user="tess", roles=frozenset({"treasurer"}))
INTERN = TrustedContext(tenant="acme", user="ian", roles=frozenset({"intern"}))
PAYMENT = '{"tool": "pay", "arguments": {"recipient": "DE89370400440532013000", "amount": 5000.0}}'


class TreasurerPays:
    """Payments need a reviewer unless a treasurer makes them."""

    name = "treasury"

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None:
        if call.spec.name == "pay" and "treasurer" not in context.roles:
            return Decision("approve", self.name, "treasurer_or_reviewer", {})
        return None


def _paying_host(tmp_path: Path, paid: list[tuple[str, float]]) -> Host:
    @tool(effect=Effect.PURCHASE)
    def pay(
        recipient: Annotated[str, Field(description="Account.")],
        amount: Annotated[float, Field(description="Amount in EUR.")],
    ) -> str:
        """Pay an account."""
        paid.append((recipient, amount))
        return "paid"

    approvals = Approvals(SqliteApprovalStore(tmp_path / "approvals.db"))
    policy = Policy(automatic_effects=(Effect.READ, Effect.PURCHASE), rules=[TreasurerPays()])
    host = Host(policy=policy, approvals=approvals, trace_dir=tmp_path)
    host.add_tools(pay)
    return host


async def test_an_automatic_approval_is_no_persons_approval(tmp_path: Path) -> None:
    paid: list[tuple[str, float]] = []
    host = _paying_host(tmp_path, paid)
    desk = ProposalDesk(host)
    async with host:
        proposed = await desk.propose(TREASURER, PAYMENT)
        assert proposed.status is ProposalStatus.APPROVED  # the treasurer's needs no reviewer
        with pytest.raises(ApprovalError) as refused:
            await desk.execute(INTERN, proposed.id)
        assert refused.value.reason == "not_approved" and "not_reviewed" in str(refused.value)
        assert paid == []
        # The treasurer's own execution runs at once, as before.
        done = await desk.execute(TREASURER, proposed.id)
        assert not done.replayed and paid == [("DE89370400440532013000", 5000.0)]
        # The intern's payment waits for a person, and runs once approved.
        asked = await desk.propose(INTERN, PAYMENT)
        assert asked.status is ProposalStatus.PENDING
        await desk.approve(Reviewer("ana", frozenset({"acme"})), asked.id)
        await desk.execute(INTERN, asked.id)
    assert paid == [("DE89370400440532013000", 5000.0)] * 2


# -- 3. a rollback after a run whose helper paid --------------------------------------------------


async def _rolled_back_after_helper(*helper_calls: Any) -> tuple[World, str]:
    """An agent run asks a helper (``helper_calls``), then reads until its step limit; the host
    rolls back to a workflow that looks the hotel up and pays the 200 deposit."""
    world = World(account=HOTEL_IBAN)
    host = _provenance_host(world)
    host.add_tools(world.get_hotels, world.pay_deposit)
    helper = Subagent("helper", "Pays a deposit.", lambda: Agent("helper", _obeys(*helper_calls)))
    reads = [call("get_hotels", city="Paris") for _ in range(8)]
    agent = Agent(
        "act",
        _obeys(call("helper", task="Look up the Grand Hotel and pay its deposit."), *reads),
        limits=Limits(max_steps=3),
        context=ContextConfig(subagents=[helper]),
    )
    pay = {"recipient": HOTEL_IBAN, "amount": 200.0}
    steps = [Step("hotels", "get_hotels", {"city": "Paris"}), Step("pay", "pay_deposit", pay)]
    workflow = Workflow("book", steps, answer=lambda out: "paid")
    async with host:
        failed = await host.run(agent, PAY_ONCE, context=CTX)
        assert not failed.ok
        result = await host.rollback(failed, workflow, PAY_ONCE, context=CTX)
    return world, str(result.stop_reason)


async def test_a_rollback_counts_what_the_failed_runs_helper_paid() -> None:
    paid = ("pay_deposit", {"recipient": HOTEL_IBAN, "amount": 200.0})
    world, stop = await _rolled_back_after_helper(call("get_hotels", city="Paris"), _pay())
    assert world.received == [paid] and stop == "policy_denied"  # not a second 200
    # A helper that paid nothing: the workflow pays the deposit, unreviewed, as before.
    world, stop = await _rolled_back_after_helper(call("get_hotels", city="Paris"))
    assert world.received == [paid] and stop == "accepted"


# -- 4. another tenant's paused run, squatted -----------------------------------------------------


@pytest.mark.parametrize("runner", ["workflow", "plan"])
async def test_another_tenants_paused_run_is_not_overwritten(tmp_path: Path, runner: str) -> None:
    books = Books()
    approvals = Approvals(SqliteApprovalStore(tmp_path / "approvals.db"))
    host = Host(approvals=approvals, trace_dir=tmp_path)  # an export needs a reviewer
    host.add_tools(*books.tools())
    async with host:
        await _export(host, runner, ACME, "books-1", StopReason.APPROVAL_REQUIRED)
        before = await approvals.store.load_checkpoint("books-1")
        assert before is not None and before.status == "paused"
        assert await _export(host, runner, GLOBEX, "books-1", StopReason.APPROVAL_DENIED) is None
        after = await approvals.store.load_checkpoint("books-1")
        assert after is not None and (after.state, after.status) == (before.state, before.status)
        assert "globex" not in (tmp_path / "books-1.jsonl").read_text()
        [refused] = tmp_path.glob("books-1-refused-*.jsonl")  # its own trace says why
        assert "globex" in refused.read_text() and "run_id_taken" in refused.read_text()
        # Acme's reviewer approves; acme's continuation runs its export, once.
        [pending] = await approvals.store.list_proposals(status=ProposalStatus.PENDING)
        await approvals.approve(Reviewer("ana", frozenset({"acme"})), pending.id)
        done = await _export(host, runner, ACME, "books-1")
    assert done == {"tenant": "acme", "rows": "the books of acme"}
    assert books.exports == [("acme", MONTH)]
