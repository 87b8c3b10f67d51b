"""Resume from the console for a run started by `tether run --agent`: the console rebuilds it the
way `tether resume` does (the recorded agent, told which run); a refusal is audited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from console_world import PASSWORD, csrf_of, login
from starlette.testclient import TestClient

from tether.agents._build import APP as AGENT_FILES
from tether.cli import main
from tether.console import create_app, sqlite_sources
from tether.console._sources import ConsoleSources
from tether.console._users import UserStore
from tether_testing.fake_server import FakeChatServer, Reply, scripted

CONSOLE_KEY = b"resume-test-key-e6a80f2d9b1c4735"

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
            resume_apps=(AGENT_FILES,),
        )  # fmt: skip
        sources.users.add_user("ana", PASSWORD)
        sources.users.grant("ana", "shop-a", "reviewer")
        app = create_app(sources, secret_key=CONSOLE_KEY, allowed_hosts=("testserver",))
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
    # The refusal is named as tether resume names it (runscope.resume_point).
    assert ("resume", "accepted") in entries and ("resume", "refused:run_finished") in entries


LOOKUP = '''
from typing import Annotated
from pydantic import Field
from tether import Effect, tool


@tool(effect=Effect.READ)
def lookup(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Look up a work order."""
    return {"order_id": order_id, "state": "open"}
'''


def _console(tmp_path: Path) -> tuple[TestClient, ConsoleSources]:
    sources = sqlite_sources(
        users_db=tmp_path / "console.db", approvals_db=tmp_path / "approvals.db",
        trace_dir=tmp_path / "traces", users=UserStore(tmp_path / "console.db", scrypt_n=2**10),
        resume_apps=(AGENT_FILES, "no_such_module_here:build"),
    )  # fmt: skip
    sources.users.add_user("ana", PASSWORD)
    sources.users.grant("ana", "shop-a", "reviewer")
    sources.users.add_user("vic", PASSWORD)
    sources.users.grant("vic", "shop-a", "viewer")
    app = create_app(sources, secret_key=CONSOLE_KEY, allowed_hosts=("testserver",))
    return TestClient(app, base_url="http://testserver"), sources


@pytest.mark.spec("T5")
def test_a_run_stopped_on_a_model_error_resumes_from_the_console_as_tether_resume_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "lookup_tools.py").write_text(LOOKUP, encoding="utf-8")
    agent = {
        "name": "reader",
        "instructions": "Read orders.",
        "model": {"name": "fake-model", "api_key_env": "RESUME_TEST_KEY", "streaming": False},
        "tools": ["lookup_tools:lookup"],
        "policy": {"tenant": "shop-a", "approvals_db": "approvals.db"},
        "trace": {"dir": "traces"},
    }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(agent), encoding="utf-8")
    monkeypatch.setenv("RESUME_TEST_KEY", "sk-resume-console-2")
    replies = [
        Reply.error(400, "the provider refused the request"),
        Reply.calls(("lookup", '{"order_id": "742"}')),
        Reply.text("Order 742 is open."),
    ]
    with FakeChatServer(scripted(replies)) as chat:
        main(["run", "Read 742", "--agent", "agent.yaml", "--base-url", chat.url, "--json"])
        stopped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert stopped["stop_reason"] == "model_error", stopped
        run_id = stopped["run_id"]
        client, sources = _console(tmp_path)
        with client:
            # Attack: a viewer of the tenant sees the run but may not resume it (audited).
            vic = login(TestClient(client.app, base_url="http://testserver"), "vic")
            vic_page = vic.get(f"/runs/{run_id}").text
            assert 'id="resume"' not in vic_page
            vic_csrf = csrf_of(vic_page)
            refused = vic.post(f"/api/runs/{run_id}/resume", headers={"x-csrf-token": vic_csrf})
            assert refused.status_code == 403
            ana = login(client, "ana")
            page = ana.get(f"/runs/{run_id}").text
            assert 'id="resume"' in page and "stopped (model_error)" in page  # offered, as the CLI would
            done = ana.post(f"/runs/{run_id}/resume", data={"csrf_token": csrf_of(page)})
            assert done.status_code == 200 and "The run was resumed." in done.text
            again = ana.post(f"/api/runs/{run_id}/resume", headers={"x-csrf-token": csrf_of(page)})
            assert again.status_code == 409 and again.json()["error"] == "run_finished"
            entries = [(e.actor, e.action, e.outcome) for e in sources.users.audit_log()]
    assert ("session:ana", "resume", "accepted") in entries
    assert ("session:ana", "resume", "refused:run_finished") in entries
    assert ("session:vic", "resume", "refused:not_reviewer") in entries
    trace = (tmp_path / "traces" / f"{run_id}.jsonl").read_text(encoding="utf-8")
    assert '"kind":"run_resumed"' in trace and "Order 742 is open." in trace


@pytest.mark.spec("T5")
def test_a_factory_that_cannot_be_loaded_is_refused_by_name_and_audited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime

    from tether.policy import SqliteApprovalStore
    from tether.sql._database import blocking

    monkeypatch.chdir(tmp_path)
    store = SqliteApprovalStore(tmp_path / "approvals.db")
    state = {"run_id": "run-x1", "context": {"tenant": "shop-a"}}
    blocking(
        store.save_checkpoint, "run-x1", app="no_such_module_here:build", state=json.dumps(state),
        status="stopped", stop_reason="model_error", now=datetime.now(UTC),
    )  # fmt: skip
    store.close()
    (tmp_path / "traces").mkdir()
    event = {"run_id": "run-x1", "seq": 1, "ts": "2026-01-01T00:00:00+00:00", "kind": "run_started",
             "design": "agent", "tenant": "shop-a", "objective": "x"}  # fmt: skip
    (tmp_path / "traces" / "run-x1.jsonl").write_text(json.dumps(event) + "\n", encoding="utf-8")
    client, sources = _console(tmp_path)
    with client:
        ana = login(client, "ana")
        csrf = csrf_of(ana.get("/runs/run-x1").text)
        refused = ana.post("/api/runs/run-x1/resume", headers={"x-csrf-token": csrf})
        assert refused.status_code == 409, refused.text
        body = refused.json()
        assert body["error"] == "not_resumable" and "no_such_module_here:build" in body["message"]
        [entry] = [e for e in sources.users.audit_log() if e.action == "resume"]
    assert entry.outcome == "refused:not_resumable" and "no_such_module_here" in entry.detail
    # Nothing was changed by the refusal: the run is still there to resume once the factory exists.
    after = SqliteApprovalStore(tmp_path / "approvals.db")
    checkpoint = blocking(after.load_checkpoint, "run-x1")
    after.close()
    assert checkpoint is not None and checkpoint.status == "stopped"
