"""C1 (stable prefix, structured roles) and C7 (prefix-stability meter, `tether trace stats`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pytest
from ctx_helpers import CTX, agent_with, fetch, host_with
from pydantic import Field

from tether import tool
from tether.cli import main
from tether.context import ContextConfig, PrefixMeter, StatusConfig, request_bytes
from tether.context._meter import common_prefix_len
from tether.core.messages import SystemMessage, ToolMessage, UserMessage
from tether.models._base import ModelRequest
from tether.testing import ScriptedModel, call
from tether.trace._stats import trace_stats


@tool
def zeta(x: Annotated[str, Field(description="x")]) -> str:
    """Last alphabetically."""
    return x


@tool
def alpha(x: Annotated[str, Field(description="x")]) -> str:
    """First alphabetically."""
    return x


def _prefix(request: ModelRequest) -> bytes:
    """System message + tool definitions, as bytes."""
    return json.dumps([request.messages[0].wire(), list(request.tools)], sort_keys=True).encode()


@pytest.mark.spec("C1")
@pytest.mark.anyio
async def test_prefix_is_byte_identical_for_every_request_and_dynamic_facts_go_last(tmp_path: Path) -> None:
    model = ScriptedModel(
        [call("fetch", url="https://a.example/300"), call("zeta", x="1"), call("alpha", x="2"), "done"]
    )
    host = host_with(tmp_path, zeta, fetch, alpha)
    config = ContextConfig(status=StatusConfig(strategy="replace", working_dir="/srv/app"))
    result = await host.run(agent_with(model, config), "Look it up.", context=CTX)
    assert result.ok
    prefixes = {_prefix(r) for r in model.requests}
    assert len(prefixes) == 1
    first = model.requests[0]
    # fixed tool order (sorted by name, whatever order they were added in), harness tools included
    names = [t["function"]["name"] for t in first.tools]
    assert names == sorted(names) and {"alpha", "fetch", "zeta", "rewrite_todo_list"} <= set(names)
    for request in model.requests:
        assert isinstance(request.messages[0], SystemMessage)
        assert "2026-03-02" not in request.messages[0].content  # the time is never in the prefix
        last = request.messages[-1]
        assert isinstance(last, UserMessage) and last.origin == "harness"
        assert last.content.startswith("<agent_status>") and "time: 2026-03-02T10:30:45" in last.content
        assert "working_directory: /srv/app" in last.content
        # tool results are tool messages with the id of their call, never user messages
        for m in request.messages:
            if isinstance(m, UserMessage):
                assert "<untrusted_data" not in m.content
        tool_msgs = [m for m in request.messages if isinstance(m, ToolMessage)]
        assert all(m.wire()["role"] == "tool" and m.tool_call_id for m in tool_msgs)


@pytest.mark.spec("C7")
def test_meter_measures_the_share_of_the_previous_request_kept_as_prefix() -> None:
    meter = PrefixMeter()
    sys_msg = SystemMessage("rules")
    r1 = ModelRequest(messages=(sys_msg, UserMessage("hello")))
    r2 = ModelRequest(messages=(sys_msg, UserMessage("hello"), UserMessage("more")))
    r3 = ModelRequest(messages=(SystemMessage("rules, edited at 10:31"), UserMessage("hello")))
    assert meter.measure(r1).reuse is None
    s2 = meter.measure(r2)
    assert s2.reuse == 1.0 and s2.common_bytes == len(request_bytes(r1))
    s3 = meter.measure(r3)
    # editing the system prompt throws away everything after the edit: only its line's start stays
    assert s3.common_bytes == len('{"role":"system","content":"rules')
    assert s3.reuse == round(s3.common_bytes / s2.request_bytes, 6)
    assert meter.mean_reuse == round((1.0 + s3.reuse) / 2, 6)
    assert common_prefix_len(b"a" * 10_000 + b"x", b"a" * 10_000 + b"y") == 10_000
    assert common_prefix_len(b"abc", b"abcdef") == 3


@pytest.mark.spec("C7")
def test_trace_stats_reports_prefix_reuse_of_a_run_as_one_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ScriptedModel([call("fetch", url="https://a.example/300"), "done"])
    host = host_with(tmp_path, fetch)
    result = host.run_sync(agent_with(model, None), "Look it up.", context=CTX)
    assert result.ok and result.trace_path is not None
    composed = [e.data for e in result.events if str(e.kind) == "context_composed"]
    assert composed[0]["prefix_reuse"] is None and composed[1]["prefix_reuse"] == 1.0

    assert main(["trace", "stats", result.run_id, "--dir", str(tmp_path / "traces"), "--json"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    figures = json.loads(last)
    assert figures["prefix_reuse_mean"] == 1.0 and figures["requests"] == 2
    assert figures["run_id"] == result.run_id and figures["stop_reason"] == "accepted"
    envelope = {"ok": True, "exit": 0, "error": None, "message": None}  # every command's JSON has these
    expected = {**trace_stats(e.to_json() for e in result.events), "trace": str(result.trace_path)}
    assert figures == {**expected, **envelope}
    # a path works too; an unknown run is a clear error, not a traceback
    assert main(["trace", "stats", str(result.trace_path), "--json"]) == 0
    assert main(["trace", "stats", "no-such-run", "--dir", str(tmp_path / "traces")]) == 1
    assert "no trace for run" in capsys.readouterr().err
