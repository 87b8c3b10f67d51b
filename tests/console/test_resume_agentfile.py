"""Resume from the console for a run started by `tether run --agent`: the console rebuilds it the
way `tether resume` does (the recorded agent, told which run); a refusal is audited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from starlette.testclient import TestClient

from conftest import PASSWORD, csrf_of, login
from tether.cli import main
from tether.console import create_app, sqlite_sources
from tether.console.users import UserStore
from tether_testing.fake_server import FakeChatServer, Reply, scripted

TOOLS = '''
from typing import Annotated
from pydantic import Field
from tether import Effect, tool


@tool(effect=Effect.WRITE)
def add_note(
    order_id: Annotated[str, Field(description="Work order id.")],
    text: Annotated[str, Field(description="The note to add.")],
) -> dict:
    """Add a note to a work order (a side effect)."""
    return {"order_id": order_id, "noted": text}
'''


@pytest.mark.spec("T5")
def test_a_run_started_from_an_agent_file_resumes_from_the_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "resume_tools.py").write_text(TOOLS, encoding="utf-8")
    agent = {
        "name": "noter",
        "instructions": "Add notes.",
        "model": {"name": "fake-model", "api_key_env": "RESUME_TEST_KEY", "streaming": False},
        "tools": ["resume_tools:add_note"],
        "policy": {"tenant": "shop-a", "approvals_db": "approvals.db"},
        "trace": {"dir": "traces"},
    }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(agent), encoding="utf-8")
    monkeypatch.setenv("RESUME_TEST_KEY", "sk-resume-console-1")
    replies = [Reply.calls(("add_note", '{"order_id": "742", "text": "checked"}')), Reply.text("Noted.")]
    with FakeChatServer(scripted(replies)) as chat:
        code = main(["run", "Note 742", "--agent", "agent.yaml", "--base-url", chat.url, "--json"])
        paused = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert code == 5 and paused["stop_reason"] == "approval_required"
        run_id = paused["run_id"]
        sources = sqlite_sources(
            users_db=tmp_path / "console.db", approvals_db=tmp_path / "approvals.db",
            trace_dir=tmp_path / "traces", users=UserStore(tmp_path / "console.db", scrypt_n=2**10),
        )  # fmt: skip
        sources.users.add_user("ana", PASSWORD)
        sources.users.grant("ana", "shop-a", "reviewer")
        app = create_app(sources, secret_key=b"resume-test-key-" * 3, allowed_hosts=("testserver",))
        with TestClient(app, base_url="http://testserver") as client:
            ana = login(client, "ana")
            [row] = ana.get("/api/approvals").json()["proposals"]
            page = ana.get(f"/approvals/{row['id']}").text
            csrf = csrf_of(page)
            # Before the approval, a resume rebuilds the run and it pauses again, still waiting.
            early = ana.post(f"/api/runs/{run_id}/resume", headers={"x-csrf-token": csrf})
            assert early.status_code == 200 and early.json()["stop_reason"] == "approval_required"
            approved = ana.post(
                f"/api/approvals/{row['id']}/approve", json={"content_hash": row["content_hash"]},
                headers={"x-csrf-token": csrf},
            )  # fmt: skip
            assert approved.status_code == 200
            assert 'id="resume"' in ana.get(f"/approvals/{row['id']}").text
            done = ana.post(f"/api/runs/{run_id}/resume", headers={"x-csrf-token": csrf})
            assert done.status_code == 200, done.text
            assert done.json()["stop_reason"] == "accepted"
            again = ana.post(f"/api/runs/{run_id}/resume", headers={"x-csrf-token": csrf})
            assert again.status_code == 409  # finished: nothing to resume
            entries = [(e.action, e.outcome) for e in sources.users.audit_log()]
    assert ("resume", "accepted") in entries and ("resume", "refused:not_paused") in entries
