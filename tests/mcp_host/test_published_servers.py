"""Published MCP servers, configured as their READMEs tell users to, under the host: the npm
reference servers (filesystem, memory, sequential-thinking; by ``node`` and by ``npx -y``) and the
PyPI ones (time, git, fetch; by their console scripts, ``python -m`` and ``uvx``). Each is listed,
pinned, called and shut down confined (``sandbox: auto``). Installed once per test session (xdist
workers share the install) into a temporary folder; skipped, with the reason, where node/npm, pip
or a registry is unavailable."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import venv
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tether.core.stop import StopReason
from tether.errors import DependencyUnavailable
from tether.mcp._config import McpConfig
from tether.mcphost._runner import INSTRUCTIONS, StandIn, build_host, run_question
from tether.policy import Approvals, SqliteApprovalStore
from tether.policy._approvals import Reviewer
from tether.runs._values import Agent
from tether.testing import FunctionModel
from tether.trace._tracer import read_trace

from .conftest import approve, processes_mentioning, script, write_config

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

SCOPE = "@modelcontextprotocol"
FS_READS = {t: "read" for t in ("read_text_file", "list_directory", "list_allowed_directories")}


# -- the installs (npm_servers, pypi_servers) and the launchers' first runs (npx_cached, uvx_cached)
# are conftest's session fixtures (tests/published_installs.py)


# -- helpers --------------------------------------------------------------------------------------


def _children() -> set[int]:
    """This process's child processes (a server left running after the host closed is one)."""
    mine, out = str(os.getpid()), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if stat.rpartition(")")[2].split()[1] == mine:
                out.add(int(entry.name))
    return out


async def _run(config: McpConfig, *steps: tuple[str, dict[str, Any]] | str, **kw: Any) -> Any:
    """One run of the scripted steps; no server process is left behind (neither a child of this
    process nor a process given the test's folder, such as the server inside bwrap)."""
    before = _children()
    run = await run_question(config, "Q", script(*steps), **kw)
    assert _children() <= before, "a server process outlived the host"
    assert not processes_mentioning(str(config.base_dir)), "a server process outlived the host"
    return run


def _confined(run: Any) -> dict[str, Any]:
    trace = read_trace(run.result.trace_path)
    (event,) = [e for e in trace if e["kind"] == "mcp_sandbox"]
    assert event["action"] == "confined", event
    return event


async def _approved_call(config: McpConfig, tmp_path: Path, tool: str, args: dict[str, Any]) -> str:
    """A side-effecting call: the run pauses for a person, who approves; the resumed run makes
    it. Returns what the model was shown."""
    approvals = Approvals(SqliteApprovalStore(tmp_path / "approvals.db"))
    first = await _run(config, (tool, args), "done", approvals=approvals)
    assert first.result.stop_reason is StopReason.APPROVAL_REQUIRED
    (pending,) = await approvals.store.list_proposals(run_id=first.result.run_id)
    assert pending.tool == tool
    await approvals.approve(Reviewer.for_all_tenants("operator"), pending.id)
    host = build_host(config, approvals=approvals)
    model = FunctionModel(StandIn([]), name="mcp-stand-in")
    try:
        done = await host.resume(
            Agent(instructions=INSTRUCTIONS, model=model, name="mcp-agent"), first.result.run_id
        )
    finally:
        await host.aclose()
    assert done.stop_reason is StopReason.ACCEPTED
    shown = [m.content for m in model.requests[-1].messages if getattr(m, "name", None) == tool]
    approvals.store.close()
    return shown[-1]


# -- npm: filesystem ------------------------------------------------------------------------------


