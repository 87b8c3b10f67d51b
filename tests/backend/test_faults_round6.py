"""A sixth round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run`` in
process) against real servers on 127.0.0.1 speaking chat completions, the Anthropic Messages API
or the OpenAI Responses API; each case runs where its path differs (``Round4.at``).

Variants end ``accepted`` with the answer: an Anthropic stream that gave its stop reason in
``message_delta`` and then ends, or is cut, without ``message_stop`` (whole, as a chat stream past
its finish reason is); Anthropic block events all numbered 0 (each ``content_block_start`` a new
block: none overwrites the text before it); a ``response.completed`` whose response still says
``queued`` or ``in_progress`` (a stale snapshot); token counts as decimal text (``"10.0"``);
cache-token fields null; a ``content-encoding`` that names no compression (``UTF-8``, ``none``:
read as it is, as ``httpx2`` and the SDKs read it); a fractional ``retry-after-ms``.

Faults end with a typed stop and a non-zero exit: a ``retry-after`` the run's deadline comes
before (fails at once, naming the error, rather than sleep into the deadline); an error object
beside a whole answer cut short (chat, Anthropic and Responses alike); an SSE event named
``error`` whose data lacks the protocol's marker (JSON or text; retried, or final when it names
the request); a 429 quota body labelled ``x-gzip`` (read, so it is final, not retried as a rate
limit); an Anthropic ``max_tokens`` without ``message_stop`` (truncated); a
``response.completed`` whose response says ``cancelled``, or says ``completed`` and gives an
``incomplete_details`` reason (truncated); a chat answer whose content is a ``refusal`` part
(refused, not retried as an empty answer). And an Anthropic ``message_delta`` that zeroes the
input count does not take it back.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, good, run_case, twice
from test_faults_round3 import assert_outcome, walk, wire
from test_faults_round4 import SERVERS4, Raw, Round4, head_body, relabel, round_params

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]


# -- edits ---------------------------------------------------------------------------------------


def without_message_stop(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: the stream ends after ``message_delta`` (a clean end, no ``message_stop``)."""
    return [i for i in items if not (isinstance(i, dict) and i.get("type") == "message_stop")]


def cut_after_message_delta(data: bytes) -> bytes:
    """Anthropic: the connection dies right after the ``message_delta`` that carries the stop
    reason (no ``message_stop``, no last HTTP chunk)."""
    at = data.index(b"event: message_delta")
    return data[: data.index(b"\n\n", at) + 2]


def error_event(payload: bytes) -> Callable[[str, bool], Reply]:
    """The answer with an event named ``error`` (its data ``payload``, without the protocol's
    error marker) before its last two events: after a chat stream's finish chunk, before
    Anthropic's ``message_delta``, before the Responses terminal event; the stream then goes on
    as if nothing happened (its end cannot make the error unsaid)."""

    def edit(p: str, stream: bool, items: list[Any]) -> list[Any]:
        out = wire(p, stream, items)
        at = len(out) - 2
        return [*out[:at], b"event: error\ndata: " + payload + b"\n\n", *out[at:]]

    return lambda p, s: Reply.text(ANSWER, edit=lambda items: edit(p, s, items))


def all_blocks_at_index_0(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: the answer's text in two blocks, every block event numbered 0 (a translating
    proxy that numbers them all 0, each block stopped before the next begins)."""
    at = next(n for n, i in enumerate(items) if (i.get("delta") or {}).get("type") == "text_delta")
    second = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    items = [*items[: at + 1], {"type": "content_block_stop", "index": 0}, second, *items[at + 1 :]]
    return walk(items, lambda d: str(d.get("type")).startswith("content_block") and d.update(index=0))


def error_beside_the_answer(error: dict[str, Any]) -> Callable[[list[Any]], list[Any]]:
    """A whole answer, cut short, with an error object beside it (OpenRouter-style)."""

    def edit(items: list[Any]) -> list[Any]:
        items[0]["error"] = error
        return items

    return edit


def x_gzip_body(data: bytes) -> bytes:
    """The answer's body gzip-compressed and labelled ``x-gzip``."""
    head, body = head_body(data)
    head = b"\r\n".join(h for h in head.split(b"\r\n") if not h.lower().startswith(b"content-length"))
    packed = gzip.compress(body)
    return head + b"\r\ncontent-encoding: x-gzip\r\ncontent-length: %d\r\n\r\n" % len(packed) + packed


