"""A user's own agent file on the durable queue, as the README's "Scale out" walks it.

Real parts: PostgreSQL, a ``tether worker`` process serving ``--app agent.yaml``, an MCP server
over stdio (the project's hostile test server: its legitimate ``ask_colour`` question), a local
tool with a side effect, and the CLI for everything a person does from another shell: pin the
server on the shared store, submit, answer the server's question, approve the side effect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "mcp_host" / "hostile_server.py"

TOOLS = '''
from typing import Annotated
from pydantic import Field


def add_note(text: Annotated[str, Field(description="The note to add.")]) -> dict:
    """Add a note (a side effect: one line in notes.log)."""
    with open(__file__.replace("tools.py", "notes.log"), "a") as f:
        f.write(text + "\\n")
    return {"noted": text}
'''


def _agent_folder(folder: Path) -> Path:
    (folder / "tools.py").write_text(TOOLS)
    mcp = {
        "host": {"tenant": "acme", "pins": "pins.db", "state": "pauses.db", "trace_dir": "traces"},
        "servers": [
            {
                "name": "h",
                "transport": "stdio",
                "command": [sys.executable, str(SERVER)],
                "effects": {"ask_colour": "read"},
                "elicitation": {"enabled": True},
            }
        ],
    }
    (folder / "mcp.json").write_text(json.dumps(mcp))
    steps = [{"call": "h__ask_colour"}, {"call": "add_note", "arguments": {"text": "colour chosen"}}]
    (folder / "steps.json").write_text(json.dumps(steps))
    agent = textwrap.dedent(
        """\
        name: colour-agent
        instructions: Ask for the colour, then note it.
        model: {name: "scripted:steps.json"}
        tools: [{function: "tools:add_note", effect: write}]
        mcp: {config: mcp.json}
        policy: {tenant: acme, user: ana, roles: [ops]}
        trace: {dir: traces}
        """
    )
    path = folder / "agent.yaml"
    path.write_text(agent)
    return path


def _cli(capsys: Any, *argv: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr().out.strip().splitlines()
    return code, (json.loads(out[-1]) if out and out[-1].startswith("{") else {"text": out})


def _until(what: str, probe: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def worker(
    durable_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """One worker serving the agent file for the module (its launch is most of a test's time);
    a test that edits the file's folder puts it back."""
    tmp_path = tmp_path_factory.mktemp("agent-file-runs")
    folder = tmp_path / "agent"
    folder.mkdir()
    agent = _agent_folder(folder)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [
        sys.executable, "-m", "tether.cli", "worker", "--db", durable_url, "--app", str(agent),
        "--executor-id", f"af-{uuid.uuid4().hex[:6]}", "--poll", "0.1",
    ]  # fmt: skip
    log = (tmp_path / "worker.log").open("ab")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, cwd=tmp_path)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line and json.loads(line)["ready"], (tmp_path / "worker.log").read_text()[-3000:]
    try:
        yield agent, proc
    finally:
        proc.terminate()
        proc.wait(90)