@pytest.mark.npm
async def test_the_filesystem_server_works_in_the_folder_its_arguments_name(
    tmp_path: Path, npm_servers: Path
) -> None:
    """As its README says (allowed folders as arguments), with that folder in sandbox_write: all
    its tools pin unflagged, reads round-trip, an edit (a person approves it) lands on the host."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("hello files\n", encoding="utf-8")
    entry = npm_servers / "server-filesystem" / "dist" / "index.js"
    server = {
        "name": "fs",
        "command": "node",
        "args": [str(entry), str(data)],
        "sandbox_write": [str(data)],
        "effects": {**FS_READS, "edit_file": "write"},
    }
    config = write_config(tmp_path, [server])
    pinned, skipped = await approve(config, "fs")
    assert {"read_text_file", "write_file", "edit_file", "list_directory"} <= set(pinned) and not skipped
    run = await _run(
        config,
        ("fs__list_allowed_directories", {}),
        ("fs__read_text_file", {"path": str(data / "notes.txt")}),
        ("fs__list_directory", {"path": str(data)}),
        "done",
    )
    assert str(data) in run.seen("fs__list_allowed_directories")[0]
    assert "hello files" in run.seen("fs__read_text_file")[0]
    assert "[FILE] notes.txt" in run.seen("fs__list_directory")[0]
    assert str(data) in _confined(run)["read_write"]
    edit = {"path": str(data / "notes.txt"), "edits": [{"oldText": "hello", "newText": "goodbye"}]}
    shown = await _approved_call(config, tmp_path, "fs__edit_file", edit)
    assert "+goodbye files" in shown
    assert (data / "notes.txt").read_text(encoding="utf-8") == "goodbye files\n"


@pytest.mark.npm
@pytest.mark.parametrize("declared", ["sandbox_write", "sandbox_read", "roots"])
async def test_a_folder_declared_through_a_symlink_is_there_at_the_path_written(
    tmp_path: Path, npm_servers: Path, declared: str
) -> None:
    """``~/notes`` a link to ``/srv/notes``: the server is given the path as written (its argument,
    the root's URI), so the sandbox shows the folder there too, not only at its resolved path."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.txt").write_text("through the link", encoding="utf-8")
    link = tmp_path / "elsewhere" / "link"
    link.parent.mkdir()
    link.symlink_to(real)
    entry = npm_servers / "server-filesystem" / "dist" / "index.js"
    server: dict[str, Any] = {"name": "fs", "command": ["node", str(entry), str(link)], "effects": FS_READS}
    server[declared] = [link.as_uri() if declared == "roots" else str(link)]
    config = write_config(tmp_path, [server])
    pinned, _ = await approve(config, "fs")
    assert "read_text_file" in pinned
    # (with roots, the server allows the root's resolved path: it is read there)
    path = (real if declared == "roots" else link) / "a.txt"
    run = await _run(config, ("fs__read_text_file", {"path": str(path)}), "done")
    assert "through the link" in run.seen("fs__read_text_file")[0]
    _confined(run)


@pytest.mark.npm
async def test_a_path_argument_the_sandbox_does_not_show_is_named_in_the_start_failure(
    tmp_path: Path, npm_servers: Path
) -> None:
    """The README's launch without sandbox settings: the server cannot see the folder its
    argument names and exits. The error names that folder and the setting that shows it."""
    data = tmp_path / "data"
    data.mkdir()
    entry = npm_servers / "server-filesystem" / "dist" / "index.js"
    config = write_config(tmp_path, [{"name": "fs", "command": ["node", str(entry), str(data)]}])
    with pytest.raises(DependencyUnavailable) as err:
        await approve(config, "fs")
    assert f"its command names {data}, which it is not shown" in str(err.value)
    assert "sandbox_read (sandbox_write if the server writes there)" in str(err.value)
    run = await _run(config, "done")  # in a run: that server unavailable, said so, the run goes on
    assert f"its command names {data}" in run.summary()["unavailable_servers"]["fs"]
    assert run.result.stop_reason is StopReason.ACCEPTED
    (event,) = [e for e in read_trace(run.result.trace_path) if e["kind"] == "mcp_sandbox"]
    assert event["not_shown"] == [str(data)]


@pytest.mark.npm
async def test_the_filesystem_server_by_its_npx_command(tmp_path: Path, npx_cached: None) -> None:
    """``npx -y @modelcontextprotocol/server-filesystem <folder>`` once fetched: confined, from
    npx's install, with no network."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.txt").write_text("npx form", encoding="utf-8")
    command = ["npx", "-y", f"{SCOPE}/server-filesystem", str(data)]
    server = {"name": "files", "command": command, "sandbox_read": [str(data)], "effects": FS_READS}
    config = write_config(tmp_path, [server])
    await approve(config, "files")
    run = await _run(config, ("files__read_text_file", {"path": str(data / "x.txt")}), "done")
    assert "npx form" in run.seen("files__read_text_file")[0]
    event = _confined(run)
    assert event["launcher"] == "npx" and event["network"] == "none"


# -- npm: memory, sequential thinking ---------------------------------------------------------------


@pytest.mark.npm
async def test_the_memory_server_keeps_its_graph_in_the_file_its_env_names(
    tmp_path: Path, npm_servers: Path
) -> None:
    """MEMORY_FILE_PATH (its documented setting) in a sandbox_write folder: a write a person
    approves lands there, and the next session reads it back."""
    store = tmp_path / "memory"
    store.mkdir()
    entry = npm_servers / "server-memory" / "dist" / "index.js"
    server = {
        "name": "memory",
        "command": ["node", str(entry)],
        "sandbox_write": [str(store)],
        "env": {"MEMORY_FILE_PATH": str(store / "graph.jsonl")},
        "effects": {"read_graph": "read", "create_entities": "write"},
    }
    config = write_config(tmp_path, [server])
    pinned, skipped = await approve(config, "memory")
    assert {"create_entities", "read_graph", "delete_entities"} <= set(pinned) and not skipped
    ada = {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}
    shown = await _approved_call(config, tmp_path, "memory__create_entities", {"entities": [ada]})
    assert '"Ada"' in shown
    assert '"name":"Ada"' in (store / "graph.jsonl").read_text(encoding="utf-8")
    run = await _run(config, ("memory__read_graph", {}), "done")
    assert "wrote the first program" in run.seen("memory__read_graph")[0]


@pytest.mark.npm
async def test_the_memory_server_without_its_path_setting_fails_its_write_with_a_hint(
    tmp_path: Path, npm_servers: Path
) -> None:
    """Without MEMORY_FILE_PATH it writes beside its own code, which a confined server sees
    read-only: the call fails (the run goes on), nothing is written there, and the person is told
    which setting to change, in the run's warnings and its trace (the model sees only the error)."""
    package = npm_servers / "server-memory"
    before = sorted(p.name for p in (package / "dist").iterdir())
    server = {
        "name": "memory",
        "command": ["node", str(package / "dist" / "index.js")],
        "effects": {"read_graph": "read", "create_entities": "write"},
    }
    config = write_config(tmp_path, [server])
    await approve(config, "memory")
    ada = {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}
    shown = await _approved_call(config, tmp_path, "memory__create_entities", {"entities": [ada]})
    assert "read-only file system" in shown and "sandbox_write" not in shown
    assert sorted(p.name for p in (package / "dist").iterdir()) == before
    (trace,) = (tmp_path / "traces").glob("*.jsonl")  # the run, paused and resumed
    (hint,) = [e for e in read_trace(trace) if e["kind"] == "mcp_sandbox" and e["action"] == "write_refused"]
    assert "the server's own installation" in hint["hint"] and "sandbox_write" in hint["hint"]


@pytest.mark.npm
async def test_the_sequential_thinking_servers_banner_goes_to_its_log(
    tmp_path: Path, npm_servers: Path
) -> None:
    entry = npm_servers / "server-sequential-thinking" / "dist" / "index.js"
    server = {"name": "think", "command": ["node", str(entry)], "effects": {"sequentialthinking": "read"}}
    config = write_config(tmp_path, [server], server_stderr="log")
    assert await approve(config, "think") == (["sequentialthinking"], {})
    step = {
        "thought": "first, list the facts",
        "nextThoughtNeeded": False,
        "thoughtNumber": 1,
        "totalThoughts": 1,
    }
    run = await _run(config, ("think__sequentialthinking", step), "done")
    assert '"thoughtHistoryLength": 1' in run.seen("think__sequentialthinking")[0]
    log = (tmp_path / "tether-output" / "mcp-logs" / "think.stderr.log").read_text(encoding="utf-8")
    assert "first, list the facts" in log  # its boxed thought, kept out of the result


# -- PyPI: time, git, fetch ------------------------------------------------------------------------


def _copied_venv(folder: Path, servers: Path) -> Path:
    """A ``python -m venv --copies`` environment (its interpreter a copy, not a link) that
    imports the servers' environment through a ``.pth`` file; its python."""
    venv.EnvBuilder(symlinks=False).create(folder)
    (site,) = servers.parent.glob("lib/python3*/site-packages")
    (mine,) = folder.glob("lib/python3*/site-packages")
    (mine / "servers.pth").write_text(f"{site}\n", encoding="utf-8")
    return folder / "bin" / "python"


@pytest.mark.pypi
@pytest.mark.parametrize("form", ["console script", "python -m", "venv --copies"])
async def test_the_time_server(tmp_path: Path, pypi_servers: Path, form: str) -> None:
    """By its console script and by ``python -m`` (its README's forms), also from a venv whose
    interpreter is a copy (``--copies``, the default on some systems)."""
    command = {
        "console script": lambda: [str(pypi_servers / "mcp-server-time")],
        "python -m": lambda: [str(pypi_servers / "python"), "-m", "mcp_server_time"],
        "venv --copies": lambda: [
            str(_copied_venv(tmp_path / "copies", pypi_servers)),
            "-m",
            "mcp_server_time",
        ],
    }[form]()
    server = {
        "name": "time",
        "command": [*command, "--local-timezone", "UTC"],
        "effects": {"get_current_time": "read", "convert_time": "read"},
    }
    config = write_config(tmp_path, [server])
    assert await approve(config, "time") == (["convert_time", "get_current_time"], {})
    noon = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    run = await _run(config, ("time__convert_time", noon), "done")
    assert "T21:00:00+09:00" in run.seen("time__convert_time")[0]
    assert _confined(run)["launcher"] == "python"


@pytest.mark.pypi
async def test_the_time_server_by_its_uvx_command(tmp_path: Path, uvx_cached: None) -> None:
    server = {
        "name": "time",
        "command": "uvx",
        "args": ["mcp-server-time"],
        "effects": {"get_current_time": "read"},
    }
    config = write_config(tmp_path, [server])
    await approve(config, "time")
    run = await _run(config, ("time__get_current_time", {"timezone": "Europe/Paris"}), "done")
    assert '"timezone": "Europe/Paris"' in run.seen("time__get_current_time")[0]
    event = _confined(run)
    assert event["launcher"] == "uvx" and event["network"] == "none"


@pytest.mark.pypi
async def test_the_git_server_on_the_repository_its_argument_names(
    tmp_path: Path, pypi_servers: Path
) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "f.txt").write_text("one\n", encoding="utf-8")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "the first commit"], check=True)
    (repo / "f.txt").write_text("two\n", encoding="utf-8")
    server = {
        "name": "git",
        "command": [str(pypi_servers / "mcp-server-git"), "--repository", str(repo)],
        "sandbox_read": [str(repo)],
        "effects": {"git_log": "read", "git_diff_unstaged": "read"},
    }
    config = write_config(tmp_path, [server])
    pinned, skipped = await approve(config, "git")
    assert {"git_log", "git_diff_unstaged", "git_commit"} <= set(pinned) and not skipped
    run = await _run(
        config,
        ("git__git_log", {"repo_path": str(repo)}),
        ("git__git_diff_unstaged", {"repo_path": str(repo)}),
        "done",
    )
    assert "the first commit" in run.seen("git__git_log")[0]
    assert "+two" in run.seen("git__git_diff_unstaged")[0]


