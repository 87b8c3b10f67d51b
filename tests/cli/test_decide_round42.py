"""A person's decision on a paused run's proposal is checked and audited the same way whichever
entry point takes it (``policy._decisions.decide_proposal``): ``tether approvals``, ``tether runs
approve|deny``, the console, a ``ProposalDesk``. A refused decision (another tenant's, already
decided, cancelled, a denial with no reason, not what was read) writes nothing but its refusal's
audit entry, alike everywhere; the legitimate one still resumes the run.

Real parts: ``tether`` through ``main``, a scripted agent run paused on SQLite, the console's
users database; ``tether runs`` is given a client whose stores are that same SQLite file."""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tether.cli import main
from tether.cli._commands import runs as runs_cmd
from tether.console._approvals import review_proposal
from tether.console._users import Denied, Hidden, Principal, UserStore
from tether.errors import ApprovalError
from tether.policy import Approvals, Reviewer, SqliteApprovalStore
from tether.runners._desk import ProposalDesk
from tether.sql._database import blocking

TOOLS = '''
from typing import Annotated

from pydantic import Field

from tether import Effect, tool


@tool(effect=Effect.WRITE)
def add_note(
    order_id: Annotated[str, Field(description="Work order id.")],
    text: Annotated[str, Field(description="The note.")],
) -> dict:
    """Add a note to a work order."""
    with open(__file__ + ".notes", "a", encoding="utf-8") as f:
        f.write(text + "\\n")
    return {"noted": text}
'''

TENANT = "shop-a"
ENTRY_POINTS = ["approvals", "runs", "console", "desk"]


