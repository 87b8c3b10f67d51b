"""Wild servers, round thirty-five: a server file on the official SDK launched by a Python
runner's console script, as the SDKs' READMEs say (``mcp run server.py``, ``uvx --from
'mcp[cli]' mcp run server.py``, ``fastmcp run server.py:mcp``), under the default ``sandbox:
auto``.

Found: such a launch could not start confined ("its command names server.py, which it is not
shown"): the console script and its venv were shown, the server file its argument names was not.
``python server.py`` showed its script; a console script's arguments were never looked at. Each
argument naming a ``.py`` file (relative to ``cwd``, with or without a ``:object``) is now shown
read-only, alone, as ``python server.py``'s script is (``mcp/_wrapped.server_file``): nothing
else of its folder, and never through a link in a folder the server writes.

Found: ``uv --directory PROJECT run server.py`` (the MCP quickstart's launch, in Claude
Desktop's config) could not start confined: uv itself was shown and run, and found neither the
project nor its cache. It is now confined as what it runs, the project's ``.venv`` interpreter on
the script (or the venv's console script), once ``uv sync`` has made the venv
(``mcp/_wrapped.uv_run``); a run with an environment uv builds for it (``--with``, ``--isolated``)
is left as it was.

Held (checked here): the tool output comes back labelled untrusted with its terminal escapes
removed; no server process outlives the run.
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.core.stop import StopReason
from tether.errors import DependencyUnavailable
from tether.mcp import review_server
from tether.mcp._sandbox import bwrap_status
from tether.mcp._wrapped import server_file, uv_run
from tether.mcphost._runner import run_question

from .conftest import approve, processes_mentioning, script, write_config

pytestmark = [pytest.mark.anyio]

NO_BWRAP = bwrap_status(None)[0] is None
SECRET = "sibling secret 35"

SERVER = '''\
from pathlib import Path

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("wild35")


@mcp.tool()
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-of-{key} \\x1b[31mred\\x1b[0m"


@mcp.tool()
def peek(name: str) -> str:
    """Read a file beside this one."""
    try:
        return "read: " + (Path(__file__).parent / name).read_text()
    except OSError as err:
        return f"hidden: {type(err).__name__}"


if __name__ == "__main__":
    mcp.run()
'''

# What ``mcp run FILE[:object]`` does (mcp/cli/cli.py), without its typer dependency: the file's
# folder first on the import path, the file imported, its server run.
RUNNER = """\
import importlib.util
import sys
from pathlib import Path

path, _, obj = sys.argv[2].partition(":")
sys.path.insert(0, str(Path(path).parent))
spec = importlib.util.spec_from_file_location("server", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
getattr(module, obj or "mcp").run()
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "server.py").write_text(SERVER, encoding="utf-8")
    (project / "secret.txt").write_text(SECRET, encoding="utf-8")
    return project


def _runner(tmp_path: Path) -> Path:
    """A console script as pip writes one into a venv's ``bin``: its ``#!`` the interpreter."""
    runner = tmp_path / "bin" / "mcp-runner"
    runner.parent.mkdir()
    runner.write_text(f"#!{sys.executable}\n{RUNNER}", encoding="utf-8")
    runner.chmod(0o755)
    return runner


def _entry(command: list[str], project: Path, **extra: Any) -> dict[str, Any]:
    effects = {"lookup": "read", "peek": "read"}
    return {"name": "w", "command": command, "cwd": str(project), "effects": effects, **extra}


async def _served(tmp_path: Path, entry: dict[str, Any]) -> Any:
    config = write_config(tmp_path, [entry])
    review = await review_server(config, "w")
    await approve(config, "w")
    steps = script(("w__lookup", {"key": "a"}), ("w__peek", {"name": "secret.txt"}), "done")
    with anyio.fail_after(120):
        run = await run_question(config, "Q", steps)
    assert not processes_mentioning(str(tmp_path)), "a server process outlived the run"
    return review, run


def _held(review: Any, run: Any, project: Path) -> None:
    """Served confined, the file alone shown (its folder's secret not), output labelled, cleaned."""
    assert review.launch["confined"] is True
    assert str(project / "server.py") in review.launch["read_only"]
    assert str(project) not in review.launch["read_only"]
    looked = run.seen("w__lookup")[0]
    assert looked.startswith('<untrusted_data source="w"') and "value-of-a" in looked
    assert "\x1b" not in looked
    peeked = run.seen("w__peek")[0]
    assert "hidden: " in peeked and SECRET not in peeked
    assert run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.slow
@pytest.mark.skipif(NO_BWRAP, reason="bubblewrap is not available")
@pytest.mark.parametrize("arg", ["server.py", "server.py:mcp", "{project}/server.py"])
async def test_a_runner_given_a_server_file_starts_confined(tmp_path: Path, arg: str) -> None:
    project = _project(tmp_path)
    command = [str(_runner(tmp_path)), "run", arg.format(project=project)]
    review, run = await _served(tmp_path, _entry(command, project))
    _held(review, run, project)


