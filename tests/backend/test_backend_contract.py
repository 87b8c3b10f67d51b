"""One contract for every model backend against a real server on 127.0.0.1 that speaks its
protocol: chat completions (``OpenAICompatible``), the Anthropic Messages API
(``AnthropicMessages``) and the OpenAI Responses API (``OpenAIResponses``), each on both of
its transports: httpx2 directly (the default) and its official SDK client (``anthropic``,
``openai``; ``transport="sdk"``). SPEC L1, L2, L4, C1."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from backend_support import CONTEXT, Sleeps, make_host

from tether import Agent, Limits, StopReason
from tether.clisupport.output import run_exit
from tether.models._anthropic import AnthropicMessages
from tether.models._openai import OpenAICompatible
from tether.models._pricing import Price
from tether.models._responses import OpenAIResponses
from tether.models._retrying import RetryPolicy
from tether_testing.fake_server import FakeChatServer, Reply, scripted
from tether_testing.servers import FakeAnthropicServer, FakeResponsesServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ORDER = ("read_order", '{"order_id": "742"}')
HISTORY = ("read_history", '{"order_id": "742"}')
PRICE = Price(2.0, 8.0, 0.5)


@dataclass
class Provider:
    """One backend and the server that speaks its protocol."""

    name: str
    server: type[FakeChatServer]
    backend: Callable[..., Any]
    model: str
    finishes: dict[str, str]  # tether's finish -> the protocol's own value
    error: Callable[..., Reply]
    history_key: str
    servers: list[FakeChatServer] = field(default_factory=list)

    def serve(self, replies: Sequence[Reply]) -> FakeChatServer:
        server = self.server(scripted(replies)).__enter__()
        self.servers.append(server)
        return server

    def make(self, server: FakeChatServer, **kw: Any) -> Any:
        kw.setdefault("sleep", Sleeps())
        kw.setdefault("prices", {self.model: PRICE})
        return self.backend(self.model, base_url=server.url, **kw)

    def history(self, body: dict[str, Any]) -> list[Any]:
        return list(body[self.history_key])

    def fixed(self, body: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in body.items() if k not in (self.history_key, "max_tokens")}


def _chat_error(status: int, message: str = "error", **kw: Any) -> Reply:
    return Reply(status=status, error_body={"error": {"message": message, "type": "server_error"}}, **kw)


PROVIDERS = {
    "openai-chat": lambda: Provider(
        "openai-chat", FakeChatServer, OpenAICompatible, "fake-model",
        {"length": "length", "refused": "content_filter", "refusal": "refusal", "unknown": "weird"},
        _chat_error, "messages",
    ),
    "anthropic": lambda: Provider(
        "anthropic", FakeAnthropicServer, AnthropicMessages, "claude-test",
        {"length": "max_tokens", "refused": "refusal", "refusal": "refusal", "unknown": "weird",
         "paused": "pause_turn"},
        FakeAnthropicServer.error, "messages",
    ),
    "openai-responses": lambda: Provider(
        "openai-responses", FakeResponsesServer, OpenAIResponses, "gpt-test",
        {"length": "max_output_tokens", "refused": "content_filter", "refusal": "refusal",
         "unknown": "weird"},
        FakeResponsesServer.error, "input",
    ),
}  # fmt: skip
# The same contract on the official SDK clients' own transport (``transport="sdk"``; the default
# posts over httpx2 directly): the same bodies, the same answers.
for _name in ("openai-chat", "anthropic", "openai-responses"):
    PROVIDERS[f"{_name}+sdk"] = lambda _name=_name: dataclasses.replace(  # type: ignore[misc]
        PROVIDERS[_name](), backend=functools.partial(PROVIDERS[_name]().backend, transport="sdk")
    )


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> Iterator[Provider]:
    p = PROVIDERS[request.param]()
    yield p
    for server in p.servers:
        server.__exit__(None, None, None)


def agent(model: Any, **limits: Any) -> Agent:
    return Agent(instructions="Investigate work orders.", model=model, limits=Limits(**limits))


def events(result: Any, kind: str) -> list[dict[str, Any]]:
    return [e.to_json() for e in result.events if str(e.kind) == kind]


@pytest.mark.spec("L4")
@pytest.mark.parametrize("stream", [True, False])
async def test_parallel_tool_calls_round_trip_and_the_answer_is_accepted(
    provider: Provider, tmp_path: Path, stream: bool
) -> None:
    server = provider.serve([Reply.calls(ORDER, HISTORY), Reply.text("Order 742 awaits part P-17.")])
    pieces: list[tuple[str, str]] = []
    model = provider.make(server, stream=stream, on_delta=lambda k, p: pieces.append((k, p)))
    result = await make_host(tmp_path).run(agent(model), "Why is 742 open?", context=CONTEXT)
    await model.aclose()

    assert result.stop_reason is StopReason.ACCEPTED and run_exit(str(result.stop_reason), []) == 0
    assert result.answer == "Order 742 awaits part P-17."
    assert [(c.tool, c.status) for c in result.calls] == [("read_order", "ok"), ("read_history", "ok")]
    # The second request answers each call by the id the server gave it.
    second = json.dumps(provider.history(server.bodies()[1]))
    assert all(c.call_id in second for c in result.calls) and len({c.call_id for c in result.calls}) == 2
    assert events(result, "model_response")[-1]["finish"] == "stop"
    if stream:
        text = [p for k, p in pieces if k == "text"]
        assert len(text) > 1 and "".join(text) == result.answer
        assert [p for k, p in pieces if k == "tool_call"] == ["read_order", "read_history"]


@pytest.mark.spec("L2")
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        ("length", StopReason.TRUNCATED),
        ("refused", StopReason.MODEL_REFUSED),
        ("refusal", StopReason.MODEL_REFUSED),  # a refusal part or field, not only a stop reason
        ("unknown", StopReason.MODEL_ERROR),
        ("paused", StopReason.MODEL_ERROR),
    ],
)
async def test_a_final_answer_that_did_not_end_normally_is_never_accepted(
    provider: Provider, tmp_path: Path, stream: bool, finish: str, reason: StopReason
) -> None:
    if finish not in provider.finishes:
        pytest.skip(f"{provider.name} has no {finish} finish")
    raw = provider.finishes[finish]
    server = provider.serve([Reply.calls(ORDER), Reply.text("Order 742 is op", finish_reason=raw)])
    model = provider.make(server, stream=stream)
    result = await make_host(tmp_path).run(agent(model), "Why is 742 open?", context=CONTEXT)
    await model.aclose()

    assert result.stop_reason is reason
    assert run_exit(str(result.stop_reason), []) == 7
    assert result.answer == "Order 742 is op"  # kept, and flagged by the stop reason
    stop = events(result, "stop")[0]
    assert stop["reason"] == str(reason) and repr(raw) in stop["detail"]
    assert events(result, "model_response")[-1]["finish"] == ("refused" if finish == "refusal" else finish)


async def test_a_normal_answer_after_the_same_exchange_is_accepted(
    provider: Provider, tmp_path: Path
) -> None:
    # The legitimate twin of the test above: nothing but the finish differs.
    server = provider.serve([Reply.calls(ORDER), Reply.text("Order 742 is open.")])
    model = provider.make(server)
    result = await make_host(tmp_path).run(agent(model), "Why is 742 open?", context=CONTEXT)
    await model.aclose()
    assert result.stop_reason is StopReason.ACCEPTED and result.answer == "Order 742 is open."


@pytest.mark.spec("T2")
@pytest.mark.parametrize("stream", [True, False])
async def test_429_waits_what_retry_after_says_and_5xx_is_retried(
    provider: Provider, tmp_path: Path, stream: bool
) -> None:
    overloaded = 529 if provider.name == "anthropic" else 503
    server = provider.serve(
        [
            provider.error(429, "slow down", headers={"retry-after": "2"}),
            provider.error(overloaded, "Overloaded"),
            Reply.text("open"),
        ]
    )
    sleeps = Sleeps()
    model = provider.make(server, stream=stream, sleep=sleeps, rand=lambda: 0.0)
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
    await model.aclose()

    assert result.stop_reason is StopReason.ACCEPTED and result.answer == "open"
    assert sleeps.waits == [2.0, 1.0]  # Retry-After, then the policy's second backoff (0.5 * 2)
    kinds = [r["kind"] for r in events(result, "model_response")[0]["retries"]]
    assert kinds == ["rate_limited", "overloaded" if overloaded == 529 else "server_error"]
    assert len(server.received) == 3


async def test_a_client_error_is_final_and_ends_model_error(provider: Provider, tmp_path: Path) -> None:
    server = provider.serve([provider.error(400, "prompt is too long")])
    model = provider.make(server)
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
    await model.aclose()
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert "HTTP 400" in result.detail and "prompt is too long" in result.detail
    assert len(server.received) == 1


@pytest.mark.parametrize("cut", ["after_headers", "mid_chunk", "before_done", "error_event"])
async def test_a_broken_stream_is_retried_and_never_half_accepted(
    provider: Provider, tmp_path: Path, cut: str
) -> None:
    if cut == "before_done" and provider.name in ("openai-chat", "anthropic"):
        # A stream that reached its finish reason is whole without [DONE] or message_stop.
        cut = "before_finish"
    server = provider.serve([Reply.text("half an answer", cut=cut), Reply.text("whole answer")])
    model = provider.make(server, stream=True)
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
    await model.aclose()
    assert result.stop_reason is StopReason.ACCEPTED and result.answer == "whole answer"
    assert len(events(result, "model_response")[0]["retries"]) == 1


@pytest.mark.parametrize("stream", [True, False])
async def test_timeout_bounds_the_whole_call_not_each_read(
    provider: Provider, tmp_path: Path, stream: bool
) -> None:
    # One byte every 50 ms: no single read ever waits long, the answer would take a minute.
    server = provider.serve([Reply.text("x" * 600, trickle_s=0.05)])
    model = provider.make(server, stream=stream, timeout_s=0.5, retry=RetryPolicy(max_retries=0))
    result = await make_host(tmp_path).run(agent(model, deadline_s=60), "q", context=CONTEXT)
    await model.aclose()
    assert result.stop_reason is StopReason.MODEL_ERROR  # not the run's 60 s deadline
    assert "did not complete within 0.5s" in result.detail


async def test_the_run_deadline_cancels_a_call_in_flight(provider: Provider, tmp_path: Path) -> None:
    server = provider.serve([Reply.text("too late", delay_s=5.0)])
    model = provider.make(server, timeout_s=30)
    result = await make_host(tmp_path).run(agent(model, deadline_s=0.5), "q", context=CONTEXT)
    await model.aclose()
    assert result.stop_reason is StopReason.DEADLINE
    assert result.detail == "deadline passed while the model was thinking"


@pytest.mark.parametrize("stream", [True, False])
async def test_tokens_cached_tokens_and_cost_are_counted_across_calls(
    provider: Provider, tmp_path: Path, stream: bool
) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 400}}
    server = provider.serve([Reply.calls(ORDER, usage=usage), Reply.text("open", usage=usage)])
    model = provider.make(server, stream=stream)
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
    await model.aclose()
    assert result.stop_reason is StopReason.ACCEPTED
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (2000, 200)
    assert result.usage.cached_tokens == 800
    one = (600 * 2.0 + 400 * 0.5 + 100 * 8.0) / 1_000_000
    assert result.cost_usd == pytest.approx(2 * one)
    assert [e["cached_tokens"] for e in events(result, "model_response")] == [400, 400]


@pytest.mark.spec("C1")
async def test_the_prefix_is_byte_identical_across_turns(provider: Provider, tmp_path: Path) -> None:
    server = provider.serve([Reply.calls(ORDER), Reply.calls(HISTORY), Reply.text("open")])
    model = provider.make(server)
    result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
    await model.aclose()
    assert result.stop_reason is StopReason.ACCEPTED
    bodies = server.bodies()
    assert len(bodies) == 3

    def strip(value: Any) -> Any:  # cache breakpoints move to each turn's end; the content does not
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    fixed = [json.dumps(strip(provider.fixed(b)), sort_keys=True) for b in bodies]
    assert fixed[0] == fixed[1] == fixed[2]  # system prompt, tools, settings: the same bytes
    for before, after in itertools.pairwise(bodies):
        old, new = strip(provider.history(before)), strip(provider.history(after))
        assert len(new) > len(old)
        assert [json.dumps(x) for x in new[: len(old)]] == [json.dumps(x) for x in old]