@pytest.fixture
def paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], request: Any
) -> Iterator[SimpleNamespace]:
    """A run paused on one pending proposal, and the console's users database the CLI audits to."""
    module = f"tools_d42_{abs(hash(request.node.name)) % 10**8}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TETHER_OUT", str(tmp_path / "out"))
    (tmp_path / "out").mkdir()
    (tmp_path / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    steps = '- call: add_note\n  arguments: {order_id: "742", text: first}\n- final: done\n'
    (tmp_path / "steps.yaml").write_text(textwrap.dedent(steps), encoding="utf-8")
    db = tmp_path / "approvals.db"
    spec = {
        "name": "order-agent",
        "instructions": "You note work orders.",
        "model": {"name": "scripted:steps.yaml"},
        "tools": [f"{module}:add_note"],
        "policy": {"tenant": TENANT, "approvals_db": str(db)},
        "trace": {"dir": "traces"},
    }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    assert main(["run", "Note it.", "--agent", "agent.yaml", "--json"]) == 5
    run = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    [pid] = run["pending_proposals"]
    users = UserStore(tmp_path / "out" / "console.db")
    store = SqliteApprovalStore(db)
    try:
        yield SimpleNamespace(
            db=db,
            pid=pid,
            run_id=run["run_id"],
            users=users,
            store=store,
            approvals=Approvals(store),
            notes=tmp_path / f"{module}.py.notes",
        )
    finally:
        store.close()
        users.close()


def _decide(
    where: str,
    p: SimpleNamespace,
    action: str,
    *,
    reason: str = "",
    seen: str | None = None,
    tenants: str = "",
) -> Any:
    """``action`` on ``p.pid`` through entry point ``where``, as ``ana`` (of ``tenants`` if given)."""
    if where == "approvals":
        extra = [*(["--reason", reason] if reason else []), *(["--content-hash", seen] if seen else [])]
        return main(["approvals", action, p.pid, "--db", str(p.db), "--reviewer", "ana", "--json", *extra])
    if where == "runs":
        client = SimpleNamespace(stores=SimpleNamespace(approvals=p.store))
        args = argparse.Namespace(
            action=action, proposal_id=p.pid, reviewer="ana", reason=reason, content_hash=seen, json=True
        )
        return runs_cmd._decide(client, args)
    if where == "console":
        sources = SimpleNamespace(approvals=p.approvals, users=p.users)
        who = Principal("ana", {tenants or TENANT: "reviewer"})
        seen = seen if seen is not None else _hash(p)
        return blocking(review_proposal, sources, who, p.pid, action, reason=reason, content_hash=seen)  # type: ignore[arg-type]
    desk = ProposalDesk(SimpleNamespace(approvals=p.approvals), audit=p.users)  # type: ignore[arg-type]
    reviewer = Reviewer("ana", tenants=frozenset({tenants})) if tenants else Reviewer.for_all_tenants("ana")
    if action == "approve":
        return blocking(desk.approve, reviewer, p.pid, reason=reason, content_hash=seen)
    return blocking(desk.deny, reviewer, p.pid, reason=reason)


def _hash(p: SimpleNamespace) -> str:
    return str(blocking(p.store.get_proposal, p.pid).content_hash)


def _entries(p: SimpleNamespace) -> list[tuple[str, ...]]:
    """The audit log, each entry as what it says of the decision (the actor's kind aside)."""
    return [
        (e.action, e.tenant, e.target, e.content_hash, e.outcome, e.detail.split("; ")[-1])
        for e in p.users.audit_log()
    ]


def _state(p: SimpleNamespace) -> tuple[Any, ...]:
    row = blocking(p.store.get_proposal, p.pid)
    return (str(row.status), row.decided_by, row.decided_at, len(blocking(p.store.events, p.pid)))


@pytest.mark.parametrize("where", ENTRY_POINTS)
def test_an_approval_is_audited_alike_from_every_entry_point_and_resumes_the_run(
    where: str, paused: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    digest = _hash(paused)
    _decide(where, paused, "approve")
    assert _entries(paused) == [("approve", TENANT, paused.pid, digest, "approved", "")]
    [entry] = paused.users.audit_log()
    assert entry.actor.split(":")[1].startswith("ana")  # cli:ana, session:ana, reviewer:ana
    assert str(blocking(paused.store.get_proposal, paused.pid).decided_by) == "reviewer:ana"
    capsys.readouterr()
    assert main(["resume", paused.run_id, "--db", str(paused.db), "--json"]) == 0
    assert paused.notes.read_text() == "first\n"  # the approved call ran, once


@pytest.mark.parametrize("where", ENTRY_POINTS)
def test_a_denial_is_audited_alike_with_its_reason(where: str, paused: SimpleNamespace) -> None:
    _decide(where, paused, "deny", reason="  wrong order ")
    assert _entries(paused) == [("deny", TENANT, paused.pid, _hash(paused), "denied", "wrong order")]
    assert _state(paused)[0] == "denied"


def _refused(where: str, call: Callable[[], Any]) -> str:
    """The reason a refused decision gave (``tether approvals``' exit 1, or the error raised:
    ``tether runs`` answers it as a refusal, exit 1)."""
    if where == "approvals":
        assert call() == 1
        return ""
    with pytest.raises(ApprovalError) as refused:
        call()
    return refused.value.reason


REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    ("deny", {}, "reason_required"),  # a denial says why
    ("approve", {"seen": "0" * 64}, "content_changed"),  # not what was read
    ("deny", {"reason": "x" * 2001}, "bad_request"),  # a reason kept whole, or refused
]


@pytest.mark.parametrize("where", ENTRY_POINTS)
@pytest.mark.parametrize(("action", "given", "reason"), REFUSALS, ids=[r[2] for r in REFUSALS])
def test_a_malformed_decision_is_refused_alike_and_writes_nothing(
    where: str, action: str, given: dict[str, Any], reason: str, paused: SimpleNamespace
) -> None:
    before = _state(paused)
    said = _refused(where, lambda: _decide(where, paused, action, **given))
    assert said in ("", reason)
    assert _state(paused) == before  # still pending, undecided, no event
    [(act, tenant, target, _, outcome, _)] = _entries(paused)
    assert (act, tenant, target, outcome) == (action, TENANT, paused.pid, f"refused:{reason}")


@pytest.mark.parametrize("where", ENTRY_POINTS)
@pytest.mark.parametrize("first", ["approve", "invalidate"])
def test_a_decided_or_cancelled_proposal_is_not_decided_again(
    where: str, first: str, paused: SimpleNamespace
) -> None:
    decide = paused.approvals.approve if first == "approve" else paused.approvals.invalidate
    blocking(decide, Reviewer.for_all_tenants("rita"), paused.pid, reason="first")
    before = _state(paused)
    said = _refused(where, lambda: _decide(where, paused, "deny", reason="too late"))
    status = "approved" if first == "approve" else "invalidated"
    assert said in ("", f"already_{status}")
    assert _state(paused) == before and before[1] == "reviewer:rita"
    [(act, tenant, target, _, outcome, _)] = _entries(paused)
    assert (act, tenant, target, outcome) == ("deny", TENANT, paused.pid, f"refused:already_{status}")


def test_another_tenants_reviewer_decides_nothing(paused: SimpleNamespace) -> None:
    """The desk's reviewer of another tenant is refused, audited; the console hides the proposal."""
    before = _state(paused)
    with pytest.raises(ApprovalError) as refused:
        _decide("desk", paused, "approve", tenants="shop-b")
    assert refused.value.reason == "reviewer_not_allowed"
    [(act, tenant, _, _, outcome, _)] = _entries(paused)
    assert (act, tenant, outcome) == ("approve", TENANT, "refused:reviewer_not_allowed")
    with pytest.raises(Hidden):
        _decide("console", paused, "approve", tenants="shop-b")
    viewer = Principal("val", {TENANT: "viewer"})
    sources = SimpleNamespace(approvals=paused.approvals, users=paused.users)
    with pytest.raises(Denied):
        blocking(
            review_proposal, sources, viewer, paused.pid, "approve", reason="", content_hash=_hash(paused)
        )  # type: ignore[arg-type]
    assert _state(paused) == before
