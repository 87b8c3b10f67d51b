"""Wild servers, round thirty-three: a server on the official SDK (``wild33_sdk_server.py``) whose
tools claim more than they do, with odd names, over stdio and Streamable HTTP (stateful and
stateless, JSON answers on and off), launched the ordinary ways users launch them.

Held (pinned here): a tool annotated read-only, not destructive, closed-world, with ``_meta``
saying its effect is a read, is side-effecting unless the operator's ``effects`` says otherwise
(it pauses for approval and never reaches the server); a dotted name and one past 64 characters
are offered under the host's safe names and called by their own; names with a ``/`` or outside
ASCII are flagged at review and never pinned, even accepted.

Found (confined, ``sandbox: auto``, the default):

* ``python -m pkg.server`` with ``cwd`` the project folder could not start ("No module named
  'pkg'"): Python imports ``pkg`` from its working folder, which confinement never shows. The
  package named by ``-m`` in the working folder (or ``pkg.py``) is now shown read-only, alone,
  at the head of the import path inside (``mcp/_wrapped.module_in_cwd``); a link to it in a
  folder the server writes is never followed;
* ``sh -c "exec python …"`` (a shell given one plain command, as client configs write a launch)
  could not start: confinement showed the shell alone, not the interpreter or script the command
  names. A shell script of one plain command is now confined as that command
  (``mcp/_wrapped.unwrapped``); a script with anything a shell would read beyond words and
  quotes is left as it is. A ``#!/bin/sh`` wrapper of one such command (``exec python -m
  pkg.server "$@"``), by a relative path with ``cwd`` or found on the server's ``PATH``, is
  confined as that command with the wrapper's arguments (``mcp/_wrapped.script_command``), unless
  it lies in a folder the server writes (it may have written it).

Also: ``tether mcp review`` now names what a server declares that no run uses (prompts,
resources, completions, an experimental capability, escaped), instead of leaving it silent.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.core.stop import Limits, StopReason
from tether.mcp import review_server
from tether.mcp._launchers import resolve_launch
from tether.mcp._listing import offered_name
from tether.mcp._opening import unused_features
from tether.mcp._sandbox import bwrap_status
from tether.mcp._wrapped import module_in_cwd, script_command, unwrapped
from tether.mcphost._runner import run_question

from .conftest import approve, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
SDK = HERE / "wild33_sdk_server.py"
LONG = "a_very_long_tool_name_" + "x" * 60
READS = {"lookup": "read", "files.read": "read", LONG: "read"}
NO_BWRAP = bwrap_status(None)[0] is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(
    params=[(), ("json",), ("stateless",), ("stateless", "json")], ids=lambda m: "-".join(m) or "stateful"
)
def web(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The SDK server as ``mcp.run("streamable-http", …)`` in its own process."""
    port = _free_port()
    env = {**os.environ, "WILD33_MARKS": str(tmp_path / "marks")}
    command = [sys.executable, str(SDK), "http", str(port), *request.param]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(timeout=10)


async def _run(tmp_path: Path, entry: dict[str, Any], *steps: tuple[str, dict[str, Any]]) -> Any:
    config = write_config(tmp_path, [entry])
    await approve(config, "x")
    with anyio.fail_after(90):
        return await run_question(config, "Q", script(*steps, "done"), limits=Limits(max_steps=20))


def _said(run: Any, tool: str, text: str) -> bool:
    seen = run.seen(offered_name("x", tool))
    return bool(seen) and seen[0].startswith('<untrusted_data source="x"') and text in seen[0]


CALLS = [
    (offered_name("x", "wipe"), {"key": "k"}),
    (offered_name("x", "lookup"), {"key": "a"}),
    (offered_name("x", "files.read"), {"path": "p"}),
    (offered_name("x", LONG), {"key": "l"}),
]


def _held(run: Any, marks: Path) -> None:
    """``wipe`` (claiming read-only) was denied for want of approval and never reached the
    server; the reads, under safe names for the odd ones, were served."""
    wiped = run.seen(offered_name("x", "wipe"))[0]
    assert '"error": "deny"' in wiped and "approval" in wiped and not marks.exists()
    assert _said(run, "lookup", "value-of-a") and _said(run, "files.read", "dotted-p")
    assert _said(run, LONG, "long-l") and run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.slow
