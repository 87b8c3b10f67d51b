"""A fifth round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run`` in
process) against real servers on 127.0.0.1 speaking chat completions, the Anthropic Messages API
or the OpenAI Responses API; each case runs where its path differs (``Round4.at``).

Variants end ``accepted`` with the answer: a body labelled ``x-gzip`` (RFC 9110: the same as
``gzip``), a whole answer in UTF-16 with its byte-order mark, an interim ``102 Processing``, an
HTTP/1.1 body with neither length nor chunks (ended by the close), chunk sizes with leading
zeros, CRLF lines in one-byte chunks, one event's JSON over a ``data:`` line per field, chat
chunks with ``logprobs``, ``refusal: null`` and ``system_fingerprint``, usage in every chunk,
token counts as floats and digit strings.

Faults end with a typed stop and a non-zero exit: a finish that says the answer was cut or
filtered followed by a later, normal one (a proxy that appends its own ``stop`` chunk or
``end_turn`` delta), a Responses ``response.failed`` or ``response.incomplete`` event whose
response still says ``in_progress`` or ``completed``, a ``content-length`` longer than the body
(then the close), ``gzip`` named twice on a body compressed once, a 304, token counts that are
booleans or integers no model could have counted.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, good, run_case, twice
from test_faults_round3 import Odd, assert_outcome, walk, wire
from test_faults_round4 import SERVERS4, Raw, Round4, head_body, raw, round_params, usage_counts

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]


# -- edits ---------------------------------------------------------------------------------------


def x_gzip(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The body as one gzip stream, each piece flushed as it goes (labelled ``x-gzip``)."""
    z = zlib.compressobj(wbits=31)
    out = [z.compress(b) + z.flush(zlib.Z_SYNC_FLUSH) for b in wire(p, stream, items)]
    return [*out, z.flush()]


