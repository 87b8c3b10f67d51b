"""A third round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run``)
against real servers on 127.0.0.1 speaking chat completions, the Anthropic Messages API or the
OpenAI Responses API, streamed and whole, over the SDK transport and plain httpx2.

Variants a real server sends end ``accepted`` with the answer and its tool calls, exit 0: server-
sent events labelled ``application/json`` and a JSON answer labelled ``text/event-stream``
(every body is judged by its first bytes), content types in capitals, events without ``event:``
lines, a chat stream that reaches its finish reason but never sends ``[DONE]`` (with or without
its usage chunk), ``finish_reason: ""`` until the end, Responses message parts typed ``text`` and
a terminal event whose response leaves out its status, comments before and inside every event,
events with empty data, CR-only line endings in one-byte chunks, a usage chunk whose ``choices``
is null, tool arguments split inside ``\\u`` escapes, text split inside a UTF-16 surrogate pair
(an emoji's halves in two deltas), parallel tool calls whose deltas interleave, a finish chunk
sent twice or carried by the last delta, tool calls that end ``stop``, tool-call deltas without
an ``index``, Anthropic server tools (``server_tool_use`` with its input deltas, their results),
``redacted_thinking``, ``citations_delta``, text in ``content_block_start`` and
``stop_sequence``, a ``deflate`` body, an interim ``100 Continue`` or ``103 Early Hints``, chunk
extensions and a trailer, an HTTP/1.0 body ended by closing the connection, a server that
silently closes each kept-alive connection after answering, and 408/409/429/500/502/503/504
answers (``retry-after-ms`` honoured) or a dropped pooled connection followed by a good answer.

Faults end with a typed stop and a non-zero exit: SSE labelled JSON cut before its end, a chat
stream with neither finish reason nor ``[DONE]``, a ``length`` finish without ``[DONE]``, a
connection reset inside the response headers, an error answer whose body is cut, keep-alive
comments past the timeout, an HTML page labelled ``text/event-stream``, JSON nested past the
parser's recursion limit (an answer, an error body), a usage count past any integer,
``retry-after-ms`` past the limit, a Responses answer ``incomplete`` at ``max_output_tokens`` or
``failed`` with no error object.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS, Case, case_params, good, only, run_case, sse, twice

from tether_testing.fake_server import FakeChatServer, Pause, Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

OTHER = ("read_order", '{"order_id": "743"}')
ESCAPED = ("read_order", '{"order_id": "\\u0037\\u0034\\u0032"}')  # "742", written as escapes
DONE = b"data: [DONE]\n\n"
EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"
EMOJI = "Order 742 is open 👍🏽 — awaiting part P-17 ✓"
CUT_500 = (
    b'HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: 90\r\n\r\n{"e'
)
NESTED = b"[" * 100_000 + b"]" * 100_000  # valid JSON no recursive parser can read


# -- a server that can also misbehave at the HTTP level --------------------------------------


@dataclass(frozen=True)
class Odd(Reply):
    """A ``Reply`` with HTTP-level oddities: ``raw`` bytes instead of any answer (then the
    connection closes); ``interim`` bytes before the answer (a ``100 Continue``); ``http10``: an
    HTTP/1.0 answer whose body ends when the connection closes; ``close_after``: the connection
    is closed after the answer without saying so (a keep-alive connection gone stale);
    ``extensions``: each HTTP chunk with a chunk extension, the body with a trailer."""

    raw: bytes | None = None
    interim: bytes = b""
    http10: bool = False
    close_after: bool = False
    extensions: bool = False


class _OddServer(FakeChatServer):
    async def _answer(self, writer: asyncio.StreamWriter, request: dict[str, Any], reply: Reply) -> bool:
        if isinstance(reply, Odd):
            if reply.raw is not None:
                writer.write(reply.raw)
                await writer.drain()
                return False
            writer.write(reply.interim)
        keep = await super()._answer(writer, request, reply)
        return keep and not (isinstance(reply, Odd) and reply.close_after)

    async def _send_body(
        self, writer: asyncio.StreamWriter, reply: Reply, kind: str, pieces: list[Any], *, chunked: bool
    ) -> bool:
        if isinstance(reply, Odd) and reply.http10:
            data = b"".join(p for p in pieces if isinstance(p, bytes))
            writer.write(f"HTTP/1.0 200 OK\r\ncontent-type: {kind}\r\n\r\n".encode() + data)
            await writer.drain()
            return False
        if isinstance(reply, Odd) and reply.extensions:
            chunks = [b"%x;tether=1\r\n%s\r\n" % (len(p), p) for p in pieces if isinstance(p, bytes) and p]
            head = f"HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ntransfer-encoding: chunked\r\n\r\n"
            writer.write(head.encode() + b"".join(chunks) + b"0\r\nx-checksum: 1\r\n\r\n")
            await writer.drain()
            return True
        return await super()._send_body(writer, reply, kind, pieces, chunked=chunked)


ODD: dict[str, type[FakeChatServer]] = {
    name: type(f"Odd{cls.__name__}", (_OddServer, cls), {}) for name, cls in SERVERS.items()
}


# -- edits -------------------------------------------------------------------------------------


def wire(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The items as the bytes the server would send."""
    return [(sse(p, i) if stream else json.dumps(i).encode()) if isinstance(i, dict) else i for i in items]