@pytest.mark.slow
@pytest.mark.skipif(NO_BWRAP, reason="bubblewrap is not available")
async def test_a_server_file_linked_from_a_folder_the_server_writes_is_not_shown(tmp_path: Path) -> None:
    """``server.py`` in the folder the server writes is a link (it may have made it) to a file
    elsewhere: never followed; the start fails, naming what was withheld."""
    project, work = _project(tmp_path), tmp_path / "work"
    work.mkdir()
    (work / "server.py").symlink_to(project / "server.py")
    command = [str(_runner(tmp_path)), "run", "server.py"]
    entry = _entry(command, work, sandbox_write=[str(work)], timeout_s=30)
    config = write_config(tmp_path, [entry])
    with pytest.raises(DependencyUnavailable, match="a link in a folder the server writes"):
        await review_server(config, "w")
    assert not processes_mentioning(str(tmp_path))


def test_what_a_runners_argument_names(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "server.py").write_text("", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("", encoding="utf-8")
    at = tmp_path / "app" / "server.py"
    assert server_file("app/server.py", tmp_path) == (at, "")
    assert server_file("app/server.py:mcp", tmp_path) == (at, ":mcp")
    assert server_file(f"{at}:app.server", tmp_path) == (at, ":app.server")
    for other in ("--transport", "stdio", "notes.txt", "missing.py", "app/server.py:bad-name", "-x.py"):
        assert server_file(other, tmp_path) is None, other


@pytest.fixture(scope="module")
def uvx_mcp_cli() -> str:
    """``mcp[cli]`` in uv's cache, as a user's first ``uvx --from 'mcp[cli]' mcp`` leaves it."""
    uvx = shutil.which("uvx")
    if uvx is None:
        pytest.skip("uvx is not installed")
    try:
        done = subprocess.run(
            [uvx, "--from", "mcp[cli]", "mcp", "version"], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        pytest.skip("uvx timed out fetching mcp[cli] (no registry?)")
    if done.returncode != 0:
        pytest.skip(f"uvx could not fetch mcp[cli]: {done.stderr[-300:]}")
    return uvx


@pytest.mark.slow
@pytest.mark.pypi
@pytest.mark.skipif(NO_BWRAP, reason="bubblewrap is not available")
async def test_uvx_mcp_run_of_a_server_file_starts_confined(tmp_path: Path, uvx_mcp_cli: str) -> None:
    """The SDK's own runner, as its README says: ``uv run mcp run server.py`` / ``uvx``."""
    project = _project(tmp_path)
    command = [uvx_mcp_cli, "--from", "mcp[cli]", "mcp", "run", "server.py"]
    review, run = await _served(tmp_path, _entry(command, project))
    _held(review, run, project)
    assert review.launch["launcher"] == "uvx"


def _uv_project(tmp_path: Path) -> Path:
    """A project as ``uv init`` then ``uv sync`` leave it: ``pyproject.toml`` and ``.venv``, the
    SDK reached through a ``.pth`` file (offline: this test's own site-packages)."""
    project = _project(tmp_path)
    (project / "pyproject.toml").write_text('[project]\nname = "w"\nversion = "0"\n', encoding="utf-8")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(project / ".venv")
    sites = list((project / ".venv" / "lib").glob("python3*/site-packages"))
    (sites[0] / "sdk.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    return project


@pytest.mark.slow
@pytest.mark.skipif(NO_BWRAP, reason="bubblewrap is not available")
async def test_uv_run_in_a_project_starts_confined_as_its_venv(tmp_path: Path) -> None:
    project = _uv_project(tmp_path)
    command = ["uv", "--directory", str(project), "run", "server.py"]
    review, run = await _served(tmp_path, _entry(command, tmp_path))
    _held(review, run, project)
    assert str(project / ".venv") in review.launch["read_only"]


def test_what_uv_run_runs(tmp_path: Path) -> None:
    (tmp_path / "p" / ".venv" / "bin").mkdir(parents=True)
    project, bin_ = tmp_path / "p", tmp_path / "p" / ".venv" / "bin"
    (project / "pyproject.toml").write_text("", encoding="utf-8")
    (project / ".venv" / "pyvenv.cfg").write_text("", encoding="utf-8")
    (bin_ / "srv").write_text("", encoding="utf-8")
    python = str(bin_ / "python")
    assert uv_run(["uv", "--directory", str(project), "run", "s.py", "-v"], tmp_path) == (
        [python, "s.py", "-v"],
        project,
    )
    assert uv_run(["uv", "run", "--project=p", "--frozen", "srv", "x"], tmp_path) == (
        [str(bin_ / "srv"), "x"],
        tmp_path,
    )
    assert uv_run(["uv", "run", "--quiet", "s.py"], project) == ([python, "s.py"], project)
    assert uv_run(["uv", "run", "--with", "mcp", "s.py"], project) is None  # uv builds that one
    assert uv_run(["uv", "run", "--isolated", "s.py"], project) is None
    assert uv_run(["uv", "run", "nothere"], project) is None
    assert uv_run(["uv", "run", "s.py"], tmp_path) is None  # no project
    assert uv_run(["uv", "sync"], project) is None
    assert uv_run(["uvx", "run", "s.py"], project) is None
