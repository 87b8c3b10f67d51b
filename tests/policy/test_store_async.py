"""Stores are async-only: ``Approvals`` refuses at wiring a store with a missing or blocking
method, and the effect ledger driven by ``Approvals.perform`` never leaves an effect that
happened unrecorded when a cancellation lands while it is being written. (What each method
does: tests/policy/test_store_contract.py, on every backend.)
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.policy import Approvals, LedgerStatus, MemoryApprovalStore, SqliteApprovalStore
from tether.policy._store import NewProposal

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=5)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteApprovalStore]:
    s = SqliteApprovalStore(tmp_path / "approvals.db")
    yield s
    s.close()


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
    entry = await store.ledger_entry("k-mail")
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
    entry = await store.ledger_entry("k-slow")
    assert entry is not None and entry.status is LedgerStatus.RECONCILING and entry.lease_until <= T0.now(UTC)


class _Blocking(MemoryApprovalStore):
    """A store whose ``claim`` blocks: a plain function where a coroutine is needed."""

    def claim(self, key: str, **kw: Any) -> Any:  # type: ignore[override]
        return anyio.run(functools.partial(MemoryApprovalStore.claim, self, key, **kw))


class _NoLedgerIn:
    """Every method of a store but one (``ledger_in``), each a coroutine."""

    def __init__(self) -> None:
        self._inner = MemoryApprovalStore()

    def __getattr__(self, name: str) -> Any:
        if name == "ledger_in":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_approvals_refuse_a_store_with_a_blocking_or_missing_method_and_accept_a_whole_one() -> None:
    with pytest.raises(TypeError, match=r"lacks async claim$"):
        Approvals(_Blocking())
    with pytest.raises(TypeError, match=r"lacks async ledger_in$"):
        Approvals(_NoLedgerIn())  # type: ignore[arg-type]

    class SyncOnly:  # the sync face stores had before: every method named, none awaitable
        def add_proposal(self, proposal: NewProposal, *, now: datetime) -> None: ...

    with pytest.raises(TypeError) as info:
        Approvals(SyncOnly())  # type: ignore[arg-type]
    assert "add_proposal" in str(info.value) and "claim" in str(info.value)
    assert Approvals(MemoryApprovalStore()).store is not None  # the legitimate store is accepted