@pytest.fixture
def plain_page() -> Iterator[tuple[str, list[str]]]:
    """A text page on 127.0.0.1 (no robots.txt), and the paths asked for."""
    asked: list[str] = []

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            found = self.path == "/page.txt"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"local page text" if found else b"")

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}", asked
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.pypi
async def test_the_fetch_server_reaches_only_what_its_network_setting_lists(
    tmp_path: Path, pypi_servers: Path, plain_page: tuple[str, list[str]]
) -> None:
    """Its tool's description tells the model to forget its earlier instructions: flagged, pinned
    only when accepted by name. ``network: none`` keeps it off the host's loopback; listing the
    page's host:port lets it through the host's proxy."""
    address, asked = plain_page
    url = f"http://{address}/page.txt"
    command = [str(pypi_servers / "mcp-server-fetch"), "--allow-private-ips"]
    server: dict[str, Any] = {"name": "fetch", "command": command, "effects": {"fetch": "read"}}
    config = write_config(tmp_path, [server])
    pinned, skipped = await approve(config, "fetch")
    assert not pinned and "flagged (instruction)" in skipped["fetch"]
    assert (await approve(config, "fetch", accept_flagged={"fetch"}))[0] == ["fetch"]
    run = await _run(config, ("fetch__fetch", {"url": url}), "done")
    assert "connection issue" in run.seen("fetch__fetch")[0] and not asked  # its own loopback only
    assert run.result.stop_reason is StopReason.ACCEPTED
    config = write_config(tmp_path, [{**server, "network": [address]}])
    run = await _run(config, ("fetch__fetch", {"url": url}), "done")
    assert "local page text" in run.seen("fetch__fetch")[0]
    assert asked == ["/robots.txt", "/page.txt"]
    assert _confined(run)["network_allow"] == [address]