def utf16(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """A whole answer's JSON in UTF-16 (little-endian, its byte-order mark first)."""
    return [json.dumps(items[0], ensure_ascii=False).encode("utf-16")]


def in_charset(charset: str) -> Callable[[str, bool, list[Any]], list[Any]]:
    """A whole answer's JSON with its text in ``charset``, not escaped."""
    return lambda p, s, items: [json.dumps(items[0], ensure_ascii=False).encode(charset)]


def read_until_close(data: bytes) -> bytes:
    """HTTP/1.1 with neither ``content-length`` nor chunks: the body ends when the connection
    closes (RFC 9112 6.3)."""
    head, body = head_body(data)
    lines = [h for h in head.split(b"\r\n") if not h.lower().startswith((b"content-length", b"connection"))]
    return b"\r\n".join(lines) + b"\r\nconnection: close\r\n\r\n" + body


def zero_padded_chunks(data: bytes) -> bytes:
    """Every chunk size written with leading zeros (``0000001a``)."""
    head, body = head_body(data)
    out, rest = [], body
    while rest:
        size, rest = rest.split(b"\r\n", 1)
        n = int(size, 16)
        out.append(b"%08x\r\n" % n + rest[: n + 2])
        rest = rest[n + 2 :]
        if n == 0:
            out.append(rest)
            break
    return head + b"\r\n\r\n" + b"".join(out)


def crlf(p: str, stream: bool, items: list[Any]) -> list[Any]:
    return [b.replace(b"\n", b"\r\n") for b in wire(p, stream, items)]


def data_line_per_field(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Each event's JSON pretty-printed, one ``data:`` line per line of it (SSE joins them)."""
    out = []
    for i in items:
        if not isinstance(i, dict):
            out.append(i)
            continue
        head = "" if p == "openai-chat" else f"event: {i.get('type')}\n"
        lines = json.dumps(i, indent=1).split("\n")
        out.append((head + "".join(f"data: {line}\n" for line in lines) + "\n").encode())
    return out


def chat_extras(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: ``logprobs``, ``refusal: null`` and ``system_fingerprint`` on every chunk (or the
    whole answer), usage on every chunk (vLLM's ``continuous_usage_stats``)."""
    logprobs = {"content": [{"token": "x", "logprob": -0.1, "bytes": [120], "top_logprobs": []}],
                "refusal": None}  # fmt: skip
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    for i in items:
        if not isinstance(i, dict):
            continue
        i["system_fingerprint"] = "fp_44709d6fcb"
        if stream and i.get("choices"):
            i.setdefault("usage", usage)
        for choice in i.get("choices") or ():
            choice["logprobs"] = logprobs
            (choice.get("delta") or choice.get("message") or {}).setdefault("refusal", None)
    return items


def counts_as(values: dict[str, Any]) -> Callable[[list[Any]], list[Any]]:
    """Every token count named in ``values`` set to its value."""
    return lambda items: walk(items, lambda d: d.update({k: v for k, v in values.items() if k in d}))


def finish_then_stop(cut: dict[str, str]) -> Callable[[str, bool], Reply]:
    """An answer cut or filtered (the protocol's word in ``cut``), then a later normal finish: a
    chat chunk ``finish_reason: "stop"``, an Anthropic ``message_delta`` ``end_turn``."""

    def edit(p: str, items: list[Any]) -> list[Any]:
        if p == "anthropic":
            at = next(n for n, i in enumerate(items) if i.get("type") == "message_delta")
            later = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}
            return [*items[: at + 1], later, *items[at + 1 :]]
        at = next(n for n, i in enumerate(items) if any(c["finish_reason"] for c in i.get("choices") or ()))
        later = json.loads(json.dumps(items[at]))
        later["choices"][0]["finish_reason"] = "stop"
        return [*items[: at + 1], later, *items[at + 1 :]]

    return lambda p, s: Reply.text(ANSWER, finish_reason=cut[p], edit=lambda i: edit(p, i))


LENGTH = {"openai-chat": "length", "anthropic": "max_tokens"}
FILTERED = {"openai-chat": "content_filter", "anthropic": "refusal"}


def terminal_as(kind: str, status: str, **fields: Any) -> Callable[[list[Any]], list[Any]]:
    """Responses: the terminal event named ``kind``, its response saying ``status`` (a stale
    snapshot) with ``fields``."""

    def edit(items: list[Any]) -> list[Any]:
        items[-1]["type"] = kind
        items[-1]["response"].update(status=status, **fields)
        return items

    return edit


def longer_length(data: bytes) -> bytes:
    """A ``content-length`` 40 bytes past the body; the connection then closes."""
    head, body = head_body(data)
    return head.replace(b"content-length: %d" % len(body), b"content-length: %d" % (len(body) + 40)) + (
        b"\r\n\r\n" + body
    )


def gzip_named_twice(data: bytes) -> bytes:
    head, body = head_body(data)
    head = b"\r\n".join(h for h in head.split(b"\r\n") if not h.lower().startswith(b"content-length"))
    packed = gzip.compress(body)
    twice = b"\r\ncontent-encoding: gzip" * 2
    return head + twice + b"\r\ncontent-length: %d\r\n\r\n" % len(packed) + packed


HUGE = {k: 10**30 for k in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")}
FLOATS = {"prompt_tokens": 100.0, "completion_tokens": "10", "input_tokens": 100.0, "output_tokens": "10"}
BOOLS = {k: True for k in HUGE}
FRENCH = "Ordre 742 : réglé, pièce P-17 reçue"

CASES = [
    # -- legitimate variants: accepted with the answer ----------------------------------------
    Round4("x_gzip_label", good(edit=x_gzip, headers={"content-encoding": "x-gzip"}), True,
           at=("chat/whole/http", "anthropic/stream/sdk")),
    Round4("utf16_whole_answer_with_its_bom", good(edit=utf16, headers={
        "content-type": "application/json; charset=utf-16"}), True,
           at=("chat/whole/http", "responses/whole/sdk")),
    Round4("latin1_answer_labelled_latin1", lambda p, s: [Reply.calls(ORDER), Reply.text(
        FRENCH, edit=lambda i: in_charset("latin-1")(p, s, i), headers={
            "content-type": "application/json; charset=ISO-8859-1"})],
           True, answer=FRENCH, at=("chat/whole/http", "anthropic/whole/sdk")),
    Round4("interim_102_processing", lambda p, s: [
        Odd(tool_calls=(ORDER,), interim=b"HTTP/1.1 102 Processing\r\n\r\n"), Reply.text(ANSWER)], True,
           at=("responses/whole/sdk",)),
    Round4("http11_body_ended_by_close", raw(read_until_close), True,
           at=("chat/stream/sdk",)),
    Round4("chunk_sizes_with_leading_zeros", raw(zero_padded_chunks), True, at=("responses/stream/http",)),
    Round4("crlf_lines_in_one_byte_chunks", good(http_chunk=1, edit=crlf), True,
           at=("anthropic/stream/http",)),
    Round4("a_data_line_per_line_of_json", good(edit=data_line_per_field), True,
           at=("anthropic/stream/http", "responses/stream/sdk")),
    Round4("chat_logprobs_refusal_null_usage_everywhere", good(edit=chat_extras), True,
           at=("chat/stream/http", "chat/whole/http")),
    Round4("token_counts_as_floats_and_digit_strings", lambda p, s: [
        Reply.calls(ORDER), Reply.text(ANSWER, edit=counts_as(FLOATS))], True,
           at=("anthropic/stream/http", "responses/whole/http")),
    # -- faults: a typed stop, a non-zero exit -----------------------------------------------
    Round4("length_then_a_later_stop", twice(finish_then_stop(LENGTH)), False, ("token limit",),
           stop="truncated", at=("chat/stream/http", "anthropic/stream/http")),
    Round4("filtered_then_a_later_stop", twice(finish_then_stop(FILTERED)), False, ("refused or filtered",),
           stop="model_refused", at=("chat/stream/sdk", "anthropic/stream/sdk")),
    Round4("response_failed_event_still_in_progress", twice(lambda p, s: Reply.text(ANSWER, edit=terminal_as(
        "response.failed", "in_progress", error={"code": "server_error", "message": "The model crashed"}))),
           False, ("The model crashed", "gave up"), at=("responses/stream/http",)),
    Round4("response_failed_event_saying_completed", twice(lambda p, s: Reply.text(ANSWER, edit=terminal_as(
        "response.failed", "completed", error={"code": "server_error", "message": "The model crashed"}))),
           False, ("The model crashed", "gave up"), at=("responses/stream/sdk",)),
    Round4("response_incomplete_event_saying_completed", twice(lambda p, s: Reply.text(
        ANSWER, edit=terminal_as("response.incomplete", "completed", incomplete_details={
            "reason": "max_output_tokens"}))), False, ("token limit",), stop="truncated",
           at=("responses/stream/http",)),
    Round4("latin1_answer_labelled_utf8", twice(lambda p, s: Reply.text(
        FRENCH, edit=lambda i: in_charset("latin-1")(p, s, i), headers={
            "content-type": "application/json; charset=utf-8"})),
           False, ("not a JSON object", "gave up"), at=("responses/whole/sdk",)),
    Round4("content_length_past_the_body", twice(lambda p, s: Raw(content=ANSWER, wire=longer_length)),
           False, ("gave up",), at=("anthropic/whole/sdk",)),
    Round4("gzip_named_twice_on_a_body_compressed_once", twice(lambda p, s: Raw(
        content=ANSWER, wire=gzip_named_twice)), False, ("gave up",), at=("responses/whole/http",)),
    Round4("304_not_modified", twice(lambda p, s: Reply(status=304, body=b"")), False,
           ("HTTP 304", "not an answer"), at=("chat/whole/http",)),
    Round4("usage_counts_booleans", twice(lambda p, s: Reply.text(ANSWER, edit=counts_as(BOOLS))), False,
           ("gave up",), at=("chat/stream/http",)),
    Round4("usage_counts_no_model_could_count", twice(usage_counts(10**30)), False, ("gave up",),
           at=("chat/stream/http", "anthropic/whole/http", "responses/stream/sdk")),
]  # fmt: skip

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round5_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    assert_outcome(case, *run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4))
