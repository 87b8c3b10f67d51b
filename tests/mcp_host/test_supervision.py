"""Supervised connections: a server that dies (at connect, mid-call, between runs; stdio or
Streamable HTTP, both eras) is unavailable for its own calls only. The run goes on, the other
server on the same host keeps working, and the run ends with exactly one stop reason."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.core.messages import ToolMessage
from tether.core.stop import Limits, StopReason
from tether.host import Host
from tether.mcp._hosting import mcp_sources
from tether.mcphost._build import build_host
from tether.mcphost._runner import INSTRUCTIONS, ScriptStep, StandIn, run_question
from tether.policy._trusted import TrustedContext
from tether.runs._values import Agent, RunResult
from tether.testing import FunctionModel
from tether.trace._tracer import read_trace

from .conftest import HttpProcess, approve, bare_tcp_server, script, stdio_server, web_server, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

READS = {"lookup": "read", "die": "read"}
LOOKUP = {"lookup": "read"}


def _stand_in_run(host: Host, steps: Sequence[ScriptStep]) -> tuple[Agent, FunctionModel]:
    model = FunctionModel(StandIn(list(steps)), name="mcp-stand-in")
    return Agent(instructions=INSTRUCTIONS, model=model, name="mcp-agent"), model


async def _run(host: Host, steps: Sequence[ScriptStep]) -> tuple[RunResult, FunctionModel]:
    agent, model = _stand_in_run(host, steps)
    result = await host.run(agent, "Q", context=TrustedContext(tenant="default"))
    return result, model


def _seen(model: FunctionModel, tool: str) -> list[str]:
    last = model.requests[-1].messages
    return [m.content for m in last if isinstance(m, ToolMessage) and m.name == tool]


def _one_stop(result: RunResult) -> list[dict[str, Any]]:
    """The trace, after checking it ends with the run's one and only stop event."""
    assert result.trace_path is not None
    trace = read_trace(result.trace_path)
    stops = [e for e in trace if e["kind"] == "stop"]
    assert len(stops) == 1 and trace[-1]["kind"] == "stop"
    assert stops[0]["reason"] == str(result.stop_reason)
    return trace


def _connection_events(trace: list[dict[str, Any]], server: str) -> list[dict[str, Any]]:
    return [e for e in trace if e["kind"] == "mcp_connection" and e.get("server") == server]


@pytest.mark.slow  # an HTTP server process and a stdio server process
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_server_dying_mid_call_is_unavailable_and_the_other_server_still_answers(
    tmp_path: Path, http_process: HttpProcess, approved_pins: Path, mode: str
) -> None:
    config = write_config(
        tmp_path,
        [
            web_server("web", http_process.url, mode=mode, tools=["die", "lookup"], effects=READS),
            stdio_server("b", mode=mode, tools=["lookup"], effects=LOOKUP),
        ],
        pins_from=approved_pins,  # b's pins (saves a launch)
    )
    await approve(config, "web")
    run = await run_question(
        config, "Q", script(("web__die", {}), ("b__lookup", {"key": "z"}), "done after a lost server")
    )
    assert run.result.stop_reason is StopReason.ACCEPTED  # the run went on to its answer
    assert run.result.answer == "done after a lost server"
    died = run.seen("web__die")[0]
    assert "dependency_unavailable" in died and "went away during web__die" in died
    assert "value-of-z" in run.seen("b__lookup")[0]
    obs = {o.tool: o for o in run.result.observations}
    assert obs["web__die"].meta["unavailable"] is True and obs["web__die"].meta["quarantined"] is True
    trace = _one_stop(run.result)
    lost = _connection_events(trace, "web")
    assert [e["action"] for e in lost] == ["lost"] and lost[0]["phase"] == "during the call"
    assert lost[0]["cause"]  # the transport's own error, for whoever reads the trace
    assert run.summary()["unavailable_servers"]["web"].startswith("MCP server web quarantined")


