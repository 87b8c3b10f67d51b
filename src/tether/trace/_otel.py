"""``OtelSink``: a run's trace as OpenTelemetry spans, after the GenAI semantic conventions:
``invoke_agent {agent}`` per run part, with ``chat {model}`` and ``execute_tool {tool}`` children.

Message content is off unless ``capture_content`` (or ``CAPTURE_ENV``); every string passes the
sink's own redactor and sanitiser; span times are the events' timestamps.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from tether.trace._events import TraceEvent
from tether.trace._sanitize import Redactor, sanitize_value

__all__ = ["OtelSink", "model_endpoint", "otel_sink_from_env", "run_trace_context"]

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_SCOPE = "tether"
_MAX_TEXT = 4000
# Keys whose string values are identifiers or verdicts, never message content: exported always.
_SAFE_KEYS = frozenset(
    {
        "tool",
        "server",
        "source",
        "rule",
        "reason",
        "status",
        "outcome",
        "design",
        "trust",
        "error_kind",
        "proposal_id",
        "call_id",
        "key",
        "answered_by",
        "strategy",
        "kind",
        "model",
        "agent",
        "workflow",
        "tenant",
        "effect",
        "content_hash",
        "reviewer",
        "state",
    }
)


# With content capture off, a string under one of these keys is exported only if it looks like an
# identifier; anything else is free text and is replaced.
_IDENTIFIER = re.compile(r"^[A-Za-z0-9_.:@/+=-]{1,200}$")
_CHECKED = _SAFE_KEYS | {"error", "finish_reason", "model"}
_NOT_OFFERED = "[not offered]"
_FREE_TEXT = "[text not exported]"
# Events whose "reason" is what a person typed (a reviewer's note), not a code.
_PERSON_TEXT = frozenset({"approval_granted", "approval_denied"})
# Host names of the providers the GenAI conventions name (gen_ai.provider.name).
PROVIDERS = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral_ai",
    "api.perplexity.ai": "perplexity",
    "api.x.ai": "x_ai",
    "generativelanguage.googleapis.com": "gcp.gemini",
    "api.cohere.com": "cohere",
}


def run_trace_context(run_id: str) -> SpanContext:
    """The span context every part of run ``run_id`` descends from, derived from the run id: a
    run resumed in another process continues the same trace without stored state."""
    # The seed is the trace format (every release since 4ef2ab4 derived with it): never change it.
    digest = hashlib.sha256(f"tether.runs._values:{run_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def model_endpoint(model: Any) -> tuple[str, str | None, int | None]:
    """(``gen_ai.provider.name``, ``server.address``, ``server.port``) of a model backend, from
    its ``base_url`` (an unlisted host is named ``openai``, the protocol it speaks)."""
    base_url = getattr(model, "base_url", None)
    if isinstance(base_url, str) and "://" in base_url:
        parts = urlsplit(base_url)
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return PROVIDERS.get(host, "openai"), host or None, port
    module = type(model).__module__
    if module.startswith("tether.testing"):
        return "tether.testing", None, None
    return type(model).__name__.lower(), None, None


def _ns(ts: str) -> int:
    try:
        return int(datetime.fromisoformat(ts).timestamp() * 1e9)
    except (TypeError, ValueError):
        return time.time_ns()


@dataclass
class _Run:
    span: Span
    ctx: Any
    model: str
    chat: Span | None = None
    tools: dict[str, Span] = field(default_factory=dict)  # call id -> open execute_tool span
    input_tokens: int = 0
    output_tokens: int = 0


class OtelSink:
    """Spans from tether trace events. Give it to ``Host(trace_sinks=[...])``. ``close()`` exports
    what has ended and keeps the sink usable; ``shutdown()`` ends what is open and stops exporting."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        capture_content: bool | None = None,
        redactor: Redactor | None = None,
        secrets: Iterable[str] = (),
        model: Any = None,
    ) -> None:
        self._owns_provider = tracer_provider is None
        self.provider = tracer_provider or TracerProvider()
        self._tracer = self.provider.get_tracer(_SCOPE)
        if capture_content is None:
            capture_content = os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes")
        self.capture_content = capture_content
        self.redactor = redactor or Redactor()
        for secret in secrets:
            self.redactor.add(secret)
        endpoint = model_endpoint(model) if model is not None else ("unknown", None, None)
        self.provider_name, self.server_address, self.server_port = endpoint
        self._runs: dict[str, _Run] = {}
        self._offered: dict[str, frozenset[str]] = {}  # run id -> the tool names offered to its model
        self._lock = threading.Lock()

    def write(self, event: TraceEvent) -> None:
        data = sanitize_value(dict(event.data), self.redactor)
        kind = str(event.kind)
        at = _ns(event.ts)
        with self._lock:
            if kind in ("run_started", "run_resumed") and isinstance(data.get("tools"), list):
                self._offered[event.run_id] = frozenset(str(t) for t in data["tools"])
            if not self.capture_content:
                data = self._public(event.run_id, kind, data)
            handler = getattr(self, f"_on_{kind}", None)
            if handler is not None:
                handler(event.run_id, data, at)
            else:
                self._other(event.run_id, kind, data, at)

    def close(self) -> None:
        # Bounded: a collector that is down must not hold up the end of a run.
        self.provider.force_flush(timeout_millis=2000)

    def shutdown(self) -> None:
        with self._lock:
            for run_id in list(self._runs):
                self._end_run(run_id, time.time_ns(), unfinished=True)
        if self._owns_provider:
            self.provider.shutdown()
        else:
            self.provider.force_flush()

    def _tool_name(self, run_id: str, name: Any) -> str:
        offered = self._offered.get(run_id)
        text = str(name)
        return text if offered is not None and text in offered else _NOT_OFFERED

    def _public(self, run_id: str, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        """With content capture off: tool names only from the offered set, identifiers only."""
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key == "tool" and value is not None and kind not in ("run_started", "run_resumed"):
                out[key] = self._tool_name(run_id, value)
            elif key == "tool_calls" and isinstance(value, list):
                out[key] = [
                    {
                        "id": str(c.get("id", "")) if _IDENTIFIER.match(str(c.get("id", ""))) else _FREE_TEXT,
                        "name": self._tool_name(run_id, c.get("name", "")),
                    }
                    for c in value
                    if isinstance(c, dict)
                ]
            elif key == "reason" and kind in _PERSON_TEXT:
                continue
            elif key in _CHECKED and isinstance(value, str):
                out[key] = value if _IDENTIFIER.match(value) else _FREE_TEXT
            else:
                out[key] = value
        return out

    def _endpoint(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {"gen_ai.provider.name": self.provider_name}
        if self.server_address:
            attrs["server.address"] = self.server_address
        if self.server_port:
            attrs["server.port"] = self.server_port
        return attrs

    def _text(self, value: Any) -> str:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        return text[:_MAX_TEXT]

    def _attrs(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """Event data as span-event attributes: text only identifiers, unless capturing content."""
        out: dict[str, Any] = {}
        for key, value in data.items():
            name = f"tether.{key}"
            if isinstance(value, bool | int | float):
                out[name] = value
            elif isinstance(value, str) and key in _SAFE_KEYS:
                out[name] = value[:500]
            elif self.capture_content and value is not None:
                out[name] = self._text(value)
        return out

    def _run(self, run_id: str, at: int) -> _Run:
        """The run's open span; one is started if the run's first event was missed."""
        run = self._runs.get(run_id)
        if run is None:
            self._on_run_started(run_id, {}, at)
            run = self._runs[run_id]
        return run

    def _on_run_started(self, run_id: str, data: dict[str, Any], at: int, resumed: bool = False) -> None:
        if run_id in self._runs:  # a new part of a run whose previous part never stopped
            self._end_run(run_id, at, unfinished=True)
        agent = str(data.get("agent") or data.get("workflow") or data.get("design") or "agent")
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            **self._endpoint(),
            "gen_ai.agent.name": agent,
            "gen_ai.conversation.id": run_id,
            "tether.run_id": run_id,
            "tether.resumed": resumed,
        }
        for key in ("design", "tenant"):
            if data.get(key):
                attrs[f"tether.{key}"] = str(data[key])
        if data.get("model"):
            attrs["gen_ai.request.model"] = str(data["model"])
        if isinstance(data.get("tools"), list):
            attrs["tether.tools"] = [str(t) for t in data["tools"]]
        if self.capture_content and data.get("objective"):
            message = {"role": "user", "parts": [{"type": "text", "content": self._text(data["objective"])}]}
            attrs["gen_ai.input.messages"] = json.dumps([message], ensure_ascii=False)
        # Every part of the run is a child of the run's own context (one trace); a resume links it.
        run_ctx = run_trace_context(run_id)
        span = self._tracer.start_span(
            f"invoke_agent {agent}",
            context=otel_trace.set_span_in_context(NonRecordingSpan(run_ctx)),
            kind=SpanKind.INTERNAL,
            attributes=attrs,
            start_time=at,
            links=[Link(run_ctx, {"tether.link": "resumes run"})] if resumed else None,
        )
        self._runs[run_id] = _Run(span, otel_trace.set_span_in_context(span), str(data.get("model") or ""))

    def _on_run_resumed(self, run_id: str, data: dict[str, Any], at: int) -> None:
        self._on_run_started(run_id, data, at, resumed=True)

    def _on_run_paused(self, run_id: str, data: dict[str, Any], at: int) -> None:
        self._run(run_id, at).span.add_event("tether.run_paused", self._attrs(data), timestamp=at)

    def _on_stop(self, run_id: str, data: dict[str, Any], at: int) -> None:
        run = self._run(run_id, at)
        reason = str(data.get("reason") or "")
        run.span.set_attribute("tether.stop_reason", reason)
        for key in ("steps", "llm_calls"):
            if isinstance(data.get(key), int):
                run.span.set_attribute(f"tether.{key}", data[key])
        if self.capture_content and data.get("detail"):
            run.span.set_attribute("tether.stop_detail", self._text(data["detail"]))
        if reason == "accepted":
            run.span.set_status(Status(StatusCode.OK))
        elif reason in ("model_error", "truncated", "model_refused", "internal_error"):
            run.span.set_status(Status(StatusCode.ERROR, reason))
            run.span.set_attribute("error.type", reason)
        self._end_run(run_id, at)

    def _end_run(self, run_id: str, at: int, *, unfinished: bool = False) -> None:
        run = self._runs.pop(run_id)
        for span in [*([run.chat] if run.chat is not None else []), *run.tools.values()]:
            span.set_attribute("tether.unfinished", True)
            span.end(end_time=at)
        run.span.set_attribute("gen_ai.usage.input_tokens", run.input_tokens)
        run.span.set_attribute("gen_ai.usage.output_tokens", run.output_tokens)
        if unfinished:
            run.span.set_attribute("tether.unfinished", True)
        run.span.end(end_time=at)

    def _start_chat(self, run: _Run, at: int, data: Mapping[str, Any]) -> Span:
        model = run.model or "model"
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            **self._endpoint(),
            "gen_ai.request.model": model,
        }
        for key in ("messages", "tools", "request_tokens", "prefix_reuse", "cached_share"):
            value = data.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attrs[f"tether.request.{key}"] = value
        return self._tracer.start_span(
            f"chat {model}", context=run.ctx, kind=SpanKind.CLIENT, attributes=attrs, start_time=at
        )

    def _on_context_composed(self, run_id: str, data: dict[str, Any], at: int) -> None:
        run = self._run(run_id, at)
        if run.chat is not None:
            run.chat.end(end_time=at)
        run.chat = self._start_chat(run, at, data)

    def _chat(self, run_id: str, at: int) -> tuple[_Run, Span]:
        """The run and its open chat span (one is started if the request was missed), now closed."""
        run = self._run(run_id, at)
        span, run.chat = run.chat or self._start_chat(run, at, {}), None
        return run, span

    def _on_model_response(self, run_id: str, data: dict[str, Any], at: int) -> None:
        run, span = self._chat(run_id, at)
        inp, out = int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0)
        run.input_tokens += inp
        run.output_tokens += out
        span.set_attributes({"gen_ai.usage.input_tokens": inp, "gen_ai.usage.output_tokens": out})
        if data.get("cached_tokens"):
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", int(data["cached_tokens"]))
        for key, name in (("model", "gen_ai.response.model"), ("response_id", "gen_ai.response.id")):
            if data.get(key):
                span.set_attribute(name, str(data[key]))
        if isinstance(data.get("cost_usd"), int | float):
            span.set_attribute("tether.cost_usd", float(data["cost_usd"]))
        if data.get("finish_reason"):
            span.set_attribute("gen_ai.response.finish_reasons", [str(data["finish_reason"])])
        calls = [c for c in data.get("tool_calls") or [] if isinstance(c, dict)]
        if calls:
            span.set_attribute("tether.tool_calls", [str(c.get("name", "")) for c in calls])
        if self.capture_content:
            parts: list[dict[str, Any]] = []
            if data.get("text"):
                parts.append({"type": "text", "content": self._text(data["text"])})
            parts += [
                {"type": "tool_call", "id": str(c.get("id", "")), "name": str(c.get("name", ""))}
                for c in calls
            ]
            message = {"role": "assistant", "parts": parts}
            span.set_attribute("gen_ai.output.messages", json.dumps([message], ensure_ascii=False))
        span.end(end_time=at)

    def _on_model_error(self, run_id: str, data: dict[str, Any], at: int) -> None:
        _, span = self._chat(run_id, at)
        span.set_attribute("error.type", "model_error")
        span.set_status(
            Status(
                StatusCode.ERROR, str(data.get("error", ""))[:200] if self.capture_content else "model_error"
            )
        )
        span.end(end_time=at)

    def _on_tool_proposed(self, run_id: str, data: dict[str, Any], at: int) -> None:
        run = self._run(run_id, at)
        tool, call_id = str(data.get("tool") or "tool"), str(data.get("call_id") or "")
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        }
        if self.capture_content and data.get("arguments") is not None:
            attrs["gen_ai.tool.call.arguments"] = self._text(data["arguments"])
        old = run.tools.pop(call_id, None)
        if old is not None:
            old.end(end_time=at)
        run.tools[call_id] = self._tracer.start_span(
            f"execute_tool {tool}", context=run.ctx, kind=SpanKind.INTERNAL, attributes=attrs, start_time=at
        )

    def _tool(self, run_id: str, data: Mapping[str, Any], at: int) -> Span | None:
        run = self._run(run_id, at)
        call_id = data.get("call_id")
        if call_id is not None:
            return run.tools.get(str(call_id))
        tool = data.get("tool")
        matches = [s for s in run.tools.values() if getattr(s, "name", "") == f"execute_tool {tool}"]
        return matches[0] if len(matches) == 1 else None

    def _decide(self, span: Span, decision: str, data: Mapping[str, Any], at: int) -> None:
        span.set_attribute("tether.policy.decision", decision)
        for key in ("rule", "reason"):
            if data.get(key):
                span.set_attribute(f"tether.policy.{key}", str(data[key]))
        span.add_event(
            "tether.policy.decision", {"tether.policy.decision": decision, **self._attrs(data)}, timestamp=at
        )

    def _finish(self, run_id: str, span: Span, at: int, error: str | None = None) -> None:
        if error:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=at)
        tools = self._runs[run_id].tools
        for call_id, open_span in list(tools.items()):
            if open_span is span:
                del tools[call_id]

    def _on_policy_allowed(self, run_id: str, data: dict[str, Any], at: int) -> None:
        if (span := self._tool(run_id, data, at)) is not None:
            self._decide(span, "allow", data, at)

    def _step(self, run_id: str, kind: str, data: dict[str, Any], at: int) -> Span | None:
        """The open tool span an event belongs to; without one, the event goes to ``_other``."""
        span = self._tool(run_id, data, at)
        if span is None:
            self._other(run_id, kind, data, at)
        return span

    def _approval(self, span: Span, status: str, data: Mapping[str, Any], at: int) -> None:
        span.set_attribute("tether.approval.status", status)
        span.add_event(
            "tether.approval", {"tether.approval.status": status, **self._attrs(data)}, timestamp=at
        )

    def _on_policy_denied(self, run_id: str, data: dict[str, Any], at: int) -> None:
        if (span := self._step(run_id, "policy_denied", data, at)) is not None:
            self._decide(span, "deny", data, at)
            self._finish(run_id, span, at, "policy_denied")

    def _on_tool_error(self, run_id: str, data: dict[str, Any], at: int) -> None:
        if (span := self._step(run_id, "tool_error", data, at)) is not None:
            self._decide(span, "reject", data, at)
            self._finish(run_id, span, at, str(data.get("error") or "tool_error"))

    def _on_approval_requested(self, run_id: str, data: dict[str, Any], at: int) -> None:
        if (span := self._step(run_id, "approval_requested", data, at)) is not None:
            self._decide(span, "approve", data, at)
            if data.get("proposal_id"):
                span.set_attribute("tether.approval.proposal_id", str(data["proposal_id"]))

    def _on_approval_granted(self, run_id: str, data: dict[str, Any], at: int) -> None:
        if (span := self._step(run_id, "approval_granted", data, at)) is not None:
            self._approval(span, "approved", data, at)

    def _on_approval_denied(self, run_id: str, data: dict[str, Any], at: int) -> None:
        if (span := self._step(run_id, "approval_denied", data, at)) is not None:
            self._approval(span, str(data.get("status") or data.get("reason") or "denied"), data, at)
            self._finish(run_id, span, at, "approval_denied")

    def _on_tool_observation(self, run_id: str, data: dict[str, Any], at: int) -> None:
        if (span := self._step(run_id, "tool_observation", data, at)) is None:
            return
        for key in ("trust", "source"):
            if data.get(key):
                span.set_attribute(f"tether.observation.{key}", str(data[key]))
        for key in ("chars", "truncated", "is_error"):
            if isinstance(data.get(key), bool | int):
                span.set_attribute(f"tether.observation.{key}", data[key])
        error = str(data.get("error_kind") or "tool_error") if data.get("is_error") else None
        self._finish(run_id, span, at, error)

    def _on_tool_crashed(self, run_id: str, data: dict[str, Any], at: int) -> None:
        span = self._tool(run_id, data, at)
        if span is not None:
            self._finish(run_id, span, at, "tool_crashed")
        self._other(run_id, "tool_crashed", data, at)

    def _other(self, run_id: str, kind: str, data: dict[str, Any], at: int) -> None:
        """Events without a span of their own: events on their tool's span, else on the run's."""
        target: Span | None = None
        if kind.startswith("effect_"):
            target = self._tool(run_id, data, at)
        if target is None:
            target = self._run(run_id, at).span
        target.add_event(f"tether.{kind}", self._attrs(data), timestamp=at)


_PROVIDERS_BY_CONFIG: dict[tuple[str, ...], TracerProvider] = {}
_ENV_KEYS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
)


def _env_provider() -> TracerProvider:
    """One exporting provider per configuration for the whole process; the SDK shuts it down."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    key = tuple(os.environ.get(k, "") for k in _ENV_KEYS)
    provider = _PROVIDERS_BY_CONFIG.get(key)
    if provider is None:
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "tether")})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _PROVIDERS_BY_CONFIG[key] = provider
    return provider


def otel_sink_from_env(
    *, capture_content: bool | None = None, secrets: Iterable[str] = (), model: Any = None
) -> OtelSink:
    """An ``OtelSink`` exporting over OTLP/HTTP as the standard ``OTEL_*`` variables say."""
    return OtelSink(_env_provider(), capture_content=capture_content, secrets=secrets, model=model)
