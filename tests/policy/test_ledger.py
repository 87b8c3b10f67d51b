"""The effect ledger across real processes: crashes between intent and outcome, a killed and
restarted process, and several processes executing one approved proposal at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _outbox_app import ALPHA, REVIEWER, build

from tether.errors import ApprovalError
from tether.policy import LedgerStatus, Reviewer, idempotency_key
from tether.runners._desk import ProposalDesk

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

APP = str(Path(__file__).with_name("_outbox_app.py"))


def note(text: str = "Call back on Monday.") -> str:
    return json.dumps({"tool": "add_note", "arguments": {"order_id": "order-1", "note": text}})


def worker(db: Path, outbox: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, APP, str(db), str(outbox), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


async def approved(tmp_path: Path, **build_kw: object) -> tuple[ProposalDesk, str]:
    host, _ = build(tmp_path / "a.db", tmp_path / "o.db", **build_kw)  # type: ignore[arg-type]
    await host.start()
    desk = ProposalDesk(host)
    p = await desk.propose(ALPHA, note())
    await desk.approve(REVIEWER, p.id)
    return desk, p.id


def crash_while_executing(tmp_path: Path, proposal_id: str, where: str) -> None:
    proc = worker(tmp_path / "a.db", tmp_path / "o.db", "execute", proposal_id, OUTBOX_CRASH=where)
    _, err = proc.communicate("go\n", timeout=60)
    assert proc.returncode == 17, err  # died inside the tool: os._exit, no outcome recorded


def test_idempotency_keys_are_deterministic_per_run_step_call_and_arguments() -> None:
    k = idempotency_key("run-1", 2, "call_7", "add_note", {"a": 1, "b": "x"})
    assert k == idempotency_key("run-1", 2, "call_7", "add_note", {"b": "x", "a": 1})
    others = {
        idempotency_key("run-2", 2, "call_7", "add_note", {"a": 1, "b": "x"}),
        idempotency_key("run-1", 3, "call_7", "add_note", {"a": 1, "b": "x"}),
        idempotency_key("run-1", 2, "call_8", "add_note", {"a": 1, "b": "x"}),
        idempotency_key("run-1", 2, "call_7", "add_note", {"a": 2, "b": "x"}),
    }
    assert k not in others and len(others) == 4


async def test_crash_after_the_effect_is_reconciled_from_the_tool_and_never_repeated(tmp_path: Path) -> None:
    desk, pid = await approved(tmp_path)
    crash_while_executing(tmp_path, pid, "after")
    [entry] = await desk.approvals.store.ledger_for(pid)
    assert entry.status is LedgerStatus.INTENT and entry.result is None  # intent without outcome
    ex = await desk.execute(ALPHA, pid)
    assert ex.replayed and ex.data["note"] == "Call back on Monday."
    rows = build(tmp_path / "a.db", tmp_path / "o.db")[1].rows()
    assert len(rows) == 1  # the crashed process's effect, not a second one
    [entry] = await desk.approvals.store.ledger_for(pid)
    assert entry.status is LedgerStatus.DONE and entry.note == "reconciled: happened"
    assert (await desk.execute(ALPHA, pid)).data == ex.data
    await desk.host.aclose()


async def test_crash_before_the_effect_is_reconciled_and_run_exactly_once(tmp_path: Path) -> None:
    desk, pid = await approved(tmp_path)
    crash_while_executing(tmp_path, pid, "before")
    ex = await desk.execute(ALPHA, pid)
    assert not ex.replayed
    rows = build(tmp_path / "a.db", tmp_path / "o.db")[1].rows()
    assert len(rows) == 1 and rows[0][3] == os.getpid()
    [entry] = await desk.approvals.store.ledger_for(pid)
    assert entry.attempts == 2 and entry.status is LedgerStatus.DONE
    await desk.host.aclose()


async def test_unknown_outcome_without_a_reconciler_is_escalated_to_a_person(tmp_path: Path) -> None:
    desk, pid = await approved(tmp_path, reconcile=False)
    crash_while_executing(tmp_path, pid, "after")
    for _ in range(2):  # asked twice: still escalated, never blindly re-run
        with pytest.raises(ApprovalError) as info:
            await desk.execute(ALPHA, pid)
        assert info.value.reason == "outcome_unknown"
    assert len(build(tmp_path / "a.db", tmp_path / "o.db")[1].rows()) == 1
    [entry] = await desk.approvals.store.ledger_for(pid)
    assert entry.status is LedgerStatus.ESCALATED
    with pytest.raises(ApprovalError):
        await desk.approvals.resolve(
            Reviewer("beta-manager", tenants=frozenset({"org-beta"})), entry.key, happened=True
        )
    await desk.approvals.resolve(
        Reviewer.for_all_tenants("ops"), entry.key, happened=True, note="seen in the order log"
    )
    ex = await desk.execute(ALPHA, pid)
    assert ex.replayed and "resolved by ops" in ex.observation.text
    assert [e.op for e in await desk.approvals.store.events(pid)][-3:] == [
        "escalated",
        "resolved",
        "replayed",
    ]
    await desk.host.aclose()


async def test_approved_proposal_survives_a_killed_process(tmp_path: Path) -> None:
    proc = worker(tmp_path / "a.db", tmp_path / "o.db", "propose-approve-hold", "Survives a kill.")
    assert proc.stdout is not None
    pid = proc.stdout.readline().strip()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    restarted = worker(tmp_path / "a.db", tmp_path / "o.db", "execute", pid)  # a new process, same files
    out, err = restarted.communicate("go\n", timeout=60)
    assert restarted.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["data"]["note"] == "Survives a kill." and not result["replayed"]
    host, box = build(tmp_path / "a.db", tmp_path / "o.db")
    await host.start()
    desk = ProposalDesk(host)
    assert (await desk.review(ALPHA, pid)).status == "approved"
    assert (await desk.execute(ALPHA, pid)).replayed  # and this process sees the recorded outcome
    assert len(box.rows()) == 1
    await host.aclose()


async def test_several_processes_executing_one_approved_proposal_make_exactly_one_effect(
    tmp_path: Path,
) -> None:
    desk, pid = await approved(tmp_path)
    procs = [worker(tmp_path / "a.db", tmp_path / "o.db", "execute", pid) for _ in range(4)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:  # release them together
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    rows = build(tmp_path / "a.db", tmp_path / "o.db")[1].rows()
    assert len(rows) == 1
    assert sum(not r["replayed"] for r in results) == 1
    assert all(r["data"] == results[0]["data"] for r in results)  # everyone got the one outcome
    winner = next(r for r in results if not r["replayed"])
    assert rows[0][3] == winner["pid"]
    await desk.host.aclose()
