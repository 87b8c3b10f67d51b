"""Footguns closed: a bare string where names are expected, a reviewer of every tenant by
accident, and approvals without a database file (the in-memory store)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from pydantic import Field

from tether.core._names import repeated
from tether.errors import ApprovalError
from tether.host import Host
from tether.policy import (
    ALL_TENANTS,
    Allowlist,
    Approvals,
    DictCatalog,
    EffectApproval,
    Egress,
    MemoryApprovalStore,
    Permissions,
    Policy,
    ProposalStatus,
    Reviewer,
    TrustedContext,
)
from tether.policy._provenance_labels import TrustConfig
from tether.policy._provenance_rules import ArgumentRule, ProvenancePolicy, ProvenanceRules, ToolRules
from tether.runners._desk import ProposalDesk
from tether.tools import Effect, Target, ToolContext, tool

ALPHA = TrustedContext(tenant="org-alpha")
BETA = TrustedContext(tenant="org-beta")


@pytest.mark.parametrize(
    ("build", "what"),
    [
        (lambda v: TrustedContext(tenant="t", roles=v), "TrustedContext.roles"),
        (lambda v: Permissions(read=v), "Permissions.read"),
        (lambda v: Permissions(write=v), "Permissions.write"),
        (lambda v: Reviewer("ana", tenants=v), "Reviewer.tenants"),
        (lambda v: Policy(allow=v), "Policy.allow"),
        (lambda v: Policy(deny=v), "Policy.deny"),
        (lambda v: Policy(egress=v), "Policy.egress"),
        (lambda v: Policy(automatic_effects=v), "Policy.automatic_effects"),
        (lambda v: Allowlist(allow=v), "allow"),
        (lambda v: Allowlist(deny=v), "deny"),
        (lambda v: Egress(v), "egress"),
        (lambda v: EffectApproval(v), "automatic_effects"),
        (lambda v: ProvenancePolicy(ProvenanceRules({}, TrustConfig()), allow=v), "Policy.allow"),
        (lambda v: ArgumentRule.from_dict("to", {"role": "destination", "from": v}), "to.from"),
        (lambda v: ArgumentRule.from_dict("to", {"role": "destination", "approve": v}), "to.approve"),
        (lambda v: ToolRules.from_dict("send", {"no_flow": v}), "send.no_flow"),
    ],
)
def test_a_bare_string_where_names_are_expected_is_a_type_error(
    build: Callable[[Any], Any], what: str
) -> None:
    for bare in ("read", b"read"):
        with pytest.raises(TypeError, match="bare string") as info:
            build(bare)
        assert what in str(info.value)
    with pytest.raises(TypeError, match="strings"):
        build([1])
    built = build(["read"])  # the same names as a collection work
    assert built is not None


def test_name_sets_hold_exactly_the_names_given() -> None:
    ctx = TrustedContext(tenant="t", roles=["admin", "ops"], permissions=Permissions(read={"orders"}))
    assert ctx.roles == frozenset({"admin", "ops"}) and ctx.permissions.read == frozenset({"orders"})
    policy = Policy(allow=("read_order",), egress=["Example.COM"], automatic_effects=["read", Effect.WRITE])
    assert policy.allowlist.allow == frozenset({"read_order"})
    assert policy.permits_tool("read_order") and not policy.permits_tool("r")
    egress = next(r for r in policy.rules if isinstance(r, Egress))
    assert egress.allowed == frozenset({"example.com"})
    effect = next(r for r in policy.rules if isinstance(r, EffectApproval))
    assert effect.automatic == frozenset({Effect.READ, Effect.WRITE})
    with pytest.raises(ValueError):
        Policy(automatic_effects=["reed"])


def test_repeated_names_are_each_named_once_sorted() -> None:
    assert repeated(["b", "a", "b", "c", "a", "b"]) == ["a", "b"]
    assert repeated(["a", "b", "c"]) == [] and repeated([]) == []


def test_a_reviewer_must_be_given_a_tenant_scope_or_be_made_global_explicitly() -> None:
    with pytest.raises(TypeError):
        Reviewer("ana")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="ALL_TENANTS"):
        Reviewer("ana", tenants=None)  # type: ignore[arg-type]
    nobody = Reviewer("ana", tenants=set())  # a reviewer of no tenant decides nothing
    assert not nobody.may_review("org-alpha") and not nobody.reviews_all_tenants
    with pytest.raises(ValueError):
        Reviewer(" ", tenants={"org-alpha"})
    scoped = Reviewer("ana", tenants={"org-alpha"})
    assert scoped.may_review("org-alpha") and not scoped.may_review("org-beta")
    assert not scoped.reviews_all_tenants
    operator = Reviewer.for_all_tenants("ops")
    assert operator == Reviewer("ops", tenants=ALL_TENANTS) and operator.reviews_all_tenants
    assert operator.may_review("org-alpha") and operator.may_review("org-beta")


# -- approvals on the in-memory store, end to end ----------------------------------------------


class Notes:
    def __init__(self) -> None:
        self.rows: list[tuple[str | None, str, str]] = []

    @tool(effect=Effect.WRITE, target=Target("order_id", "order"))
    def add_note(
        self,
        order_id: Annotated[str, Field(min_length=1, max_length=40, description="Order id.")],
        note: Annotated[str, Field(min_length=1, max_length=500, description="Note text.")],
        ctx: ToolContext,
    ) -> dict[str, Any]:
        """Append a note to an order."""
        self.rows.append((ctx.idempotency_key, order_id, note))
        return {"order_id": order_id, "note": note}


@pytest.mark.anyio
@pytest.mark.spec("T5")
async def test_the_in_memory_store_runs_the_approval_workflow_exactly_once() -> None:
    notes = Notes()
    catalog = DictCatalog({"order": {"order-1": "org-alpha", "order-9": "org-beta"}})
    store = MemoryApprovalStore()
    host = Host(policy=Policy(allow={"add_note"}, catalog=catalog), approvals=Approvals(store))
    host.add_tools(notes.add_note)
    await host.start()
    desk = ProposalDesk(host)
    raw = json.dumps({"tool": "add_note", "arguments": {"order_id": "order-1", "note": "Call back."}})
    p = await desk.propose(ALPHA, raw)
    assert p.status is ProposalStatus.PENDING
    with pytest.raises(ApprovalError) as info:  # a reviewer of another tenant cannot approve it
        await desk.approve(Reviewer("beta-manager", tenants={"org-beta"}), p.id)
    assert info.value.reason == "reviewer_not_allowed"
    with pytest.raises(ApprovalError):
        await desk.execute(ALPHA, p.id)
    assert notes.rows == []
    await desk.approve(Reviewer("alpha-manager", tenants={"org-alpha"}), p.id)
    first = await desk.execute(ALPHA, p.id)
    again = await desk.execute(ALPHA, p.id)
    assert not first.replayed and again.replayed and again.data == first.data
    assert len(notes.rows) == 1 and notes.rows[0][1:] == ("order-1", "Call back.")
    assert [e.op for e in await store.events(p.id)] == [
        "proposed",
        "policy",
        "approved",
        "executed",
        "replayed",
    ]
    await host.aclose()
