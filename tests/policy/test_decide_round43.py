"""The library's own decision methods are the one home of a person's decision (round 43):
``Approvals.approve``, ``deny`` and ``invalidate`` with a ``Reviewer`` go through
``decide_proposal`` (its rules: a denial needs a reason, a reason within bounds, what was read)
and are audited in the ``audit`` log the ``Approvals`` is given, refused or not. Before, they wrote
the store directly: a denial with no reason, a reason of any size, and no audit entry.

A host's own revocation (``invalidate`` with a ``TrustedContext``) is not a person's decision and
stays as it was. Real parts: the in-memory SQL approval store and the console's users database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tether.console._users import UserStore
from tether.errors import ApprovalError
from tether.policy import Approvals, MemoryApprovalStore, Reviewer, TrustedContext
from tether.policy._intake import canonical_json, content_hash
from tether.policy._store import NewProposal
from tether.sql._database import blocking

TENANT = "shop-a"
ANA = Reviewer.for_all_tenants("ana")


def _add(store: MemoryApprovalStore, order: str) -> str:
    from datetime import UTC, datetime

    arguments = {"order_id": order}
    new = NewProposal(
        TENANT, "add_note", canonical_json(arguments), content_hash("add_note", arguments), "write", "runner"
    )
    return str(blocking(store.add_proposal, new, now=datetime.now(UTC)).id)


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[SimpleNamespace]:
    store, users = MemoryApprovalStore(), UserStore(tmp_path / "console.db")
    try:
        yield SimpleNamespace(store=store, users=users, bare=Approvals(store))
    finally:
        store.close()
        users.close()


def _audited(d: SimpleNamespace) -> Approvals:
    return Approvals(d.store, audit=d.users)


def _entries(d: SimpleNamespace) -> list[tuple[str, str, str, str]]:
    return [(e.actor, e.action, e.target, e.outcome) for e in reversed(d.users.audit_log())]


def _status(d: SimpleNamespace, pid: str) -> str:
    return str(blocking(d.store.get_proposal, pid).status)


def test_the_library_approve_deny_invalidate_are_audited_where_a_log_is_given(desk: SimpleNamespace) -> None:
    a, b, c = (_add(desk.store, o) for o in ("1", "2", "3"))
    assert str(blocking(_audited(desk).approve, ANA, a, reason="ok").status) == "approved"
    assert str(blocking(_audited(desk).deny, ANA, b, reason="not asked for").status) == "denied"
    assert str(blocking(_audited(desk).invalidate, ANA, a, reason="withdrawn").status) == "invalidated"
    assert _entries(desk) == [
        ("reviewer:ana", "approve", a, "approved"),
        ("reviewer:ana", "deny", b, "denied"),
        ("reviewer:ana", "invalidate", a, "invalidated"),
    ]
    [entry] = [e for e in desk.users.audit_log() if e.action == "deny"]
    assert (entry.tenant, entry.detail.split("; ")[-1]) == (TENANT, "not asked for")
    # A host's own revocation (a context, not a person) still works, as before.
    context = TrustedContext(tenant=TENANT, user="u1")
    assert str(blocking(desk.bare.invalidate, context, c, reason="host").status) == "invalidated"


def test_the_shared_rules_hold_on_the_library_path_and_refusals_are_audited(desk: SimpleNamespace) -> None:
    """Attack: a library caller denies with no reason, or a reason past its bound, or approves
    what it did not read; each is refused, changes nothing, and is audited as refused."""
    pid = _add(desk.store, "9")
    attempts = [
        (lambda: blocking(_audited(desk).deny, ANA, pid), "reason_required"),
        (lambda: blocking(_audited(desk).deny, ANA, pid, reason="x" * 2001), "bad_request"),
        (lambda: blocking(_audited(desk).approve, ANA, pid, content_hash="0" * 64), "content_changed"),
    ]
    for attempt, reason in attempts:
        with pytest.raises(ApprovalError) as refused:
            attempt()
        assert refused.value.reason == reason
    assert _status(desk, pid) == "pending" and blocking(desk.store.events, pid)[-1].op != "denied"
    assert [(act, outcome) for _, act, _, outcome in _entries(desk)] == [
        ("deny", "refused:reason_required"),
        ("deny", "refused:bad_request"),
        ("approve", "refused:content_changed"),
    ]
    # Legitimate: the same proposal, read and decided properly, is approved.
    seen = blocking(desk.store.get_proposal, pid).content_hash
    assert str(blocking(_audited(desk).approve, ANA, pid, content_hash=seen).status) == "approved"


def test_a_look_alike_reviewer_is_refused_on_every_library_method(desk: SimpleNamespace) -> None:
    pid = _add(desk.store, "7")
    fake = SimpleNamespace(name="ana", may_review=lambda tenant: True)
    for method in (desk.bare.approve, desk.bare.deny):
        with pytest.raises(ApprovalError, match="Reviewer"):
            blocking(method, fake, pid, reason="r")
    with pytest.raises(ApprovalError) as refused:
        blocking(desk.bare.invalidate, fake, pid)
    assert refused.value.reason in ("not_a_reviewer", "not_authorised")
    assert _status(desk, pid) == "pending"


def test_a_library_denial_with_no_log_still_follows_the_shared_rules(desk: SimpleNamespace) -> None:
    """With no audit log given, the rules still hold (the store's history keeps the decision)."""
    pid = _add(desk.store, "5")
    for reason, refusal in (("", "reason_required"), ("   ", "reason_required"), ("x" * 2001, "bad_request")):
        with pytest.raises(ApprovalError) as refused:
            blocking(desk.bare.deny, ANA, pid, reason=reason)
        assert refused.value.reason == refusal
    assert _status(desk, pid) == "pending"
    assert str(blocking(desk.bare.deny, ANA, pid, reason="  not asked for ").status) == "denied"
    done = blocking(desk.store.get_proposal, pid)
    assert (done.decided_by, done.decision_reason) == ("reviewer:ana", "not asked for")


class _CrashAfterCommit:
    """An audit log whose write never lands: the process dies between the store's commit and the
    log's entry (``audit`` raises), the window round 42 left."""

    def __init__(self) -> None:
        self.refusals: list[str] = []

    def audit(self, actor: str, action: str, **fields: str) -> None:
        raise SystemExit("killed between the decision and its audit entry")

    def refused(self, actor: str, action: str, err: Exception, **fields: str) -> None:
        self.refusals.append(action)


def test_a_crash_after_the_decision_leaves_its_audit_record_written_with_it(desk: SimpleNamespace) -> None:
    """The decision's history entry, written in the decision's own transaction, names who acted as
    the audit log does (``cli:ana``, ``token:ana/<id>``), why and when: a crash before the log's
    copy leaves the record it is derived from, never a decision of no one's."""
    from tether.policy._decisions import HumanDecision, decide_proposal

    pid = _add(desk.store, "c")
    decision = HumanDecision("deny", pid, "not asked for")
    with pytest.raises(SystemExit):
        blocking(decide_proposal, desk.bare, ANA, decision, actor="token:ana/t-42", audit=_CrashAfterCommit())
    done = blocking(desk.store.get_proposal, pid)
    assert (str(done.status), done.decided_by) == ("denied", "reviewer:ana")  # the authority
    [event] = [e for e in blocking(desk.store.events, pid) if e.op == "denied"]
    assert (event.actor, event.detail, event.at) == ("token:ana/t-42", "not asked for", done.decided_at)


def test_the_store_decides_nothing_without_who_as_audited(desk: SimpleNamespace) -> None:
    """Attack: a library caller writes a decision straight into the store naming no one."""
    from datetime import UTC, datetime

    from tether.policy._store import ProposalStatus

    pid = _add(desk.store, "s")
    pending = frozenset({ProposalStatus.PENDING})
    for nobody in ("", "   "):
        with pytest.raises(ApprovalError) as refused:
            blocking(
                desk.store.decide, pid, ProposalStatus.APPROVED, allowed_from=pending, actor="r",
                audited_as=nobody, reason="", now=datetime.now(UTC),
            )  # fmt: skip
        assert refused.value.reason == "bad_request"
    with pytest.raises(TypeError):
        blocking(
            desk.store.decide, pid, ProposalStatus.APPROVED, allowed_from=pending, actor="r", reason="",
            now=datetime.now(UTC),
        )  # fmt: skip
    assert _status(desk, pid) == "pending"
    # Legitimate: named, it is decided, and its history says by whom.
    blocking(
        desk.store.decide, pid, ProposalStatus.APPROVED, allowed_from=pending, actor="r",
        audited_as="cli:ana", reason="", now=datetime.now(UTC),
    )  # fmt: skip
    assert blocking(desk.store.events, pid)[-1].actor == "cli:ana"


def test_a_store_written_to_the_older_protocol_is_refused_at_wiring() -> None:
    """A store whose ``decide`` does not take ``audited_as`` would decide without the record: it is
    refused when the ``Approvals`` is built, naming what it lacks."""

    class Older(MemoryApprovalStore):
        async def decide(  # type: ignore[override]
            self, proposal_id: str, to: Any, *, allowed_from: Any, actor: str, reason: str, now: Any
        ) -> Any:
            return await super().decide(
                proposal_id,
                to,
                allowed_from=allowed_from,
                actor=actor,
                audited_as=actor,
                reason=reason,
                now=now,
            )

    older = Older()
    try:
        with pytest.raises(TypeError, match=r"decide\(audited_as="):
            Approvals(older)
    finally:
        older.close()
