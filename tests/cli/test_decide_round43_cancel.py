"""A person ending a run is a decision too (round 43): ``tether runs cancel`` closes the run's
proposals through the one home of a decision (``decide_proposal``) and its questions through the
one home of an answer (``answer_question``), each audited as the person (``cli:<person>``), and
audits the cancel itself (``run_cancel``: who, which tenant's run, why). ``tether runs pauses``
and ``tether mcp pauses`` list waiting questions in one shape.

Real parts: the SQLite approval and pause stores, the console's users database the CLI audits to
(``$TETHER_OUT/console.db``), ``tether runs`` given a client on those stores whose cancel is the
durable client's less its DBOS workflows (``durable._cancel.close_decisions``, what it closes)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tether.cli import main
from tether.cli._commands import runs as runs_cmd
from tether.console._users import UserStore
from tether.durable._cancel import CANCEL_REASON, close_decisions
from tether.errors import ApprovalError
from tether.mcp._pauses import PauseStore
from tether.policy import Approvals, Reviewer, SqliteApprovalStore
from tether.policy._decisions import DecisionAudit
from tether.policy._intake import canonical_json, content_hash
from tether.policy._store import NewProposal
from tether.sql._database import blocking

TENANT, RUN = "shop-a", "run-43"


class _Client:
    """``tether runs``' client: the durable client's cancel less its workflows (no DBOS here)."""

    def __init__(self, stores: Any) -> None:
        self.stores = stores

    def cancel(
        self,
        run_id: str,
        *,
        by: str = "operator",
        actor: str = "",
        audit: DecisionAudit | None = None,
        reason: str = CANCEL_REASON,
    ) -> dict[str, Any]:
        closed = blocking(
            close_decisions,
            self.stores,
            run_id,
            by=by,
            actor=actor or f"operator:{by}",
            audit=audit,
            tenant=TENANT,
            reason=reason,
        )
        return {"workflows": [], **closed, "tasks_cancelled": [], "tasks_not_cancelled": []}


def _add(store: SqliteApprovalStore, new: NewProposal) -> str:
    from datetime import UTC, datetime

    return str(blocking(store.add_proposal, new, now=datetime.now(UTC)).id)


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """A paused run of ``TENANT`` with two pending proposals and one pending question; another
    run's proposal beside it; the console's users database."""
    monkeypatch.setenv("TETHER_OUT", str(tmp_path))
    monkeypatch.setenv("USER", "ana")
    store = SqliteApprovalStore(tmp_path / "approvals.db")
    pauses = PauseStore(tmp_path / "pauses.db")
    users = UserStore(tmp_path / "console.db")
    pids = [_add(store, _new(RUN, c)) for c in ("c1", "c2")]
    other = _add(store, _new("run-other", "c1"))
    asked = blocking(
        pauses.create, run_id=RUN, server="paint", tool="paint", arguments={}, message="Colour?", schema={}
    )
    try:
        yield SimpleNamespace(
            store=store,
            pauses=pauses,
            users=users,
            pids=pids,
            other=other,
            qid=asked.id,
            client=_Client(SimpleNamespace(approvals=store, pauses=pauses)),
        )
    finally:
        for closing in (store, pauses, users):
            closing.close()


def _new(run_id: str, call_id: str) -> NewProposal:
    arguments = {"order_id": f"{run_id}-{call_id}"}
    digest = content_hash("add_note", arguments)
    return NewProposal(
        TENANT, "add_note", canonical_json(arguments), digest, "write", "runner", run_id, 0, call_id
    )


def _cancel(r: SimpleNamespace, *extra: str) -> int:
    ns = argparse.Namespace(run_id=RUN, json=True, reason=_reason(extra), wait=None)
    return runs_cmd._cancel(r.client, ns)


def _reason(extra: tuple[str, ...]) -> str:
    return extra[extra.index("--reason") + 1] if "--reason" in extra else CANCEL_REASON


def _entries(r: SimpleNamespace) -> list[tuple[str, ...]]:
    return [(e.actor, e.action, e.tenant, e.target, e.outcome) for e in reversed(r.users.audit_log())]


def test_runs_cancel_is_audited_as_the_person_with_each_decision_it_makes(
    run: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before round 43 a cancel invalidated and closed behind the audit log's back."""
    assert _cancel(run, "--reason", "customer withdrew") == 0
    done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert done["proposals_invalidated"] == run.pids and done["questions_closed"] == [run.qid]
    entries = _entries(run)
    assert entries == [
        *(("cli:ana", "invalidate", TENANT, pid, "invalidated") for pid in run.pids),
        ("cli:ana", "elicitation_cancel", TENANT, run.qid, "answered"),
        ("cli:ana", "run_cancel", TENANT, RUN, "cancelled"),
    ]
    [cancel] = [e for e in run.users.audit_log() if e.action == "run_cancel"]
    assert "customer withdrew" in cancel.detail and cancel.client == "cli"
    for pid in run.pids:  # the store's own record of each decision says the same
        row = blocking(run.store.get_proposal, pid)
        assert (str(row.status), row.decided_by, row.decision_reason) == (
            "invalidated",
            "reviewer:ana",
            "customer withdrew",
        )
        last = blocking(run.store.events, pid)[-1]
        assert (last.op, last.actor) == ("invalidated", "cli:ana")  # written with the decision
    # Legitimate: another run's proposal is untouched and still decided from the desk.
    assert str(blocking(run.store.get_proposal, run.other).status) == "pending"
    approved = blocking(Approvals(run.store).approve, Reviewer.for_all_tenants("rita"), run.other)
    assert str(approved.status) == "approved"