BAD_REQUEST = b'{"type": "invalid_request_error", "message": "tools: bad schema"}'
UPSTREAM_DIED = {"message": "upstream died mid-answer", "code": 502}
QUOTA = {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}


def stale_completed(status: str) -> Callable[[list[Any]], list[Any]]:
    """Responses: the ``response.completed`` event's response saying ``status``."""

    def edit(items: list[Any]) -> list[Any]:
        items[-1]["response"]["status"] = status
        return items

    return edit


def completed_but_cut(items: list[Any]) -> list[Any]:
    """Responses: the response says ``completed`` and, in ``incomplete_details``, why it is not
    (a server that always says completed)."""
    final = items[-1].get("response", items[-1])
    final.update(status="completed", incomplete_details={"reason": "max_output_tokens"})
    return items


def refusal_parts(items: list[Any]) -> list[Any]:
    """Chat: the answer's content as ``refusal`` parts (as requests write an assistant's
    refusal), not the ``refusal`` field."""

    def fix(d: dict[str, Any]) -> None:
        if isinstance(d.get("content"), str) and d["content"]:
            d["content"] = [{"type": "refusal", "refusal": d["content"]}]

    return walk(items, fix)


CACHE_FIELDS = (
    "prompt_tokens_details",
    "completion_tokens_details",
    "input_tokens_details",
    "output_tokens_details",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def cache_fields_null(items: list[Any]) -> list[Any]:
    """Every cache and details field of the usage null; Anthropic's newer ``cache_creation``
    object beside them."""

    def fix(d: dict[str, Any]) -> None:
        d.update({key: None for key in CACHE_FIELDS if key in d})
        if "input_tokens" in d and "output_tokens" in d:
            d["cache_creation"] = {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}

    return walk(items, fix)


def counts_as_decimal_strings(items: list[Any]) -> list[Any]:
    """Every token count as the text of a float (``"100.0"``)."""
    keys = ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")
    return walk(items, lambda d: d.update({k: f"{d[k]}.0" for k in keys if isinstance(d.get(k), int)}))


def then_good(make: Callable[[str, bool], Reply]) -> Callable[[str, bool], list[Reply]]:
    return lambda p, s: [make(p, s), Reply.calls(ORDER), Reply.text(ANSWER)]


CASES = [
    # -- legitimate variants: accepted with the answer ----------------------------------------
    Round4("anthropic_stop_reason_without_message_stop", good(edit=without_message_stop), True,
           at=("anthropic/stream/http", "anthropic/stream/sdk")),
    Round4("anthropic_cut_right_after_message_delta", lambda p, s: [
        Raw(tool_calls=(ORDER,), wire=cut_after_message_delta), Reply.text(ANSWER)], True,
           at=("anthropic/stream/http",)),
    Round4("anthropic_every_block_at_index_0", lambda p, s: [
        Reply.calls(ORDER), Reply.text(ANSWER, edit=lambda i: all_blocks_at_index_0(p, s, i))], True,
           at=("anthropic/stream/http", "anthropic/stream/sdk")),
    Round4("responses_completed_event_still_in_progress", lambda p, s: [
        Reply.calls(ORDER, edit=stale_completed("queued")), Reply.text(ANSWER, edit=stale_completed(
            "in_progress"))], True, at=("responses/stream/http", "responses/stream/sdk")),
    Round4("token_counts_as_decimal_strings", lambda p, s: [
        Reply.calls(ORDER), Reply.text(ANSWER, edit=counts_as_decimal_strings)], True,
           at=("chat/stream/http", "anthropic/whole/http", "responses/stream/http")),
    Round4("usage_cache_fields_null", lambda p, s: [
        Reply.calls(ORDER), Reply.text(ANSWER, edit=cache_fields_null)], True,
           at=("chat/whole/http", "anthropic/stream/http", "responses/whole/http")),
    Round4("content_encoding_that_is_no_compression", lambda p, s: [
        Raw(tool_calls=(ORDER,), wire=relabel(b"UTF-8")), Raw(content=ANSWER, wire=relabel(b"none"))], True,
           at=("chat/whole/http", "anthropic/stream/sdk", "responses/whole/http")),
    Round4("retry_after_ms_fractional_then_good", then_good(lambda p, s: Reply(
        status=503, body=b"busy", headers={"retry-after-ms": "12.5"})), True, requests=3,
           at=("responses/whole/sdk",)),
    # -- faults: a typed stop, a non-zero exit -----------------------------------------------
    Round4("anthropic_max_tokens_without_message_stop", twice(lambda p, s: Reply.text(
        ANSWER, finish_reason="max_tokens", edit=lambda i: without_message_stop(p, s, i))), False,
           ("token limit", "max_tokens"), stop="truncated", at=("anthropic/stream/http",)),
    Round4("responses_completed_event_saying_cancelled", twice(lambda p, s: Reply.text(
        ANSWER, edit=stale_completed("cancelled"))), False, ("unknown reason", "cancelled"),
           at=("responses/stream/http",)),
    Round4("responses_completed_with_an_incomplete_reason", twice(lambda p, s: Reply.text(ANSWER, edit=(
        completed_but_cut))), False, ("token limit", "max_output_tokens"), stop="truncated",
           at=("responses/whole/http", "responses/stream/sdk")),
    Round4("chat_refusal_as_a_content_part", lambda p, s: [Reply.text(ANSWER, edit=refusal_parts)], False,
           ("refused or filtered",), stop="model_refused", at=("chat/whole/http", "chat/stream/http")),
    Round4("retry_after_past_the_run_deadline", twice(lambda p, s: Reply(
        status=503, body=b"busy", headers={"retry-after": "45"})), False, ("HTTP 503", "pass the deadline"),
           at=("chat/whole/http", "anthropic/stream/sdk")),
    Round4("error_object_beside_a_cut_whole_answer", twice(lambda p, s: Reply.text(
        "Order 742 is", edit=error_beside_the_answer(UPSTREAM_DIED))), False, ("upstream died", "gave up"),
           at=("chat/whole/http", "anthropic/whole/sdk", "responses/whole/http")),
    Round4("event_named_error_without_the_marker", twice(error_event(b'{"message": "Upstream overloaded"}')),
           False, ("Upstream overloaded", "gave up"),
           at=("chat/stream/http", "anthropic/stream/http", "responses/stream/sdk")),
    Round4("event_named_error_as_text", twice(error_event(b"Internal Server Error")), False,
           ("an error event", "Internal Server Error", "gave up"),
           at=("chat/stream/sdk", "anthropic/stream/http")),
    Round4("event_named_error_a_bad_request", twice(error_event(BAD_REQUEST)), False,
           ("invalid_request_error", "bad schema"), at=("responses/stream/http",)),
    Round4("quota_429_body_in_x_gzip", twice(lambda p, s: Raw(
        status=429, error_body=QUOTA, wire=x_gzip_body)), False, ("insufficient_quota", "not retried"),
           at=("chat/whole/http", "responses/stream/sdk", "anthropic/whole/sdk")),
]  # fmt: skip

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round6_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    assert_outcome(case, *run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4))


def input_zeroed_in_message_delta(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: ``message_delta`` repeats the usage with the input side zeroed (a proxy that
    fills the counts it does not know with 0)."""
    for i in items:
        if i.get("type") == "message_delta":
            i["usage"] = {"input_tokens": 0, "output_tokens": 10, "cache_read_input_tokens": 0}
    return items


@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_a_count_a_later_anthropic_event_zeroes_is_not_lost(tmp_path: Any, transport: str) -> None:
    """Each turn read 100 input tokens (``message_start``) and wrote 10; a ``message_delta``
    that then says 0 input tokens does not take them back: the run's two turns count 220
    tokens, not 20 (a token budget would have let ten times its worth through)."""
    case = Round4("input_zeroed_in_message_delta", good(edit=input_zeroed_in_message_delta), True)
    code, out, requests, _ = run_case(tmp_path, "anthropic", case, "stream", transport, servers=SERVERS4)
    assert (code, out["stop_reason"], requests, out["answer"]) == (0, "accepted", 2, ANSWER), out
    assert out["tokens"] == 2 * (100 + 10), out
