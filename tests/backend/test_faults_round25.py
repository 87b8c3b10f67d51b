"""Model faults, round twenty-five: held-out shapes driven as the other rounds are (an agent file
naming ``model.provider``, ``tether run`` in process, streamed and whole, over the SDK transport
and plain httpx) against real servers on 127.0.0.1 speaking chat completions, the Responses API
and the Anthropic Messages API. This round's streams say something after, or about, a part they
never said or already ended.

Fixed here (each a model error, retried once, the call never run; before: ``accepted``, exit 0):

- an event named ``error`` with no ``data:`` line (``event: error`` and a blank line, or the
  body's end), on every protocol: mid-stream, or after the finish (a chat finish chunk, an
  Anthropic ``message_delta``, a Responses stream before its terminal event). The SSE standard
  would not dispatch it; both official SDKs do, and fail on it. It was passed over, and the
  answer around it accepted (``_sse.sse_data``);
- an Anthropic ``content_block_stop`` for an index no block began (its start and deltas lost:
  a proxy that dropped events): the answer read lacks that block (``_anthropic._Blocks.stop``);
- a Responses delta (arguments, text) for an item after its ``output_item.done`` (a proxy that
  replays a delta unnumbered, or reorders events): argument pieces were passed over and the call
  run with the done arguments; text pieces were added where the done item listed no text
  (``_said._Said.piece``), as an Anthropic delta after its block's stop already was refused;
- a Responses delta numbered for an item of another type (text deltas at the call's output
  index, argument deltas at the message's): the text was passed over, the call run with the
  arguments its done item gave (``_said._Said._fits``), as an Anthropic delta sent to a block of
  another type already was refused.

Probed, all already honest; pinned here so they stay so:

- quirks, accepted with the same answer: a JSON answer labelled ``charset=utf-16`` and a stream
  labelled ``charset=iso-8859-1`` (both UTF-8: the bytes decide); an event of another name with
  no data between events; an Anthropic ``content_block_stop`` sent twice; a Responses
  ``output_item.done`` sent twice, or ``function_call_arguments.done`` after it;
- faults: a 200 whose JSON is no answer and no error object of any protocol (``{"detail": …}``,
  ``{"message": …}``, ``null``, a string), whole or to a stream request: retried, then a model
  error naming what came; a connection reset (RST, not FIN) right after the headers, after the
  first events, or after a complete call before the finish: retried, then a model error, the
  call never run.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS, Case, Make, case_params, good, only, run_case
from test_faults_round24 import call_done_at, ends_as_its_case_says, faulty_call

from tether_testing.fake_server import FakeChatServer, Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

BARE_ERROR = b"event: error\n\n"  # an event named error, with no data line


def finished_at(p: str, items: list[Any]) -> int:
    """Where a stream has said how it ended: after the chat finish chunk or the Anthropic
    ``message_delta``; a Responses stream, before its terminal event (which says it there)."""
    if p == "openai-responses":
        return len(items) - 1
    if p == "anthropic":
        return next(k for k, i in enumerate(items) if i.get("type") == "message_delta") + 1
    return next(k for k, i in enumerate(items) if isinstance(i, dict) and i["choices"]
                and i["choices"][0].get("finish_reason")) + 1  # fmt: skip


def bare_error_after_finish(p: str, s: bool, items: list[Any]) -> list[Any]:
    at = finished_at(p, items)
    return [*items[:at], BARE_ERROR, *items[at:]]


def bare_error_mid_stream(p: str, s: bool, items: list[Any]) -> list[Any]:
    return [*items[:3], BARE_ERROR, *items[3:]]


def bare_error_last(p: str, s: bool, items: list[Any]) -> list[Any]:
    """The stream ends, after its finish, with ``event: error`` and no blank line (the end of
    the body ends the event)."""
    return [*items[: finished_at(p, items)], b"event: error\n"]


def stop_never_started(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Anthropic: after the last block's stop, a stop for the block after it, never started."""
    last = max(k for k, i in enumerate(items) if i.get("type") == "content_block_stop")
    return [*items[: last + 1], {"type": "content_block_stop", "index": items[last]["index"] + 1},
            *items[last + 1 :]]  # fmt: skip


