"""A fiftieth round of attacks by a reader of the policy and provenance rules (helper ``prov50``),
aimed at the rules that count or remember across calls: ``cumulative`` amounts, approvals bound
to one call, what a resumed run counts of what ran before its pause.

1. **two calls of one turn under one id**: everything the host counts and remembers of a call
   goes by its id (the turn-mates a cumulative bound adds up, the proposal an approval settles
   on, the effect ledger's key, the result the model reads). A model that gave two payments of
   one turn the same id had each judged with nothing beside it (the turn-mates counted are those
   *before* the call's id in the turn: none, for both), so two deposits of 150 under a bound of
   200 both ran, and two calls under one id would settle on one approval. Now every call of a
   turn whose id another call of the turn gives is refused before any policy sees it
   (``duplicate_call_id``), and a backend's answer that repeats an id within itself has the
   later ones renamed (``unique_call_ids``), so a real server's repeated ids still run;
2. **an amount left to the tool's default, before a pause, counted after a restart**: an
   earlier call's amount that the call left out was counted at its tool's schema default only
   where the policy had learnt that default in this process (by checking a call of that tool);
   resumed in another process, a top-up made by its default 50 counted nothing, and a second
   top-up through the other paying tool ran past the bound. Now the default is read from the
   host's catalog when it has not been learnt;
3. **a payment paused for a person's answer, run again once resumed**: a bank that asks a
   question mid-call pauses the run (its server is told to cancel); resumed, the call runs again
   under its id, and the policy judged it with its own paused attempt already paid, so the user's
   own deposit of 200 under a bound of 200 needed a reviewer. The paused attempt and its run
   again are one payment, counted once: a second deposit afterwards still needs a reviewer.

Each test runs a real host with the provenance policy and a scripted model that obeys, checks
what the tools received (the attack did not run unreviewed) AND that the legitimate version
still runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field
from test_provenance_round6 import CTX, FRIEND, HOTEL_IBAN, RULES, TRUST, World

from tether import Agent, Effect, Host, tool
from tether.core.messages import AssistantMessage, ToolMessage
from tether.core.types import ToolCall
from tether.mcp._calling import InputPending
from tether.models._base import ModelRequest, ModelResponse, unique_call_ids
from tether.policy._approvals import Approvals, Reviewer
from tether.policy._provenance_rules import ProvenancePolicy, ProvenanceRules, make_labeler, rules_from_dict
from tether.policy._sqlite_store import SqliteApprovalStore
from tether.testing import FunctionModel, call
from tether.trace._events import EventKind

pytestmark = [pytest.mark.anyio, pytest.mark.spec("P1", "P2")]

REQUEST = f"Look at the Grand Hotel in Paris and pay the 200.00 EUR deposit to {HOTEL_IBAN}."
REVIEWER = Reviewer("ana", frozenset({CTX.tenant}))


def _pay(amount: float, call_id: str | None = None) -> ToolCall:
    made = call("pay_deposit", recipient=HOTEL_IBAN, amount=amount)
    return made if call_id is None else ToolCall(call_id, made.name, made.arguments)


def _as(call_id: str, made: ToolCall) -> ToolCall:
    return ToolCall(call_id, made.name, made.arguments)


def _turns(*turns: list[ToolCall]) -> FunctionModel:
    """A model that proposes each of ``turns`` (the calls of one answer) in order, whatever it read,
    then answers: stateless (it counts the answers it has given), so a resumed run goes on."""

    def reply(request: ModelRequest) -> AssistantMessage:
        n = sum(isinstance(m, AssistantMessage) and bool(m.tool_calls) for m in request.messages)
        if n < len(turns):
            return AssistantMessage(tool_calls=tuple(turns[n]))
        return AssistantMessage(content="Done.")

    return FunctionModel(reply)


def _host(world: World, rules: Any = RULES, **kw: Any) -> Host:
    policy = ProvenancePolicy(ProvenanceRules(rules, TRUST))
    host = Host(policy=policy, on_denied="continue", labeler=make_labeler(TRUST), **kw)
    host.add_tools(world.get_hotels, world.pay_deposit, world.send_email)
    return host


def _refused_ids(events: Any) -> list[str]:
    return [
        str(e.data.get("call_id"))
        for e in events
        if e.kind is EventKind.TOOL_ERROR and str(e.data.get("message", "")).startswith("duplicate_call_id")
    ]


# -- 1. two calls of one turn under one id -----------------------------------------------------------

_MAIL = call("send_email", recipients=[FRIEND], body="Booked the Grand Hotel.")

SHARED = {
    "two deposits within the bound": [_pay(150.0, "x"), _pay(150.0, "x")],
    "the same deposit twice": [_pay(200.0, "x"), _pay(200.0, "x")],
    "a deposit beside a mail": [_pay(150.0, "x"), _as("x", _MAIL)],
    "a deposit between two others": [_pay(150.0, "a"), _pay(40.0, "x"), _pay(10.0, "x")],
}


@pytest.mark.parametrize("calls", list(SHARED.values()), ids=list(SHARED))
async def test_calls_of_one_turn_under_one_id_never_run(calls: list[ToolCall]) -> None:
    world = World(account=HOTEL_IBAN)
    async with _host(world) as host:
        result = await host.run(Agent("act", _turns(calls)), REQUEST, context=CTX)
    shared = [c for c in calls if sum(o.id == c.id for o in calls) > 1]
    assert _refused_ids(result.events) == [c.id for c in shared]
    others = [c for c in calls if all(c is not s for s in shared)]
    assert len(world.received) == len(others)  # only the calls with an id of their own ran
    assert sum(float(a.get("amount", 0)) for _, a in world.received) <= 200.0


async def test_two_deposits_under_their_own_ids_within_the_bound_both_run() -> None:
    world = World(account=HOTEL_IBAN)
    async with _host(world) as host:
        agent = Agent("act", _turns([_pay(120.0, "a"), _pay(80.0, "b")]))
        result = await host.run(agent, REQUEST, context=CTX)
    assert str(result.stop_reason) == "accepted" and not _refused_ids(result.events)
    assert sorted(a["amount"] for _, a in world.received) == [80.0, 120.0]  # run side by side


async def test_two_deposits_under_their_own_ids_past_the_bound_wait_for_a_person() -> None:
    world = World(account=HOTEL_IBAN)
    async with _host(world) as host:
        await host.run(Agent("act", _turns([_pay(150.0, "a"), _pay(150.0, "b")])), REQUEST, context=CTX)
    assert [a["amount"] for _, a in world.received] == [150.0]  # the second needs a reviewer (none here)


async def test_one_approval_never_runs_two_calls_under_one_id(tmp_path: Path) -> None:
    """Two deposits over the bound under one id: neither is proposed to a reviewer (one approval
    would have settled both: a proposal is found by its run, step and call id), neither runs."""
    world, approvals = World(account=HOTEL_IBAN), Approvals(SqliteApprovalStore(tmp_path / "a.db"))
    agent = Agent("act", _turns([_pay(300.0, "x"), _pay(300.0, "x")]))
    async with _host(world, approvals=approvals) as host:
        result = await host.run(agent, REQUEST, context=CTX)
        for proposal in result.pending_proposals:
            await approvals.approve(REVIEWER, proposal)
        stored = await approvals.store.list_proposals(run_id=result.run_id)
    assert world.received == [] and result.pending_proposals == [] and stored == []
    assert _refused_ids(result.events) == ["x", "x"]


async def test_a_deposit_over_the_bound_still_runs_once_approved(tmp_path: Path) -> None:
    world, approvals = World(account=HOTEL_IBAN), Approvals(SqliteApprovalStore(tmp_path / "a.db"))
    agent = Agent("act", _turns([_pay(300.0, "x")]))
    async with _host(world, approvals=approvals) as host:
        first = await host.run(agent, REQUEST, context=CTX)
        assert str(first.stop_reason) == "approval_required" and world.received == []
        for proposal in first.pending_proposals:
            await approvals.approve(REVIEWER, proposal)
        result = await host.resume(agent, first.run_id)
    assert str(result.stop_reason) == "accepted"
    assert world.received == [("pay_deposit", {"recipient": HOTEL_IBAN, "amount": 300.0})]


def _answer(*ids: str) -> ModelResponse:
    return ModelResponse(AssistantMessage("", tuple(ToolCall(i, "pay_deposit", "{}") for i in ids)))


def test_an_answer_that_repeats_an_id_within_itself_has_the_later_call_renamed() -> None:
    """A server that numbers the calls of an answer badly (``call_0`` twice): the backend gives
    the later one a new id, so the host runs both (each judged beside the other)."""
    response = unique_call_ids((), _answer("call_0", "call_0", "call_1"))
    ids = [c.id for c in response.message.tool_calls]
    assert ids[0] == "call_0" and ids[2] == "call_1" and ids[1] not in ("call_0", "call_1")
    assert response.meta["call_ids_renamed"] == [["call_0", ids[1]]]
    # Distinct ids, none used before: the same response.
    plain = _answer("call_0", "call_1")
    assert unique_call_ids((AssistantMessage("", ()), ToolMessage("t", "r")), plain) is plain


# -- 2. an amount left to the tool's default, counted after a restart ---------------------------------

CARD = "4111222233334444"
_TOP_UP = {
    "effect": "purchase",
    "requested_by": ["top up"],
    "arguments": {
        "card": {"role": "destination", "from": ["user"]},
        "amount": {"role": "amount", "bound": ["user"], "cumulative": True},
    },
}
CARD_RULES = {**RULES, **rules_from_dict({"top_up": _TOP_UP, "top_up_exact": _TOP_UP})}


class Cards(World):
    @tool(effect=Effect.PURCHASE)
    def top_up(
        self,
        card: Annotated[str, Field(description="The card's number.")],
        amount: Annotated[float, Field(description="How much, in EUR.")] = 50.0,
    ) -> str:
        """Top up a prepaid card (by 50 EUR unless told otherwise)."""
        self.received.append(("top_up", {"amount": amount}))
        return "topped up"

    @tool(effect=Effect.PURCHASE)
    def top_up_exact(
        self,
        card: Annotated[str, Field(description="The card's number.")],
        amount: Annotated[float, Field(description="How much, in EUR.")],
    ) -> str:
        """Top up a prepaid card by exactly ``amount``."""
        self.received.append(("top_up_exact", {"amount": amount}))
        return "topped up"


async def _topped_up_across_a_restart(tmp_path: Path, request: str, then: float) -> tuple[list[Any], str]:
    """Process one tops the card up by the tool's default, then pauses on a mail a reviewer
    approves; process two (a new host and policy, the same store) resumes and tops it up by
    ``then`` through the other tool. What the card received, and the second process's stop."""
    received: list[Any] = []
    agent = Agent(
        "act",
        _turns([call("top_up", card=CARD)], [_MAIL], [call("top_up_exact", card=CARD, amount=then)]),
    )
    run_id, stop = "", ""
    for process in range(2):
        world, approvals = Cards(), Approvals(SqliteApprovalStore(tmp_path / "a.db"))
        host = _host(world, CARD_RULES, approvals=approvals)
        host.add_tools(world.top_up, world.top_up_exact)
        async with host:
            if process == 0:
                first = await host.run(agent, request, context=CTX)
                assert str(first.stop_reason) == "approval_required"
                for proposal in first.pending_proposals:
                    await approvals.approve(REVIEWER, proposal)
                run_id = first.run_id
            else:
                stop = str((await host.resume(agent, run_id)).stop_reason)
        received += [(name, a["amount"]) for name, a in world.received if name.startswith("top_up")]
    return received, stop


