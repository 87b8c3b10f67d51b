"""Wild servers, round thirty: a server on the official SDK written the ordinary way
(``MCPServer``, FastMCP's name in mcp 2: ``wild30_sdk_server.py``), run as ``mcp.run()`` on stdio
and ``mcp.run("streamable-http")`` on 127.0.0.1 (stateful, stateless with JSON answers, mounted
under a sub-path), each beside the honest stdio server (``wild4_server.py``), checked to serve.

Contained already (checked here): tools answering an image, audio, an embedded resource and a
resource link (shown as what they are, never fetched), structured content under an output schema,
progress and a log line at every level during a call, a question (elicitation) and a sampling
request the host never advertised (that call fails, named), a call outliving its timeout (it fails
as timed out, the server is told to cancel it, the next call is served), a server exiting with
status 0 right after its first answer (its next call fails named, the exit status for the person;
restarted where ``restart: on_failure`` says so, and a restart listing a tool otherwise is blocked
by its pin), and 10 MB of stderr lines (the server never blocks, its log bounded).

Found:

* a long-lived host (one ``Host`` serving run after run) indexed its tools once, at its start:
  a tool its server added later (``notifications/tools/list_changed``), even one approved and
  pinned, was never offered to any later run ("unknown tool"), and a tool blocked as changed
  mid-run stayed in the index. A source whose listing changed since the host indexed it (a
  list-changed notice, or a listing that changes what may be offered) is now listed again at the
  next run's start, checked against its pins as every listing is (``chokepoint/_index.py``). A
  run's own tool set stays fixed at its start.
"""

from __future__ import annotations

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
from tether.errors import DependencyUnavailable
from tether.host import Host
from tether.mcp._serverlog import MAX_LOG_BYTES
from tether.mcphost._build import build_host
from tether.mcphost._runner import INSTRUCTIONS, StandIn, run_question
from tether.policy import Policy
from tether.policy._trusted import TrustedContext
from tether.runs._values import Agent
from tether.testing import FunctionModel
from tether.tools._contract import Effect, ToolSpec

from .conftest import approve, honest_server, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
SDK = HERE / "wild30_sdk_server.py"
TOOLS = ("lookup", "picture", "sound", "mixed", "reading", "chatty", "slow", "ask", "sample", "grow", "extra")


def _entry(*mode: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "x",
        "command": [sys.executable, str(SDK), *mode],
        "mode": "legacy",
        "effects": dict.fromkeys(TOOLS, "read"),
        "timeout_s": 60,
        "sandbox": "none",
        **extra,
    }


def _said(said: str, *lines: str) -> bool:
    return (
        said.startswith('<untrusted_data source="x"')
        and "error=" not in said
        and all(line in said for line in lines)
    )


def _failed(said: str, kind: str, why: str) -> bool:
    return said.startswith('<untrusted_data source="x"') and f'error="{kind}"' in said and why in said


async def _run(tmp_path: Path, entry: dict[str, Any], steps: list[Any], *, done: bool = True) -> Any:
    """The run making ``steps``, then ``ok__lookup``: ``ok`` served, the run done (``done``)."""
    config = write_config(tmp_path, [entry, honest_server()])
    await approve(config, "x")
    await approve(config, "ok")
    with anyio.fail_after(100):
        run = await run_question(
            config, "Q", script(*steps, ("ok__lookup", {"key": "z"}), "done"), limits=Limits(max_steps=30)
        )
    if done:
        assert "value-of-z" in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED
    return run


# -- held: what an ordinary SDK server answers -------------------------------------------------

STEPS = [
    ("x__picture", {}),
    ("x__sound", {}),
    ("x__mixed", {"key": "a"}),
    ("x__reading", {"key": "b"}),
    ("x__chatty", {"key": "c"}),
    ("x__ask", {}),
    ("x__sample", {}),
]


def _features_held(run: Any, refused: str = "Method not found") -> None:
    seen = {name: run.seen(f"x__{name}")[0] for name in ("picture", "sound", "mixed", "reading", "chatty")}
    assert _said(seen["picture"], "[image content omitted]") and _said(
        seen["sound"], "[audio content omitted]"
    )
    assert _said(seen["mixed"], "value-of-a", "[image content omitted]", "memo-of-a")
    assert "[resource_link not fetched: memo://a/more (more-a)]" in seen["mixed"]
    assert _said(seen["reading"], '"value": "value-of-b"', '"length": 1')
    assert _said(seen["chatty"], "value-of-c")
    for name in ("ask", "sample"):  # never advertised: the server's request is refused, the call fails
        assert _failed(run.seen(f"x__{name}")[0], "upstream_error", refused)
    assert not run.summary()["unavailable_servers"]