def test_a_proposal_decided_meanwhile_is_a_refusal_audited_and_the_cancel_goes_on(
    run: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attack on the window: a proposal denied between the listing and the cancel's decision is not
    flipped; the cancel's attempt is audited as refused, the rest is closed."""
    first, second = run.pids
    real = Approvals.decided

    async def raced(self: Approvals, reviewer: Any, action: str, proposal_id: str, *rest: Any) -> Any:
        if proposal_id == first:  # another reviewer's decision lands first
            await real(
                self, Reviewer.for_all_tenants("rita"), "invalidate", first, "meanwhile", None, "cli:rita"
            )
        return await real(self, reviewer, action, proposal_id, *rest)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Approvals, "decided", raced)
        assert _cancel(run) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["proposals_invalidated"] == [second]
    assert blocking(run.store.get_proposal, first).decision_reason == "meanwhile"
    actions = [(a, t, o) for _, a, _, t, o in _entries(run)]
    assert actions[:2] == [
        ("invalidate", first, "refused:already_invalidated"),
        ("invalidate", second, "invalidated"),
    ]
    assert actions[-1] == ("run_cancel", RUN, "cancelled")


def test_a_cancel_with_no_users_database_still_cancels(
    run: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI audits where the console's users database exists; elsewhere the cancel stands."""
    monkeypatch.setenv("TETHER_OUT", str(tmp_path / "elsewhere"))
    assert _cancel(run) == 0
    assert len(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["proposals_invalidated"]) == 2
    assert _entries(run) == []


def test_a_worker_cancel_keeps_its_operator_actor(run: SimpleNamespace) -> None:
    """A cancel no person made (a worker's) goes through the same home, unaudited: no log given."""
    stores = SimpleNamespace(approvals=run.store, pauses=run.pauses)
    closed = blocking(close_decisions, stores, RUN, by="worker:w1", actor="operator:worker:w1", audit=None)  # type: ignore[arg-type]
    assert closed == {"proposals_invalidated": run.pids, "questions_closed": [run.qid]}
    assert blocking(run.pauses.get, run.qid).answered_by == "operator:worker:w1"
    with pytest.raises(ApprovalError, match="invalidated"):
        blocking(Approvals(run.store).approve, Reviewer.for_all_tenants("rita"), run.pids[0])


def _pauses_json(capsys: pytest.CaptureFixture[str], code: int) -> dict[str, Any]:
    assert code == 0
    return dict(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))


def test_runs_pauses_and_mcp_pauses_print_one_shape(
    run: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = _pauses_json(capsys, runs_cmd._pauses(run.client, argparse.Namespace(json=True)))
    config = tmp_path / "mcp.yaml"
    server = "  - {name: a, transport: http, url: 'http://127.0.0.1:9/mcp'}"
    config.write_text(f"servers:\n{server}\nhost:\n  state: pauses.db\n", encoding="utf-8")
    mcp = _pauses_json(capsys, main(["mcp", "pauses", "--config", str(config), "--json"]))
    for out in (runs, mcp):
        out.pop("ok", None)
        out.pop("exit", None)
    assert runs == mcp, (runs, mcp)
    [row] = runs["pauses"]
    assert runs["count"] == 1 and runs["pending"] == runs["pauses"]  # `pending`: mcp pauses' older name
    assert set(row) >= {"id", "run_id", "run", "server", "tool", "asked", "message", "schema"}
    assert (row["id"], row["run_id"], row["run"], row["message"]) == (run.qid, RUN, RUN, "Colour?")