def after_done(kind: str, piece: str) -> Any:
    """Responses: a ``kind`` delta for the item after its ``output_item.done`` (no sequence
    number: not a numbered event sent again), the terminal output empty and the done message's
    text left out (the stream says it all)."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        out: list[Any] = []
        for i in items:
            if i.get("type") == "response.output_item.done" and i["item"].get("type") == "message":
                i["item"]["content"] = []
            out.append(i)
            wanted = "function_call" if kind == "function_call_arguments" else "message"
            if i.get("type") == "response.output_item.done" and i["item"].get("type") == wanted:
                late = {"type": f"response.{kind}.delta", "output_index": i["output_index"],
                        "item_id": i["item"]["id"], "content_index": 0, "delta": piece}  # fmt: skip
                out.append(late)
        out[-1]["response"]["output"] = []
        return out

    return edit


def twice_text(edit: Any) -> Make:
    """The answer's text, changed by ``edit``, twice (a retry), then the answer."""

    def make(p: str, stream: bool) -> list[Reply]:
        reply = Reply.text(ANSWER, edit=lambda items: edit(p, stream, items))
        return [reply, reply, Reply.text(ANSWER)]

    return make


def named_without_data(p: str, s: bool, items: list[Any]) -> list[Any]:
    return [piece for i in items for piece in (b"event: message\n\n", i)]


def block_stop_twice(p: str, s: bool, items: list[Any]) -> list[Any]:
    return [piece for i in items for piece in ((i, i) if i.get("type") == "content_block_stop" else (i,))]


def item_done_twice(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Responses: each ``output_item.done`` sent again under a number of its own."""
    out: list[Any] = []
    for i in items:
        out.append(i)
        if i.get("type") == "response.output_item.done":
            out.append({**i, "sequence_number": 10_000 + i["sequence_number"]})
    return out


def arguments_done_after_item_done(p: str, s: bool, items: list[Any]) -> list[Any]:
    done = [i for i in items if i.get("type") == "response.function_call_arguments.done"]
    if not done:  # the answer's text: as it is
        return items
    out = [i for i in items if i not in done]
    at = next(k for k, i in enumerate(out) if i.get("type") == "response.output_item.done"
              and i["item"].get("type") == "function_call")  # fmt: skip
    return [*out[: at + 1], *done, *out[at + 1 :]]


def at_the_other_item(kind: str, to: str) -> Any:
    """Responses, a turn of text and a call: every ``kind`` delta numbered for the item of type
    ``to`` (text deltas for the call, argument deltas for the message)."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        index = {i["item"]["type"]: i["output_index"] for i in items
                 if i.get("type") == "response.output_item.added"}  # fmt: skip
        for i in items:
            if i.get("type") == f"response.{kind}.delta":
                i["output_index"] = index[to]
        return items

    return edit


def preamble_and_call(edit: Any) -> Make:
    """Text and the tool call in one turn, changed by ``edit``, twice (a retry), then the answer."""

    def make(p: str, stream: bool) -> list[Reply]:
        reply = Reply(content="Let me look.", tool_calls=(ORDER,), edit=lambda items: edit(p, stream, items))
        return [reply, reply, Reply.text(ANSWER)]

    return make


def body_200(body: bytes) -> Make:
    reply = Reply.text(ANSWER, headers={"content-type": "application/json"}, edit=lambda items: [body])
    return lambda p, s: [reply, reply, Reply.text(ANSWER)]


