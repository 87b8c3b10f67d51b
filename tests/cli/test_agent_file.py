"""`tether run --agent FILE`: a user's own agent from a YAML/TOML file, as a user runs it.

Real parts throughout: a chat-completions server on 127.0.0.1 (the project's fake server,
speaking HTTP/1.1 and SSE), the ERP as a real MCP stdio server, SQLite approval stores, and
`tether` itself (in-process through ``main``, or as a subprocess for resume "from another shell").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.agents._file import load_agent_file
from tether.agents._record import record_path
from tether.cli import main
from tether.errors import ConfigError
from tether_testing.fake_server import FakeChatServer, Reply, scripted

pytestmark = pytest.mark.spec("L1")

TOOLS = '''
from typing import Annotated
from pydantic import Field
from tether import Effect, tool

LOG = []


@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id, e.g. '742'.")]) -> dict:
    """Read one work order."""
    return {"order_id": order_id, "status": "open", "note": "awaiting part P-17"}


def add_note(
    order_id: Annotated[str, Field(description="Work order id.")],
    text: Annotated[str, Field(description="The note to add.")],
) -> dict:
    """Add a note to a work order (a side effect)."""
    with open(__file__ + ".notes", "a") as f:
        f.write(order_id + ": " + text + "\\n")
    return {"order_id": order_id, "noted": text}


def no_descriptions(order_id: str) -> str:
    """A function whose argument has no description."""
    return order_id
'''

ANSWER = "Order 742 is open: awaiting part P-17."
ORDER = ("read_order", '{"order_id": "742"}')


def last_json(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def project(tmp_path: Path, module: str, agent: dict[str, Any] | str, *, suffix: str = ".yaml") -> Path:
    """A user's project folder: a tools module and an agent file next to it."""
    (tmp_path / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    path = tmp_path / f"agent{suffix}"
    path.write_text(agent if isinstance(agent, str) else yaml.safe_dump(agent), encoding="utf-8")
    return path


def agent_spec(module: str, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "order-agent",
        "instructions": "Answer from tool results only.",
        "model": {"name": "fake-model", "api_key_env": "TETHER_AF_KEY"},
        "tools": [f"{module}:read_order", f"{module}:add_note"],
        "policy": {"tenant": "shop-a"},
        "trace": {"dir": "traces"},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return spec


def test_an_agent_file_runs_a_real_model_over_local_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-agent-file-secret-31"
    monkeypatch.setenv("TETHER_AF_KEY", secret)
    path = project(tmp_path, "tools_a", agent_spec("tools_a"))
    with FakeChatServer(scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as chat:
        code = main(["run", "Why is 742 open?", "--agent", str(path), "--base-url", chat.url, "--json"])
        first = chat.bodies()[0]
        auth = chat.received[0].headers["authorization"]
    out = last_json(capsys.readouterr().out)

    assert code == 0 and out["ok"] is True and out["exit"] == 0
    assert out["stop_reason"] == "accepted" and out["answer"] == ANSWER
    assert out["model"] == "fake-model" and out["agent"] == str(path.resolve())
    assert [(c["tool"], c["status"]) for c in out["calls"]] == [("read_order", "ok")]
    # The file's model settings reached the server; the tools offered are the file's.
    # --json shows nothing as it arrives, so the backend asks for whole responses.
    assert first["model"] == "fake-model" and "stream" not in first
    assert sorted(t["function"]["name"] for t in first["tools"]) == ["add_note", "read_order"]
    assert first["messages"][0] == {"role": "system", "content": "Answer from tool results only."}
    assert auth == f"Bearer {secret}"
    assert secret not in Path(out["trace"]).read_text()
    assert Path(out["trace"]).parent == tmp_path / "traces"


def test_a_toml_agent_file_with_a_scripted_stand_in_named_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = tmp_path / "steps.yaml"
    steps.write_text(
        yaml.safe_dump([{"call": "read_order", "arguments": {"order_id": "742"}}, {"final": ANSWER}])
    )
    toml = """
        name = "order-agent"
        instructions = "Answer from tool results only."
        tools = ["tools_b:read_order", {function = "tools_b:add_note", effect = "write"}]

        [model]
        name = "scripted:steps.yaml"
        limits = {max_steps = 4}

        [policy]
        tenant = "shop-a"

        [trace]
        dir = "traces"
    """
    path = project(tmp_path, "tools_b", textwrap.dedent(toml), suffix=".toml")
    assert load_agent_file(path).spec.model.scripted == "steps.yaml"
    code = main(["run", "Why is 742 open?", "--agent", str(path), "--json"])
    out = last_json(capsys.readouterr().out)
    assert code == 0 and out["answer"] == ANSWER and out["model"] == "scripted:steps.yaml"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"modle": {"name": "x"}}, "modle: Extra inputs are not permitted"),
        ({"model": {"name": "m", "api_key": "sk-123"}}, "api_key is not read from files"),
        ({"model": {"name": "m", "api_key_env": "sk-live-123"}}, "not an environment variable name"),
        ({"model": {"name": "m", "streaming": "sometimes"}}, "model.streaming"),
        ({"tools": ["no_such_module_xyz:read"]}, "tools[0] (no_such_module_xyz:read): cannot import"),
        ({"tools": ["tools_c:nothing_here"]}, "module 'tools_c' has no 'nothing_here'"),
        ({"tools": ["tools_c:no_descriptions"]}, "argument 'order_id' has no description"),
        (
            {"policy": {"effects": {"read_order": "write"}}},
            "declares effect read in code; the file says write",
        ),
        ({"instructions": None}, "give either instructions or instructions_file"),
        ({"mcp": {"config": "x.yaml", "servers": []}}, "give either config (a file) or servers"),
    ],
)
def test_a_bad_agent_file_is_refused_with_the_file_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], expected: str
) -> None:
    spec = agent_spec("tools_c")
    for key, value in change.items():
        if value is None:
            spec.pop(key)
        else:
            spec[key] = value
    path = project(tmp_path, "tools_c", spec)
    code = main(["run", "q", "--agent", str(path), "--json"])
    captured = capsys.readouterr()
    out = last_json(captured.out)
    assert code == 1 and out["ok"] is False and out["exit"] == 1
    assert expected in out["message"], out["message"]
    assert str(path.resolve()) in out["message"] or str(path) in out["message"]
    assert "sk-123" not in captured.out + captured.err


