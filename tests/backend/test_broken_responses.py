"""A model server that fails inside a 200 answer never yields an accepted run (SPEC L2).

The server is real (127.0.0.1, HTTP/1.1, chunked SSE) and breaks its answer at each point a
real one can: after the headers, in the middle of a chunk, after the content but before the
finish reason, with a non-JSON event, with an ``error`` event — streamed and whole, through the
backend's own HTTP layer and through the ``openai`` client. Each broken answer is retried per
the backend's retry policy; when retries are spent the run ends ``model_error`` with no answer.
A stream that reached its finish reason and ends cleanly without ``[DONE]`` is not broken (real
servers send such streams): it is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from backend_support import CONTEXT, ORDER_CALLS, Sleeps, make_host

from tether import Agent, StopReason
from tether.models._openai import OpenAICompatible, RetryPolicy
from tether_testing.fake_server import CUTS, FakeChatServer, Reply

pytestmark = [pytest.mark.anyio, pytest.mark.spec("L2")]

Serve = Callable[[Sequence[Reply]], FakeChatServer]
STREAM_CUTS = sorted(set(CUTS) - {"before_done"})  # a chat stream whole but for [DONE] is no cut
WHOLE_CUTS = ["after_headers", "malformed", "mid_chunk"]
ANSWER = "Order 742 is open: awaiting part P-17."
CASES = [(True, cut) for cut in STREAM_CUTS] + [(False, cut) for cut in WHOLE_CUTS]


def model(server: FakeChatServer, *, stream: bool, transport: str, retries: int) -> OpenAICompatible:
    return OpenAICompatible(
        "fake-model",
        base_url=server.url,
        stream=stream,
        transport=transport,  # type: ignore[arg-type]
        retry=RetryPolicy(max_retries=retries, base_delay_s=0.01),
        sleep=Sleeps(),
        timeout_s=5,
    )


def run(tmp_path: Path, backend: OpenAICompatible) -> Any:
    agent = Agent(instructions="Investigate work orders.", model=backend)
    return make_host(tmp_path).run(agent, "Why is 742 open?", context=CONTEXT)


def model_responses(result: Any) -> list[dict[str, Any]]:
    return [e.to_json() for e in result.events if str(e.kind) == "model_response"]


@pytest.mark.parametrize("transport", ["http", "openai"])
@pytest.mark.parametrize(("stream", "cut"), CASES)
async def test_a_broken_answer_every_time_ends_model_error_never_accepted(
    serve: Serve, tmp_path: Path, stream: bool, cut: str, transport: str
) -> None:
    server = serve([Reply.text(ANSWER, cut=cut, chunks=6)] * 3)
    result = await run(tmp_path, model(server, stream=stream, transport=transport, retries=2))

    assert result.stop_reason is StopReason.MODEL_ERROR
    assert result.answer is None
    assert "gave up after 3 attempts" in result.detail
    assert len(server.received) == 3  # the retry policy was followed, then the run stopped
    assert model_responses(result) == []  # no broken answer ever counted as a model turn
    assert [str(e.kind) for e in result.events].count("stop") == 1


@pytest.mark.parametrize("transport", ["http", "openai"])
@pytest.mark.parametrize(("stream", "cut"), CASES)
async def test_a_broken_answer_is_retried_and_the_good_one_is_used(
    serve: Serve, tmp_path: Path, stream: bool, cut: str, transport: str
) -> None:
    ORDER_CALLS.clear()
    server = serve(
        [
            Reply.calls(("read_order", '{"order_id": "742"}'), cut=cut),
            Reply.calls(("read_order", '{"order_id": "742"}')),
            Reply.text(ANSWER),
        ]
    )
    result = await run(tmp_path, model(server, stream=stream, transport=transport, retries=2))

    assert result.stop_reason is StopReason.ACCEPTED and result.answer == ANSWER
    assert ORDER_CALLS == ["742"]  # the half-received tool call never ran; the whole one ran once
    [retry] = model_responses(result)[0]["retries"]
    assert retry["attempt"] == 1 and retry["kind"] in {
        "connection",
        "stream_incomplete",
        "stream_unreadable",
        "server_error",
        "unusable_response",
    }


@pytest.mark.parametrize("stream", [True, False])
async def test_a_response_with_neither_text_nor_tool_calls_is_not_an_answer(
    serve: Serve, tmp_path: Path, stream: bool
) -> None:
    empty = [Reply(content=None), Reply(content="  \n"), Reply(content="", finish_reason="stop")]
    server = serve(empty)
    result = await run(tmp_path, model(server, stream=stream, transport="http", retries=2))

    assert result.stop_reason is StopReason.MODEL_ERROR and result.answer is None
    assert "empty_response" in result.detail and "neither text nor tool calls" in result.detail

    server = serve([Reply(content=None), Reply.text(ANSWER)])
    result = await run(tmp_path, model(server, stream=stream, transport="http", retries=2))
    assert result.ok and result.answer == ANSWER
    assert model_responses(result)[0]["retries"][0]["kind"] == "empty_response"


async def test_what_each_cut_leaves_is_named_in_the_error(serve: Serve, tmp_path: Path) -> None:
    server = serve([Reply.text(ANSWER, cut="before_finish")])
    result = await run(tmp_path, model(server, stream=True, transport="http", retries=0))
    assert "stream_incomplete" in result.detail
    assert "without a finish reason and [DONE]" in result.detail
    assert f"after {len(ANSWER)} characters of text" in result.detail

    server = serve([Reply.text(ANSWER, cut="before_done")])  # it reached its finish reason: whole
    result = await run(tmp_path, model(server, stream=True, transport="http", retries=0))
    assert result.ok and result.answer == ANSWER

    server = serve([Reply.text(ANSWER, cut="error_event")])
    result = await run(tmp_path, model(server, stream=True, transport="http", retries=0))
    assert "server_error" in result.detail and "crashed while generating" in result.detail


async def test_a_server_that_ignores_stream_true_is_read_as_a_whole_answer(tmp_path: Path) -> None:
    with FakeChatServer(lambda request, index: Reply.text(ANSWER), ignore_stream=True) as server:
        result = await run(tmp_path, model(server, stream=True, transport="http", retries=0))
        assert server.bodies()[0]["stream"] is True
    assert result.ok and result.answer == ANSWER


@pytest.mark.parametrize("stream", [True, False])
async def test_json_of_the_wrong_shape_is_an_unusable_answer_not_a_crash(
    tmp_path: Path, stream: bool
) -> None:
    """A proxy or a half-compatible server: valid JSON, but not a chat completion."""
    import json

    from tether_testing.fake_server import Received

    async def shapeless(method: str, path: str, headers: dict[str, str], body: bytes, writer: Any) -> bool:
        server.received.append(Received(method, path, headers, body))
        if stream:
            events = b'data: {"choices": {"delta": "x"}}\n\ndata: [DONE]\n\n'
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
            writer.write(head % len(events) + events)
        else:
            data = json.dumps({"choices": [{"message": {"tool_calls": ["not an object"]}}]}).encode()
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            writer.write(head % len(data) + data)
        await writer.drain()
        return True

    with FakeChatServer(lambda request, index: Reply.text(ANSWER)) as server:
        server._route = shapeless  # type: ignore[method-assign]
        result = await run(tmp_path, model(server, stream=stream, transport="http", retries=1))
    assert result.stop_reason is StopReason.MODEL_ERROR and result.answer is None
    assert "unusable_response" in result.detail and len(server.received) == 2
