"""An operator's rolling upgrade, sixth round: mixed versions on one deployment, from the landed
releases ca71041 and 483dcef to this branch (``UPGRADE_FROM`` names other old commits to play).

What rounds one to five did not cover, each played here: workers whose clocks disagree sharing
the effect ledger's leases.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from tether.errors import ApprovalError
from tether.policy import Approvals, content_hash
from tether.policy._pg_store import PgApprovalStore

# -- clock skew between workers ------------------------------------------------------------------


def _skewed(by: timedelta) -> Any:
    return lambda: datetime.now(UTC) + by


def test_a_worker_whose_clock_runs_ahead_does_not_take_a_live_workers_effect(pg_url: str) -> None:
    """A ledger lease is written by one worker and read by another. A worker on another machine
    (the pid cannot be checked) whose clock runs five minutes ahead read a live worker's lease as
    run out, asked the tool's reconciler (which cannot see an effect still under way: "never
    happened") and ran the effect a second time while the first still ran it.
    Leases are now on the database's clock, whatever the workers' clocks say."""
    store = PgApprovalStore(pg_url)
    ran: list[str] = []

    async def call() -> dict[str, Any]:
        ran.append("b")
        return {"ok": True}

    async def play() -> None:
        behind = Approvals(store, clock=_skewed(timedelta(minutes=-2)), wait_s=0.3)
        ahead = Approvals(store, {"pay": _not_seen}, clock=_skewed(timedelta(minutes=5)), wait_s=0.3)
        # Worker A (its clock two minutes slow), on another host, holds the call: 30 s + margin.
        now = behind.clock()
        held = await store.claim(
            "k1", tool="pay", arguments_hash=_hash("pay", {"n": 1}), owner="host-a:4242:tok",
            lease_until=now + timedelta(seconds=90), now=now, owner_dead=_never,
        )  # fmt: skip
        assert held.action == "run"
        with pytest.raises(ApprovalError) as caught:  # B waits for A's outcome; it never runs it
            await ahead.perform("k1", tool="pay", arguments={"n": 1}, call=call)
        assert caught.value.reason == "in_progress"
        assert ran == []
        # A's lease truly runs out (A is gone): the next worker reconciles and runs it, as before.
        now = behind.clock()
        await store.set_ledger_status(
            "k1", _status("intent"), owner="host-a:4242:tok", note="", now=now, lease_until=now
        )
        out = await ahead.perform("k1", tool="pay", arguments={"n": 1}, call=call)
        assert out.result == {"ok": True} and ran == ["b"]
        # A fresh call on the fast worker runs once, its lease on the database's clock.
        await ahead.perform("k2", tool="pay", arguments={"n": 2}, call=call)
        entry = await store.ledger_entry("k2")
        assert ran == ["b", "b"] and entry is not None and entry.status.value == "done"
        lease = entry.lease_until - datetime.now(UTC)  # 30 s and the margin, from the call's start
        assert timedelta(seconds=60) < lease <= timedelta(seconds=90), lease

    try:
        anyio.run(play)
    finally:
        store.close()


def _not_seen(key: str) -> None:
    return None  # the tool finds no trace of the call: it "never happened" (so far)


def _never(entry: Any, now: datetime) -> bool:
    from tether.policy._ledger import owner_dead

    return owner_dead(entry, now)


def _hash(tool: str, arguments: dict[str, Any]) -> str:
    return content_hash(tool, arguments)


def _status(name: str) -> Any:
    from tether.policy._store import LedgerStatus

    return LedgerStatus(name)
