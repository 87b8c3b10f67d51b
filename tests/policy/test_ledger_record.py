"""An effect's outcome survives a store that loses its connection while recording it: the
outcome is offered again (the commit's fate was unknown), recorded once, and the tool is never
called twice; a lost connection that never comes back still surfaces as ``StoreUnavailable``."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tether.policy import Approvals, LedgerStatus, SqliteApprovalStore
from tether.sql._postgres import StoreUnavailable

pytestmark = pytest.mark.anyio


class CutWhileRecording(SqliteApprovalStore):
    """``finish`` fails ``cuts`` times: after committing (``landed``: the reply was lost) or
    before (nothing written), as a PostgreSQL connection terminated at commit would."""

    def __init__(self, path: Path, cuts: int, landed: bool) -> None:
        super().__init__(path)
        self.cuts, self.landed, self.finish_calls = cuts, landed, 0

    async def finish(self, key: str, *, owner: str | None, result: str, note: str, now: datetime) -> Any:
        self.finish_calls += 1
        if self.cuts > 0:
            self.cuts -= 1
            if self.landed:
                await super().finish(key, owner=owner, result=result, note=note, now=now)
            raise StoreUnavailable("commit outcome unknown: server closed the connection")
        return await super().finish(key, owner=owner, result=result, note=note, now=now)


@pytest.mark.parametrize("landed", [True, False], ids=["commit-landed", "commit-lost"])
async def test_an_outcome_cut_while_recording_is_recorded_once_and_the_tool_runs_once(
    tmp_path: Path, landed: bool
) -> None:
    store = CutWhileRecording(tmp_path / "a.db", cuts=2, landed=landed)
    approvals = Approvals(store)
    calls: list[int] = []

    async def send() -> dict[str, Any]:
        calls.append(1)
        return {"sent": True}

    outcome = await approvals.perform("idem_cut", tool="send", arguments={"to": "a"}, call=send)
    assert outcome.result == {"sent": True} and not outcome.replayed
    entry = await store.ledger_entry("idem_cut")
    assert entry is not None and entry.status is LedgerStatus.DONE
    # Asked again (the same step after a restart): replayed from the ledger, never re-run.
    again = await approvals.perform("idem_cut", tool="send", arguments={"to": "a"}, call=send)
    assert again.replayed and again.result == {"sent": True}
    assert calls == [1]
    store.close()


async def test_a_store_that_never_comes_back_still_fails_loudly(tmp_path: Path) -> None:
    store = CutWhileRecording(tmp_path / "a.db", cuts=100, landed=False)
    calls: list[int] = []

    async def send() -> dict[str, Any]:
        calls.append(1)
        return {"sent": True}

    with pytest.raises(StoreUnavailable):
        await Approvals(store).perform("idem_down", tool="send", arguments={"to": "a"}, call=send)
    assert calls == [1] and store.finish_calls == 6  # offered a bounded number of times
    entry = await store.ledger_entry("idem_down")
    assert entry is not None and entry.status is LedgerStatus.INTENT  # left for reconciliation
    store.close()