def _refusing_port() -> int:
    """A port on 127.0.0.1 where nothing listens."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


@pytest.fixture
def hang_up_url() -> Iterator[str]:
    """A TCP server that accepts each connection and closes it without a word."""
    with bare_tcp_server(lambda conn: conn.close()) as port:
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.slow  # a stdio server process per case
@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("kind", ["refused", "hangs_up"])
async def test_http_server_gone_at_connect_leaves_the_other_server_working(
    tmp_path: Path, approved_pins: Path, hang_up_url: str, mode: str, kind: str
) -> None:
    url = hang_up_url if kind == "hangs_up" else f"http://127.0.0.1:{_refusing_port()}/mcp"
    config = write_config(
        tmp_path,
        [
            web_server("web", url, mode=mode, effects=READS, connect_timeout_s=20),
            stdio_server("b", mode=mode, tools=["lookup"], effects=LOOKUP),
        ],
        pins_from=approved_pins,
    )
    run = await run_question(config, "Q", script(("b__lookup", {"key": "k"}), "answered"))
    assert run.result.stop_reason is StopReason.ACCEPTED and run.result.answer == "answered"
    assert "value-of-k" in run.seen("b__lookup")[0]
    assert run.offered() == ["b__lookup"]
    why = run.summary()["unavailable_servers"]["web"]
    assert why.startswith("MCP server web could not be started:")
    trace = _one_stop(run.result)
    failed = [e for e in trace if e["kind"] == "server_launch" and e.get("state") == "failed"]
    assert failed and failed[0]["source"] == "web"


@pytest.mark.slow  # HTTP and stdio server processes, two runs
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_server_dying_between_runs_is_quarantined_without_a_restart(
    tmp_path: Path, http_process: HttpProcess, approved_pins: Path, mode: str
) -> None:
    config = write_config(
        tmp_path,
        [
            web_server("web", http_process.url, mode=mode, tools=["lookup"], effects=LOOKUP),
            stdio_server("b", mode=mode, tools=["lookup"], effects=LOOKUP),
        ],
        pins_from=approved_pins,  # b's pins (saves a launch)
    )
    await approve(config, "web")
    host = build_host(config)
    try:
        first, model = await _run(host, script(("web__lookup", {"key": "one"}), "first"))
        assert first.stop_reason is StopReason.ACCEPTED and "value-of-one" in _seen(model, "web__lookup")[0]
        http_process.kill()
        second, model = await _run(
            host, script(("web__lookup", {"key": "two"}), ("b__lookup", {"key": "two"}), "second")
        )
        assert second.stop_reason is StopReason.ACCEPTED and second.answer == "second"
        assert "dependency_unavailable" in _seen(model, "web__lookup")[0]
        assert "value-of-two" in _seen(model, "b__lookup")[0]
        trace = _one_stop(second)
        lost = _connection_events(trace, "web")
        assert lost[0]["action"] == "lost" and lost[0]["phase"] in ("before the call", "between calls")
        (web,) = [s for s in mcp_sources(host) if s.name == "web"]
        assert web.unavailable is not None and "quarantined" in web.unavailable
    finally:
        await host.aclose()


@pytest.mark.slow  # HTTP server processes (one killed, one started on its port), two runs
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_server_back_between_runs_is_reconnected_with_restart_on_failure(
    tmp_path: Path, http_process: HttpProcess, mode: str
) -> None:
    server = web_server(
        "web", http_process.url, mode=mode, tools=["lookup"], effects=LOOKUP, restart="on_failure"
    )
    config = write_config(tmp_path, [server])
    await approve(config, "web")
    host = build_host(config)
    try:
        _, model = await _run(host, script(("web__lookup", {"key": "one"}), "first"))
        assert "value-of-one" in _seen(model, "web__lookup")[0]
        http_process.kill()
        http_process.start()  # the same port, a new process: the old session is gone
        second, model = await _run(host, script(("web__lookup", {"key": "two"}), "second"))
        assert second.stop_reason is StopReason.ACCEPTED
        assert "value-of-two" in _seen(model, "web__lookup")[0]
        actions = [e["action"] for e in _connection_events(_one_stop(second), "web")]
        if mode == "legacy":
            # The new process answers the old session 404: a new session, as the spec asks (no
            # restart: the connection itself was never lost).
            assert actions == ["new_session"] and mcp_sources(host)[0].restarts == 0
        else:
            # 2026-07-28 over HTTP is stateless: the new process simply answers the next request.
            assert actions == [] and mcp_sources(host)[0].restarts == 0
    finally:
        await host.aclose()


@pytest.mark.slow  # stdio server processes, restarted
async def test_stdio_server_restarts_on_failure_a_bounded_number_of_times(
    tmp_path: Path, approved_pins: Path
) -> None:
    config = write_config(
        tmp_path,
        [stdio_server("a", tools=["die", "lookup"], effects=READS, restart="on_failure", max_restarts=1)],
        pins_from=approved_pins,
    )
    run = await run_question(
        config,
        "Q",
        script(
            ("a__die", {}),
            ("a__lookup", {"key": "after-restart"}),
            ("a__die", {}),
            ("a__lookup", {"key": "never"}),
            "done",
        ),
        limits=Limits(max_unavailable=5),  # the run's own rule would stop it at the second loss
    )
    first_death, second_death = run.seen("a__die")
    assert "went away during a__die" in first_death and "went away during a__die" in second_death
    after, never = run.seen("a__lookup")
    assert "value-of-after-restart" in after  # restarted once: the legitimate tool works again
    assert "dependency_unavailable" in never and "quarantined" in never  # the bound holds
    trace = _one_stop(run.result)
    actions = [e["action"] for e in _connection_events(trace, "a")]
    assert actions == ["lost", "restarting", "lost"]
    assert run.result.stop_reason is StopReason.ACCEPTED and run.result.answer == "done"


@pytest.mark.slow  # a stdio server process killed between runs, then started again
async def test_stdio_server_exiting_between_runs_is_noticed_before_the_next_call_and_restarted(
    tmp_path: Path, approved_pins: Path
) -> None:
    config = write_config(
        tmp_path,
        [stdio_server("a", tools=["lookup"], effects=LOOKUP, restart="on_failure", max_restarts=1)],
        pins_from=approved_pins,
    )
    host = build_host(config)
    try:
        _, model = await _run(host, script(("a__lookup", {"key": "one"}), "first"))
        assert "value-of-one" in _seen(model, "a__lookup")[0]
        (source,) = mcp_sources(host)
        source._process.kill()
        with anyio.fail_after(10):
            while source._process.returncode is None:
                await anyio.sleep(0.02)
        await anyio.sleep(0.2)  # the transport reads the end of the server's output
        second, model = await _run(host, script(("a__lookup", {"key": "two"}), "second"))
        assert second.stop_reason is StopReason.ACCEPTED and "value-of-two" in _seen(model, "a__lookup")[0]
        actions = [(e["action"], e.get("phase")) for e in _connection_events(_one_stop(second), "a")]
        # Known before any request was sent to the dead process (not found out by a failing call).
        assert actions == [("lost", "between calls"), ("restarting", None)]
        assert source.restarts == 1
    finally:
        await host.aclose()
