"""What only one protocol has: Anthropic thinking blocks and cache breakpoints, Responses
reasoning items, refusals and prompt_cache_key — each against its loopback server; and the
protocol's own headers on both transports (httpx2 directly, the official SDK)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from backend_support import CONTEXT, Sleeps, make_host

from tether import Agent, Limits, StopReason
from tether.context import ContextConfig, StatusConfig
from tether.models._anthropic import AnthropicMessages
from tether.models._responses import OpenAIResponses
from tether_testing.fake_server import Reply, scripted
from tether_testing.servers import FakeAnthropicServer, FakeResponsesServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ORDER = ("read_order", '{"order_id": "742"}')


def agent(model: Any, **kw: Any) -> Agent:
    return Agent(instructions="Investigate work orders.", model=model, limits=Limits(), **kw)


@pytest.mark.parametrize("stream", [True, False])
async def test_anthropic_thinking_blocks_go_back_signed_and_first(tmp_path: Path, stream: bool) -> None:
    replies = [
        Reply(content="Reading it.", tool_calls=[ORDER], reasoning="I should read 742."),
        Reply.text("open"),
    ]
    with FakeAnthropicServer(scripted(replies)) as server:
        model = AnthropicMessages("claude-test", base_url=server.url, stream=stream, sleep=Sleeps())
        result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
        await model.aclose()
        second = server.bodies()[1]
    assert result.stop_reason is StopReason.ACCEPTED
    turn = second["messages"][1]
    assert turn["role"] == "assistant"
    thinking, text, use = turn["content"]
    assert thinking["type"] == "thinking" and thinking["thinking"] == "I should read 742."
    assert len(thinking["signature"]) == 64  # the server's signature, unchanged
    assert text == {"type": "text", "text": "Reading it."}
    assert use["type"] == "tool_use" and use["input"] == {"order_id": "742"}
    assert second["messages"][2]["content"][0]["type"] == "tool_result"


async def test_anthropic_cache_breakpoints_end_the_stable_prefix_and_the_trajectory(tmp_path: Path) -> None:
    with FakeAnthropicServer(scripted([Reply.calls(ORDER), Reply.text("open")])) as server:
        model = AnthropicMessages("claude-test", base_url=server.url, sleep=Sleeps())
        status = ContextConfig(status=StatusConfig(strategy="replace"))
        result = await make_host(tmp_path).run(agent(model, context=status), "q", context=CONTEXT)
        await model.aclose()
        second = server.bodies()[1]
    assert result.stop_reason is StopReason.ACCEPTED
    assert second["system"][-1]["cache_control"] == {"type": "ephemeral"}
    last_user = second["messages"][-1]["content"]
    # the tool result ends the trajectory; the status block after it (the dynamic tail) is not cached
    assert last_user[0]["type"] == "tool_result" and last_user[0]["cache_control"] == {"type": "ephemeral"}
    assert "<agent_status>" in last_user[-1]["text"] and "cache_control" not in last_user[-1]
    marks = [
        b for m in second["messages"] for b in m["content"] if isinstance(b, dict) and "cache_control" in b
    ]
    assert len(marks) == 1


async def test_anthropic_cache_writes_and_reads_are_priced_apart(tmp_path: Path) -> None:
    usage = {"input_tokens": 100, "cache_creation_input_tokens": 1000, "cache_read_input_tokens": 0,
             "output_tokens": 10}  # fmt: skip
    with FakeAnthropicServer(scripted([Reply.text("open", usage=usage)])) as server:
        model = AnthropicMessages("claude-sonnet-4-5", base_url=server.url, sleep=Sleeps())
        result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
        await model.aclose()
    assert result.usage.prompt_tokens == 1100
    assert result.cost_usd == pytest.approx((100 * 3.0 + 1000 * 3.75 + 10 * 15.0) / 1_000_000)
    event = next(e.to_json() for e in result.events if str(e.kind) == "model_response")
    assert event["cache_write_tokens"] == 1000


@pytest.mark.parametrize("stream", [True, False])
async def test_responses_reasoning_items_are_carried_to_the_next_turn(tmp_path: Path, stream: bool) -> None:
    replies = [Reply(tool_calls=[ORDER], reasoning="Read 742 first."), Reply.text("open")]
    with FakeResponsesServer(scripted(replies)) as server:
        model = OpenAIResponses(
            "gpt-test", base_url=server.url, stream=stream, reasoning={"effort": "low"}, sleep=Sleeps()
        )
        result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
        await model.aclose()
        first, second = server.bodies()
    assert result.stop_reason is StopReason.ACCEPTED
    assert first["include"] == ["reasoning.encrypted_content"] and first["store"] is False
    kinds = [item.get("type", item.get("role")) for item in second["input"]]
    assert kinds == ["user", "reasoning", "function_call", "function_call_output"]
    reasoning = second["input"][1]
    assert reasoning["encrypted_content"].startswith("enc:")
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Read 742 first."}]
    assert second["input"][2]["call_id"] == second["input"][3]["call_id"]
    assert first["prompt_cache_key"] == second["prompt_cache_key"]
    assert first["instructions"].startswith("Investigate work orders.")


@pytest.mark.parametrize("stream", [True, False])
async def test_responses_refusal_ends_model_refused(tmp_path: Path, stream: bool) -> None:
    with FakeResponsesServer(
        scripted([Reply.text("I can't help with that.", finish_reason="refusal")])
    ) as server:
        model = OpenAIResponses("gpt-test", base_url=server.url, stream=stream, sleep=Sleeps())
        result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
        await model.aclose()
    assert result.stop_reason is StopReason.MODEL_REFUSED
    assert result.answer == "I can't help with that."


async def test_a_history_with_tool_use_keeps_its_tools_on_the_final_turn_without_tools(
    tmp_path: Path,
) -> None:
    # The budget's last turn disables tools; Anthropic still needs them defined (tool_choice none).
    replies = [Reply.calls(ORDER), Reply.text("what I found")]
    with FakeAnthropicServer(scripted(replies)) as server:
        model = AnthropicMessages("claude-test", base_url=server.url, sleep=Sleeps())
        limits = Limits(llm_calls=1, llm_calls_hard=3)
        result = await make_host(tmp_path).run(
            Agent(instructions="x", model=model, limits=limits), "q", context=CONTEXT
        )
        await model.aclose()
        last = server.bodies()[-1]
    assert result.stop_reason is StopReason.BUDGET and result.answer == "what I found"
    assert last["tool_choice"] == {"type": "none"} and [t["name"] for t in last["tools"]] == [
        "read_history",
        "read_order",
    ]


async def test_fallback_model_in_python_moves_on_and_stays_on_the_model_that_answers(tmp_path: Path) -> None:
    from tether.models._fallback import FallbackModel
    from tether.models._retrying import RetryPolicy

    down = FakeAnthropicServer.error(529, "Overloaded")
    with (
        FakeAnthropicServer(scripted([down, down])) as first,
        FakeResponsesServer(scripted([Reply.calls(ORDER), Reply.text("open")])) as second,
    ):
        primary = AnthropicMessages(
            "claude-test", base_url=first.url, retry=RetryPolicy(max_retries=1), sleep=Sleeps()
        )
        backup = OpenAIResponses("gpt-test", base_url=second.url, sleep=Sleeps())
        model = FallbackModel([primary, backup])
        result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
        await model.aclose()
        assert (len(first.received), len(second.received)) == (2, 2)
    assert result.stop_reason is StopReason.ACCEPTED and result.answer == "open"
    retried = [{"kind": "overloaded", "attempt": 1, "delay_s": model.switches[0]["retries"][0]["delay_s"]}]
    error = model.switches[0]["error"]
    assert model.switches == [{"model": "claude-test", "error": error, "retries": retried, "to": "gpt-test"}]
    assert "overloaded" in error


def test_a_checkpoint_keeps_the_provider_items_a_paused_run_must_send_back() -> None:
    # A run paused for approval resumes from its checkpoint: the thinking block and its
    # signature must still be there for the next request, or Anthropic refuses it.
    from datetime import UTC, datetime

    from tether.core.messages import AssistantMessage, ToolCall
    from tether.runs._checkpoint import state_from_json, state_to_json
    from tether.runs._values import RunState

    thinking = {"provider": "anthropic", "type": "thinking", "thinking": "read it", "signature": "c2ln"}
    state = RunState(run_id="r", objective="q", context=CONTEXT, started=0.0, started_at=datetime.now(UTC))
    state.trajectory.append(
        AssistantMessage("x", (ToolCall("t1", "read_order", "{}"),), provider_items=(thinking,))
    )
    restored = state_from_json(state_to_json(state)).trajectory[-1]
    assert isinstance(restored, AssistantMessage) and restored.provider_items == (thinking,)
    blocks = AnthropicMessages._message_blocks(restored)[1]
    assert blocks[0] == {"type": "thinking", "thinking": "read it", "signature": "c2ln"}


async def test_httpx2_directly_sends_the_headers_the_official_sdk_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The "http" transport must say what the SDK says: the key where the protocol wants it, the
    # API version the SDK pins, the caller's headers — so the two transports speak one API.
    monkeypatch.setenv("TETHER_TEST_KEY", "sk-native-0123456789")
    sent: dict[str, list[dict[str, str]]] = {}
    for name, backend, server_type in (
        ("anthropic", AnthropicMessages, FakeAnthropicServer),
        ("openai-responses", OpenAIResponses, FakeResponsesServer),
    ):
        for transport in ("http", "sdk"):
            with server_type(scripted([Reply.text("open")])) as server:
                model = backend(
                    "m", base_url=server.url, api_key_env="TETHER_TEST_KEY", headers={"X-Team": "ops"},
                    transport=transport,
                )  # fmt: skip
                result = await make_host(tmp_path).run(agent(model), "q", context=CONTEXT)
                await model.aclose()
                assert result.stop_reason is StopReason.ACCEPTED and result.answer == "open"
                sent.setdefault(name, []).append(dict(server.received[0].headers))
    keys = ("authorization", "x-api-key", "anthropic-version", "x-team", "content-type")
    for name, (http, sdk) in sent.items():
        assert {k: http.get(k) for k in keys} == {k: sdk.get(k) for k in keys}, name
        assert "sk-native-0123456789" in (http.get("authorization") or http.get("x-api-key") or "")
        assert http["x-team"] == "ops" and http["content-type"] == "application/json"
    assert "anthropic-version" in sent["anthropic"][0]


def test_an_unknown_transport_is_a_configuration_error() -> None:
    from tether.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown transport 'grpc'"):
        AnthropicMessages("claude-test", base_url="http://127.0.0.1:9", transport="grpc")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown transport 'anthropic'"):
        OpenAIResponses("gpt-test", base_url="http://127.0.0.1:9", transport="anthropic")
