"""Wild servers, round thirty-one: the published filesystem server (``@modelcontextprotocol/
server-filesystem``), launched as its README says, asked for paths outside the folder its
arguments allow, and for a write its config leaves undeclared; the published memory server
launched by ``npx -y @modelcontextprotocol/server-memory`` and driven from the command line alone
(``tether mcp review``, ``approve``, ``run --script``, ``approvals approve``, ``resume``); the
published git server asked about a repository other than its argument's.

Contained already (checked here): a read of a file outside the allowed folder, a ``..`` escape
and a link inside the folder pointing out of it are each refused by the server and reach the
model as that call's error (the run goes on, the next call served, nothing outside read or
written), as is a folder its arguments name but the host's ``roots`` leave out, and another
repository than the git server's; ``write_file``, ``create_directory``, ``move_file``, ``git_add``
and ``git_commit`` left out of ``effects`` are taken as writes (the run pauses for a person,
nothing written before approval; with no approval store, denied); from the command line, the
memory server reviewed confined (npx's install read-only, no network, only its data folder
writable), its write paused until a person approves it, then landing in the file its
``MEMORY_FILE_PATH`` names; no server process outlives a run."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tether.cli import main
from tether.core.stop import StopReason
from tether.mcp._config import McpConfig
from tether.mcphost._runner import run_question
from tether.policy import Approvals, SqliteApprovalStore

from .conftest import approve, processes_mentioning, script, write_config

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.npm]

FS_READS = {t: "read" for t in ("read_text_file", "list_directory", "list_allowed_directories")}
SECRET = "outside secret 31"


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    (data / "notes.txt").write_text("inside notes", encoding="utf-8")
    (outside / "secret.txt").write_text(SECRET, encoding="utf-8")
    (data / "link").symlink_to(outside)
    return data, outside


def _config(tmp_path: Path, npm_servers: Path, data: Path, **extra: Any) -> McpConfig:
    entry = npm_servers / "server-filesystem" / "dist" / "index.js"
    server = {"name": "fs", "command": ["node", str(entry), str(data)], "effects": FS_READS, **extra}
    return write_config(tmp_path, [server])


async def _run(config: McpConfig, *steps: tuple[str, dict[str, Any]] | str, **kw: Any) -> Any:
    run = await run_question(config, "Q", script(*steps), **kw)
    assert not processes_mentioning(str(config.base_dir)), "a server process outlived the host"
    return run


@pytest.mark.parametrize("sandbox", ["auto", "none"])
async def test_paths_outside_the_allowed_folder_are_refused_as_the_calls_error(
    tmp_path: Path, npm_servers: Path, sandbox: str
) -> None:
    """Outside by an absolute path, by ``..``, through a link inside the folder: each call
    fails, the error shown to the model, and the next read is served (the run accepted)."""
    data, outside = _folders(tmp_path)
    config = _config(tmp_path, npm_servers, data, sandbox_read=[str(data)], sandbox=sandbox)
    await approve(config, "fs")
    escapes = [outside / "secret.txt", f"{data}/../outside/secret.txt", data / "link" / "secret.txt"]
    steps = [("fs__read_text_file", {"path": str(p)}) for p in escapes]
    run = await _run(config, *steps, ("fs__read_text_file", {"path": str(data / "notes.txt")}), "done")
    said = run.seen("fs__read_text_file")
    assert len(said) == 4 and run.result.stop_reason is StopReason.ACCEPTED
    for refused in said[:3]:
        assert SECRET not in refused and "error" in refused.lower(), refused
    assert "inside notes" in said[3]


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("write_file", {"path": "new.txt", "content": "written"}),
        ("create_directory", {"path": "made"}),
        ("move_file", {"source": "notes.txt", "destination": "moved.txt"}),
    ],
)
async def test_a_write_tool_its_config_leaves_undeclared_waits_for_a_person(
    tmp_path: Path, npm_servers: Path, tool: str, args: dict[str, str]
) -> None:
    """``effects`` names only the reads: the write is held for approval (with no approval store,
    denied), nothing changes in the folder, the reads declared still run without asking."""
    data, _ = _folders(tmp_path)
    config = _config(tmp_path, npm_servers, data, sandbox_write=[str(data)])
    await approve(config, "fs")
    before = sorted(p.name for p in data.iterdir())
    absolute = {k: str(data / v) for k, v in args.items()}
    steps = [("fs__list_directory", {"path": str(data)}), (f"fs__{tool}", absolute), "done"]
    run = await _run(config, *steps)
    assert "approval_unavailable" in run.seen(f"fs__{tool}")[0]
    assert sorted(p.name for p in data.iterdir()) == before
    approvals = Approvals(SqliteApprovalStore(tmp_path / "approvals.db"))
    try:
        run = await _run(config, *steps, approvals=approvals)
        assert "[FILE] notes.txt" in run.seen("fs__list_directory")[0]
        assert run.result.stop_reason is StopReason.APPROVAL_REQUIRED
        (pending,) = await approvals.store.list_proposals(run_id=run.result.run_id)
        assert pending.tool == f"fs__{tool}"
    finally:
        approvals.store.close()
    assert sorted(p.name for p in data.iterdir()) == before


def _said(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_the_memory_server_by_npx_from_the_command_line_alone(
    tmp_path: Path, npx_memory: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "mem"
    store.mkdir()
    server = {
        "name": "memory",
        "command": "npx",
        "args": ["-y", "@modelcontextprotocol/server-memory"],
        "env": {"MEMORY_FILE_PATH": str(store / "graph.jsonl")},
        "sandbox_write": [str(store)],
        "effects": {"read_graph": "read", "open_nodes": "read"},
    }
    write_config(tmp_path, [server])
    config = str(tmp_path / "mcp.yaml")
    assert main(["mcp", "review", "memory", "--config", config]) == 0
    review = capsys.readouterr().out
    assert '"launcher": "npx"' in review and '"network": "none"' in review and "\n! " not in review
    assert "== create_entities  [new: not approved]" in review
    assert main(["mcp", "approve", "memory", "--config", config]) == 0
    assert "pinned   memory__create_entities" in capsys.readouterr().out
    ada = {"name": "Ada", "entityType": "person", "observations": ["first program"]}
    steps = tmp_path / "steps.yaml"
    calls = [("create_entities", {"entities": [ada]}), ("read_graph", {}), ("open_nodes", {"names": ["Ada"]})]
    steps.write_text(
        json.dumps([{"call": f"memory__{t}", "arguments": a} for t, a in calls] + [{"final": "ok"}])
    )
    db = str(tmp_path / "approvals.db")
    assert main(["mcp", "run", "Q", "--config", config, "--script", str(steps), "--db", db, "--json"]) == 5
    paused = _said(capsys)
    assert paused["stop_reason"] == "approval_required" and not (store / "graph.jsonl").exists()
    assert not processes_mentioning(str(tmp_path)), "a server process outlived the host"
    assert main(["approvals", "--db", db, "list", "--json"]) == 0
    (pending,) = _said(capsys)["proposals"]
    assert pending["tool"] == "memory__create_entities"
    assert main(["approvals", "--db", db, "approve", pending["id"]]) == 0
    capsys.readouterr()
    assert main(["resume", paused["run_id"], "--db", db, "--json"]) == 0
    done = _said(capsys)
    assert done["stop_reason"] == "accepted" and [c["status"] for c in done["calls"]] == ["ok"] * 3
    assert '"name":"Ada"' in (store / "graph.jsonl").read_text(encoding="utf-8")
    assert not processes_mentioning(str(tmp_path)), "a server process outlived the host"


@pytest.mark.pypi
async def test_the_git_server_refuses_a_repository_outside_its_argument_and_holds_its_writes(
    tmp_path: Path, pypi_servers: Path
) -> None:
    """``mcp-server-git --repository <repo>``: a log of another repository (beside it, through
    ``..``) is that call's error, the next call is served; ``git_add`` and ``git_commit``, left out
    of ``effects``, wait for a person (nothing staged, nothing committed)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repos = {}
    for name in ("repo", "other"):
        repo = repos[name] = tmp_path / name
        git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.org"]
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        (repo / "f.txt").write_text(f"{name}\n", encoding="utf-8")
        subprocess.run([*git, "add", "f.txt"], check=True)
        subprocess.run([*git, "commit", "-qm", f"commit in {name}"], check=True)
    repo = repos["repo"]
    (repo / "g.txt").write_text("new\n", encoding="utf-8")
    server = {
        "name": "git",
        "command": [str(pypi_servers / "mcp-server-git"), "--repository", str(repo)],
        "sandbox_write": [str(repo)],
        "effects": {"git_log": "read", "git_status": "read"},
    }
    config = write_config(tmp_path, [server])
    await approve(config, "git")
    outside = [str(repos["other"]), f"{repo}/../other"]
    steps = [("git__git_log", {"repo_path": p}) for p in [*outside, str(repo)]]
    run = await _run(config, *steps, "done")
    said = run.seen("git__git_log")
    assert run.result.stop_reason is StopReason.ACCEPTED and len(said) == 3
    for refused in said[:2]:
        assert "commit in other" not in refused and "error" in refused.lower(), refused
    assert "commit in repo" in said[2]
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout
    approvals = Approvals(SqliteApprovalStore(tmp_path / "approvals.db"))
    try:
        for tool, args in [("git_add", {"files": ["g.txt"]}), ("git_commit", {"message": "m"})]:
            step = (f"git__{tool}", {"repo_path": str(repo), **args})
            run = await _run(config, step, "done", approvals=approvals)
            assert run.result.stop_reason is StopReason.APPROVAL_REQUIRED
    finally:
        approvals.store.close()
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == "?? g.txt\n"
    assert (
        subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
        == head
    )


@pytest.mark.parametrize("sandbox", ["auto", "none"])
async def test_roots_narrower_than_the_servers_arguments_are_what_it_allows(
    tmp_path: Path, npm_servers: Path, sandbox: str
) -> None:
    """Its arguments name two folders, the host's ``roots`` one: the server takes the roots (as a
    client that supports them asks it to), so the other folder's file is that call's error, even
    unconfined, and the root's file is read."""
    data, outside = _folders(tmp_path)
    folders = [str(data), str(outside)]
    entry = npm_servers / "server-filesystem" / "dist" / "index.js"
    server = {
        "name": "fs",
        "command": ["node", str(entry), *folders],
        "effects": FS_READS,
        "roots": [data.as_uri()],
        "sandbox_read": folders,
        "sandbox": sandbox,
    }
    config = write_config(tmp_path, [server])
    await approve(config, "fs")
    reads = [("fs__read_text_file", {"path": str(p)}) for p in (outside / "secret.txt", data / "notes.txt")]
    run = await _run(config, *reads, "done")
    said = run.seen("fs__read_text_file")
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert SECRET not in said[0] and "error" in said[0].lower(), said[0]
    assert "inside notes" in said[1]