# -- what a user trips on ------------------------------------------------------------------------


@pytest.mark.parametrize("sandbox", ["auto", "none"])
@pytest.mark.parametrize(("launcher", "provider"), [("npx", "install Node.js"), ("uvx", "install uv")])
async def test_a_missing_launcher_is_named_with_what_provides_it(
    tmp_path: Path, sandbox: str, launcher: str, provider: str
) -> None:
    """The README's ``npx -y …`` / ``uvx …`` where that launcher is not installed: confined or
    not, the same message names it and what to install (not a bare FileNotFoundError)."""
    server = {
        "name": "s",
        "command": [launcher, "some-mcp-server"],
        "env": {"PATH": str(tmp_path)},
        "sandbox": sandbox,
    }
    config = write_config(tmp_path, [server])
    with pytest.raises(DependencyUnavailable) as err:
        await approve(config, "s")
    assert f"{launcher!r} was not found on the server's PATH: {provider}" in str(err.value)
    assert "FileNotFoundError" not in str(err.value)


async def test_an_npx_package_not_yet_fetched_says_how_to_fetch_it_without_hanging(tmp_path: Path) -> None:
    """Confined, ``npx -y`` cannot download: the host says to run it once. Most npm servers ignore
    ``--help`` and wait on their input, so the command given ends that input."""
    if shutil.which("npx") is None or shutil.which("node") is None:
        pytest.skip("npx/node are not installed")
    spec = f"{SCOPE}/server-tether-never-published"
    config = write_config(tmp_path, [{"name": "s", "command": ["npx", "-y", spec]}])
    with pytest.raises(DependencyUnavailable) as err:
        await approve(config, "s")
    assert f"run `npx -y {spec} --help </dev/null` once" in str(err.value)


