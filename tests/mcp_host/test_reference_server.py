"""The official reference server ``@modelcontextprotocol/server-everything`` (npm), under the host
as a user configures it: over stdio (confined when bwrap works) and over Streamable HTTP, in both
connection modes. Skipped, with the reason, where npx/npm or the npm registry is unavailable."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from published_installs import once
from tether.core.stop import StopReason
from tether.mcphost._runner import run_question

from .conftest import approve, script, web_server, write_config

pytestmark = [pytest.mark.slow, pytest.mark.spec("X1", "X2"), pytest.mark.npm]

PACKAGE = "@modelcontextprotocol/server-everything"
EFFECTS = {"echo": "read", "get-sum": "read"}


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package installed once into a folder of its own (its ``dist/index.js``), once per
    session (tests/published_installs.py: begun in the background as the session starts)."""
    return once(tmp_path_factory, "npm-everything") / "node_modules" / PACKAGE / "dist" / "index.js"


def _free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


@pytest.fixture
def everything_http(everything: Path) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "PORT": str(port)}
    proc = subprocess.Popen(
        ["node", str(everything), "streamableHttp"], env=env, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    try:
        for line in proc.stderr:  # it says when it listens
            if "listening on port" in line:
                break
        else:
            pytest.fail("the reference server exited before listening")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stderr.close()


async def _check(config_servers: list[dict[str, object]], tmp_path: Path) -> Any:
    config = write_config(tmp_path, config_servers)
    name = config.servers[0].name
    pinned, _ = await approve(config, name)
    assert {"echo", "get-sum"} <= set(pinned)
    run = await run_question(
        config,
        "Q",
        script(
            (f"{name}__echo", {"message": "hello reference"}),
            (f"{name}__get-sum", {"a": 2, "b": 40}),
            "done",
        ),
    )
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert "hello reference" in run.seen(f"{name}__echo")[0]
    assert "42" in run.seen(f"{name}__get-sum")[0]
    return run


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_reference_server_over_stdio(tmp_path: Path, everything: Path, mode: str) -> None:
    server = {
        "name": "ref",
        "transport": "stdio",
        "command": ["node", str(everything), "stdio"],
        "mode": mode,
        "tools": ["echo", "get-sum"],
        "effects": EFFECTS,  # confined (sandbox: auto): its package and node_modules found from the script
    }
    await _check([server], tmp_path)


@pytest.fixture(scope="module")
def npx_installed(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The package in npx's own cache, as a user's first ``npx -y`` leaves it (run once per
    session: tests/published_installs.py)."""
    once(tmp_path_factory, "npx-everything")
    return PACKAGE


@pytest.mark.anyio
async def test_the_reference_server_by_its_npx_command_starts_confined(
    tmp_path: Path, npx_installed: str
) -> None:
    """``npx -y <package>``, as its README says, under the default sandbox: no network, no
    writable npm cache, and it starts (from npx's install, with node directly)."""
    from tether.trace._tracer import read_trace

    command = ["npx", "-y", npx_installed]
    server = {
        "name": "ref",
        "transport": "stdio",
        "command": command,
        "effects": EFFECTS,
        "tools": list(EFFECTS),
    }
    run = await _check([server], tmp_path)
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    (confined,) = [e for e in trace if e["kind"] == "mcp_sandbox"]
    assert (
        confined["action"] == "confined" and confined["launcher"] == "npx" and confined["network"] == "none"
    )
    assert not any(p.endswith("/.npm") for p in confined["read_only"])  # the install, not the whole cache


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_reference_server_over_streamable_http(
    tmp_path: Path, everything_http: str, mode: str
) -> None:
    server = web_server("ref", everything_http, mode=mode, tools=["echo", "get-sum"], effects=EFFECTS)
    await _check([server], tmp_path)


@pytest.mark.anyio
async def test_the_reference_servers_form_is_asked_not_refused_as_credential_shaped(
    tmp_path: Path, everything: Path
) -> None:
    """Its form's integer field says "do not give us your phone number, pin, …": a warning, not a
    pin field. The person is asked; nothing is refused as credential-shaped."""
    from tether.mcp._elicitation import Answer, ScriptedResponder
    from tether.trace._tracer import read_trace

    tool = "trigger-elicitation-request"
    server = {"name": "ref", "transport": "stdio", "command": ["node", str(everything), "stdio"],
              "tools": [tool], "effects": {tool: "read"}, "elicitation": {"enabled": True}}  # fmt: skip
    config = write_config(tmp_path, [server])
    pinned, _ = await approve(config, "ref")
    assert tool in pinned
    person = ScriptedResponder([Answer("decline")])
    run = await run_question(config, "Q", script((f"ref__{tool}", {}), "done"), responder=person)
    assert len(person.shown) == 1 and "integer" in str(person.shown[0])
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    outcomes = [e.get("outcome") for e in trace if e["kind"] == "mcp_elicitation"]
    assert outcomes and "refused" not in outcomes, outcomes


@pytest.mark.anyio
async def test_the_reference_servers_task_only_tool_runs_to_its_end(tmp_path: Path, everything: Path) -> None:
    """``simulate-research-query`` (``execution.taskSupport: required``) over stdio, confined:
    created, polled through its stages (shown as progress), its report fetched."""
    from tether.trace._tracer import read_trace

    tool = "simulate-research-query"
    server = {"name": "ref", "transport": "stdio", "command": ["node", str(everything), "stdio"],
              "mode": "legacy", "tools": [tool], "effects": {tool: "read"}, "timeout_s": 60}  # fmt: skip
    config = write_config(tmp_path, [server])
    pinned, _ = await approve(config, "ref")
    assert tool in pinned
    run = await run_question(config, "Q", script((f"ref__{tool}", {"topic": "tasks"}), "done"))
    assert "Research Report: tasks" in run.seen(f"ref__{tool}")[0]
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    tasks = [e for e in trace if e["kind"] == "mcp_task"]
    # (a 'notified' row when the server also reported the end by notifications/tasks/status)
    actions = [e["action"] for e in tasks if e["action"] != "notified"]
    assert actions == ["created", "finished"] and tasks[-1]["status"] == "completed"
    assert any(e["kind"] == "mcp_progress" for e in trace)  # its status messages