async def test_an_sdk_server_on_stdio_answers_every_kind_of_content(tmp_path: Path) -> None:
    """Images, audio, embedded resources, resource links, structured content, progress and logs
    at every level are each shown as what they are; an unadvertised question or sampling request
    fails its own call only."""
    run = await _run(tmp_path, _entry(), STEPS)
    _features_held(run)
    events = [e for e in run.result.events if str(e.kind) == "mcp_log"]
    assert {e.data["level"] for e in events} >= {"debug", "info", "warning", "error", "emergency"}


async def test_a_call_outliving_its_timeout_is_cancelled_at_the_server(tmp_path: Path) -> None:
    """``slow`` outlives its 2 s timeout: it fails as timed out, the server is told to cancel it
    (it notes so), and the next call is served."""
    marks = tmp_path / "marks"
    entry = _entry(timeout_s=2, env={"WILD30_MARKS": str(marks)})
    run = await _run(tmp_path, entry, [("x__slow", {"key": "s"}), ("x__lookup", {"key": "b"})])
    assert _failed(run.seen("x__slow")[0], "dependency_unavailable", "x__slow timed out after 2s")
    assert _said(run.seen("x__lookup")[0], "value-of-b")
    with anyio.fail_after(20):
        while "cancelled s" not in (marks.read_text() if marks.exists() else ""):
            await anyio.sleep(0.1)


# -- held: a server exiting with status 0 after one answer --------------------------------------


async def test_a_server_exiting_after_one_answer_fails_the_next_call_named(tmp_path: Path) -> None:
    """``oneshot`` exits with status 0 after its first answer: the next call fails named, the
    server is set aside with its exit status for the person, and the run stops honestly."""
    run = await _run(tmp_path, _entry("oneshot"), [("x__lookup", {"key": k}) for k in "abc"], done=False)
    said = run.seen("x__lookup")
    assert _said(said[0], "value-of-a")
    assert _failed(said[1], "dependency_unavailable", "MCP server x went away during x__lookup")
    assert "exited with code 0" in run.summary()["unavailable_servers"]["x"]
    assert run.result.stop_reason is StopReason.DEPENDENCY_UNAVAILABLE


async def test_a_one_shot_server_is_restarted_and_a_changed_restart_is_blocked(tmp_path: Path) -> None:
    """With ``restart: on_failure`` the next call after the exit fails, the one after is served
    by a new process; where the new process describes ``lookup`` otherwise, its pin blocks it."""
    steps = [("x__lookup", {"key": k}) for k in "abc"]
    run = await _run(tmp_path, _entry("oneshot", restart="on_failure"), steps)
    said = run.seen("x__lookup")
    assert _said(said[0], "value-of-a") and _said(said[2], "value-of-c")
    assert _failed(said[1], "dependency_unavailable", "went away during x__lookup")
    (tmp_path / "b").mkdir()
    launches = tmp_path / "b" / "launches"
    entry = _entry("oneshot", restart="on_failure", env={"WILD30_LAUNCHES": str(launches)})
    config = write_config(tmp_path / "b", [entry, honest_server()])
    await approve(config, "x")  # its first launch: lookup as approved
    await approve(config, "ok")
    launches.write_text("", encoding="utf-8")
    with anyio.fail_after(100):
        run = await run_question(
            config, "Q", script(*steps, ("ok__lookup", {"key": "z"}), "done"), limits=Limits(max_steps=30)
        )
    said = run.seen("x__lookup")
    assert _said(said[0], "value-of-a") and "value-of-c" not in said[2] and "blocked" in said[2]
    assert any(b.get("status") == "changed" and b["tool"] == "x__lookup" for b in run.summary()["blocked"])
    assert "value-of-z" in run.seen("ok__lookup")[-1]


# -- held: a flood of stderr --------------------------------------------------------------------


async def test_megabytes_of_stderr_lines_never_block_the_server(tmp_path: Path) -> None:
    """``flood`` writes 8 MB of stderr lines at its start and 2 MB before each answer: each call
    is served, and the log keeps at most its bound a launch."""
    run = await _run(tmp_path, _entry("flood"), [("x__lookup", {"key": "a"}), ("x__lookup", {"key": "b"})])
    assert _said(run.seen("x__lookup")[0], "value-of-a") and _said(run.seen("x__lookup")[1], "value-of-b")
    (log,) = tmp_path.rglob("x.stderr.log")
    assert 0 < log.stat().st_size <= 2 * (MAX_LOG_BYTES + 65536)  # (the approval's launch and the run's)


# -- held: the SDK server over Streamable HTTP ---------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(
    params=[(), ("stateless", "json"), ("/api/v1/mcp", "stateless")], ids=["stateful", "json", "path"]
)
def web(request: pytest.FixtureRequest) -> Iterator[str]:
    """The SDK server run as ``mcp.run("streamable-http", …)``, in its own process."""
    mode: tuple[str, ...] = request.param
    port = _free_port()
    command = [sys.executable, str(SDK), "http", str(port), *mode]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not _listening(port) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        path = mode[0] if mode and mode[0].startswith("/") else "/mcp"
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