async def test_a_default_top_up_before_a_pause_counts_after_a_restart(tmp_path: Path) -> None:
    request = f"Top up my card {CARD} with 50 EUR."
    received, stop = await _topped_up_across_a_restart(tmp_path, request, 50.0)
    assert received == [("top_up", 50.0)] and stop == "approval_required"


async def test_the_rest_of_a_top_up_still_runs_after_a_restart(tmp_path: Path) -> None:
    request = f"Top up my card {CARD} with 100 EUR."
    received, stop = await _topped_up_across_a_restart(tmp_path, request, 50.0)
    assert received == [("top_up", 50.0), ("top_up_exact", 50.0)] and stop == "accepted"


# -- 3. a payment paused for the bank's question, run again once resumed ------------------------------


class Asking(World):
    """A bank that asks a question (``InputPending``: nobody can answer now, the host tells it to
    cancel) the first time it is asked to pay, then pays."""

    asked = False

    @tool(effect=Effect.PURCHASE)
    def pay_deposit(
        self,
        recipient: Annotated[str, Field(description="Account of the hotel.")],
        amount: Annotated[float, Field(description="Amount in EUR.")],
    ) -> str:
        """Pay a hotel's deposit."""
        if not self.asked:
            self.asked = True
            raise InputPending("Confirm the payee?", pause_id="bank-question-1")
        self.received.append(("pay_deposit", {"recipient": recipient, "amount": amount}))
        return "paid"


