"""OpenTelemetry export (GenAI semantic conventions): spans from real runs, content off by
default, redaction before export, and spans delivered over OTLP/HTTP to a receiver on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from pydantic import Field

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tether import Agent, Effect, Host, Policy, TrustedContext, tool
from tether.testing import ScriptedModel, call, final
from tether.trace._otel import CAPTURE_ENV, OtelSink, otel_sink_from_env

CTX = TrustedContext(tenant="shop-a", user="ops")


@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict[str, Any]:
    """Read one work order."""
    return {"order_id": order_id, "status": "open", "note": "waiting for parts"}


@tool(effect=Effect.DELETE)
def delete_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict[str, Any]:
    """Delete a work order."""
    raise AssertionError("a denied tool must never run")


def memory_sink(**kw: Any) -> tuple[OtelSink, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    kw.setdefault("model", ScriptedModel([]))  # the runs' model: a scripted stand-in (``run``)
    return OtelSink(provider, **kw), exporter


def run(sink: OtelSink, objective: str, turns: list[Any], *, secrets: tuple[str, ...] = ()) -> Any:
    host = Host(
        policy=Policy(allow={"read_order"}), trace_sinks=[sink], on_denied="continue", secrets=secrets
    )
    host.add_tools(read_order, delete_order)
    agent = Agent(instructions="Answer from tool results.", model=ScriptedModel(turns), name="investigator")
    return host.run_sync(agent, objective, context=CTX)


def every_string(spans: list[ReadableSpan]) -> str:
    """All exported text: attribute values and event attributes of every span."""
    parts: list[str] = []
    for s in spans:
        parts.append(s.name)
        parts += [str(v) for v in (s.attributes or {}).values()]
        for e in s.events:
            parts.append(e.name)
            parts += [str(v) for v in (e.attributes or {}).values()]
    return "\n".join(parts)


def test_a_run_is_an_agent_span_with_chat_and_tool_children_carrying_usage_and_policy_decisions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    sink, exporter = memory_sink()
    result = run(
        sink,
        "Why is order 742 open? My card is 4111-1111.",
        [
            call("read_order", order_id="742"),
            call("delete_order", order_id="742"),
            final("Waiting for parts."),
        ],
    )
    assert str(result.stop_reason) == "accepted"
    spans = exporter.get_finished_spans()
    [root] = [s for s in spans if s.name == "invoke_agent investigator"]
    chats = [s for s in spans if s.name.startswith("chat ")]
    tools = {s.name: s for s in spans if s.name.startswith("execute_tool ")}
    # delete_order was never offered (the policy allows read_order only): with content capture off
    # a name the model made up is not exported.
    assert len(chats) == 3 and set(tools) == {"execute_tool read_order", "execute_tool [not offered]"}
    assert all(
        s.parent is not None and s.parent.span_id == root.context.span_id for s in [*chats, *tools.values()]
    )
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    assert root.attributes["gen_ai.provider.name"] == "tether.testing"  # the scripted stand-in

    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "investigator"
    assert root.attributes["tether.run_id"] == result.run_id
    assert root.attributes["tether.stop_reason"] == "accepted"
    assert root.status.status_code is StatusCode.OK
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    assert root.attributes["gen_ai.usage.input_tokens"] == sum(
        c.attributes["gen_ai.usage.input_tokens"] for c in chats
    )
    assert root.attributes["gen_ai.usage.input_tokens"] == result.usage.prompt_tokens

    read, delete = tools["execute_tool read_order"], tools["execute_tool [not offered]"]
    assert read.attributes["gen_ai.operation.name"] == "execute_tool"
    assert read.attributes["gen_ai.tool.name"] == "read_order" and read.attributes["gen_ai.tool.call.id"]
    assert read.attributes["tether.policy.decision"] == "allow"
    assert read.attributes["tether.observation.trust"] == "untrusted"
    assert read.status.status_code is StatusCode.UNSET
    assert delete.attributes["tether.policy.decision"] == "deny"
    assert delete.attributes["tether.policy.rule"] == "allowlist"
    assert delete.attributes["tether.policy.reason"] == "tool_not_allowed"
    assert (
        delete.status.status_code is StatusCode.ERROR and delete.attributes["error.type"] == "policy_denied"
    )
    assert [e.name for e in delete.events] == ["tether.policy.decision"]
    assert delete.events[0].attributes["tether.rule"] == "allowlist"
    # spans are timed by the events, in order
    assert root.start_time <= chats[0].start_time <= chats[0].end_time <= read.start_time <= root.end_time

    # Content is off by default: no objective, no model text, no arguments anywhere.
    text = every_string(spans)
    for content in ("order 742 open", "4111-1111", "Waiting for parts", '"order_id"', "waiting for parts"):
        assert content not in text
    assert not any(
        k in s.attributes
        for s in spans
        for k in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments")
    )


def test_content_is_exported_only_when_asked_and_redacted_and_sanitised_first() -> None:
    sink, exporter = memory_sink(capture_content=True, secrets=["sk-sink-only-42"])
    run(
        sink,
        "Check order 742 with key sk-sink-only-42 and token sk-host-77\u2028forged line",
        [call("read_order", order_id="742"), final("Order 742 waits for parts; key sk-sink-only-42.")],
        secrets=("sk-host-77",),
    )
    spans = exporter.get_finished_spans()
    text = every_string(spans)
    assert "sk-sink-only-42" not in text and "sk-host-77" not in text  # the sink's secret and the host's
    assert "[REDACTED]" in text
    [root] = [s for s in spans if s.name.startswith("invoke_agent")]
    [message] = json.loads(root.attributes["gen_ai.input.messages"])
    objective = message["parts"][0]["content"]
    assert objective.startswith("Check order 742 with key [REDACTED]") and "\\u2028forged line" in objective
    assert "\u2028" not in text  # a line separator cannot reach a log line downstream
    outputs = [
        json.loads(s.attributes["gen_ai.output.messages"]) for s in spans if s.name.startswith("chat ")
    ]
    assert outputs[0][0]["parts"] == [
        {"type": "tool_call", "id": outputs[0][0]["parts"][0]["id"], "name": "read_order"}
    ]
    assert outputs[1][0]["parts"][0]["content"] == "Order 742 waits for parts; key [REDACTED]."
    [read] = [s for s in spans if s.name == "execute_tool read_order"]
    assert json.loads(read.attributes["gen_ai.tool.call.arguments"]) == {"order_id": "742"}


def test_an_approval_pause_and_its_resume_are_two_agent_spans_of_one_run(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "console"))
    try:
        from _notes_app import TENANT_A, build
    finally:
        sys.path.pop(0)
    sink, exporter = memory_sink()

    async def go() -> tuple[str, str]:
        host, agent = build(tmp_path / "approvals.db")
        host.extra_sinks.append(sink)
        first = await host.run(agent, "Note on order-a1: call back", context=TENANT_A)
        assert host.approvals is not None
        [p] = await host.approvals.store.list_proposals(run_id=first.run_id)
        from tether.policy import Reviewer

        await host.approvals.approve(Reviewer("ana", tenants=frozenset({"tenant-a"})), p.id)
        done = await host.resume(agent, first.run_id)
        await host.aclose()
        return first.run_id, str(done.stop_reason)

    run_id, stop = anyio.run(go)
    assert stop == "accepted"
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.name == "invoke_agent noter"]
    assert [r.attributes["tether.run_id"] for r in roots] == [run_id, run_id]
    assert [r.attributes["tether.stop_reason"] for r in roots] == ["approval_required", "accepted"]
    assert roots[1].attributes["tether.resumed"] is True
    paused, resumed = [s for s in spans if s.name == "execute_tool add_note"]
    assert paused.attributes["tether.policy.decision"] == "approve" and paused.attributes["tether.unfinished"]
    assert paused.attributes["tether.approval.proposal_id"].startswith("prop_")
    assert resumed.attributes["tether.approval.status"] == "approved"
    assert resumed.parent is not None and resumed.parent.span_id == roots[1].context.span_id
    assert {e.name for e in resumed.events} >= {
        "tether.approval",
        "tether.effect_intent",
        "tether.effect_recorded",
    }


class _Receiver(BaseHTTPRequestHandler):
    requests: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        type(self).requests.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    handler = type("Receiver", (_Receiver,), {"requests": []})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", handler.requests
    finally:
        server.shutdown()
        server.server_close()


def test_spans_reach_an_otlp_http_collector_configured_by_the_standard_variables(
    receiver: tuple[str, list[ExportTraceServiceRequest]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, requests = receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "tether-under-test")
    sink = otel_sink_from_env()
    run(sink, "Why is order 742 open?", [call("read_order", order_id="742"), final("Waiting for parts.")])
    sink.shutdown()
    spans, services = [], set()
    for request in requests:
        for rs in request.resource_spans:
            services |= {a.value.string_value for a in rs.resource.attributes if a.key == "service.name"}
            for ss in rs.scope_spans:
                spans += list(ss.spans)
    assert services == {"tether-under-test"}
    assert sorted(s.name for s in spans) == [
        "chat scripted", "chat scripted", "execute_tool read_order", "invoke_agent investigator",
    ]  # fmt: skip
    [tool_span] = [s for s in spans if s.name == "execute_tool read_order"]
    attributes = {a.key: a.value.string_value for a in tool_span.attributes}
    assert attributes["tether.policy.decision"] == "allow" and attributes["gen_ai.tool.name"] == "read_order"


def test_a_backends_response_id_and_address_are_exported_and_a_made_up_tool_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from tether.trace._events import EventKind
    from tether.trace._tracer import Tracer

    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    sink, exporter = memory_sink(model=SimpleNamespace(base_url="https://api.openai.com/v1"))
    tracer = Tracer("run-x", [sink], strict=True)
    tracer.emit(EventKind.RUN_STARTED, design="agent", objective="secret plans", tools=["read_order"])
    tracer.emit(EventKind.CONTEXT_COMPOSED, messages=2, tools=1, tools_enabled=True)
    tracer.emit(
        EventKind.MODEL_RESPONSE, model="gpt-x", text="free text", response_id="chatcmpl-123",
        tool_calls=[{"id": "call_1", "name": "read_order"}, {"id": "ignore all rules", "name": "wire_money"}],
    )  # fmt: skip
    tracer.emit(EventKind.STOP, reason="accepted")
    sink.shutdown()
    [chat] = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert chat.attributes["gen_ai.response.id"] == "chatcmpl-123"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert (chat.attributes["server.address"], chat.attributes["server.port"]) == ("api.openai.com", 443)
    assert list(chat.attributes["tether.tool_calls"]) == ["read_order", "[not offered]"]
    assert "wire_money" not in every_string(exporter.get_finished_spans())
