"""A thirteenth round: transport, time and accounting, driven as the others are (an agent file
naming ``model.provider`` and ``tether run`` in process, ``test_faults_round10.run_agent``, or
the Python API) against real servers on 127.0.0.1 speaking each protocol, on both transports.

Accounting: a call the run's deadline cuts after its server reported usage (an Anthropic
``message_start``'s counts, a chat usage chunk before ``[DONE]``), or after failed attempts or
fallback models that were billed, counts what was billed: the run's tokens and cost, and a
``model_error`` event with the counts, before the ``deadline`` stop (before: the cancellation
dropped them, the run ending ``deadline`` with 0 tokens and $0 where the same cut by
``timeout_s`` counted them). An answer that names another model than the one asked for (a
router, an alias, a silent upgrade: ``m-big`` for ``m-1``) is priced as the model that answered,
which the provider bills, where the price table has it, its ``model_response`` saying so
(``priced_as``), and a cost budget counts it (before: priced as the model asked for, a third of
the bill, and the run ended ``accepted`` over its budget); a dated snapshot of the model asked for
and a name the table lacks keep the asked model's price.

Held as they were (coverage of this round's faults, each ending the honest way on every protocol
and transport): informational 1xx answers before the 200 and HTTP/1.0 answers with no length
(accepted whole; cut early: retried, never accepted), a stream of keep-alive comments and empty
events forever (cut at ``timeout_s``), a server that accepts the connection and never answers
(``timeout``), a ``retry-after`` longer than what is left of the run's deadline (``model_error``
at once naming the deadline, asked once), a run cancelled mid-stream (its connection closed: the
server's writes fail), a whole answer or a stream event of one multi-megabyte line (accepted).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS
from test_faults_round4 import SERVERS4, Raw
from test_faults_round10 import cut_after_first_text, run_agent
from test_faults_round11 import OTHER_TEXT, WHERE, garbled_after_usage, terminal_text, trace_of

from tether.core.messages import UserMessage
from tether.errors import ModelError
from tether.models import AnthropicMessages, ModelRequest, OpenAICompatible, OpenAIResponses, RetryPolicy
from tether_testing.fake_server import Pause, Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

SDKS = {"openai-chat": "openai", "openai-responses": "openai", "anthropic": "anthropic"}
PRICES = {"m-1": {"input": 1_000_000.0, "output": 1_000_000.0}}  # $1 a token: the cost is the count


# -- a call the run's deadline cuts after it was billed ---------------------------------------------


def stall_after_usage(items: list[Any]) -> list[Any]:
    """The stream stalls, never ending, right after its server reported usage: an Anthropic
    ``message_start`` (its input count), a chat usage chunk (before ``[DONE]``)."""
    if isinstance(items[0], dict) and items[0].get("type") == "message_start":
        return [items[0], Pause(60)]
    at = next(n for n, i in enumerate(items) if isinstance(i, dict) and i.get("usage"))
    return [*items[: at + 1], Pause(60)]


STALL = Reply.text(ANSWER, edit=stall_after_usage)
CUT = [
    # provider, transport, a first attempt that fails after it was billed, then the stall
    ("anthropic", "http", [STALL]),
    ("anthropic", "sdk", [STALL]),
    ("openai-chat", "http", [STALL]),
    ("openai-chat", "sdk", [Reply.text(ANSWER, edit=garbled_after_usage), STALL]),
    ("anthropic", "http", [Raw(content=ANSWER, wire=cut_after_first_text), STALL]),
    ("openai-responses", "http", [Reply.text(ANSWER, edit=terminal_text(OTHER_TEXT)), Reply(delay_s=60)]),
    ("openai-responses", "sdk", [Reply.text(ANSWER, edit=terminal_text(OTHER_TEXT)), Reply(delay_s=60)]),
]


def _model(provider: str, transport: str, url: str, **more: Any) -> dict[str, Any]:
    importlib.import_module(SDKS[provider])  # the SDK's first import is no part of the deadline
    model = {"provider": provider, "name": "m-1", "base_url": url, "streaming": True, "transport": transport}
    return {**model, "max_retries": 1, "timeout_s": 60, "prices": PRICES, **more}


@pytest.mark.parametrize(("provider", "transport", "replies"), CUT)
def test_a_call_the_runs_deadline_cuts_after_it_was_billed_still_counts(
    tmp_path: Path, provider: str, transport: str, replies: list[Reply]
) -> None:
    """The run's deadline (3 s, under a ``timeout_s`` of 60) passes while the call waits on a
    stream that already reported usage, or on a retry after an attempt that was billed: the run
    ends ``deadline`` (exit 4) with the billed tokens and their cost counted and a
    ``model_error`` event naming them (before: 0 tokens, $0, no event). Without the stall, the
    same server's answer is accepted with its counts."""
    with SERVERS4[provider](scripted(replies)) as server:
        model = _model(provider, transport, server.url, limits={"deadline_s": 3})
        code, out, _ = run_agent(tmp_path, model)
    assert (code, out["stop_reason"]) == (4, "deadline"), out
    assert out["tokens"] > 0 and out["cost_usd"] == out["tokens"], out
    errors = [e for e in trace_of(out) if e["kind"] == "model_error"]
    assert len(errors) == 1 and "deadline" in errors[0]["error"], errors
    assert errors[0]["prompt_tokens"] + errors[0]["completion_tokens"] == out["tokens"], errors
    with SERVERS4[provider](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as server:
        code, out, _ = run_agent(tmp_path, _model(provider, transport, server.url, limits={"deadline_s": 30}))
    assert (code, out["stop_reason"], out["answer"], out["tokens"]) == (0, "accepted", ANSWER, 220), out


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_a_fallback_chain_the_deadline_cuts_counts_the_models_it_left(tmp_path: Path, provider: str) -> None:
    """The first model's two attempts fail after each was billed; the fallback (``provider``)
    never answers and the run's deadline passes: the run counts both billed attempts (before:
    0 tokens)."""
    failing = Reply.text(ANSWER, edit=garbled_after_usage)
    with (
        SERVERS["openai-chat"](scripted([failing, failing])) as first,
        SERVERS[provider](scripted([Reply(delay_s=60)])) as second,
    ):
        model = _model("openai-chat", "http", first.url, limits={"deadline_s": 3})
        model["fallback"] = [{"provider": provider, "name": "m-1", "base_url": second.url, "timeout_s": 60}]
        code, out, _ = run_agent(tmp_path, model)
    assert (code, out["stop_reason"]) == (4, "deadline"), out
    assert out["tokens"] == out["cost_usd"] == 220, out
    assert len(second.bodies()) == 1


# -- an answer that names another model than the one asked for --------------------------------------


def answered_as(name: str) -> Any:
    """Every event (or the whole answer) names ``name`` as the model that answered: chat's
    ``model``, an Anthropic ``message_start``'s message, a Responses event's response."""

    def edit(items: list[Any]) -> list[Any]:
        for item in items:
            if isinstance(item, dict):
                for holder in (item, item.get("message"), item.get("response")):
                    if isinstance(holder, dict) and ("model" in holder or holder is item):
                        holder["model"] = name
        return items

    return edit


@pytest.mark.parametrize(("provider", "stream", "transport"), [*WHERE, ("openai-chat", True, "sdk")])
def test_an_answer_from_another_model_is_priced_as_the_model_that_answered(
    tmp_path: Path, provider: str, stream: bool, transport: str
) -> None:
    """Asked for ``m-1`` ($1 a token), the server answers as ``m-big`` ($3 a token; a router or
    an alias that served another model, which the provider bills): the run's cost is ``m-big``'s
    and a cost budget between the two prices trips (before: priced as ``m-1``, a third of what
    was billed, and the run ended ``accepted`` over its budget), each ``model_response`` naming
    the model it was priced as. A dated snapshot of the model asked for (``m-1-2025-01-01``)
    and a name the table does not price (a local server's) keep ``m-1``'s price."""
    prices = {**PRICES, "m-big": {"input": 3_000_000.0, "output": 3_000_000.0}}
    model: dict[str, Any] = {"provider": provider, "name": "m-1", "streaming": stream, "transport": transport}
    model.update(max_retries=0, timeout_s=10, prices=prices)
    importlib.import_module(SDKS[provider])
    for name, cost, priced_as in (
        ("m-big", 660.0, "m-big"),
        ("m-1-2025-01-01", 220.0, None),
        ("local", 220.0, None),
    ):
        edit = answered_as(name)
        with SERVERS[provider](
            scripted([Reply.calls(ORDER, edit=edit), Reply.text(ANSWER, edit=edit)])
        ) as server:
            code, out, responses = run_agent(tmp_path, {**model, "base_url": server.url})
        assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
        assert (out["tokens"], out["cost_usd"]) == (220, cost), out
        assert [(r["model"], r.get("priced_as")) for r in responses] == [(name, priced_as)] * 2, responses
    budget = {**model, "limits": {"max_cost_usd": 400, "final_turn_on_budget": False}}
    edit = answered_as("m-big")
    turns = [Reply.calls(ORDER, edit=edit)] * 3 + [Reply.text(ANSWER, edit=edit)]
    with SERVERS[provider](scripted(turns)) as server:
        code, out, _ = run_agent(tmp_path, {**budget, "base_url": server.url})
    assert (code != 0, out["stop_reason"]) == (True, "budget"), out


# -- transport faults that end honestly (coverage) ----------------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, list[str]], Awaitable[None]]


class RawServer:
    """A server on 127.0.0.1 that reads one request per connection and hands the connection to
    ``handler`` (every byte of the answer is its own); ``notes`` collects what it saw."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.port = 0
        self.requests = 0
        self.notes: list[str] = []
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> RawServer:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
            length = next(int(h.split(":")[1]) for h in head.split("\r\n") if h.startswith("content-length"))
            await reader.readexactly(length)
            self.requests += 1
            await self.handler(reader, writer, self.notes)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError) as err:
            self.notes.append(f"closed: {type(err).__name__}")
        finally:
            writer.close()


BACKENDS = {
    "openai-chat": OpenAICompatible,
    "anthropic": AnthropicMessages,
    "openai-responses": OpenAIResponses,
}
WHOLE: dict[str, dict[str, Any]] = {
    "openai-chat": {
        "id": "c",
        "model": "m-1",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    },
    "anthropic": {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "m-1",
        "content": [{"type": "text", "text": ANSWER}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    },
    "openai-responses": {
        "id": "r",
        "object": "response",
        "status": "completed",
        "model": "m-1",
        "output": [
            {
                "type": "message",
                "id": "i",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 10, "output_tokens": 5},
    },
}
STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
PARAMS = [(p, t) for p in sorted(BACKENDS) for t in ("http", "sdk")]


async def _ask(provider: str, transport: str, url: str, **kw: Any) -> Any:
    importlib.import_module(SDKS[provider])
    options: dict[str, Any] = {"timeout_s": 10, "retry": RetryPolicy(max_retries=1, base_delay_s=0.01), **kw}
    async with BACKENDS[provider]("m-1", base_url=url, transport=transport, **options) as model:
        return await model.complete(ModelRequest(messages=[UserMessage("Why is 742 open?")]))


def _answer(provider: str, status_lines: bytes, *, length: bool = True, cut: int = 0) -> Handler:
    body = json.dumps(WHOLE[provider]).encode()
    body = body[:cut] if cut else body
    sized = b"content-length: %d\r\n" % len(body) if length else b""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, notes: list[str]) -> None:
        writer.write(status_lines + b"content-type: application/json\r\n" + sized + b"\r\n" + body)
        await writer.drain()

    return handler


INFORMATIONAL = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"
INFORMATIONAL += b"HTTP/1.1 200 OK\r\n"


@pytest.mark.anyio
@pytest.mark.parametrize(("provider", "transport"), PARAMS)
async def test_informational_answers_and_http_1_0_without_a_length(provider: str, transport: str) -> None:
    """1xx answers before the 200, and an HTTP/1.0 answer with no length (its end the close):
    accepted; the same cut early is retried and ends ``ModelError``, never accepted."""
    http_1_0 = b"HTTP/1.0 200 OK\r\n"
    for handler in (_answer(provider, INFORMATIONAL), _answer(provider, http_1_0, length=False)):
        with RawServer(handler) as server:
            response = await _ask(provider, transport, server.url)
        assert (response.message.content, server.requests) == (ANSWER, 1)
    cut = _answer(provider, http_1_0, length=False, cut=40)
    with RawServer(cut) as server, pytest.raises(ModelError, match="gave up after 2 attempts"):
        await _ask(provider, transport, server.url)
    assert server.requests == 2


async def _pings(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, notes: list[str]) -> None:
    """A stream of keep-alive comments and empty events, forever."""
    writer.write(STREAM_HEAD)
    while True:
        for piece in (b": keep-alive\n\n", b"data: \n\n", b"event: ping\ndata: \n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        await writer.drain()
        await asyncio.sleep(0.02)


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, notes: list[str]) -> None:
    await asyncio.sleep(60)


@pytest.mark.anyio
@pytest.mark.parametrize(("provider", "transport"), PARAMS)
async def test_pings_forever_and_a_silent_server_end_at_timeout_s(provider: str, transport: str) -> None:
    """Keep-alive comments forever, and a server that takes the request and never answers: each
    attempt cut at ``timeout_s`` (2 s; within 20 s in all), ``ModelError`` naming the timeout."""
    for handler in (_pings, _silent):
        timed_out = pytest.raises(ModelError, match="did not complete within 2s")
        with RawServer(handler) as server, anyio.fail_after(20), timed_out:
            await _ask(provider, transport, server.url, timeout_s=2, stream=True, retry=RetryPolicy(0))
        assert server.requests == 1


def _slow_stream(provider: str) -> Handler:
    """An answer that streams text slowly, forever (counting the pieces it wrote)."""
    if provider == "anthropic":
        start = {"type": "message_start", "message": {**WHOLE[provider], "content": [], "stop_reason": None}}
        block = {"type": "text", "text": ""}
        opening = [start, {"type": "content_block_start", "index": 0, "content_block": block}]
        piece: dict[str, Any] = {"type": "content_block_delta", "index": 0}
        piece["delta"] = {"type": "text_delta", "text": "x"}
    elif provider == "openai-chat":
        opening = []
        piece = {"id": "c", "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}
    else:
        created = {"id": "r", "status": "in_progress", "output": []}
        opening = [{"type": "response.created", "response": created}]
        piece = {"type": "response.output_text.delta", "item_id": "i", "output_index": 0, "content_index": 0}
        piece["delta"] = "x"

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, notes: list[str]) -> None:
        writer.write(STREAM_HEAD)
        for event in [*opening, *[piece] * 1000]:
            data = b"data: " + json.dumps(event).encode() + b"\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
            await asyncio.sleep(0.02)
        notes.append("wrote everything")

    return handler


@pytest.mark.anyio
@pytest.mark.parametrize(("provider", "transport"), PARAMS)
async def test_a_call_cancelled_mid_stream_closes_its_connection(provider: str, transport: str) -> None:
    """The caller cancels the call while the stream is under way: the connection closes (the
    server's next writes fail), no task is left behind."""
    with RawServer(_slow_stream(provider)) as server:
        before = len(asyncio.all_tasks())
        with anyio.move_on_after(0.5):
            await _ask(provider, transport, server.url, stream=True, timeout_s=60)
        with anyio.fail_after(20):
            while not server.notes:
                await anyio.sleep(0.05)
        assert len(asyncio.all_tasks()) == before
    assert server.notes[0].startswith("closed"), server.notes


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_a_retry_after_past_the_runs_deadline_ends_at_once(tmp_path: Path, provider: str) -> None:
    """A 429 whose ``retry-after`` (20 s) is under ``max_retry_after_s`` but past what is left
    of the run's deadline (4 s): ``model_error`` at once, naming the deadline, asked once (no
    sleep to the deadline); one of 1 s is honoured and the answer accepted."""
    busy = Reply.error(429, "slow down", headers={"retry-after": "20"})
    with SERVERS[provider](scripted([busy] * 4)) as server:
        code, out, _ = run_agent(tmp_path, _model(provider, "http", server.url, limits={"deadline_s": 4}))
        assert (code, out["stop_reason"], len(server.bodies())) == (7, "model_error", 1), out
    assert "would pass the deadline" in out["message"], out
    brief = Reply.error(429, "slow down", headers={"retry-after": "1"})
    with SERVERS[provider](scripted([brief, Reply.calls(ORDER), Reply.text(ANSWER)])) as server:
        model = _model(provider, "http", server.url, limits={"deadline_s": 30})
        code, out, responses = run_agent(tmp_path, model)
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert responses[0]["retries"] == [{"kind": "rate_limited", "attempt": 1, "delay_s": 1.0}], responses


@pytest.mark.anyio
@pytest.mark.parametrize(("provider", "transport"), PARAMS)
async def test_an_answer_of_one_multi_megabyte_line_is_accepted(provider: str, transport: str) -> None:
    """A whole answer of 6 MB on one line, in small HTTP chunks: accepted whole."""
    big = "x" * (6 * 1024 * 1024)
    data = json.loads(json.dumps(WHOLE[provider], ensure_ascii=False).replace(ANSWER, big))
    body = json.dumps(data).encode()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, notes: list[str]) -> None:
        writer.write(STREAM_HEAD.replace(b"text/event-stream", b"application/json"))
        for at in range(0, len(body), 16 * 1024):
            part = body[at : at + 16 * 1024]
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    with RawServer(handler) as server:
        response = await _ask(provider, transport, server.url)
    assert response.message.content == big


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http", "sdk"])
async def test_a_stream_whose_event_is_one_multi_megabyte_line_is_accepted(transport: str) -> None:
    """Chat, streamed: one event of 6 MB on one line, in 16 kB HTTP chunks, then ``[DONE]``:
    accepted whole, its blocks joined once (CPU bounded generously: no quadratic rejoining)."""
    big = "y" * (6 * 1024 * 1024)
    choice = {"index": 0, "delta": {"role": "assistant", "content": big}, "finish_reason": "stop"}
    event = {
        "id": "c",
        "model": "m-1",
        "choices": [choice],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    body = b"data: " + json.dumps(event).encode() + b"\n\ndata: [DONE]\n\n"

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, notes: list[str]) -> None:
        writer.write(STREAM_HEAD)
        for at in range(0, len(body), 16 * 1024):
            part = body[at : at + 16 * 1024]
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    with RawServer(handler) as server:
        started = time.process_time()
        response = await _ask("openai-chat", transport, server.url, stream=True)
        assert time.process_time() - started < 30
    assert response.message.content == big