async def _paused_by_the_bank(tmp_path: Path, *later: list[ToolCall]) -> tuple[list[Any], str, list[str]]:
    """The run pays the deposit; the bank's question pauses it; resumed, the call runs again, then
    the run proposes ``later``. What was paid, the resumed run's stop and what waits for a person."""
    world, approvals = Asking(account=HOTEL_IBAN), Approvals(SqliteApprovalStore(tmp_path / "a.db"))
    agent = Agent("act", _turns([_pay(200.0)], *later))
    async with _host(world, approvals=approvals) as host:
        first = await host.run(agent, REQUEST, context=CTX)
        assert str(first.stop_reason) == "approval_required" and world.received == []
        result = await host.resume(agent, first.run_id)
        waiting = [(await approvals.get(p)).tool for p in result.pending_proposals]
    return [a["amount"] for _, a in world.received], str(result.stop_reason), waiting


async def test_the_users_deposit_paused_for_the_banks_question_runs_once_resumed(tmp_path: Path) -> None:
    assert await _paused_by_the_bank(tmp_path) == ([200.0], "accepted", [])


async def test_a_deposit_paused_then_run_again_still_counts_once(tmp_path: Path) -> None:
    paid, stop, waiting = await _paused_by_the_bank(tmp_path, [_pay(200.0)])
    assert paid == [200.0] and stop == "approval_required" and waiting == ["pay_deposit"]