LATIN1_SSE = "text/event-stream; charset=iso-8859-1"
STREAM = ("stream",)
R = ("openai-responses",)
CASES = [
    # -- fixed: a typed stop, a non-zero exit, the call never run ----------------------------
    Case("an_error_event_without_data_after_the_finish", faulty_call(bare_error_after_finish), False,
         ("error event", "gave up"), modes=STREAM),
    Case("an_error_event_without_data_mid_stream", faulty_call(bare_error_mid_stream), False,
         ("error event", "gave up"), modes=STREAM),
    Case("an_error_event_without_data_ending_the_body", only(("openai-chat", "anthropic"),
         faulty_call(bare_error_last)), False, ("error event", "gave up"), modes=STREAM),
    Case("a_block_stop_for_a_block_never_started", only(("anthropic",), twice_text(stop_never_started)),
         False, ("stream_unreadable", "never started", "gave up"), modes=STREAM),
    Case("an_argument_delta_after_the_call_is_done", only(R, faulty_call(
         after_done("function_call_arguments", ', "note": 1}'))), False,
         ("stream_unreadable", "after its output_item.done", "gave up"), modes=STREAM),
    Case("a_text_delta_after_the_message_is_done", only(R, twice_text(after_done("output_text", " (draft)"))),
         False, ("stream_unreadable", "after its output_item.done", "gave up"), modes=STREAM),
    Case("text_deltas_numbered_for_the_call", only(R, preamble_and_call(at_the_other_item(
         "output_text", "function_call"))), False, ("stream_unreadable", "a function_call item", "gave up"),
         modes=STREAM),
    Case("argument_deltas_numbered_for_the_message", only(R, preamble_and_call(at_the_other_item(
         "function_call_arguments", "message"))), False, ("stream_unreadable", "gave up"), modes=STREAM),
    # -- pinned quirks: accepted with the same answer ---------------------------------------
    Case("json_labelled_charset_utf16", good(headers={"content-type": "application/json; charset=utf-16"}),
         True, modes=("whole",)),
    Case("sse_labelled_charset_latin1", good(headers={"content-type": LATIN1_SSE}), True, modes=STREAM),
    Case("an_event_of_another_name_without_data", good(edit=named_without_data), True, modes=STREAM),
    Case("a_block_stop_sent_twice", only(("anthropic",), good(edit=block_stop_twice)), True, modes=STREAM),
    Case("an_item_done_sent_twice", only(R, good(edit=item_done_twice)), True, modes=STREAM),
    Case("arguments_done_after_the_item_done", only(R, good(edit=arguments_done_after_item_done)), True,
         modes=STREAM),
    # -- pinned faults -----------------------------------------------------------------------
    Case("a_200_with_a_detail_object", body_200(b'{"detail": "Internal Server Error"}'), False,
         ("Internal Server Error", "gave up")),
    Case("a_200_with_a_message_object", body_200(b'{"message": "upstream timed out"}'), False,
         ("upstream timed out", "gave up")),
    Case("a_200_with_null", body_200(b"null"), False, ("not a JSON object", "gave up")),
    Case("a_200_with_a_string", body_200(b'"overloaded"'), False, ("not a JSON object", "gave up")),
]  # fmt: skip

assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(CASES))
def test_a_round25_fault_ends_honestly_and_a_quirk_is_accepted(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    ends_as_its_case_says(tmp_path, case, provider, mode, transport)


RESET = b"\x00reset\x00"  # where a body piece holds it, the server resets the connection there


class _Resetting:
    """A stream writer that resets the connection (RST, not FIN) where a piece holds ``RESET``,
    after writing what came before it: a balancer or server that died mid-answer."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    def write(self, data: bytes) -> None:
        if RESET not in data:
            self.writer.write(data)
            return
        self.writer.write(data.split(RESET)[0])
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()
        raise ConnectionResetError("reset on purpose")

    async def drain(self) -> None:
        await self.writer.drain()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.writer, name)


def resetting(base: type[FakeChatServer]) -> type[FakeChatServer]:
    class Resetting(base):  # type: ignore[valid-type,misc]
        async def _answer(self, writer: Any, request: dict[str, Any], reply: Reply) -> bool:
            return bool(await super()._answer(_Resetting(writer), request, reply))

    return Resetting


RESETTING = {provider: resetting(server) for provider, server in SERVERS.items()}


def reset_at(where: str) -> Any:
    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        if where == "after_the_headers":
            return [RESET]
        return [*items[: call_done_at(p, items) if where == "after_a_complete_call" else 2], RESET]

    return edit


RESETS = [
    Case("reset_after_the_headers", faulty_call(reset_at("after_the_headers")), False,
         ("ReadError", "gave up")),
    Case("reset_after_the_first_events", faulty_call(reset_at("after_the_first_events")), False,
         ("ReadError", "gave up"), modes=STREAM),
    Case("reset_after_a_complete_call", faulty_call(reset_at("after_a_complete_call")), False,
         ("ReadError", "gave up"), modes=STREAM),
]  # fmt: skip


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(RESETS))
def test_a_connection_reset_mid_answer_is_retried_and_the_call_never_runs(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, transport, servers=RESETTING)
    assert (code, out["stop_reason"], requests, out["calls"]) == (7, "model_error", 2, []), out
    for piece in case.said:
        assert piece in out["message"], out["message"]