def test_the_plan_links_a_declared_path_written_through_a_symlink(tmp_path: Path) -> None:
    """(Without npm.) The declared folder is bound at its resolved path and linked at the path
    written; one inside a shown folder, or given as written, needs no link."""
    from tether.mcp._sandbox import bwrap_status, plan_confinement

    if bwrap_status(None)[0] is None:
        pytest.skip(f"bwrap does not work here: {bwrap_status(None)[1]}")
    real = tmp_path / "real"
    (real / "inner").mkdir(parents=True)
    link = tmp_path / "links" / "data"
    link.parent.mkdir()
    link.symlink_to(real)
    (real / "back").symlink_to(real / "inner")  # inside the shown folder: there already
    argv = [sys.executable, "-c", "pass"]
    read = [str(link), str(real / "back")]
    plan = plan_confinement("auto", argv, roots=[], cwd=str(tmp_path), read=read, env=dict(os.environ))
    opts = list(plan.options)
    links = [
        tuple(opts[i + 1 : i + 3])
        for i, o in enumerate(opts)
        if o == "--symlink" and str(tmp_path) in opts[i + 2]
    ]
    assert links == [(str(real), str(link))]
    assert ("--ro-bind", str(real), str(real)) in zip(opts, opts[1:], opts[2:], strict=False)


def test_a_refused_write_is_hinted_only_for_a_confined_servers_file_errors() -> None:
    """(Without npm.) A read-only file system, or permission denied on a quoted path, from a
    confined server: hinted. An API's "permission denied", or an unconfined server: not."""
    from tether.mcp._sandbox import Confinement, SandboxPlan, write_hint

    confined = SandboxPlan("auto", [], confinement=Confinement("node", (), (), "none"))
    own = write_hint(confined, "EROFS: read-only file system, open '/opt/mcp/app/dist/memory.json'")
    assert own is not None and "own installation" in own and "sandbox_write" in own
    other = write_hint(confined, "EACCES: permission denied, mkdir '/srv/reports'")
    assert other is not None and "(/srv/reports)" in other and "sandbox_write" in other
    assert write_hint(confined, "GitHub: permission denied for this repository") is None
    assert write_hint(SandboxPlan("none", []), "EROFS: read-only file system, open '/x'") is None