BROKEN_MODULES = {
    "raises": "import json\n\nSETTINGS = json.loads('{not json')\n",
    "undescribed": (
        "from tether import Effect, tool\n\n\n@tool(effect=Effect.READ)\n"
        "def lookup(order_id: str) -> str:\n    return order_id\n"
    ),
    "syntax": "def read(:\n    pass\n",
    "exits": "import sys\n\nsys.exit(3)\n",
}


@pytest.mark.parametrize(
    ("kind", "cause", "line"),
    [
        ("raises", "raised JSONDecodeError: Expecting property name", 3),
        ("undescribed", "raised TypeError: tool lookup: argument 'order_id' has no description", 4),
        ("syntax", "raised SyntaxError: invalid syntax", 1),
        ("exits", "raised SystemExit: 3", 3),
    ],
)
def test_a_tool_module_that_fails_on_import_is_a_configuration_error_naming_it(
    tmp_path: Path, kind: str, cause: str, line: int
) -> None:
    module = f"broken_{kind}"
    (tmp_path / f"{module}.py").write_text(BROKEN_MODULES[kind], encoding="utf-8")
    spec = agent_spec("tools_ok", tools=["tools_ok:read_order", f"{module}:lookup"], python_path=["."])
    path = project(tmp_path, "tools_ok", spec)
    done = tether("run", "q", "--agent", str(path), "--json", cwd=tmp_path)
    out = last_json(done.stdout)
    assert done.returncode == 1 and out["ok"] is False and out["exit"] == 1, done.stdout + done.stderr
    assert f"tools[1] ({module}:lookup): importing '{module}' {cause}" in out["message"], out["message"]
    assert f"{tmp_path / module}.py:{line})" in out["message"], out["message"]
    assert "Traceback" not in done.stdout + done.stderr
    # The same project with the module mended runs past the import (to the missing model key).
    (tmp_path / f"{module}.py").write_text(TOOLS.replace("read_order", "lookup"), encoding="utf-8")
    mended = last_json(tether("run", "q", "--agent", str(path), "--json", cwd=tmp_path).stdout)
    assert "importing" not in mended["message"] and "TETHER_AF_KEY" in mended["message"], mended