async def test_an_sdk_server_over_http_answers_every_kind_of_content(tmp_path: Path, web: str) -> None:
    """The same server over Streamable HTTP, stateful, stateless answering JSON, and mounted
    under a sub-path: each kind of content shown as what it is, as on stdio (a question or a
    sampling request fails its call, in the SDK server's words over HTTP)."""
    entry = {k: v for k, v in _entry().items() if k not in ("command", "mode", "sandbox")}
    run = await _run(tmp_path, {**entry, "url": web}, [*STEPS, ("x__lookup", {"key": "h"})])
    _features_held(run, refused="server x failed: ")
    assert _said(run.seen("x__lookup")[0], "value-of-h")


# -- found: a long-lived host offers what its servers list now ----------------------------------


async def _two_runs(tmp_path: Path, approved_extra: bool) -> list[tuple[Any, list[str]]]:
    """One host, two runs: the first calls ``grow`` (the server adds ``extra`` and says so), the
    second ``extra`` then ``lookup``. ``extra`` was approved (the server listed it at approval)
    or not."""
    more = {"WILD30_MORE": "1"} if approved_extra else {}
    await approve(write_config(tmp_path, [_entry(env=more)]), "x")
    config = write_config(tmp_path, [_entry()])
    host = build_host(config)
    context = TrustedContext(tenant=config.host.tenant, user=config.host.user)
    out = []
    try:
        for steps in ([("x__grow", {})], [("x__extra", {"key": "e"}), ("x__lookup", {"key": "l"})]):
            model = FunctionModel(StandIn(script(*steps, "done"), obey=True), name="m")
            agent = Agent(instructions=INSTRUCTIONS, model=model, name="a", limits=Limits(max_steps=10))
            with anyio.fail_after(60):
                result = await host.run(agent, "Q", context=context)
            out.append((result, [s.name for s in host.offered()]))
    finally:
        await host.aclose()
    return out


async def test_a_long_lived_host_offers_an_approved_tool_added_mid_session(tmp_path: Path) -> None:
    """``extra`` (approved) is added after the first run started: the next run is offered it and
    its call is served (before: "unknown tool", never offered for the host's life)."""
    (_, offered_first), (second, offered_second) = await _two_runs(tmp_path, approved_extra=True)
    assert "x__extra" not in offered_first and "x__extra" in offered_second
    assert [(c.tool, c.status) for c in second.calls] == [("x__extra", "ok"), ("x__lookup", "ok")]


async def test_a_long_lived_host_never_offers_an_unapproved_tool_added_mid_session(tmp_path: Path) -> None:
    """``extra`` (never approved) is added: listed again, it is blocked as new and never offered;
    ``lookup`` is still served."""
    (_, _), (second, offered_second) = await _two_runs(tmp_path, approved_extra=False)
    assert "x__extra" not in offered_second
    assert [(c.tool, c.status) for c in second.calls] == [("x__extra", "rejected"), ("x__lookup", "ok")]


class _Changing:
    """A tool source whose listing changes, saying so through ``listing_version``."""

    def __init__(self) -> None:
        self.name, self.listing_version, self.tools, self.fail, self.listed = "s", 0, ["s__a"], False, 0

    async def start(self) -> None:
        return None

    async def list_tools(self) -> list[ToolSpec]:
        self.listed += 1
        if self.fail:
            raise DependencyUnavailable("MCP server s went away")
        return [
            ToolSpec(name=n, description="", parameters={}, effect=Effect.READ, source="s")
            for n in self.tools
        ]

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], context: Any) -> Any:
        raise AssertionError("never called")

    async def close(self) -> None:
        return None


async def test_a_host_lists_a_changed_source_again_before_its_next_run_only() -> None:
    """A source whose listing version moved is listed again before the next run (a tool added is
    offered, one withdrawn or blocked is no longer); an unchanged one is not listed again; one
    that cannot list keeps what it offered (its calls fail as its own), the host still runs."""
    host, source = Host(policy=Policy(allow={"s__a", "s__b"})), _Changing()
    host.add_source(source)
    await host.ensure_started()
    await host.ensure_started()
    assert [s.name for s in host.offered()] == ["s__a"] and source.listed == 1
    source.tools, source.listing_version = ["s__b"], 1
    await host.ensure_started()
    assert [s.name for s in host.offered()] == ["s__b"] and source.listed == 2
    source.fail, source.listing_version = True, 2
    await host.ensure_started()
    assert [s.name for s in host.offered()] == ["s__b"] and source.listed == 3
    await host.ensure_started()  # (its version is recorded: not tried again until it moves)
    assert source.listed == 3