async def test_read_only_claims_never_lower_the_policy_on_stdio(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    entry = {"name": "x", "command": [sys.executable, str(SDK)], "sandbox": "none", "effects": READS}
    _held(await _run(tmp_path, {**entry, "env": {"WILD33_MARKS": str(marks)}}, *CALLS), marks)


async def test_read_only_claims_never_lower_the_policy_over_http(tmp_path: Path, web: str) -> None:
    _held(await _run(tmp_path, {"name": "x", "url": web, "effects": READS}, *CALLS), tmp_path / "marks")


@pytest.mark.slow
async def test_the_operators_effects_decide(tmp_path: Path) -> None:
    """Declared a read by the operator, the same tool runs without approval."""
    marks = tmp_path / "marks"
    entry = {"name": "x", "command": [sys.executable, str(SDK)], "sandbox": "none"}
    entry |= {"effects": {"wipe": "read"}, "env": {"WILD33_MARKS": str(marks)}}
    run = await _run(tmp_path, entry, CALLS[0])
    assert _said(run, "wipe", "wiped-k") and marks.read_text() == "wiped k\n"


async def test_names_no_provider_takes_are_never_pinned(tmp_path: Path) -> None:
    config = write_config(tmp_path, [{"name": "x", "command": [sys.executable, str(SDK)], "sandbox": "none"}])
    pinned, skipped = await approve(config, "x", accept_flagged={"fs/list", "naïve_lookup"})
    assert {"lookup", "wipe", "files.read", LONG} == set(pinned)
    assert set(skipped) == {"fs/list", "naïve_lookup"} and all("outside" in why for why in skipped.values())


async def test_review_names_what_the_server_declares_and_no_run_uses(tmp_path: Path) -> None:
    """Prompts, resources and completions are named at review as never used, not left silent."""
    config = write_config(tmp_path, [{"name": "x", "command": [sys.executable, str(SDK)], "sandbox": "none"}])
    review = await review_server(config, "x")
    assert set(review.unused) == {"prompts", "resources", "completions"}
    line = next(line for line in review.summary() if "never used by tether" in line)
    assert all(word in line for word in review.unused) and review.to_json()["unused_features"]


def test_unused_features_are_named_escaped() -> None:
    from mcp.types import ServerCapabilities, ToolsCapability

    caps = ServerCapabilities(tools=ToolsCapability(), logging={}, experimental={"\x1b[2Jwipe": {}})
    assert unused_features(caps) == ("experimental \\x1b[2Jwipe",)
    assert unused_features(ServerCapabilities(tools=ToolsCapability())) == ()


# -- confined launches, as users write them ----------------------------------------------------


def _project(tmp_path: Path) -> Path:
    """A project folder holding the server as a package, and a secret beside it."""
    project = tmp_path / "project"
    (project / "wpkg").mkdir(parents=True)
    (project / "wpkg" / "__init__.py").write_text("", encoding="utf-8")
    (project / "wpkg" / "server.py").write_text(SDK.read_text(encoding="utf-8"), encoding="utf-8")
    (project / ".env").write_text("TOKEN=hunter2\n", encoding="utf-8")
    (project / "bin").mkdir()
    wrapper = project / "bin" / "run-server"
    wrapper.write_text(
        f'#!/bin/sh\n# start it\n\nexec {sys.executable} -m wpkg.server "$@"\n', encoding="utf-8"
    )
    wrapper.chmod(0o755)
    return project


LAUNCHES = {
    "module": lambda p: {"command": "python", "args": ["-m", "wpkg.server"], "cwd": str(p)},
    "module-flags": lambda p: {
        "command": sys.executable,
        "args": ["-u", "-X", "utf8", "-m", "wpkg.server"],
        "cwd": str(p),
    },
    "sh-exec": lambda p: {"command": "sh", "args": ["-c", f"exec {sys.executable} {p}/wpkg/server.py"]},
    "bash-module": lambda p: {"command": "bash", "args": ["-c", "'python' -m wpkg.server"], "cwd": str(p)},
    "wrapper-relative": lambda p: {"command": "./bin/run-server", "cwd": str(p)},
    "wrapper-on-path": lambda p: {
        "command": "run-server",
        "cwd": str(p),
        "env": {"PATH": f"{p}/bin:/usr/bin:/bin"},
    },
}


@pytest.mark.slow
@pytest.mark.skipif(NO_BWRAP, reason="bwrap does not work here")
@pytest.mark.parametrize("form", sorted(LAUNCHES))
async def test_ordinary_launches_start_confined(tmp_path: Path, form: str) -> None:
    """Each launch form starts under the default sandbox and serves a call."""
    entry = {"name": "x", **LAUNCHES[form](_project(tmp_path)), "effects": READS, "connect_timeout_s": 30}
    entry.setdefault("env", {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    run = await _run(tmp_path, entry, CALLS[1])
    assert _said(run, "lookup", "value-of-a")


def test_the_module_alone_is_shown_never_its_folder(tmp_path: Path) -> None:
    project = _project(tmp_path)
    env = {"PATH": os.environ["PATH"]}
    launch = resolve_launch([sys.executable, "-m", "wpkg.server"], env=env, cwd=project)
    shown = [p.resolve() for p in launch.read_only]
    assert (project / "wpkg").resolve() in shown and project.resolve() not in shown
    assert launch.env["PYTHONPATH"].startswith("/opt/mcp/module")
    # -I keeps the working folder off the import path: nothing of it is shown.
    isolated = resolve_launch([sys.executable, "-I", "-m", "wpkg.server"], env=env, cwd=project)
    assert all(not p.resolve().is_relative_to(project.resolve()) for p in isolated.read_only)


def test_a_planted_link_to_a_module_is_never_followed(tmp_path: Path) -> None:
    """In a folder the server writes, ``wpkg`` as a link elsewhere is withheld."""
    work, secret = tmp_path / "work", tmp_path / "secret"
    work.mkdir()
    secret.mkdir()
    (secret / "key").write_text("k", encoding="utf-8")
    (work / "wpkg").symlink_to(secret)
    env = {"PATH": os.environ["PATH"]}
    launch = resolve_launch([sys.executable, "-m", "wpkg.server"], env=env, cwd=work, writable=[work])
    assert secret.resolve() not in [p.resolve() for p in launch.read_only]
    assert any("wpkg" in w for w in launch.withheld)


@pytest.mark.parametrize(
    ("script_text", "words"),
    [
        ("exec python -m pkg.server --port 3", ["python", "-m", "pkg.server", "--port", "3"]),
        ("'/opt/my env/bin/python' \"server.py\"", ["/opt/my env/bin/python", "server.py"]),
        ("exec $PYTHON server.py", None),
        ("cd /srv && exec python server.py", None),
        ("python server.py; rm -rf /tmp/x", None),
        ("python server.py | tee log", None),
        ("FOO=1 python server.py", None),
        ("python ~/server.py", None),
        ("python *.py", None),
        ("exec", None),
        ("exec -a name python", None),
        ("python 'unclosed", None),
    ],
)
def test_only_one_plain_command_is_unwrapped(script_text: str, words: list[str] | None) -> None:
    assert unwrapped(["/bin/sh", "-c", script_text]) == words
    assert unwrapped(["python", "-c", script_text]) is None


def test_module_in_cwd_reads_python_options(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "single.py").write_text("", encoding="utf-8")
    assert module_in_cwd(["python", "-m", "pkg.a.b"], tmp_path) == tmp_path / "pkg"
    assert module_in_cwd(["python", "-W", "ignore", "-m", "single"], tmp_path) == tmp_path / "single.py"
    assert module_in_cwd(["python", "-m", "installed_only"], tmp_path) is None
    assert module_in_cwd(["python", "-P", "-m", "pkg"], tmp_path) is None
    assert module_in_cwd(["python", "server.py", "-m", "pkg"], tmp_path) is None
    assert module_in_cwd(["python", "-m", "../pkg"], tmp_path) is None


def test_a_wrapper_script_is_read_only_outside_what_the_server_writes(tmp_path: Path) -> None:
    project = _project(tmp_path)
    wrapper = project / "bin" / "run-server"
    assert script_command(wrapper, [str(wrapper), "--port", "3"]) == [
        sys.executable,
        "-m",
        "wpkg.server",
        "--port",
        "3",
    ]
    env = {"PATH": os.environ["PATH"]}
    followed = resolve_launch([str(wrapper)], env=env, cwd=project)
    assert followed.profile == "python" and (project / "wpkg").resolve() in followed.read_only
    # The server writes its folder: the script there may be its own, so it is shown as it is.
    kept = resolve_launch([str(wrapper)], env=env, cwd=project, writable=[project / "bin"])
    assert kept.profile == "executable" and (project / "wpkg").resolve() not in kept.read_only


@pytest.mark.parametrize(
    "body",
    [
        'cd /srv && exec python server.py "$@"',
        "set -e\nexec python server.py",
        'exec python "$1"',
        "exec python server.py\r",
        "",
    ],
)
def test_only_a_one_command_wrapper_is_followed(tmp_path: Path, body: str) -> None:
    script = tmp_path / "wrapper"
    script.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    assert script_command(script, [str(script)]) is None
    script.write_text("#!/usr/bin/python3\nexec python server.py\n", encoding="utf-8")
    assert script_command(script, [str(script)]) is None