@pytest.mark.spec("T5", "X5", "L1")
def test_an_agent_file_runs_on_a_worker_and_a_question_and_an_approval_from_other_shells_resume_it(
    worker: tuple[Path, Any], durable_url: str, capsys: Any
) -> None:
    agent, _ = worker
    db = ("--db", durable_url)
    pin = ("mcp", "approve", "h", "--agent", str(agent), "--tool", "ask_colour", *db, "--json")
    code, pinned = _cli(capsys, *pin)
    assert code == 0 and pinned["pinned"] == ["ask_colour"]
    assert not (agent.parent / "pins.db").exists()  # pinned on the shared store, not the config's file

    code, sub = _cli(capsys, "submit", "--agent", str(agent), "ask for a colour", *db, "--json")
    assert code == 0
    run_id = sub["run_id"]

    def question() -> list[dict[str, Any]]:
        _, listed = _cli(capsys, "runs", *db, "pauses", "--json")
        return [p for p in listed["pauses"] if p["run"] == run_id]

    [pause] = _until("the server's question", question)
    assert pause["message"] == "Which colour?"
    # Attack: an answer outside the question's schema is refused and changes nothing.
    code, bad = _cli(capsys, "runs", *db, "answer", pause["id"], "--answer", '{"colour": "green"}', "--json")
    assert code == 1 and bad["error"] == "invalid_answer"
    assert [p["id"] for p in question()] == [pause["id"]]
    # Legitimate: a valid answer; a worker resumes the run by itself.
    code, ok = _cli(capsys, "runs", *db, "answer", pause["id"], "--answer", '{"colour": "red"}', "--json")
    assert code == 0 and ok["action"] == "accept"

    def proposal() -> list[dict[str, Any]]:
        _, listed = _cli(capsys, "approvals", "list", *db, "--json")
        return [p for p in listed["proposals"] if p["run"] == run_id]

    [prop] = _until("the side effect's proposal", proposal)
    assert prop["tool"] == "add_note" and prop["tenant"] == "acme"  # the file's tenant
    assert not (agent.parent / "notes.log").exists()  # nothing ran before a person
    code, decided = _cli(capsys, "approvals", "approve", prop["id"], *db, "--reviewer", "rita", "--json")
    assert code == 0 and decided["status"] == "approved"

    def finished() -> dict[str, Any] | None:
        _, shown = _cli(capsys, "runs", *db, "show", run_id, "--json")
        return shown if shown.get("status") == "finished" else None

    shown = _until("the run to finish", finished)
    assert shown["stop_reason"] == "accepted", shown
    assert [w["op"] for w in shown["workflows"]] == ["start", "resume", "resume"]
    assert "content={'colour': 'red'}" in shown["answer"]  # the server got the person's answer
    assert (agent.parent / "notes.log").read_text() == "colour chosen\n"  # once


def test_a_run_of_another_version_of_the_agent_file_waits_for_a_worker_of_that_version(
    worker: tuple[Path, Any], durable_url: str, tmp_path: Path, capsys: Any
) -> None:
    agent, _ = worker
    db = ("--db", durable_url)
    _, workers = _cli(capsys, "runs", *db, "workers", "--json")
    [old] = [w["app_version"] for w in workers["workers"] if w["state"] == "alive"]
    # The tool module the file imports is edited: a new version, though the file is the same.
    tools = agent.parent / "tools.py"
    original = tools.read_text()
    notes = agent.parent / "notes.log"
    noted = notes.read_text() if notes.exists() else ""
    tools.write_text(original.replace("Add a note", "Add one note"))
    try:
        code, sub = _cli(capsys, "submit", "--agent", str(agent), "ask", *db, "--json")
        assert code == 0
        _, shown = _cli(capsys, "runs", *db, "show", sub["run_id"], "--json")
        assert shown["status"] == "queued" and shown["version"] != old
        # A worker of the new version takes it. The old worker, polling every 0.1 s all through
        # that worker's launch, never does: the run's first workflow is the new worker's.
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        cmd = [
            sys.executable, "-m", "tether.cli", "worker", "--db", durable_url, "--app", str(agent),
            "--executor-id", f"af2-{uuid.uuid4().hex[:6]}", "--poll", "0.1",
        ]  # fmt: skip
        log = (tmp_path / "worker2.log").open("ab")
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, cwd=tmp_path)
        try:
            assert proc.stdout is not None and json.loads(proc.stdout.readline())["ready"]

            def taken() -> dict[str, Any] | None:
                _, view = _cli(capsys, "runs", *db, "show", sub["run_id"], "--json")
                return view if view.get("status") != "queued" else None

            view = _until("the new version's worker to take the run", taken)
            assert view["workflows"][0]["executor"].startswith("af2-")
            assert view["version"] == shown["version"]
        finally:
            proc.terminate()
            proc.wait(90)
    finally:
        tools.write_text(original)  # the module's worker serves the file as it was
    assert (notes.read_text() if notes.exists() else "") == noted  # nothing noted by this run
