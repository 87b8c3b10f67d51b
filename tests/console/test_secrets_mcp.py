"""Secrets by declaration reach MCP tools too: a real MCP server (official SDK, stdio) declares
``api_token`` secret with ``format: password`` in its input schema; its value is masked on the
console's page and in its API, in the JSONL trace, in the run timeline and in OpenTelemetry, for
agent runs, workflows and plans alike, while the other arguments stay visible."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from console_world import csrf_of

from tether.host import Host
from tether.models._base import ModelRequest
from tether.policy import Approvals, Policy, SqliteApprovalStore, TrustedContext
from tether.runners._plan import Plan, PlannedCall, run_plan
from tether.runners._workflow import Step, Workflow
from tether.runs._values import Agent
from tether.testing import FunctionModel, call, final, tool_results
from tether.tools import Effect
from tether.trace._sanitize import MIN_FRAGMENT

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tether.trace._otel import OtelSink

pytestmark = pytest.mark.slow

SERVER = Path(__file__).with_name("_airline_server.py")
SECRET = "mcp_live_Q8vT3nXb7WkP2rLs9HdY4cZe"
TOOL = "airline__book_seat"
CTX = TrustedContext(tenant="tenant-a", user="ops-a")
ARGS = {"passenger_name": "Ana Passenger", "seat": "4A", "api_token": SECRET}


def fragments(text: str) -> list[str]:
    pieces = (SECRET[i : i + MIN_FRAGMENT] for i in range(len(SECRET) - MIN_FRAGMENT + 1))
    return [p for p in pieces if p in text]


def _host(db: Path, sinks: list[Any], *, approvals: bool = True, write: bool = True) -> Host:
    host = Host(
        policy=Policy(allow={TOOL}, **({} if write else {"automatic_effects": (Effect.READ, Effect.WRITE)})),
        approvals=Approvals(SqliteApprovalStore(db)) if approvals else None,
        trace_dir=db.parent / "traces",
        trace_sinks=sinks,
        on_denied="continue",
    )
    host.add_mcp_server("airline", command=[sys.executable, str(SERVER)], effects={"book_seat": Effect.WRITE})
    return host


def _model(request: ModelRequest) -> Any:
    if results := tool_results(request):  # the model repeats the server's error, token and all
        return final(f"The airline said: {results[0].content}")
    return call(TOOL, **ARGS)


def _otel() -> tuple[OtelSink, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelSink(provider, capture_content=True), exporter


@pytest.mark.spec("T5", "P1")
def test_an_mcp_tools_password_parameter_is_masked_in_every_sink(world: Any) -> None:
    sink, exporter = _otel()
    agent = Agent(instructions="Book.", model=FunctionModel(_model, name="stand-in"), name="booker")

    async def first() -> tuple[str, str]:
        host = _host(world.db, [sink])
        try:
            result = await host.run(agent, "Book seat 4A for Ana Passenger", context=CTX)
            [spec] = [s for s in host.known_tools() if s.name == TOOL]
            assert spec.secret_arguments == {"api_token"}  # from the server's own schema
        finally:
            await host.aclose()
        assert str(result.stop_reason) == "approval_required", result.detail
        assert host.approvals is not None
        [p] = await host.approvals.store.list_proposals(run_id=result.run_id)
        return result.run_id, p.id

    run_id, pid = anyio.run(first)
    ana = world.clients["ana"]
    page = ana.get(f"/approvals/{pid}").text
    api = ana.get(f"/api/approvals/{pid}").text
    queue = ana.get("/approvals").text + ana.get("/api/approvals").text
    for text in (page, api, queue):
        assert not fragments(text), fragments(text)
    assert "Ana Passenger" in page and "4A" in page  # the other arguments are shown
    assert f"secret, not shown: {len(SECRET)} characters" in page
    assert json.loads(api)["masked_arguments"] == ["api_token"]
    approved = ana.post(
        f"/approvals/{pid}/approve",
        data={"csrf_token": csrf_of(page), "content_hash": json.loads(api)["content_hash"]},
    )
    assert approved.status_code == 200

    async def resume() -> None:
        host = _host(world.db, [sink])
        try:
            await host.resume(agent, run_id)
        finally:
            await host.aclose()

    anyio.run(resume)
    sink.shutdown()
    jsonl = (world.db.parent / "traces" / f"{run_id}.jsonl").read_text(encoding="utf-8")
    assert "quota exceeded" in jsonl and "Ana Passenger" in jsonl  # the server's error is traced ...
    assert not fragments(jsonl), fragments(jsonl)  # ... without any piece of the token
    run_page = ana.get(f"/runs/{run_id}").text + ana.get(f"/api/runs/{run_id}").text
    assert TOOL in run_page and "Ana Passenger" in run_page and not fragments(run_page)
    spans = json.dumps([s.to_json() for s in exporter.get_finished_spans()])
    assert TOOL in spans and "quota exceeded" in spans and not fragments(spans)


class _Planner:
    async def plan(self, objective: str, tools: Sequence[dict[str, Any]]) -> Plan:
        return Plan((PlannedCall(TOOL, dict(ARGS)),))


class _Extractor:
    async def extract(self, request: Any) -> Any:
        raise AssertionError("nothing to extract")


@pytest.mark.spec("T5", "P1")
@pytest.mark.parametrize("runner", ["workflow", "plan"])
def test_workflow_and_plan_runs_mask_an_mcp_tools_declared_secret(tmp_path: Path, runner: str) -> None:
    sink, exporter = _otel()

    async def go() -> Any:
        host = _host(tmp_path / "approvals.db", [sink], approvals=False, write=False)
        try:
            if runner == "workflow":
                flow = Workflow("book", [Step("book", TOOL, dict(ARGS))], answer=lambda out: "booked")
                return await host.run_workflow(flow, "Book seat 4A", context=CTX)
            await host.start()
            return await run_plan(host, _Planner(), _Extractor(), "Book seat 4A", context=CTX)
        finally:
            await host.aclose()

    result = anyio.run(go)
    sink.shutdown()
    assert result.trace_path is not None
    jsonl = result.trace_path.read_text(encoding="utf-8")
    assert "Ana Passenger" in jsonl and "4A" in jsonl and "[REDACTED]" in jsonl
    if runner == "workflow":  # the workflow stops on the failed step, quoting the server's error
        assert "quota exceeded" in jsonl
    assert not fragments(jsonl), fragments(jsonl)
    spans = json.dumps([s.to_json() for s in exporter.get_finished_spans()])
    assert TOOL in spans and not fragments(spans)
