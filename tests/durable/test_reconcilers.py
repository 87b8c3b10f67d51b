"""Reconcilers declared in an agent file (by import path, per tool), and a write that raised:
its outcome is unknown, the next attempt asks the reconciler instead of running it again, and a
person may resolve it when no one is reconciling it."""

from __future__ import annotations

import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from tether.agents._build import build_agent
from tether.agents._file import load_agent_file
from tether.errors import ApprovalError, ConfigError
from tether.policy import Reviewer
from tether.policy._store import LedgerStatus
from tether.sql._database import blocking

TOOLS = '''
import json, os
from typing import Annotated
from pydantic import Field

LOG = os.path.join(os.path.dirname(__file__), "notes.log")


def add_note(text: Annotated[str, Field(description="The note.")]) -> dict:
    """Add a note (a side effect: one line in notes.log, keyed)."""
    raise NotImplementedError  # the tests call the ledger directly


def find_note(key: str):
    """The tool's own record of the note written under this key, or None."""
    if os.path.exists(LOG):
        for line in open(LOG):
            k, text = line.rstrip("\\n").split("\\t")
            if k == key:
                return {"text": json.dumps({"noted": text}), "is_error": False}
    return None
'''


def _agent(folder: Path, reconciler: str = "{module}:find_note") -> Path:
    module = f"recon_tools_{uuid.uuid4().hex[:8]}"  # a fresh module per test (sys.modules caches)
    (folder / f"{module}.py").write_text(TOOLS)
    recon = reconciler.format(module=module)
    (folder / "agent.yaml").write_text(
        textwrap.dedent(
            f"""\
            name: notes
            instructions: Add notes.
            model: {{name: "scripted:steps.json"}}
            python_path: ["."]
            tools:
              - {{function: "{module}:add_note", effect: write, reconciler: "{recon}"}}
            policy: {{tenant: acme, approvals_db: approvals.db}}
            """
        )
    )
    (folder / "steps.json").write_text("[]")
    return folder / "agent.yaml"


def test_a_declared_reconciler_answers_for_a_write_that_raised(tmp_path: Path) -> None:
    built = build_agent(load_agent_file(_agent(tmp_path)))
    approvals = built.host.approvals
    assert approvals is not None and set(approvals.reconcilers) == {"add_note"}
    ran: list[str] = []

    async def write_then_raise() -> dict[str, object]:
        with open(tmp_path / "notes.log", "a") as f:
            f.write("k1\thello\n")  # the effect happened...
        raise ConnectionResetError("...and the reply was lost")

    async def must_not_run() -> dict[str, object]:
        ran.append("again")
        return {"text": "again", "is_error": False}

    async def go() -> object:
        with pytest.raises(ConnectionResetError):
            await approvals.perform("k1", tool="add_note", arguments={"text": "hello"}, call=write_then_raise)
        assert (await approvals.store.ledger_entry("k1")).status is LedgerStatus.RECONCILING
        return await approvals.perform("k1", tool="add_note", arguments={"text": "hello"}, call=must_not_run)

    outcome = anyio.run(go)
    assert outcome.reconciled and ran == []  # asked the system of record; not run twice
    assert blocking(approvals.store.ledger_entry, "k1").status is LedgerStatus.DONE
    assert (tmp_path / "notes.log").read_text() == "k1\thello\n"


def test_a_write_that_raised_can_be_resolved_by_a_person_unless_someone_owns_it(tmp_path: Path) -> None:
    built = build_agent(load_agent_file(_agent(tmp_path)))
    approvals = built.host.approvals
    assert approvals is not None

    async def boom() -> dict[str, object]:
        raise RuntimeError("the tool raised mid-way")

    async def go() -> None:
        for key in ("k2", "k3"):
            with pytest.raises(RuntimeError):
                await approvals.perform(key, tool="add_note", arguments={"text": key}, call=boom)

    anyio.run(go)
    rita = Reviewer.for_all_tenants("rita")
    # Attack: an entry a live process is reconciling (its lease runs) is not for a person to settle.
    entry = blocking(approvals.store.ledger_entry, "k3")
    now = datetime.now(UTC)
    blocking(
        approvals.store.set_ledger_status, "k3", LedgerStatus.RECONCILING, owner=entry.owner,
        note="reconciling", now=now, lease_until=now + timedelta(minutes=5),
    )  # fmt: skip
    with pytest.raises(ApprovalError) as info:
        blocking(approvals.resolve, rita, "k3", happened=True)
    assert info.value.reason == "not_escalated"
    # Legitimate: the one no one owns is resolved.
    done = blocking(approvals.resolve, rita, "k2", happened=False, note="checked: never written")
    assert done.status is LedgerStatus.DONE and "rita" in done.note


def test_a_reconciler_that_does_not_import_is_a_config_error_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_agent(load_agent_file(_agent(tmp_path, reconciler="{module}:no_such_fn")))
    assert "tools[0].reconciler" in str(info.value) and "no_such_fn" in str(info.value)