def test_an_unreadable_or_malformed_file_is_a_clear_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read agent file"):
        load_agent_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_agent_file(bad)


def tether(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
@pytest.mark.spec("T5")
def test_a_side_effect_pauses_and_another_shell_resumes_the_same_agent(tmp_path: Path) -> None:
    secret = "sk-resume-secret-58"
    spec = agent_spec("tools_d", policy={"approvals_db": "approvals.db"})
    spec["model"]["streaming"] = False
    path = project(tmp_path, "tools_d", spec)
    replies = [
        Reply.calls(ORDER),
        Reply.calls(("add_note", '{"order_id": "742", "text": "checked"}')),
        Reply.text("Noted on 742."),
    ]
    env = {"TETHER_AF_KEY": secret}
    with FakeChatServer(scripted(replies)) as chat:
        argv = ["run", "Note 742", "--agent", str(path), "--base-url", chat.url, "--json"]
        started = tether(*argv, cwd=tmp_path, env=env)
        paused = last_json(started.stdout)
        assert started.returncode == 5, started.stderr
        assert paused["stop_reason"] == "approval_required" and paused["ok"] is False
        approve, resume = paused["next"]
        assert approve.startswith("tether approvals approve prop_") and approve.endswith(
            "--db " + str(tmp_path / "approvals.db")
        )
        assert resume == f"tether resume {paused['run_id']} --db {tmp_path / 'approvals.db'}"
        assert not (tmp_path / "tools_d.py.notes").exists()  # nothing of that turn ran

        # The agent is recorded beside the store: path, hash, the model settings — never the key.
        record = record_path(tmp_path / "approvals.db", paused["run_id"]).read_text()
        assert secret not in record and '"base_url": "' + chat.url in record

        other = tmp_path / "elsewhere"
        other.mkdir()  # another shell, another folder: the commands in "next" are complete
        assert tether(*approve.split()[1:], "--reviewer", "ana", cwd=other).returncode == 0
        done = tether(*resume.split()[1:], "--json", cwd=other, env=env)
        finished = last_json(done.stdout)
        bodies = chat.bodies()
        auth = [r.headers["authorization"] for r in chat.received]
    assert done.returncode == 0, done.stderr
    assert finished["stop_reason"] == "accepted" and finished["answer"] == "Noted on 742."
    assert (tmp_path / "tools_d.py.notes").read_text() == "742: checked\n"  # once
    # The resumed run used the recorded model settings: same model, no stream, same key source.
    assert [b["model"] for b in bodies] == ["fake-model"] * 3 and all("stream" not in b for b in bodies)
    assert auth == [f"Bearer {secret}"] * 3


def test_no_agent_no_config_is_a_usage_error_naming_every_way_in(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Why is 742 open?", "--json"]) == 1
    out = last_json(capsys.readouterr().out)
    assert (
        out["exit"] == 1 and "--agent FILE" in out["message"] and "tether demo maintenance" in out["message"]
    )


def test_show_results_prints_tool_output_and_trace_results_stores_it_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-echoed-secret-77"
    monkeypatch.setenv("TETHER_AF_KEY", secret)
    (tmp_path / "tools_e_extra.py").write_text(
        textwrap.dedent(
            '''
            import os
            from typing import Annotated
            from pydantic import Field
            from tether import tool

            @tool
            def leaky(key: Annotated[str, Field(description="Any key.")]) -> dict:
                """Returns an environment value (a badly written tool)."""
                return {"key": key, "value": os.environ["TETHER_AF_KEY"], "line": "two\\nlines"}
            '''
        )
    )
    spec = agent_spec("tools_e", tools=["tools_e_extra:leaky"])
    path = project(tmp_path, "tools_e", spec)
    with FakeChatServer(scripted([Reply.calls(("leaky", '{"key": "k"}')), Reply.text("done")])) as chat:
        argv = ["run", "q", "--agent", str(path), "--base-url", chat.url, "--show-results", "--trace-results"]
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert "--- result of leaky ---" in out and secret in out  # shown to the person running it
    trace = next((tmp_path / "traces").glob("*.results.jsonl"))
    stored = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [s["tool"] for s in stored] == ["leaky"]
    assert secret not in trace.read_text() and "[REDACTED]" in stored[0]["text"]
    assert '"key": "k"' in stored[0]["text"]  # the rest of the result is kept


@pytest.mark.slow
@pytest.mark.spec("X1", "C2")
def test_an_agent_file_with_its_own_tool_and_an_mcp_server_inline(tmp_path: Path) -> None:
    erp = {
        "name": "erp",
        "transport": "stdio",
        "command": ["{python}", "-m", "tether_examples.scenarios.maintenance.erp"],
        "tools": ["read_order", "read_history"],
        "effects": {"read_order": "read", "read_history": "read"},
    }
    spec = agent_spec(
        "tools_f",
        mcp={"servers": [erp], "host": {"pins": "pins.db", "state": "state.db"}},
        context={"status": True},
    )
    path = project(tmp_path, "tools_f", spec)
    # The server's tools are offered only once a person reviewed and pinned them (stdio servers
    # need a real stderr: these run as the user runs them, in a subprocess).
    assert tether("mcp", "review", "erp", "--agent", str(path), cwd=tmp_path).returncode == 0
    approved = tether("mcp", "approve", "erp", "--agent", str(path), "--json", cwd=tmp_path)
    assert last_json(approved.stdout)["pinned"] == ["read_history", "read_order"]
    replies = [
        Reply.calls(("erp__read_order", '{"order_id": "742"}'), ORDER),
        Reply.text(ANSWER),
    ]
    with FakeChatServer(scripted(replies)) as chat:
        done = tether(
            "run", "Why is 742 open?", "--agent", str(path), "--base-url", chat.url, "--json", cwd=tmp_path
        )
        first = chat.bodies()[0]
    out = last_json(done.stdout)
    assert done.returncode == 0 and out["stop_reason"] == "accepted", done.stderr
    assert sorted(c["tool"] for c in out["calls"] if c["status"] == "ok") == ["erp__read_order", "read_order"]
    assert out["offered_tools"] == {"erp": ["erp__read_history", "erp__read_order"]}
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"add_note", "erp__read_history", "erp__read_order", "read_order"} <= offered
    assert first["messages"][-1]["content"].startswith("<agent_status>")  # context.status from the file


@pytest.mark.spec("C2", "C3", "C5")
def test_an_agent_files_context_settings_reach_the_engine_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_AF_KEY", "k")  # nothing is sent: the agent is only built
    from tether.agents._build import build_agent
    from tether.context import CompressionConfig, StatusConfig, ToolSearchConfig

    context = {
        "status": {"strategy": "append", "todo": False, "show_time": False},
        "compression": {
            "strategy": "task_aware",
            "window_tokens": 4096,
            "trigger": 0.5,
            "result_budget_chars": 500,
        },
        "tool_search": {"threshold": 3, "max_results": 2},
    }
    built = build_agent(
        load_agent_file(project(tmp_path, "tools_ctx", agent_spec("tools_ctx", context=context)))
    )
    config = built.agent.context
    assert config is not None
    assert config.status == StatusConfig(strategy="append", todo=False, show_time=False)
    assert config.compression == CompressionConfig(
        strategy="task_aware", window_tokens=4096, trigger=0.5, result_budget_chars=500
    )
    assert config.tool_search == ToolSearchConfig(threshold=3, max_results=2)
