"""Secrets by declaration: a tool's contract marks its secret arguments; their values are masked
on the page, in the API, in the JSONL trace, in the run timeline and in OpenTelemetry, and no
piece of them (8 characters or more) survives a cut anywhere. Nothing is masked by its name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from console_world import csrf_of
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import Field, SecretStr

from tether.console._runs import timeline
from tether.errors import UpstreamError
from tether.host import Host
from tether.models._base import ModelRequest
from tether.policy import Approvals, Policy, SqliteApprovalStore, TrustedContext
from tether.runners._scope import declare_secrets
from tether.runs._values import Agent
from tether.testing import FunctionModel, call, final, tool_results
from tether.tools import Effect, tool
from tether.trace._events import EventKind
from tether.trace._sanitize import MIN_FRAGMENT
from tether.trace._tracer import JsonlSink, Tracer, read_trace

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tether.trace._otel import OtelSink

SECRET = "tok_live_7Gq2ZpXw9RbN4sKd8LmVa3Tc"
CTX = TrustedContext(tenant="tenant-a", user="ops-a")


@tool(effect=Effect.WRITE, secret_arguments=("api_token",))
def book_seat(
    passenger_name: Annotated[str, Field(description="Passenger as on the ticket.")],
    secretary_email: Annotated[str, Field(description="Who gets the confirmation.")],
    max_tokens: Annotated[int, Field(description="Loyalty points to spend.")],
    api_token: Annotated[str, Field(description="The airline API token.")],
) -> dict[str, Any]:
    """Book a seat with the airline."""
    raise UpstreamError(f"airline refused token {api_token}: quota exceeded for this account")


def fragments(text: str, secret: str = SECRET) -> list[str]:
    return [
        secret[i : i + MIN_FRAGMENT]
        for i in range(len(secret) - MIN_FRAGMENT + 1)
        if secret[i : i + MIN_FRAGMENT] in text
    ]


def test_a_contract_declares_secrets_by_schema_never_by_name() -> None:
    assert book_seat.spec.secret_arguments == {"api_token"}
    assert book_seat.spec.parameters["properties"]["api_token"]["writeOnly"] is True

    @tool
    def login(
        user: Annotated[str, Field(description="User.")],
        password: Annotated[SecretStr, Field(description="Password.")],
        token_count: Annotated[int, Field(description="How many tokens.")],
    ) -> str:
        """Log in."""
        return "ok"

    assert login.spec.secret_arguments == {"password"}  # SecretStr: format password, writeOnly
    with pytest.raises(TypeError, match="not one of its arguments"):
        tool(secret_arguments=("nope",))(book_seat.function)


def _model(request: ModelRequest) -> Any:
    if results := tool_results(request):  # the model repeats the tool's error, token and all
        return final(f"The airline said: {results[0].content}")
    return call(
        "book_seat", passenger_name="Ana Passenger", secretary_email="sec@example.org", max_tokens=1200,
        api_token=SECRET,
    )  # fmt: skip


def _host(db: Path, sinks: list[Any]) -> tuple[Host, Agent]:
    host = Host(
        policy=Policy(allow={"book_seat"}),
        approvals=Approvals(SqliteApprovalStore(db)),
        trace_dir=db.parent / "traces",
        trace_sinks=sinks,
        on_denied="continue",
    )
    host.add_tools(book_seat)
    return host, Agent(instructions="Book.", model=FunctionModel(_model, name="stand-in"), name="booker")


@pytest.mark.spec("T5", "P1")
def test_a_declared_secret_is_masked_in_every_sink_and_other_arguments_are_shown(world: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = OtelSink(provider, capture_content=True)

    async def go() -> tuple[str, str]:
        host, agent = _host(world.db, [sink])
        first = await host.run(agent, "Book seat 4A for Ana Passenger", context=CTX)
        assert str(first.stop_reason) == "approval_required"
        assert host.approvals is not None
        [p] = await host.approvals.store.list_proposals(run_id=first.run_id)
        await host.aclose()
        return first.run_id, p.id

    run_id, pid = anyio.run(go)
    ana = world.clients["ana"]
    page = ana.get(f"/approvals/{pid}").text
    api = ana.get(f"/api/approvals/{pid}").text
    queue = ana.get("/approvals").text + ana.get("/api/approvals").text
    whole = ana.get(f"/approvals/{pid}/arguments").text  # every argument whole, as ASCII JSON
    for text in (page, api, queue, whole):
        assert not fragments(text), fragments(text)
    assert "Ana Passenger" in whole and f"[secret, {len(SECRET)} characters, not shown]" in whole
    # Names that merely contain "pass", "secret", "token" are data, shown in full.
    assert "Ana Passenger" in page and "sec@example.org" in page and "1200" in page
    assert f"secret, not shown: {len(SECRET)} characters" in page
    assert json.loads(api)["masked_arguments"] == ["api_token"]
    [row] = [r for r in ana.get("/api/approvals").json()["proposals"] if r["id"] == pid]
    flags = {f["kind"]: f["text"] for f in row["flags"]}
    # Triage without opening it: a secret is there, and which arguments the model composed itself.
    assert flags["secret"] == "secret (not shown): api_token"
    assert flags["composed"] == "composed by the model: api_token, max_tokens, secretary_email"

    # The reviewer approves; the resumed call fails with the token in its error message.
    approved = ana.post(
        f"/approvals/{pid}/approve",
        data={"csrf_token": csrf_of(page), "content_hash": json.loads(api)["content_hash"]},
    )
    assert approved.status_code == 200

    async def resume() -> None:
        host, agent = _host(world.db, [sink])
        await host.resume(agent, run_id)
        await host.aclose()

    anyio.run(resume)
    sink.shutdown()
    jsonl = (world.db.parent / "traces" / f"{run_id}.jsonl").read_text()
    assert "quota exceeded" in jsonl and not fragments(jsonl)
    run_page = ana.get(f"/runs/{run_id}").text + ana.get(f"/api/runs/{run_id}").text
    assert "book_seat" in run_page and not fragments(run_page)
    spans = json.dumps([s.to_json() for s in exporter.get_finished_spans()])
    assert "book_seat" in spans and not fragments(spans)


_KEY = st.text(
    alphabet="abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789_-", min_size=12, max_size=48
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=_KEY, pad=st.integers(0, 2100), cut=st.integers(0, 90), start=st.integers(0, 90))
@example(secret="2222t_tokens", pad=0, cut=0, start=0)  # a piece of the sinks' own words
def test_no_piece_of_a_secret_survives_a_cut_at_any_length_and_position(
    tmp_path: Path, secret: str, pad: int, cut: int, start: int
) -> None:
    """What the host does to a call (its arguments cut at 2000 characters, an error message cut
    anywhere, a model's text cut at 500) never lets 8 characters of a declared secret through.
    A piece that the sinks print with no secret at all (``t_tokens`` of ``input_tokens``, a
    field name) is their own vocabulary, not a leak: the same run with a stand-in shows which."""
    cut, start = min(cut, len(_message(secret))), min(start, len(_message(secret)))
    sinks, arguments = _sink_texts(tmp_path / "secret", secret, pad, cut, start)
    vocabulary = " ".join(_sink_texts(tmp_path / "stand-in", "." * len(secret), pad, cut, start)[0].values())
    # The part of the secret the (cut) proposed call showed: all of it unless the cut falls in it.
    known = min(len(secret), max(0, 2000 - arguments.rindex(secret)))
    for name, text in sinks.items():
        leaked = fragments(text, secret[:known]) if known >= MIN_FRAGMENT else []
        assert not [piece for piece in leaked if piece not in vocabulary], (name, leaked)


def _message(secret: str) -> str:
    return f"airline refused token {secret}: quota exceeded"


def _sink_texts(folder: Path, secret: str, pad: int, cut: int, start: int) -> tuple[dict[str, str], str]:
    """What each sink holds after a call carrying ``secret`` failed with it in its error message
    (cut at ``cut``, and from ``start``); and the call's arguments."""
    arguments = json.dumps({"passenger_name": "x" * pad, "api_token": secret}, ensure_ascii=False)
    message = _message(secret)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{abs(hash((secret, pad, cut, start)))}.jsonl"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel = OtelSink(provider, capture_content=True)
    tracer = Tracer("run-1", [JsonlSink(path, flush="each_event"), otel], strict=True)
    declare_secrets(tracer, [book_seat.spec])  # what every run scope does at its start
    tracer.emit(EventKind.RUN_STARTED, design="agent", objective="book", tools=["book_seat"])
    tracer.emit(EventKind.TOOL_PROPOSED, call_id="c1", tool="book_seat", arguments=arguments[:2000])
    tracer.emit(EventKind.TOOL_ERROR, call_id="c1", tool="book_seat", error="upstream", message=message[:cut])
    tracer.emit(
        EventKind.TOOL_ERROR, call_id="c1", tool="book_seat", error="upstream", message=message[start:]
    )
    tracer.emit(EventKind.STOP, reason="accepted", detail=message[start:cut] or "none")
    tracer.close()
    otel.shutdown()
    texts = {
        "jsonl": path.read_text(),
        "timeline": json.dumps([i.to_json() for i in timeline(read_trace(path))]),
        "otel": json.dumps([s.to_json() for s in exporter.get_finished_spans()]),
    }
    return texts, arguments


def test_a_secret_past_the_cut_of_the_proposal_event_is_still_learned_and_redacted(tmp_path: Path) -> None:
    # The proposal event keeps the first 2,000 characters of the arguments; a secret after
    # them must be learned from the whole call, or the tool's echo of it would reach the trace.
    def model(request: ModelRequest) -> Any:
        if results := tool_results(request):
            return final(f"The airline said: {results[0].content}")
        return call(
            "book_seat", passenger_name="A" * 2100, secretary_email="sec@example.org", max_tokens=1,
            api_token=SECRET,
        )  # fmt: skip

    host = Host(
        policy=Policy(allow={"book_seat"}, automatic_effects=(Effect.READ, Effect.WRITE)),
        trace_dir=tmp_path / "traces",
        on_denied="continue",
    )
    host.add_tools(book_seat)
    agent = Agent(instructions="Book.", model=FunctionModel(model, name="stand-in"), name="booker")
    result = anyio.run(lambda: host.run(agent, "Book my seat.", context=CTX))
    text = (tmp_path / "traces" / f"{result.run_id}.jsonl").read_text(encoding="utf-8")
    assert "airline refused token" in text  # the tool's error is traced ...
    assert fragments(text) == []  # ... without any piece of the secret
    assert "A" * 1000 in text  # the other argument is shown
