"""The ``tether`` wheel holds the harness only (issue 23, item 3).

The reference scenarios and the AgentDojo adapter are the ``tether-examples`` distribution
(``examples/``), the fake chat-completions server is ``tether-testing`` (``testing/``). This
builds the core wheel from the repository and reads what it holds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_THE_LIBRARY = re.compile(r"(^|/)(scenarios|agentdojo|tether_examples|tether_testing)(/|$)|fake_server")
IMPORTS_THEM = re.compile(r"^\s*(from|import)\s+tether_(examples|testing)\b", re.MULTILINE)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [built] = out.glob("tether-*.whl")
    return built


@pytest.mark.slow
def test_the_core_wheel_holds_no_scenario_agentdojo_or_fake_server_module(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        sources = {n: zf.read(n).decode() for n in names if n.endswith(".py")}
        [entry_points] = [zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert not [n for n in names if NOT_THE_LIBRARY.search(n)]
    assert {n.split("/")[0] for n in names} == {"tether", wheel.name.split("-")[0] + "-0.1.0.dist-info"}
    assert not [n for n, text in sources.items() if IMPORTS_THEM.search(text)]
    assert "tether.scenarios" not in entry_points  # the core registers no scenario of its own
    # ... and it is the library: the command, the chokepoint and the scenario discovery are there.
    assert {"tether/cli/_main.py", "tether/chokepoint/_calls.py", "tether/clisupport/scenarios.py"} <= set(
        names
    )
    assert "tether = tether.cli:main" in entry_points


@pytest.mark.slow
def test_the_wheel_and_sdist_are_ready_to_publish(wheel: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [sdist] = tmp_path.glob("tether-*.tar.gz")
    check = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        [meta] = [zf.read(n).decode() for n in names if n.endswith(".dist-info/METADATA")]
    assert "License-Expression: Apache-2.0" in meta and "Classifier: Typing :: Typed" in meta
    assert any(n.endswith("licenses/LICENSE") for n in names) and "tether/py.typed" in names


@pytest.mark.slow
def test_the_built_wheel_installs_in_a_fresh_venv_and_runs_the_tutorial(wheel: Path, tmp_path: Path) -> None:
    """A newcomer's install: the wheel alone (its dependencies from the package index) in a new
    virtual environment, then ``tether --help`` and the tutorial's first agent: the run pauses
    for the write, the approval lets it run once."""
    venv = tmp_path / "venv"
    # Without a pip of its own (ensurepip costs seconds of CPU): this interpreter's pip installs
    # into it (``--python``), the wheel and its dependencies from the package index.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python, tether = venv / "bin" / "python", venv / "bin" / "tether"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    helped = subprocess.run([str(tether), "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert helped.returncode == 0 and "approvals" in helped.stdout, helped.stderr

    page = (ROOT / "docs" / "tutorial" / "first-agent.md").read_text(encoding="utf-8")
    project = tmp_path / "orders"
    project.mkdir()
    for name, body in re.findall(r'^```\w+ title="([^"]+)"\n(.*?)^```$', page, re.MULTILINE | re.DOTALL):
        (project / name).write_text(body, encoding="utf-8")

    def tether_in_project(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(tether), *argv], cwd=project, capture_output=True, text=True, env=env, timeout=120
        )

    run = tether_in_project("run", "Why is work order 742 still open?", "--agent", "agent.yaml", "--json")
    assert run.returncode == 5, run.stdout + run.stderr
    paused = json.loads(run.stdout.strip().splitlines()[-1])
    [proposal] = paused["pending_proposals"]
    assert not (project / "notes.txt").exists()
    assert tether_in_project("approvals", "approve", proposal, "--db", "approvals.db").returncode == 0
    resumed = tether_in_project("resume", paused["run_id"], "--db", "approvals.db", "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (project / "notes.txt").read_text(encoding="utf-8") == "742: Waiting for part P-17.\n"
