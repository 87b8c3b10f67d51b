"""The OpenAI-compatible backend against a real chat-completions server on 127.0.0.1,
through the real ``openai`` client's HTTP layer (SPEC L1, L2, L4, T2, C1, E5, P3)."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from backend_support import CONTEXT, ORDER_CALLS, Sleeps, make_host

from tether import Agent, Limits, StopReason
from tether.core.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
from tether.errors import ConfigError
from tether.models._base import ModelRequest
from tether.models._openai import OpenAICompatible, RetryPolicy, reasoning_rule
from tether.models._pricing import Price
from tether.trace import read_trace
from tether_testing.fake_server import FakeChatServer, Reply

pytestmark = pytest.mark.anyio

Serve = Callable[[Sequence[Reply]], FakeChatServer]
ORDER = ("read_order", '{"order_id": "742"}')
HISTORY = ("read_history", '{"order_id": "742"}')


def backend(server: FakeChatServer, **kw: Any) -> OpenAICompatible:
    kw.setdefault("sleep", Sleeps())
    return OpenAICompatible("fake-model", base_url=server.url, **kw)


def agent(model: OpenAICompatible, **limits: Any) -> Agent:
    return Agent(instructions="Investigate work orders.", model=model, limits=Limits(**limits))


def events(result: Any, kind: str) -> list[dict[str, Any]]:
    return [e.to_json() for e in result.events if str(e.kind) == kind]


@pytest.mark.spec("L4")
@pytest.mark.parametrize("transport", ["http", "openai"])
@pytest.mark.parametrize("stream", [True, False])
async def test_turns_with_parallel_tool_calls_and_text_round_trip(
    serve: Serve, tmp_path: Path, stream: bool, transport: str
) -> None:
    server = serve([Reply.calls(ORDER, HISTORY), Reply.text("Order 742 is open: awaiting part P-17.")])
    pieces: list[tuple[str, str]] = []
    model = backend(server, stream=stream, transport=transport, on_delta=lambda k, p: pieces.append((k, p)))
    result = await make_host(tmp_path).run(agent(model), "Why is 742 open?", context=CONTEXT)

    assert result.stop_reason is StopReason.ACCEPTED
    assert result.answer == "Order 742 is open: awaiting part P-17."
    assert [(c.tool, c.status) for c in result.calls] == [("read_order", "ok"), ("read_history", "ok")]
    first, second = server.bodies()
    assert first["stream"] is stream if stream else "stream" not in first
    # The tool results answer the ids the server gave the calls, in the order proposed.
    proposed = [c["id"] for c in second["messages"][2]["tool_calls"]]
    answered = [m["tool_call_id"] for m in second["messages"][3:5]]
    assert proposed == answered and len(set(proposed)) == 2
    assert all(m["role"] == "tool" for m in second["messages"][3:5])
    if stream:  # incremental text arrived in several pieces and assembles to the answer
        text = [p for k, p in pieces if k == "text"]
        assert len(text) > 1 and "".join(text) == result.answer
        assert [p for k, p in pieces if k == "tool_call"] == ["read_order", "read_history"]
    else:
        assert pieces == []


@pytest.mark.spec("C1")
@pytest.mark.spec("E5")
async def test_prefix_is_byte_identical_across_turns_and_status_is_appended_last(
    serve: Serve, tmp_path: Path
) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}
    server = serve(
        [
            Reply.calls(ORDER, usage=usage),
            Reply.calls(HISTORY, usage=usage),
            Reply.text("Found: order 742 open; missing: the part's delivery date.", usage=usage),
        ]
    )
    model = backend(server, prices={"fake-model": Price(1.0, 2.0)})  # 0.0012 USD a call
    result = await make_host(tmp_path).run(
        agent(model, max_cost_usd=0.002), "Why is 742 open?", context=CONTEXT
    )

    assert result.stop_reason is StopReason.BUDGET
    assert result.answer == "Found: order 742 open; missing: the part's delivery date."
    assert result.llm_calls == 3 and result.cost_usd == pytest.approx(0.0036)
    raw = [r.body for r in server.received]
    # Turn 2 extends turn 1 byte for byte: same fixed fields, tools, system prompt, trajectory.
    assert raw[1].startswith(raw[0][:-2])
    bodies = server.bodies()
    assert bodies[0]["tools"] == bodies[1]["tools"]
    assert [b["messages"][0] for b in bodies] == [
        {"role": "system", "content": "Investigate work orders."}
    ] * 3
    # The final turn: tools disabled, output capped, the harness status appended at the very end.
    last = bodies[2]
    assert "tools" not in last and last["max_tokens"] == 1024
    assert last["messages"][: len(bodies[1]["messages"])] == bodies[1]["messages"]
    assert last["messages"][-1]["role"] == "user"
    assert last["messages"][-1]["content"].startswith("<agent_status>\ncost budget of $0.002 used")
    assert events(result, "budget_exhausted")[0]["answered_by"] == "model"


@pytest.mark.spec("E5")
async def test_usage_with_cached_tokens_and_cost_reach_the_trace(serve: Serve, tmp_path: Path) -> None:
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 100,
        "prompt_tokens_details": {"cached_tokens": 400},
        "completion_tokens_details": {"reasoning_tokens": 60},
    }
    server = serve([Reply.calls(ORDER, usage=usage), Reply.text("open", usage=usage)])
    model = backend(server, prices={"fake-model": Price(input=1.0, output=2.0, cached_input=0.5)})
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)

    assert result.ok
    trace = [e for e in read_trace(result.trace_path) if e["kind"] == "model_response"]  # type: ignore[arg-type]
    assert [(e["prompt_tokens"], e["completion_tokens"], e["cached_tokens"]) for e in trace] == [
        (1000, 100, 400)
    ] * 2
    # 600 fresh x $1 + 400 cached x $0.5 + 100 out x $2, per million tokens
    assert [e["cost_usd"] for e in trace] == [pytest.approx(0.001)] * 2
    assert result.usage.total_tokens == 2200 and result.cost_usd == pytest.approx(0.002)


async def test_unpriced_model_is_marked_in_the_trace(serve: Serve, tmp_path: Path) -> None:
    server = serve([Reply.text("open")])
    result = await make_host(tmp_path).run(agent(backend(server, prices={})), "q", context=CONTEXT)
    assert result.ok and events(result, "model_response")[0]["unpriced"] is True


@pytest.mark.spec("T2")
async def test_rate_limited_call_waits_what_retry_after_says_then_succeeds(
    serve: Serve, tmp_path: Path
) -> None:
    server = serve([Reply.error(429, "slow down", headers={"retry-after": "7"}), Reply.text("open")])
    sleeps = Sleeps()
    result = await make_host(tmp_path).run(agent(backend(server, sleep=sleeps)), "q", context=CONTEXT)

    assert result.ok and result.answer == "open"
    assert sleeps.waits == [7.0]
    assert len(server.received) == 2
    assert events(result, "model_response")[0]["retries"] == [
        {"kind": "rate_limited", "attempt": 1, "delay_s": 7.0}
    ]


@pytest.mark.spec("T2")
async def test_server_errors_and_dropped_connections_back_off_exponentially_with_jitter(
    serve: Serve, tmp_path: Path
) -> None:
    server = serve(
        [Reply.error(500), Reply(drop=True), Reply.error(503), Reply.error(502), Reply.text("open")]
    )
    sleeps = Sleeps()
    policy = RetryPolicy(max_retries=4, base_delay_s=0.5, max_delay_s=1.5, jitter=0.25)
    model = backend(server, sleep=sleeps, retry=policy, rand=lambda: 0.5)
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)

    assert result.ok
    # 0.5, 1, 2 -> capped at 1.5, each reduced by jitter x rand = 12.5 %
    assert sleeps.waits == pytest.approx([0.4375, 0.875, 1.3125, 1.3125])
    kinds = [r["kind"] for r in events(result, "model_response")[0]["retries"]]
    assert kinds == ["server_error", "connection", "server_error", "server_error"]


@pytest.mark.spec("T2")
async def test_a_timed_out_call_is_retried(serve: Serve, tmp_path: Path) -> None:
    server = serve([Reply(content="too late", delay_s=3.0), Reply.text("open")])
    result = await make_host(tmp_path).run(agent(backend(server, timeout_s=0.3)), "q", context=CONTEXT)
    assert result.ok and result.answer == "open"
    assert events(result, "model_response")[0]["retries"][0]["kind"] == "timeout"


@pytest.mark.spec("L2")
async def test_spent_retries_end_the_run_with_model_error_not_a_crash(serve: Serve, tmp_path: Path) -> None:
    server = serve([Reply.error(500, "overloaded")] * 3)
    model = backend(server, retry=RetryPolicy(max_retries=2))
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)

    assert result.stop_reason is StopReason.MODEL_ERROR
    assert "gave up after 3 attempts" in result.detail and "overloaded" in result.detail
    assert len(server.received) == 3
    assert len(events(result, "model_error")) == 1


async def test_client_errors_and_overlong_retry_after_are_not_retried(serve: Serve, tmp_path: Path) -> None:
    server = serve([Reply.error(400, "context too long")])
    result = await make_host(tmp_path).run(agent(backend(server)), "q", context=CONTEXT)
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert "HTTP 400: server_error: context too long" in result.detail
    assert len(server.received) == 1

    server = serve([Reply.error(429, "quota", headers={"retry-after": "3600"}), Reply.text("never")])
    sleeps = Sleeps()
    result = await make_host(tmp_path).run(agent(backend(server, sleep=sleeps)), "q", context=CONTEXT)
    assert result.stop_reason is StopReason.MODEL_ERROR and "Retry-After too long" in result.detail
    assert sleeps.waits == [] and len(server.received) == 1


@pytest.mark.spec("T2")
@pytest.mark.parametrize("stream", [True, False])
async def test_malformed_tool_calls_go_back_to_the_model_as_recoverable_errors(
    serve: Serve, tmp_path: Path, stream: bool
) -> None:
    ORDER_CALLS.clear()
    server = serve(
        [
            Reply.calls(("read_order", '{"order_id": "742"'), ("export_everything", "{}")),
            Reply.calls(ORDER),
            Reply.text("Order 742 is open."),
        ]
    )
    result = await make_host(tmp_path).run(agent(backend(server, stream=stream)), "q", context=CONTEXT)

    assert result.stop_reason is StopReason.ACCEPTED and result.answer == "Order 742 is open."
    assert ORDER_CALLS == ["742"]  # the broken call never ran; the corrected one did
    errors = [json.loads(m["content"].split("\n")[1]) for m in server.bodies()[1]["messages"][3:5]]
    assert errors[0]["error"] == "reject" and "invalid_json" in errors[0]["message"]
    assert errors[1] == {"error": "unknown", "message": "unknown tool 'export_everything'"}


@pytest.mark.spec("L2")
async def test_repeated_malformed_turns_stop_the_run_with_a_stop_reason(serve: Serve, tmp_path: Path) -> None:
    server = serve([Reply.calls(("read_order", "not json"))] * 3)
    result = await make_host(tmp_path).run(agent(backend(server)), "q", context=CONTEXT)
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert result.detail == "3 malformed turns in a row"


@pytest.mark.spec("P3")
@pytest.mark.parametrize("transport", ["http", "openai"])
async def test_api_key_reaches_the_server_but_never_the_trace_or_logs(
    serve: Serve,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    transport: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "sk-test-0123456789-very-secret"
    monkeypatch.setenv("TETHER_TEST_KEY", secret)
    server = serve([])
    # A hostile or buggy server echoes the Authorization header back in its error.
    model = backend(server, api_key_env="TETHER_TEST_KEY", transport=transport)
    server.responder = lambda req, i: (
        Reply.calls(ORDER)
        if i == 0
        else Reply.error(400, f"bad auth: {server.received[-1].headers['authorization']}")
    )
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)

    assert server.received[0].headers["authorization"] == f"Bearer {secret}"
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert "bad auth: Bearer [REDACTED]" in result.detail
    assert secret not in Path(result.trace_path).read_text()  # type: ignore[arg-type]
    assert secret not in repr(model) and secret not in result.detail
    assert "HTTP Request" in caplog.text or "send_request" in caplog.text  # debug logging was on
    assert secret not in caplog.text


def test_reasoning_rules_decide_what_is_sent_back() -> None:
    calls = (ToolCall("c1", "read_order", "{}"),)
    messages = (
        SystemMessage("s"),
        UserMessage("q"),
        AssistantMessage(tool_calls=calls, reasoning="R1"),
        ToolMessage("c1", "r"),
        UserMessage("<agent_status>x</agent_status>", "harness"),
        AssistantMessage(content="done", reasoning="R2"),
    )

    def sent(rule: str) -> list[str]:
        model = OpenAICompatible("m", base_url="http://127.0.0.1:9/v1", reasoning=rule)  # type: ignore[arg-type]
        body = json.loads(model.encode(ModelRequest(messages=messages)))
        return [m["reasoning_content"] for m in body["messages"] if "reasoning_content" in m]

    assert sent("drop") == []
    assert sent("keep") == ["R1", "R2"]
    assert sent("since_last_user") == ["R2"]
    assert reasoning_rule("deepseek-reasoner") == "drop"
    assert reasoning_rule("deepseek-v4") == "keep"
    assert reasoning_rule("moonshotai/Kimi-K2-Thinking") == "keep"
    assert reasoning_rule("Qwen/Qwen3-32B") == "since_last_user"
    assert reasoning_rule("gpt-4o") == "drop"


@pytest.mark.parametrize("stream", [True, False])
async def test_streamed_or_whole_reasoning_is_kept_on_the_message_and_resent_when_the_rule_says(
    serve: Serve, tmp_path: Path, stream: bool
) -> None:
    server = serve([Reply.calls(ORDER, reasoning="I should read the order."), Reply.text("open")])
    model = backend(server, stream=stream, reasoning="keep")
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
    assert result.ok
    assert server.bodies()[1]["messages"][2]["reasoning_content"] == "I should read the order."


@pytest.mark.parametrize("transport", ["http", "openai"])
@pytest.mark.parametrize("stream", [True, False])
def test_a_backend_survives_being_reused_from_a_new_event_loop(
    serve: Serve, tmp_path: Path, stream: bool, transport: str
) -> None:
    # Whole responses leave a kept-alive connection in the pool, owned by the first loop.
    server = serve([Reply.text("first"), Reply.text("second")])
    model = backend(server, stream=stream, transport=transport)
    answers = [
        make_host(tmp_path).run_sync(agent(model), "q", context=CONTEXT).answer,
        make_host(tmp_path).run_sync(agent(model), "q", context=CONTEXT).answer,
    ]
    assert answers == ["first", "second"] and len(server.received) == 2
    assert model.retries == []  # no dead pooled connection from the first loop was touched


@pytest.mark.spec("C1")
@pytest.mark.spec("C2")
async def test_with_the_status_bar_each_request_extends_the_last_and_ends_with_the_status(
    serve: Serve, tmp_path: Path
) -> None:
    from tether.context import ContextConfig, StatusConfig

    server = serve([Reply.calls(ORDER), Reply.calls(HISTORY), Reply.text("open")])
    model = backend(server)
    status = ContextConfig(status=StatusConfig(strategy="replace"))
    instructed = Agent(instructions="Investigate work orders.", model=model, context=status)
    result = await make_host(tmp_path).run(instructed, "q", context=CONTEXT)

    assert result.ok
    raw = [r.body for r in server.received]
    marker = b',{"role":"user","content":"<agent_status>'
    for before, after in itertools.pairwise(raw):
        # Everything up to the previous status line is repeated byte for byte.
        assert after.startswith(before[: before.rindex(marker)])
    for body in server.bodies():
        assert body["messages"][-1]["content"].startswith("<agent_status>")
        assert (
            sum(m["content"].startswith("<agent_status>") for m in body["messages"] if m["role"] == "user")
            == 1
        )
    assert server.bodies()[0]["tools"] == server.bodies()[2]["tools"]


async def test_a_tool_call_turn_is_resent_with_empty_text_and_responses_are_capped(
    serve: Serve, tmp_path: Path
) -> None:
    server = serve([Reply.calls(ORDER), Reply.text("open")])
    model = backend(server, max_tokens=200, extra_body={"temperature": 0})
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)

    assert result.ok
    first, second = server.bodies()
    # llama.cpp's Python server refuses "content": null on an assistant turn; "" is valid everywhere.
    assert second["messages"][2]["content"] == "" and second["messages"][2]["tool_calls"]
    assert first["max_tokens"] == second["max_tokens"] == 200 and first["temperature"] == 0


def test_extra_body_cannot_overwrite_what_the_backend_writes() -> None:
    with pytest.raises(ConfigError, match="extra_body may not set max_tokens, stream"):
        OpenAICompatible("m", base_url="http://127.0.0.1:9/v1", extra_body={"stream": False, "max_tokens": 9})


@pytest.mark.parametrize("transport", ["http", "openai"])
async def test_a_proxy_named_in_the_environment_carries_the_requests(
    serve: Serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    # The lean transport must pick what the full client picks: here the fake server is the
    # proxy, so the request reaches it in absolute form, naming the upstream host.
    server = serve([Reply.calls(ORDER), Reply.text("open")])
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.url.rsplit("/", 1)[0])
    model = OpenAICompatible(
        "fake-model", base_url="http://upstream.invalid/v1", transport=transport, headers={"X-Team": "ops"}
    )
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
    await model.aclose()

    assert result.ok and result.answer == "open"
    assert [r.path for r in server.received] == ["http://upstream.invalid/v1/chat/completions"] * 2
    assert all(r.headers["x-team"] == "ops" for r in server.received)
    assert all(r.headers["host"] == "upstream.invalid" for r in server.received)


def test_the_backend_streams_by_default_only_when_someone_reads_the_pieces() -> None:
    url = "http://127.0.0.1:9/v1"
    assert OpenAICompatible("m", base_url=url).stream is False
    assert OpenAICompatible("m", base_url=url, on_delta=lambda kind, piece: None).stream is True
    assert OpenAICompatible("m", base_url=url, stream=True).stream is True
    assert OpenAICompatible("m", base_url=url, stream=False, on_delta=lambda k, p: None).stream is False
    body = json.loads(OpenAICompatible("m", base_url=url).encode(ModelRequest(messages=(UserMessage("q"),))))
    assert "stream" not in body and "stream_options" not in body


@pytest.mark.parametrize("stream", [True, False])
async def test_concurrent_calls_share_one_pool_and_every_call_gives_its_connection_back(
    serve: Serve, stream: bool
) -> None:
    # 40 overlapping calls on a pool of 8 connections, some failing on the way (a 500 then a
    # dropped connection, both retried): every call is answered on the one pool of this loop.
    server = serve([])

    def reply(request: Any, i: int) -> Reply:
        if i == 0:
            return Reply.text("warm")  # opens the pool before the concurrent calls
        if i in (3, 17):
            return Reply.error(500, "busy")
        if i in (5, 23):
            return Reply(drop=True)
        return Reply.text(f"answer {i}", delay_s=0.05)

    server.responder = reply
    model = backend(server, stream=stream, max_connections=8)
    request = ModelRequest(messages=(UserMessage("q"),))
    answers: list[str | None] = []

    async def call() -> None:
        answers.append((await model.complete(request)).message.content)

    assert (await model.complete(request)).message.content == "warm"
    opened = model._client.current
    async with anyio.create_task_group() as tg:
        for _ in range(40):
            tg.start_soon(call)
    assert model._client.current is opened  # one pool for every call on this event loop
    assert len(answers) == 40 and all(a and a.startswith("answer") for a in answers)
    assert len(model.retries) == 4
    # every connection went back: 8 more calls at once still find the pool free
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(call)
    await model.aclose()
    assert model._client.current is None


async def test_a_large_pool_is_split_into_shards_of_sixteen_connections() -> None:
    # One pool of 64 walks 64 connections per request (bench/overhead.py, pool_shards): four of 16.
    for connections, shards in ((64, 4), (70, 4), (16, 1), (8, 1)):
        model = OpenAICompatible("m", base_url="http://127.0.0.1:9/v1", max_connections=connections)
        lane = model._client.get()
        assert len(lane.clients) == shards
        await model.aclose()
    with pytest.raises(ConfigError, match="max_connections must be at least 1"):
        OpenAICompatible("m", base_url="http://127.0.0.1:9/v1", max_connections=0)
