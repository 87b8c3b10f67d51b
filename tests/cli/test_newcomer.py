"""What a newcomer meets on the command line: next commands after a second pause, the default
of streaming, hints that name the URL and the key variable, a mistyped import path, a missing
approval store. Real parts: ``tether`` through ``main``, SQLite stores, agent files on disk, a
closed port on 127.0.0.1 for a model server that is not running.
"""

from __future__ import annotations

import json
import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.agents._build import build_agent
from tether.agents._file import load_agent_file
from tether.cli import main
from tether.clisupport.output import model_hints
from tether.errors import ConfigError
from tether_testing.fake_server import FakeChatServer, Reply

TOOLS = '''
from typing import Annotated

from pydantic import Field

from tether import Effect, tool


@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Read one work order."""
    return {"order_id": order_id, "status": "open"}


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


def last_json(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def project(tmp_path: Path, module: str, model: dict[str, Any], **extra: Any) -> Path:
    (tmp_path / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    spec = {
        "name": "order-agent",
        "instructions": "Answer from tool results only.",
        "model": model,
        "tools": [f"{module}:read_order", f"{module}:add_note"],
        "policy": {"tenant": "shop-a"},
        "trace": {"dir": "traces"},
        **extra,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once the socket closes


def test_a_resume_that_pauses_again_asks_only_for_the_new_proposal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "steps.yaml").write_text(
        textwrap.dedent(
            """
            - call: add_note
              arguments: {order_id: "742", text: first}
            - call: add_note
              arguments: {order_id: "742", text: second}
            - final: done
            """
        ),
        encoding="utf-8",
    )
    db = tmp_path / "approvals.db"
    path = project(tmp_path, "tools_nc1", {"name": "scripted:steps.yaml"}, policy={"approvals_db": str(db)})
    assert main(["run", "Note twice.", "--agent", str(path), "--json"]) == 5
    first = last_json(capsys.readouterr().out)
    [approved] = first["pending_proposals"]
    assert first["next"][0] == f"tether approvals approve {approved} --db {db}"

    assert main(["approvals", "approve", approved, "--db", str(db), "--reviewer", "ana"]) == 0
    capsys.readouterr()
    assert main(["resume", first["run_id"], "--db", str(db), "--json"]) == 5  # the second note waits
    again = last_json(capsys.readouterr().out)
    [pending] = again["pending_proposals"]
    assert pending != approved
    assert again["next"] == [
        f"tether approvals approve {pending} --db {db}",
        f"tether resume {first['run_id']} --db {db}",
    ]
    assert (tmp_path / "tools_nc1.py.notes").read_text() == "first\n"  # the approved one ran, once

    # Followed as printed, the commands finish the run.
    assert main(["approvals", "approve", pending, "--db", str(db), "--reviewer", "ana"]) == 0
    assert main(["resume", first["run_id"], "--db", str(db), "--json"]) == 0
    assert (tmp_path / "tools_nc1.py.notes").read_text() == "first\nsecond\n"


def test_approvals_list_on_a_missing_store_is_an_error_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "aprovals.db"  # mistyped
    assert main(["approvals", "list", "--db", str(db)]) == 1
    assert f"no approval store at {db}" in capsys.readouterr().err
    assert main(["approvals", "list", "--db", str(db), "--json"]) == 1
    out = last_json(capsys.readouterr().out)
    assert out["ok"] is False and out["exit"] == 1 and str(db) in out["message"]
    assert not db.exists() and list(tmp_path.iterdir()) == []

    from tether.policy import SqliteApprovalStore

    SqliteApprovalStore(db).close()  # an existing, empty store is an empty queue
    assert main(["approvals", "list", "--db", str(db), "--json"]) == 0
    assert last_json(capsys.readouterr().out)["count"] == 0


def test_a_model_server_that_is_not_running_is_named_with_its_url_not_blamed_on_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NEWCOMER_KEY", raising=False)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    model = {"name": "local", "base_url": url, "api_key_env": "NEWCOMER_KEY", "max_retries": 0}
    path = project(tmp_path, "tools_nc2", model)
    assert main(["run", "Why?", "--agent", str(path), "--json"]) == 7
    out = last_json(capsys.readouterr().out)
    assert out["stop_reason"] == "model_error"
    assert any(url in h and "running" in h for h in out["hints"]), out["hints"]
    # no key was refused (nothing answered): a hint about one would send a local user the wrong way
    assert not any("NEWCOMER_KEY" in h for h in out["hints"]), out["hints"]

    assert main(["run", "Why?", "--agent", str(path)]) == 7  # the same lines on a terminal
    printed = capsys.readouterr().out
    assert f"hint: could not reach the model server at {url}" in printed


def test_a_refused_credential_names_the_unset_key_variable_and_never_a_set_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NEWCOMER_KEY", raising=False)
    refused = Reply(
        status=401,
        error_body={"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}},
    )
    with FakeChatServer(lambda request, n: refused) as chat:
        model = {"name": "gpt", "base_url": chat.url, "api_key_env": "NEWCOMER_KEY", "max_retries": 0}
        path = project(tmp_path, "tools_nc4", model)
        assert main(["run", "Why?", "--agent", str(path), "--json"]) == 7
        out = last_json(capsys.readouterr().out)
        assert out["stop_reason"] == "model_error" and "HTTP 401" in out["detail"]
        assert any("$NEWCOMER_KEY is not set" in h for h in out["hints"]), out["hints"]

        monkeypatch.setenv("NEWCOMER_KEY", "k-123")  # set: no hint about it, and never its value
        assert main(["run", "Why?", "--agent", str(path), "--json"]) == 7
        out = last_json(capsys.readouterr().out)
        assert not any("NEWCOMER_KEY" in h for h in out.get("hints", [])) and "k-123" not in json.dumps(out)


def test_a_conversation_past_the_servers_context_window_says_so_not_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NEWCOMER_KEY", raising=False)
    # llama.cpp's Python server, word for word, when a generation fills its 2,048-token window
    full = Reply(
        status=400,
        error_body={
            "error": {
                "message": "This model's maximum context length is 2048 tokens. However, you requested "
                "2048 tokens (2048 in the messages, None in the completion). Please reduce the length "
                "of the messages or completion.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    )
    with FakeChatServer(lambda request, n: full) as chat:
        model = {"name": "local", "base_url": chat.url, "api_key_env": "NEWCOMER_KEY"}
        path = project(tmp_path, "tools_nc5", model)
        assert main(["run", "Why?", "--agent", str(path)]) == 7
        printed = capsys.readouterr().out
        assert len(chat.bodies()) == 1  # a 400 is final: not retried
    assert "stop_reason: model_error" in printed and "maximum context length is 2048" in printed
    assert "hint: the conversation, with the answer being generated, outgrew the model's context" in printed
    assert "--n_ctx" in printed and "NEWCOMER_KEY" not in printed


def test_responses_are_whole_unless_the_file_asks_for_a_stream_and_a_streamed_failure_says_so(
    tmp_path: Path,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    path = project(tmp_path, "tools_nc3", {"name": "local", "base_url": url})
    shown: list[str] = []
    built = build_agent(load_agent_file(path), on_delta=lambda kind, piece: shown.append(piece))
    # a terminal's live view (on_delta) does not turn streaming on
    assert getattr(built.agent.model, "stream", None) is False
    assert not any("stream" in h for h in model_hints("model_error", "broken stream", built.agent.model))

    streamed = project(tmp_path, "tools_nc3", {"name": "local", "base_url": url, "streaming": True})
    model = build_agent(load_agent_file(streamed)).agent.model
    assert getattr(model, "stream", None) is True
    [hint] = [h for h in model_hints("model_error", "stream ended early", model) if "stream" in h]
    assert "--no-stream" in hint and "model.streaming: false" in hint
    assert model_hints("accepted", "", model) == []


def test_a_mistyped_import_path_is_explained_not_shown_as_a_pattern(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project(tmp_path, "tools_nc4", {"name": "m"})
    spec = yaml.safe_load(path.read_text())
    spec["tools"] = ["tools_nc4.read_order"]  # a dot where the colon goes
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError) as dotted:
        load_agent_file(path)
    assert "is not an import path: write module:name" in str(dotted.value)
    assert "pattern" not in str(dotted.value) and "^[" not in str(dotted.value)

    spec["tools"] = ["tools_nc4:read_ordr"]  # a typo in the name
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError) as typo:
        build_agent(load_agent_file(path))
    assert "has no 'read_ordr' (did you mean tools_nc4:read_order?)" in str(typo.value)
    # `tether agent check` imports the tools as a run would, so it catches the typo first.
    assert main(["agent", "check", str(path)]) == 1
    assert "did you mean tools_nc4:read_order?" in capsys.readouterr().err
    spec["tools"] = ["tools_nc4:read_order"]
    path.write_text(yaml.safe_dump(spec))
    assert main(["agent", "check", str(path), "--json"]) == 0
    assert last_json(capsys.readouterr().out)["tools"] == ["read_order"]

    spec["tools"] = ["tools_nc4:read_order", {"function": "tools_nc4:add_note", "reconciler": "tools_nc4"}]
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match="'tools_nc4' is not an import path"):
        load_agent_file(path)
