"""When a worker resumes a paused run: the rule, on a real SQLite approval store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tether.durable._worker import due_for_resume
from tether.errors import ApprovalError
from tether.mcp._elicitation import store_answer
from tether.mcp._pauses import PauseStore
from tether.policy import ProposalStatus, SqliteApprovalStore
from tether.policy._store import NewProposal
from tether.sql._database import blocking

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PENDING = frozenset({ProposalStatus.PENDING})


def _store(tmp_path: Path) -> SqliteApprovalStore:
    return SqliteApprovalStore(tmp_path / "approvals.db")


def _propose(store: SqliteApprovalStore, run_id: str, call_id: str = "c1") -> str:
    args = '{"amount":"30"}'
    new = NewProposal("acme", "send_payment", args, "sha256:x", "write", "model", run_id, 1, call_id)
    return blocking(store.add_proposal, new, now=T0).id


def _decide(store: SqliteApprovalStore, pid: str, to: ProposalStatus, reason: str = "") -> None:
    blocking(
        store.decide, pid, to, allowed_from=PENDING, actor="rita", audited_as="rita", reason=reason, now=T0
    )


def _pause(store: SqliteApprovalStore, run_id: str, pending: list[str], at: datetime) -> None:
    state = json.dumps({"version": 2, "pending": pending})
    reason = "approval_required"
    blocking(
        store.save_checkpoint, run_id, app="m:f", state=state, status="paused", stop_reason=reason, now=at
    )


def test_an_approval_given_before_the_pause_was_written_still_resumes(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pid = _propose(store, "r1")
    # The reviewer is fast: the decision lands between the proposal's insert and the checkpoint.
    _decide(store, pid, ProposalStatus.APPROVED)
    _pause(store, "r1", [pid], T0 + timedelta(milliseconds=5))
    [cp] = blocking(store.list_checkpoints)
    assert due_for_resume(cp, blocking(store.list_proposals, run_id="r1"))
    store.close()


def test_a_run_waits_while_any_awaited_proposal_is_pending(tmp_path: Path) -> None:
    store = _store(tmp_path)
    a, b = _propose(store, "r1"), _propose(store, "r1", "c2")
    _pause(store, "r1", [a, b], T0)
    _decide(store, a, ProposalStatus.APPROVED)
    [cp] = blocking(store.list_checkpoints)
    assert not due_for_resume(cp, blocking(store.list_proposals, run_id="r1"))
    _decide(store, b, ProposalStatus.DENIED, reason="no")
    assert due_for_resume(cp, blocking(store.list_proposals, run_id="r1"))  # a denial resumes too (to end it)
    store.close()


def test_a_pause_for_an_unresolved_effect_is_not_resumed_by_old_decisions(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pid = _propose(store, "r1")
    _decide(store, pid, ProposalStatus.APPROVED)
    _pause(store, "r1", [], T0 + timedelta(seconds=1))  # paused later, waiting for no proposal
    [cp] = blocking(store.list_checkpoints)
    assert not due_for_resume(cp, blocking(store.list_proposals, run_id="r1"))
    assert not due_for_resume(cp, [])  # a run with no proposals at all
    store.close()


def _ask(pauses: PauseStore, run_id: str, message: str) -> str:
    schema = {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]}
    return blocking(
        pauses.create,
        run_id=run_id,
        server="shop",
        tool="order",
        arguments={},
        message=message,
        schema=schema,
    ).id


def test_a_run_paused_for_questions_is_due_once_every_question_is_answered(tmp_path: Path) -> None:
    store, pauses = _store(tmp_path), PauseStore(tmp_path / "pauses.db")
    q1, q2 = _ask(pauses, "r1", "which size?"), _ask(pauses, "r1", "which colour size?")
    _ask(pauses, "r2", "another run's question")
    _pause(store, "r1", [], T0)
    [cp] = blocking(store.list_checkpoints)
    assert not due_for_resume(cp, [], blocking(pauses.for_run, "r1"))
    with pytest.raises(ApprovalError) as bad:  # an answer that does not fit is refused, nothing stored
        blocking(store_answer, pauses, q1, "accept", {"size": "XL"}, actor="ana")
    assert bad.value.reason == "invalid_answer" and blocking(pauses.get, q1).status == "pending"
    blocking(store_answer, pauses, q1, "accept", {"size": 42}, actor="ana")
    assert not due_for_resume(cp, [], blocking(pauses.for_run, "r1"))  # q2 still waits
    blocking(store_answer, pauses, q2, "decline", None, actor="ana")
    assert due_for_resume(cp, [], blocking(pauses.for_run, "r1"))
    assert [p.id for p in blocking(pauses.for_run, "r1")] == [q1, q2]
    pauses.close()
    store.close()


def test_an_awaited_approval_and_an_open_question_both_hold_the_run(tmp_path: Path) -> None:
    store, pauses = _store(tmp_path), PauseStore(tmp_path / "pauses.db")
    pid, q = _propose(store, "r1"), _ask(pauses, "r1", "which size?")
    _pause(store, "r1", [pid], T0)
    _decide(store, pid, ProposalStatus.APPROVED)
    [cp] = blocking(store.list_checkpoints)
    assert not due_for_resume(cp, blocking(store.list_proposals, run_id="r1"), blocking(pauses.for_run, "r1"))
    blocking(store_answer, pauses, q, "accept", {"size": 3}, actor="ana")
    assert due_for_resume(cp, blocking(store.list_proposals, run_id="r1"), blocking(pauses.for_run, "r1"))
    pauses.close()
    store.close()


def test_a_run_waiting_on_a_servers_task_is_due_when_its_next_check_comes(tmp_path: Path) -> None:
    store, pauses = _store(tmp_path), PauseStore(tmp_path / "pauses.db")
    later = (T0 + timedelta(seconds=30)).isoformat(timespec="seconds")
    blocking(
        pauses.park, run_id="r1", server="lab", tool="lab__study", arguments={"topic": "tides"},
        task_id="t-9", check_after=later,
    )  # fmt: skip
    _pause(store, "r1", [], T0)
    [cp] = blocking(store.list_checkpoints)
    waiting = blocking(pauses.for_run, "r1")
    assert [(p.status, p.task_id) for p in waiting] == [("task", "t-9")]
    assert not due_for_resume(cp, [], waiting, now=T0 + timedelta(seconds=29))
    assert due_for_resume(cp, [], waiting, now=T0 + timedelta(seconds=30))
    # An unanswered question of the same run still holds it, whatever its tasks.
    _ask(pauses, "r1", "which size?")
    assert not due_for_resume(cp, [], blocking(pauses.for_run, "r1"), now=T0 + timedelta(hours=1))
    # The same call parked again is the same pause, its check moved on; once its task ended the
    # pause is closed and the call no longer finds it.
    again = blocking(
        pauses.park, run_id="r1", server="lab", tool="lab__study", arguments={"topic": "tides"},
        task_id="t-9", check_after=(T0 + timedelta(minutes=5)).isoformat(timespec="seconds"),
    )  # fmt: skip
    assert again.id == waiting[0].id
    assert blocking(pauses.parked, "r1", "lab", "lab__study", {"topic": "tides"}) == again
    assert blocking(pauses.parked, "r2", "lab", "lab__study", {"topic": "tides"}) is None
    blocking(pauses.complete, again.id, "completed")
    assert blocking(pauses.parked, "r1", "lab", "lab__study", {"topic": "tides"}) is None
    pauses.close()
    store.close()
