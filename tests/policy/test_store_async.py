"""The approval store's async face, and the effect ledger driven through it by ``Approvals.perform``.

Same transactions as the sync face (tests/policy/test_store_contract.py), awaited from the
event loop; a cancellation that lands while the ledger is being written never leaves an
effect that happened unrecorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.errors import ApprovalError
from tether.policy import Approvals, ApprovalStore, LedgerStatus, ProposalStatus, SqliteApprovalStore
from tether.policy._store import LedgerEntry, NewProposal

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=5)
PENDING = frozenset({ProposalStatus.PENDING})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteApprovalStore]:
    s = SqliteApprovalStore(tmp_path / "approvals.db")
    yield s
    s.close()


def new(run_id: str | None = None, step: int | None = None, call_id: str | None = None) -> NewProposal:
    return NewProposal(
        "org-alpha", "add_note", '{"note":"n"}', "sha256:x", "write", "model", run_id, step, call_id
    )


def dead(entry: LedgerEntry, now: datetime) -> bool:
    return True


async def test_proposals_and_decisions_through_the_async_face(store: ApprovalStore) -> None:
    p = await store.aadd_proposal(new("run-1", 0, "c1"), now=T0)
    assert await store.aget_proposal(p.id) == p == await store.afind_for_call("run-1", 0, "c1")
    assert await store.afind_for_call("run-1", 1, "c1") is None
    approved = await store.adecide(
        p.id, ProposalStatus.APPROVED, allowed_from=PENDING, actor="r", reason="ok", now=LATER
    )
    assert approved.status is ProposalStatus.APPROVED and approved.decided_at == LATER
    with pytest.raises(ApprovalError) as info:  # a transition checked inside the transaction
        await store.adecide(
            p.id, ProposalStatus.DENIED, allowed_from=PENDING, actor="r", reason="", now=LATER
        )
    assert info.value.reason == "already_approved"
    await store.aadd_event(p.id, "policy", actor="rule:x", detail="why", now=LATER)
    assert [e.op for e in await store.aevents(p.id)] == ["proposed", "approved", "policy"]
    assert await store.alist_proposals(status=ProposalStatus.APPROVED) == [approved]
    assert store.list_proposals(run_id="run-1") == await store.alist_proposals(run_id="run-1")


async def test_ledger_and_checkpoints_through_the_async_face(store: ApprovalStore) -> None:
    kw: dict[str, Any] = {"tool": "t", "arguments_hash": "h", "lease_until": LATER, "owner_dead": dead}
    first = await store.aclaim("k", owner="a", now=T0, **kw)
    assert first.action == "run" and (await store.aledger_entry("k")) == first.entry
    taken = await store.aclaim("k", owner="b", now=T0, **kw)  # owner "a" is dead: "b" reconciles
    assert taken.action == "reconcile" and taken.entry.owner == "b"
    with pytest.raises(ApprovalError) as info:
        await store.afinish("k", owner="a", result="{}", note="", now=T0)
    assert info.value.reason == "lost_ownership"
    await store.aset_ledger_status(
        "k", LedgerStatus.INTENT, owner="b", note="retry", now=T0, lease_until=LATER
    )
    done = await store.afinish("k", owner="b", result='{"ok": true}', note="", now=LATER)
    assert done.status is LedgerStatus.DONE and done.attempts == 2
    assert (await store.aclaim("k", owner="c", now=LATER, **kw)).action == "done"
    with pytest.raises(ValueError):
        await store.aset_ledger_status("k", LedgerStatus.DONE, owner="b", note="", now=T0, lease_until=T0)

    assert await store.load_checkpoint("run-1") is None
    await store.save_checkpoint("run-1", app="m:f", state="{}", status="paused", stop_reason="x", now=T0)
    await store.save_checkpoint(
        "run-1", app="m:f", state="{}", status="finished", stop_reason="y", now=LATER
    )
    cp = await store.load_checkpoint("run-1")
    assert cp is not None and (cp.status, cp.stop_reason, cp.updated_at) == ("finished", "y", LATER)
    assert [c.run_id for c in await store.list_checkpoints()] == ["run-1"]


async def test_an_effect_that_happened_is_recorded_even_if_the_caller_is_cancelled_as_it_returns(
    store: SqliteApprovalStore,
) -> None:
    approvals = Approvals(store)
    sent: list[str] = []
    with anyio.CancelScope() as scope:

        async def send() -> dict[str, Any]:
            sent.append("mail")
            scope.cancel()  # the run is being cancelled just as the tool reports success
            return {"text": "sent", "is_error": False}

        await approvals.perform("k-mail", tool="send", arguments={"to": "x"}, call=send)
    entry = store.ledger_entry("k-mail")
    assert entry is not None and entry.status is LedgerStatus.DONE

    async def must_not_run() -> dict[str, Any]:
        raise AssertionError("a recorded effect ran again")

    again = await approvals.perform("k-mail", tool="send", arguments={"to": "x"}, call=must_not_run)
    assert again.replayed and again.result["text"] == "sent" and sent == ["mail"]


async def test_a_call_cancelled_mid_way_is_left_for_reconciliation_not_for_a_wait(
    store: SqliteApprovalStore,
) -> None:
    approvals = Approvals(store)
    with anyio.CancelScope() as scope:

        async def slow() -> dict[str, Any]:
            scope.cancel()
            await anyio.sleep(5)  # cancelled here: whether the effect happened is unknown
            return {"text": "never"}

        await approvals.perform("k-slow", tool="send", arguments={}, call=slow)
    assert scope.cancelled_caught
    entry = store.ledger_entry("k-slow")
    assert entry is not None and entry.status is LedgerStatus.RECONCILING and entry.lease_until <= T0.now(UTC)


def test_approvals_refuse_a_store_without_the_async_face() -> None:
    class SyncOnly:
        def add_proposal(self, proposal: NewProposal, *, now: datetime) -> None: ...

    with pytest.raises(TypeError, match="InlineAsyncFace"):
        Approvals(SyncOnly())  # type: ignore[arg-type]