def walk(value: Any, fn: Any) -> Any:
    if isinstance(value, dict):
        fn(value)
        for v in list(value.values()):
            walk(v, fn)
    elif isinstance(value, list):
        for v in value:
            walk(v, fn)
    return value


def chunks_of(items: list[Any]) -> list[tuple[int, dict[str, Any]]]:
    """Chat: each chunk with a choice, and its position."""
    return [(n, i) for n, i in enumerate(items) if isinstance(i, dict) and i.get("choices")]


def without_done(p: str, stream: bool, items: list[Any]) -> list[Any]:
    return [i for i in items if i != DONE]


def without_done_or_usage(p: str, stream: bool, items: list[Any]) -> list[Any]:
    return [i for i in without_done(p, stream, items) if not (isinstance(i, dict) and i.get("choices") == [])]


def usage_choices_null(p: str, stream: bool, items: list[Any]) -> list[Any]:
    for i in items:
        if isinstance(i, dict) and i.get("choices") == []:
            i["choices"] = None
    return items


def parts_typed_text(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Responses: message parts of type ``text`` (not ``output_text``), everywhere they appear."""
    return walk(items, lambda d: d.update(type="text") if d.get("type") == "output_text" else None)


def comments_everywhere(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """A keep-alive comment before every event, and a comment line inside each one."""
    out = []
    for piece in wire(p, stream, items):
        first, rest = piece.split(b"\n", 1)
        out.append(b": keep-alive\n\n" + first + b"\n: still here\n" + rest)
    return out


def empty_data_events(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Events that carry no data between the real ones (a proxy's keep-alive)."""
    noise = [b"data:\n\n", b"event: keepalive\ndata: \n\n"]
    return [piece for i in wire(p, stream, items) for piece in (i, *noise)]


def deflated(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The body compressed with ``deflate`` (zlib), each piece flushed as it goes."""
    z = zlib.compressobj()
    out = [z.compress(b) + z.flush(zlib.Z_SYNC_FLUSH) for b in wire(p, stream, items)]
    return [*out, z.flush()]


def interleaved_calls(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: two tool calls whose deltas alternate (0, 1, 0, 1 …)."""
    calls = [
        i
        for i in items
        if isinstance(i, dict)
        and any((c.get("delta") or {}).get("tool_calls") for c in i.get("choices") or ())
    ]
    first = [c for c in calls if c["choices"][0]["delta"]["tool_calls"][0]["index"] == 0]
    second = [c for c in calls if c not in first]
    mixed = [c for pair in zip(first, second, strict=False) for c in pair]
    mixed += first[len(second) :] + second[len(first) :]
    at = items.index(calls[0])
    rest = [i for i in items if i not in calls]
    return [*rest[:at], *mixed, *rest[at:]]


def finish_twice(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The chunk (chat) or ``message_delta`` (Anthropic) that carries the finish, sent twice."""
    at = next(
        n
        for n, i in enumerate(items)
        if isinstance(i, dict)
        and (i.get("type") == "message_delta" or any(c.get("finish_reason") for c in i.get("choices") or ()))
    )
    return [*items[: at + 1], items[at], *items[at + 1 :]]


def finish_on_last_delta(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: the finish reason on the last delta that carries content, no chunk of its own."""
    chunks = chunks_of(items)
    (at, last), (_, before) = chunks[-1], chunks[-2]
    before["choices"][0]["finish_reason"] = last["choices"][0]["finish_reason"]
    return items[:at] + items[at + 1 :]


def no_call_index(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: tool-call deltas without ``index`` (only the first of each call has its id)."""
    return walk(items, lambda d: d.pop("index", None) if "function" in d else None)


def no_call_index_id_repeated(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: tool-call deltas without ``index``, each repeating its call's id."""
    last: list[str] = []

    def fix(d: dict[str, Any]) -> None:
        if "function" in d:
            d.pop("index", None)
            if d.get("id"):
                last[:] = [d["id"]]
            d["id"] = last[0]

    return walk(items, fix)


SERVER_TOOL = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
SEARCH_RESULT = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}


def server_tools(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: a server tool call (its input streamed as JSON deltas) and its result before
    the answer's own blocks, and a ``citations_delta`` in every text block."""
    if not stream:
        items[0]["content"][:0] = [{**SERVER_TOOL, "input": {"query": "742"}}, SEARCH_RESULT]
        return items
    delta = {"type": "input_json_delta", "partial_json": '{"query": "742"}'}
    citation = {"type": "citations_delta", "citation": {"type": "web_search_result_location", "url": "u"}}
    out = []
    for item in items:
        out.append(item)
        if item.get("type") == "message_start":
            out += [
                {"type": "content_block_start", "index": 50, "content_block": SERVER_TOOL},
                {"type": "content_block_delta", "index": 50, "delta": delta},
                {"type": "content_block_stop", "index": 50},
                {"type": "content_block_start", "index": 51, "content_block": SEARCH_RESULT},
                {"type": "content_block_stop", "index": 51},
            ]
        block = item.get("content_block") or {}
        if item.get("type") == "content_block_start" and block.get("type") == "text":
            out.append({"type": "content_block_delta", "index": item["index"], "delta": citation})
    return out


def redacted_thinking(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: a ``redacted_thinking`` block first (opaque data, no deltas)."""
    block = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
    if not stream:
        items[0]["content"].insert(0, block)
        return items
    return [
        items[0],
        {"type": "content_block_start", "index": 40, "content_block": block},
        {"type": "content_block_stop", "index": 40},
        *items[1:],
    ]


def text_in_block_start(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: a text block whose start already carries its first words."""
    for start in [i for i in items if (i.get("content_block") or {}).get("type") == "text"]:
        at = start["index"]
        first = next(i for i in items if i.get("index") == at and i.get("type") == "content_block_delta")
        start["content_block"]["text"] = first["delta"]["text"]
        items.remove(first)
    return items


def finish_empty_until_the_end(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: ``finish_reason: ""`` (not null) on every chunk before the last."""
    for _, chunk in chunks_of(items):
        if not chunk["choices"][0].get("finish_reason"):
            chunk["choices"][0]["finish_reason"] = ""
    return items


def utf16_units(text: str) -> list[str]:
    """The text as UTF-16 code units: a character past U+FFFF as its two surrogate halves."""
    out: list[str] = []
    for ch in text:
        v = ord(ch) - 0x10000
        out += [chr(0xD800 + (v >> 10)), chr(0xDC00 + (v & 0x3FF))] if v >= 0 else [ch]
    return out


def split_at_surrogates(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The text deltas (chat, Anthropic) cut every 3 UTF-16 code units, as a server whose
    strings are UTF-16 (JavaScript, Java) cuts them: an emoji's halves in two deltas."""

    def piece(i: Any) -> str | None:
        if not isinstance(i, dict):
            return None
        if p == "anthropic":
            return (i.get("delta") or {}).get("text") if i.get("type") == "content_block_delta" else None
        return (i.get("choices") or [{}])[0].get("delta", {}).get("content") or None

    deltas = [i for i in items if piece(i)]
    if not deltas:
        return items
    units = utf16_units("".join(piece(i) or "" for i in deltas))
    out = []
    for k in range(0, len(units), 3):
        event = json.loads(json.dumps(deltas[0]))
        target = event["delta"] if p == "anthropic" else event["choices"][0]["delta"]
        target["text" if p == "anthropic" else "content"] = "".join(units[k : k + 3])
        out.append(event)
    at = items.index(deltas[0])
    rest = [i for i in items if not any(i is d for d in deltas)]
    return [*rest[:at], *out, *rest[at:]]


def html_as_event_stream(p: str, stream: bool, items: list[Any]) -> list[Any]:
    return [b"<html><head><title>Gateway login</title></head><body>sign in</body></html>"]


# -- how the replies are put together ------------------------------------------------------------


def then_good(make: Any) -> Any:
    """A failing answer, then a tool call and the answer: accepted after one retry."""
    return lambda p, stream: [make(p, stream), Reply.calls(ORDER), Reply.text(ANSWER)]


def status(code: int, body: bytes = b"", **headers: str) -> Any:
    return lambda p, stream: Reply(status=code, body=body, headers={"content-type": "text/plain", **headers})


def odd(**kw: Any) -> Any:
    """A tool call, then the answer, each an ``Odd`` reply."""
    return lambda p, stream: [Odd(tool_calls=(ORDER,), **kw), Odd(content=ANSWER, **kw)]


def chat_stream(edit: Any, **kw: Any) -> Any:
    return only(("openai-chat",), good(edit=edit, **kw))


@dataclass(frozen=True)
class Round3(Case):
    requests: int = 2  # requests an accepted run makes
    calls: tuple[str, ...] = ("ok",)  # the statuses of its tool calls
    answer: str = ANSWER


STREAM = ("stream",)
CASES = [
    # -- legitimate variants: accepted with the answer ----------------------------------------
    Round3("sse_labelled_application_json", good(headers={"content-type": "application/json"}), True,
           modes=STREAM),
    Round3("a_stream_labelled_json_to_a_whole_request", good(headers={"content-type": "application/json"}),
           True, modes=("whole",), force_stream=True),
    Round3("json_labelled_event_stream", good(headers={"content-type": "text/event-stream"}), True,
           modes=("whole",)),
    Round3("json_labelled_event_stream_to_a_stream_request", good(headers={
        "content-type": "text/event-stream"}), True, modes=STREAM, ignore_stream=True),
    Round3("events_without_event_lines", only(("anthropic", "openai-responses"), good(
        edit=lambda p, s, items: wire("openai-chat", s, items))), True, modes=STREAM),
    Round3("text_split_inside_surrogate_pairs", only(("openai-chat", "anthropic"), lambda p, s: [
        Reply.calls(ORDER), Reply.text(EMOJI, edit=lambda i: split_at_surrogates(p, s, i))]), True,
           modes=STREAM, answer=EMOJI),
    Round3("responses_terminal_event_without_status", only(("openai-responses",), good(
        edit=lambda p, s, items: [items[-1]["response"].pop("status"), items][1])), True, modes=STREAM),
    Round3("chat_finish_without_done", chat_stream(without_done), True, modes=STREAM),
    Round3("chat_finish_without_done_or_usage", chat_stream(without_done_or_usage), True, modes=STREAM),
    Round3("responses_parts_typed_text", only(("openai-responses",), good(edit=parts_typed_text)), True),
    Round3("comments_before_and_inside_every_event", good(edit=comments_everywhere), True, modes=STREAM),
    Round3("cr_only_line_endings_in_one_byte_chunks", good(http_chunk=1, edit=lambda p, s, items: [
        b.replace(b"\n", b"\r") for b in wire(p, s, items)]), True, modes=STREAM),
    Round3("events_with_empty_data", good(edit=empty_data_events), True, modes=STREAM),
    Round3("usage_chunk_with_choices_null", chat_stream(usage_choices_null), True, modes=STREAM),
    Round3("tool_arguments_split_inside_escapes", lambda p, s: [
        Reply.calls(ESCAPED, chunks=9), Reply.text(ANSWER, chunks=9)], True),
    Round3("parallel_calls_with_interleaved_deltas", only(("openai-chat",), lambda p, s: [
        Reply.calls(ORDER, OTHER, edit=lambda i: interleaved_calls(p, s, i)), Reply.text(ANSWER)]), True,
           modes=STREAM, calls=("ok", "ok")),
    Round3("finish_sent_twice", only(("openai-chat", "anthropic"), good(edit=finish_twice)), True,
           modes=STREAM),
    Round3("finish_on_the_last_delta", chat_stream(finish_on_last_delta), True, modes=STREAM),
    Round3("tool_calls_that_end_stop", lambda p, s: None if p == "openai-responses" else [
        Reply.calls(ORDER, finish_reason="stop" if p == "openai-chat" else "end_turn"), Reply.text(ANSWER)],
           True),
    Round3("tool_call_deltas_without_index", chat_stream(no_call_index), True, modes=STREAM),
    Round3("parallel_call_deltas_without_index_id_repeated", only(("openai-chat",), lambda p, s: [
        Reply.calls(ORDER, OTHER, edit=lambda i: no_call_index_id_repeated(p, s, i)), Reply.text(ANSWER)]),
           True, modes=STREAM, calls=("ok", "ok")),
    Round3("anthropic_server_tools_and_citations", only(("anthropic",), good(edit=server_tools)), True),
    Round3("anthropic_redacted_thinking", only(("anthropic",), good(edit=redacted_thinking)), True),
    Round3("anthropic_stop_sequence", only(("anthropic",), lambda p, s: [
        Reply.calls(ORDER), Reply.text(ANSWER, finish_reason="stop_sequence")]), True),
    Round3("deflate_body", good(edit=deflated, headers={"content-encoding": "deflate"}), True),
    Round3("interim_100_continue", odd(interim=b"HTTP/1.1 100 Continue\r\n\r\n"), True),
    Round3("interim_103_early_hints", odd(interim=EARLY_HINTS), True),
    Round3("http10_body_ended_by_close", odd(http10=True), True),
    Round3("chunk_extensions_and_a_trailer", odd(extensions=True), True),
    Round3("content_types_in_capitals", lambda p, s: [Reply.calls(ORDER, headers={"content-type": (
        "Text/Event-Stream" if s else "Application/JSON; Charset=UTF-8")}), Reply.text(ANSWER)], True),
    Round3("anthropic_text_in_block_start", only(("anthropic",), good(edit=text_in_block_start)), True,
           modes=STREAM),
    Round3("chat_finish_empty_until_the_end", chat_stream(finish_empty_until_the_end), True, modes=STREAM),
    Round3("server_closes_each_kept_alive_connection", odd(close_after=True), True),
    Round3("pooled_connection_dropped_then_good", lambda p, s: [
        Reply.calls(ORDER), Reply(drop=True), Reply.text(ANSWER)], True, requests=3),
    *[Round3(f"{code}_then_good", then_good(status(code, b"try again")), True, requests=3)
      for code in (408, 409, 502, 503, 504)],
    Round3("500_json_error_then_good", then_good(lambda p, s: Reply.error(500, "boom")), True, requests=3),
    Round3("429_retry_after_ms_then_good", then_good(status(429, b"slow", **{"retry-after-ms": "20"})),
           True, requests=3),
    # -- faults: a typed stop, a non-zero exit -----------------------------------------------
    Round3("sse_labelled_json_cut_before_its_end", twice(lambda p, s: Reply.text(
        ANSWER, cut="before_finish", headers={"content-type": "application/json"})), False, ("gave up",),
           modes=STREAM),
    Round3("chat_no_finish_and_no_done", only(("openai-chat",), twice(lambda p, s: Reply.text(
        ANSWER, cut="before_finish"))), False, ("without a finish reason", "gave up"), modes=STREAM),
    Round3("chat_length_without_done", only(("openai-chat",), twice(lambda p, s: Reply.text(
        ANSWER, finish_reason="length", edit=lambda i: without_done(p, s, i)))), False, ("token limit",),
           modes=STREAM, stop="truncated"),
    Round3("reset_inside_the_headers", twice(lambda p, s: Odd(raw=b"HTTP/1.1 200 OK\r\ncontent-ty")),
           False, ("gave up",)),
    Round3("error_status_body_cut", twice(lambda p, s: Odd(raw=CUT_500)), False, ("gave up",)),
    Round3("keep_alive_comments_past_the_timeout", twice(lambda p, s: Reply.text(ANSWER, edit=lambda i: [
        i[0], *[x for _ in range(30) for x in (b": keep-alive\n\n", Pause(0.1))], *i[1:]])), False,
           ("did not complete within 0.5s", "gave up"), modes=STREAM, timeout_s=0.5),
    Round3("html_labelled_event_stream", twice(lambda p, s: Reply.text(
        ANSWER, edit=lambda i: html_as_event_stream(p, s, i), headers={"content-type": "text/event-stream"})),
           False, ("gave up",)),
    Round3("retry_after_ms_past_the_limit", twice(status(503, b"busy", **{"retry-after-ms": "3600000"})),
           False, ("HTTP 503", "Retry-After too long")),
    Round3("json_nested_past_the_recursion_limit", twice(lambda p, s: Reply.text(
        ANSWER, edit=lambda i: [b"data: " + NESTED + b"\n\n" if s else NESTED])), False,
           ("gave up",)),
    Round3("error_body_nested_past_the_recursion_limit", twice(status(500, NESTED)), False,
           ("HTTP 500", "gave up")),
    # (Anthropic too: test_faults_round4.usage_counts_not_numbers.)
    Round3("usage_counts_past_any_integer", only(("openai-chat", "openai-responses"), twice(
        lambda p, s: Reply.text(ANSWER, usage={"prompt_tokens": 10, "completion_tokens": 1e400,
                                               "input_tokens": 10, "output_tokens": 1e400}))),
           False, ("not shaped like", "gave up")),
    Round3("responses_incomplete_at_max_output_tokens", only(("openai-responses",), twice(
        lambda p, s: Reply.text(ANSWER, finish_reason="max_output_tokens"))), False, ("token limit",),
           stop="truncated"),
    Round3("responses_failed_without_an_error_object", only(("openai-responses",), twice(
        lambda p, s: Reply.text(ANSWER, finish_reason="failed"))), False, ("gave up",)),
]  # fmt: skip

assert len({c.name for c in CASES}) == len(CASES)

PARAMS = case_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round3_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Path, case: Round3, provider: str, mode: str, transport: str
) -> None:
    assert_outcome(case, *run_case(tmp_path, provider, case, mode, transport, servers=ODD))


def assert_outcome(case: Round3, code: int, out: dict[str, Any], requests: int, took: float) -> None:
    """A normal variant is accepted with its answer and calls; a fault ends with its stop reason
    and a non-zero exit, after the tries it warrants, saying what it says (rounds three and four)."""
    if case.ok:
        assert (code, out["stop_reason"], requests) == (0, "accepted", case.requests), out
        assert out["answer"] == case.answer and [c["status"] for c in out["calls"]] == list(case.calls), out
        return
    assert code != 0 and out["stop_reason"] == (case.stop or "model_error"), out
    assert requests == (2 if "gave up" in case.said else 1), out
    for piece in case.said:
        assert piece in out["message"], out["message"]
    assert "Traceback" not in out["message"]
    assert took < 25  # each try bounded by timeout_s, not by the run's deadline (30 s)
