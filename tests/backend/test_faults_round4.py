"""A fourth round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run`` in
process) against real servers on 127.0.0.1 speaking chat completions, the Anthropic Messages API
or the OpenAI Responses API. The mechanism is shared, so each case runs where its path differs
(``Round4.at``: each protocol's reader, whole and streamed; the SDK transport for statuses).

Variants end ``accepted`` with the answer: one 6 MB event in 1 KB HTTP chunks, parallel calls a
server numbers all 0, raw U+2028/U+2029/U+0085 in the text, a second choice beside the first,
the same call id on every turn, a status line without its reason phrase, ``GZIP`` in capitals,
a body of several gzip members, chat reasoning as a list of parts, a ``retry-after`` that is
negative or not a number, a chat stream cut right after its finish chunk, a ``content-length``
short of the body, one beside ``chunked``, an Anthropic stream replayed from ``message_start``,
without block stops or block indexes, a ``response.queued`` event, absurd ``retry:``/``id:``
fields, whitespace after the JSON, NUL in the text.

Faults end with a typed stop and a non-zero exit, retried only when another try may help: two
``content-length`` headers, a negative one, a chunk size that is not hex, a header past any
limit, an OpenRouter error chunk, a ``zstd`` body or a ``br`` label (never offered: refused,
named), a ``deflate`` label on a gzip body, vLLM's ``object: error`` (400 final, 500 retried),
token counts negative or not numbers, ``retry-after: 1e999``, HTML pages for 401, 403, 404, 413,
422, 500, 503, 504 and Cloudflare's 524, a 402, a whole chat answer without a finish reason,
``content_filter`` mid-stream, a Responses answer failed for a rate limit or incomplete for an
unknown reason; and a redirect to another loopback server is not followed (it never sees the
key).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, good, run_case, twice, write_agent
from test_faults_round3 import ODD, OTHER, Round3, assert_outcome, walk, wire

from tether.cli import main
from tether_testing.fake_server import FakeChatServer, Reply, _Collect, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]


# -- a server whose answers can be edited as raw bytes --------------------------------------


@dataclass(frozen=True)
class Raw(Reply):
    """A ``Reply`` whose whole HTTP answer (status line, headers, body) is rewritten by
    ``wire`` before it is sent; ``keep``: the connection stays open after it (else it closes)."""

    wire: Callable[[bytes], bytes] | None = None
    keep: bool = False


def _raw_server(base: type[FakeChatServer]) -> type[FakeChatServer]:
    class RawServer(base):  # type: ignore[valid-type,misc]
        async def _answer(self, writer: Any, request: dict[str, Any], reply: Reply) -> bool:
            if not (isinstance(reply, Raw) and reply.wire is not None):
                return bool(await super()._answer(writer, request, reply))
            collect = _Collect()
            await super()._answer(collect, request, reply)
            writer.write(reply.wire(collect.data))
            await writer.drain()
            return reply.keep

    return RawServer


SERVERS4 = {name: _raw_server(cls) for name, cls in ODD.items()}


def raw(edit: Callable[[bytes], bytes], **kw: Any) -> Callable[[str, bool], list[Reply]]:
    """A tool call, then the answer, each rewritten on the wire by ``edit``."""
    return lambda p, s: [Raw(tool_calls=(ORDER,), wire=edit, **kw), Raw(content=ANSWER, wire=edit, **kw)]


def head_body(data: bytes) -> tuple[bytes, bytes]:
    head, body = data.split(b"\r\n\r\n", 1)
    return head, body


# -- edits ---------------------------------------------------------------------------------------


def encode_raw(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The items as JSON with non-ASCII characters raw (not ``\\u`` escaped)."""

    def one(i: Any) -> Any:
        if not isinstance(i, dict):
            return i
        text = json.dumps(i, ensure_ascii=False)
        if not stream:
            return text.encode()
        head = "" if p == "openai-chat" else f"event: {i.get('type')}\n"
        return f"{head}data: {text}\n\n".encode()

    return [one(i) for i in items]


def all_calls_at_index_0(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: every tool-call delta numbered 0, each call's first delta with its own id (as some
    servers stream parallel calls)."""
    return walk(items, lambda d: d.update(index=0) if "function" in d and "index" in d else None)


def second_choice(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: a second choice (index 1) beside the first, its deltas interleaved."""
    out: list[Any] = []
    for i in items:
        out.append(i)
        if isinstance(i, dict) and i.get("choices"):
            other = json.loads(json.dumps(i))
            for choice in other["choices"]:
                choice["index"] = 1
                for key in ("delta", "message"):
                    if (choice.get(key) or {}).get("content"):
                        choice[key]["content"] = "WRONG "
            if stream:
                out.append(other)
            else:
                i["choices"].append(other["choices"][0])
    return out


def same_call_id(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Every tool call's id the same on every turn (a server that numbers calls per answer)."""

    def fix(d: dict[str, Any]) -> None:
        for key in ("id", "call_id"):
            value = d.get(key)
            if isinstance(value, str) and value.startswith(("call_", "toolu_")):
                d[key] = value.split("_")[0] + "_0"

    return walk(items, fix)


def usage_counts(value: Any) -> Callable[[str, bool], Reply]:
    """An answer whose every token count is ``value``."""
    keys = ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")

    def edit(items: list[Any]) -> list[Any]:
        return walk(items, lambda d: d.update({k: value for k in keys if k in d}))

    return lambda p, s: Reply.text(ANSWER, edit=edit)


VLLM_400 = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_500 = {**VLLM_400, "message": "The engine died.", "type": "InternalServerError", "code": 500}


def vllm_error(error: dict[str, Any]) -> Callable[[str, bool], Reply]:
    """Chat: a vLLM error object (``object: error`` at the top) as the 200 body, or mid-stream."""

    def make(p: str, stream: bool) -> Reply:
        return Reply.text(ANSWER, edit=lambda items: [*items[:2], error] if stream else [error])

    return make


def status_page(code: int, title: str, **headers: str) -> Callable[[str, bool], Reply]:
    page = f"<html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>".encode()
    return lambda p, s: Reply(status=code, body=page, headers={"content-type": "text/html", **headers})


def then_good(make: Any) -> Any:
    return lambda p, s: [make(p, s), Reply.calls(ORDER), Reply.text(ANSWER)]


def zstd_body(data: bytes) -> bytes:
    """The answer's body compressed with zstd, which the client never asked for."""
    import zstandard

    head, body = head_body(data)
    packed = zstandard.ZstdCompressor().compress(body)
    head = b"\r\n".join(h for h in head.split(b"\r\n") if not h.lower().startswith(b"content-length"))
    return head + b"\r\ncontent-encoding: zstd\r\ncontent-length: %d\r\n\r\n" % len(packed) + packed


def chunk_size_not_hex(data: bytes) -> bytes:
    head, body = head_body(data)
    _, rest = body.split(b"\r\n", 1)
    return head + b"\r\n\r\n" + b"zz" + rest


def huge_header(data: bytes) -> bytes:
    head, body = head_body(data)
    return head + b"\r\nx-debug: " + b"a" * 200_000 + b"\r\n\r\n" + body


def no_reason_phrase(data: bytes) -> bytes:
    return data.replace(b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200\r\n", 1)


def capital_gzip(data: bytes) -> bytes:
    return data.replace(b"content-encoding: gzip", b"Content-Encoding: GZIP", 1)


def responses_final(**fields: Any) -> Callable[[list[Any]], list[Any]]:
    def edit(items: list[Any]) -> list[Any]:
        final = items[-1]["response"] if "response" in items[-1] else items[-1]
        final.update(fields)
        return items

    return edit


def cut_after_finish(data: bytes) -> bytes:
    """Chat: the connection dies right after the chunk that carries the finish reason (no usage
    chunk, no ``[DONE]``, no last HTTP chunk)."""
    at = data.index(b'"finish_reason": "', data.index(b"\r\n\r\n"))
    at = data.index(b"\n\n", at) + 2
    return data[:at]


def shorter_length(data: bytes) -> bytes:
    """A ``content-length`` ten bytes short of the body: the rest is left on the connection."""
    head, body = head_body(data)
    return head.replace(b"content-length: %d" % len(body), b"content-length: %d" % (len(body) - 10)) + (
        b"\r\n\r\n" + body
    )


def length_and_chunked(data: bytes) -> bytes:
    head, body = head_body(data)
    return head + b"\r\ncontent-length: 7\r\n\r\n" + body


def two_lengths(data: bytes) -> bytes:
    head, body = head_body(data)
    return head + b"\r\ncontent-length: %d\r\n\r\n" % (len(body) + 1) + body


def negative_length(data: bytes) -> bytes:
    head, body = head_body(data)
    return head.replace(b"content-length: %d" % len(body), b"content-length: -1") + b"\r\n\r\n" + body


def trailing_space(data: bytes) -> bytes:
    head, body = head_body(data)
    more = b"\r\n\n  \t"
    return head.replace(
        b"content-length: %d" % len(body), b"content-length: %d" % (len(body) + len(more))
    ) + (b"\r\n\r\n" + body + more)


def replayed_start(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: a proxy that retried upstream sends the first attempt's opening, then the
    whole second attempt (a second ``message_start``, its blocks numbered from 0 again)."""
    first = json.loads(json.dumps(items[:4]))
    for i in first:
        if (i.get("delta") or {}).get("type") == "text_delta":
            i["delta"]["text"] = "Lost first"
    return [*first, *items]


def reasoning_as_parts(items: list[Any]) -> list[Any]:
    """Chat: the reasoning as a list of text parts under ``reasoning`` (as content may be)."""

    def fix(d: dict[str, Any]) -> None:
        if isinstance(d.get("reasoning_content"), str):
            d["reasoning"] = [{"type": "text", "text": d.pop("reasoning_content")}]

    return walk(items, fix)


def no_block_index(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: block events without ``index`` (a translating proxy that drops it)."""
    return walk(items, lambda d: str(d.get("type")).startswith("content_block") and d.pop("index", None))


def no_block_stops(p: str, stream: bool, items: list[Any]) -> list[Any]:
    return [i for i in items if i.get("type") != "content_block_stop"]


def queued_first(p: str, stream: bool, items: list[Any]) -> list[Any]:
    queued = {**items[0], "type": "response.queued"}
    queued["response"] = {**queued["response"], "status": "queued"}
    return [queued, *items]


def absurd_retry_fields(p: str, stream: bool, items: list[Any]) -> list[Any]:
    noise = b"retry: -1\n\nretry: 99999999999999999999999\n\nretry: soon\nid: \x00\n\n"
    return [noise, *wire(p, stream, items)]


def gzip_members(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The body as several gzip members, one after another (each event, or each half of a
    whole answer, compressed on its own), as RFC 1952 allows."""
    pieces = wire(p, stream, items)
    if not stream:
        body = b"".join(pieces)
        pieces = [body[: len(body) // 2], body[len(body) // 2 :]]
    return [gzip.compress(piece) for piece in pieces]


def relabel(coding: bytes, *, gzipped: bool = False) -> Callable[[bytes], bytes]:
    """The answer labelled with ``content-encoding: coding`` (its body gzip-compressed first, or
    plain)."""

    def edit(data: bytes) -> bytes:
        head, body = head_body(data)
        head = b"\r\n".join(h for h in head.split(b"\r\n") if not h.lower().startswith(b"content-length"))
        body = gzip.compress(body) if gzipped else body
        return head + b"\r\ncontent-encoding: %s\r\ncontent-length: %d\r\n\r\n" % (coding, len(body)) + body

    return edit


def chat_finish(value: str | None) -> Callable[[list[Any]], list[Any]]:
    """Chat: the finish reason of a whole answer set to ``value`` (None: the field left out)."""

    def edit(items: list[Any]) -> list[Any]:
        choice = items[0]["choices"][0]
        choice.pop("finish_reason")
        if value is not None:
            choice["finish_reason"] = value
        return items

    return edit


def filtered_mid_stream(items: list[Any]) -> list[Any]:
    """Chat: part of the text, then the finish ``content_filter`` (the rest withheld)."""
    text = [
        i
        for i in items
        if isinstance(i, dict) and (i.get("choices") or [{}])[0].get("delta", {}).get("content")
    ]
    finish = next(
        i for i in items if isinstance(i, dict) and (i.get("choices") or [{}])[0].get("finish_reason")
    )
    finish["choices"][0]["finish_reason"] = "content_filter"
    return [i for i in items if i is not text[-1]]


HTML_STATUSES = {  # nginx's and Cloudflare's pages; where each runs
    403: ("403 Forbidden", ("HTTP 403", "403 Forbidden", "API_KEY"), "chat/whole/http"),
    404: ("404 Not Found", ("HTTP 404", "404 Not Found", "model name"), "anthropic/stream/sdk"),
    413: ("413 Request Entity Too Large", ("HTTP 413", "Too Large"), "responses/whole/http"),
    422: ("422 Unprocessable Entity", ("HTTP 422", "Unprocessable"), "chat/stream/sdk"),
    500: (
        "500 Internal Server Error",
        ("HTTP 500", "Internal Server Error", "gave up"),
        "anthropic/whole/http",
    ),
    503: (
        "503 Service Temporarily Unavailable",
        ("HTTP 503", "Unavailable", "gave up"),
        "responses/stream/sdk",
    ),
    504: ("504 Gateway Time-out", ("HTTP 504", "Gateway Time-out", "gave up"), "chat/whole/http"),
}


def nul_in_text(text: str) -> str:
    return text.replace(" ", "\u0000 ", 1)


OPENROUTER_ERROR = {
    "id": "gen-1",
    "object": "chat.completion.chunk",
    "error": {"code": 502, "message": "Provider returned error: upstream overloaded"},
    "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
}

ALL6 = tuple(f"{p}/{m}/{'sdk' if p == 'responses' and m == 'whole' else 'http'}"
             for p in ("chat", "anthropic", "responses") for m in ("whole", "stream"))  # fmt: skip
PROVIDERS = {"chat": "openai-chat", "anthropic": "anthropic", "responses": "openai-responses"}


@dataclass(frozen=True)
class Round4(Round3):
    # Where it runs, each "protocol/mode/transport": the mechanism is shared, so each case runs
    # where it differs (each protocol's reader, whole and streamed; the SDK's path for statuses).
    at: tuple[str, ...] = ()

    def combos(self) -> list[tuple[str, str, str]]:
        return [(PROVIDERS[p], m, t) for p, m, t in (a.split("/") for a in self.at)]


# A read that copies what it holds per block spends over 10 s of CPU on it (11.5 s here, the
# reader alone), past the case's 10 s timeout however idle the machine; a linear one 0.02 s, the
# whole call under 2 s at a load of 9 on 2 cores (the 2.5 s timeout it had failed under load).
BIG = "x" * 6_000_000 + ANSWER
ODD_TEXT = "Order 742\u2028is open\u0085— awaiting\u2029part P-17 ✓"

CASES = [
    # -- legitimate variants: accepted with the answer ----------------------------------------
    Round4("one_huge_event_in_small_http_chunks", lambda p, s: [
        Reply.calls(ORDER), Reply.text(BIG, chunks=1, http_chunk=1024)], True, answer=BIG, timeout_s=10,
           at=("chat/stream/http",)),
    Round4("parallel_calls_all_at_index_0", lambda p, s: [
        Reply.calls(ORDER, OTHER, edit=lambda i: all_calls_at_index_0(p, s, i)), Reply.text(ANSWER)], True,
           calls=("ok", "ok"), at=("chat/stream/http",)),
    Round4("line_separators_raw_in_text", lambda p, s: [
        Reply.calls(ORDER), Reply.text(ODD_TEXT, edit=lambda i: encode_raw(p, s, i))], True, answer=ODD_TEXT,
           at=ALL6),
    Round4("a_second_choice_beside_the_first", lambda p, s: [
        Reply.calls(ORDER), Reply.text(ANSWER, edit=lambda i: second_choice(p, s, i))], True,
           at=("chat/stream/http", "chat/whole/sdk")),
    Round4("the_same_call_id_on_every_turn", lambda p, s: [
        Reply.calls(ORDER, edit=lambda i: same_call_id(p, s, i)),
        Reply.calls(OTHER, edit=lambda i: same_call_id(p, s, i)), Reply.text(ANSWER)], True, requests=3,
           calls=("ok", "ok"), at=("chat/whole/http", "anthropic/stream/http", "responses/whole/http")),
    Round4("status_line_without_reason_phrase", raw(no_reason_phrase), True, at=("anthropic/whole/sdk",)),
    Round4("gzip_named_in_capitals", raw(capital_gzip, gzip=True), True, at=("responses/stream/http",)),
    Round4("retry_after_negative_then_good", then_good(lambda p, s: Reply(
        status=503, body=b"busy", headers={"retry-after": "-5"})), True, requests=3, at=("chat/whole/sdk",)),
    Round4("retry_after_not_a_number_then_good", then_good(lambda p, s: Reply(
        status=429, body=b"busy", headers={"retry-after": "NaN", "retry-after-ms": "soon"})), True,
           requests=3, at=("anthropic/stream/http",)),
    Round4("chat_cut_right_after_the_finish_chunk", lambda p, s: [
        Raw(tool_calls=(ORDER,), wire=cut_after_finish), Reply.text(ANSWER)], True,
           at=("chat/stream/http", "chat/stream/sdk")),
    Round4("content_length_short_of_the_body_then_good", lambda p, s: [
        Raw(content=ANSWER, wire=shorter_length, keep=True), Reply.calls(ORDER), Reply.text(ANSWER)], True,
           requests=3, at=("chat/whole/http",)),
    Round4("content_length_beside_chunked", raw(length_and_chunked), True, at=("responses/stream/http",)),
    Round4("anthropic_replayed_message_start", good(edit=replayed_start), True,
           at=("anthropic/stream/http",)),
    Round4("anthropic_without_block_stops", good(edit=no_block_stops), True, at=("anthropic/stream/sdk",)),
    Round4("anthropic_block_events_without_index", good(edit=no_block_index), True,
           at=("anthropic/stream/http",)),
    Round4("chat_reasoning_as_parts", lambda p, s: [
        Reply(tool_calls=(ORDER,), reasoning="Read it first.", edit=reasoning_as_parts),
        Reply.text(ANSWER, reasoning="It is open.", edit=reasoning_as_parts)], True,
           at=("chat/stream/http", "chat/whole/http")),
    Round4("responses_queued_first", good(edit=queued_first), True, at=("responses/stream/http",)),
    Round4("absurd_retry_and_id_fields", good(edit=absurd_retry_fields), True, at=("chat/stream/http",)),
    Round4("trailing_whitespace_after_the_json", raw(trailing_space), True, at=("anthropic/whole/http",)),
    Round4("nul_in_text", lambda p, s: [Reply.calls(ORDER), Reply.text(nul_in_text(ANSWER))], True,
           answer=nul_in_text(ANSWER), at=("responses/whole/http",)),
    Round4("gzip_in_several_members", good(edit=gzip_members, headers={"content-encoding": "gzip"}), True,
           at=("chat/stream/http", "chat/whole/sdk", "anthropic/stream/sdk", "anthropic/whole/http",
               "responses/stream/http", "responses/whole/http")),
    # -- faults: a typed stop, a non-zero exit -----------------------------------------------
    Round4("two_content_lengths", twice(lambda p, s: Raw(content=ANSWER, wire=two_lengths)), False,
           ("gave up",), at=("chat/whole/http",)),
    Round4("negative_content_length", twice(lambda p, s: Raw(content=ANSWER, wire=negative_length)), False,
           ("gave up",), at=("responses/whole/sdk",)),
    Round4("openrouter_error_chunk", twice(lambda p, s: Reply.text(
        ANSWER, edit=lambda i: [*i[:2], OPENROUTER_ERROR])), False, ("upstream overloaded", "gave up"),
           at=("chat/stream/http",)),
    Round4("zstd_body_never_asked_for", twice(lambda p, s: Raw(content=ANSWER, wire=zstd_body)), False,
           ("zstd", "cannot decode"), at=("chat/whole/http", "anthropic/whole/sdk", "responses/whole/http")),
    Round4("chunk_size_not_hex", twice(lambda p, s: Raw(content=ANSWER, wire=chunk_size_not_hex)), False,
           ("gave up",), at=("anthropic/stream/http",)),
    Round4("a_header_past_any_limit", twice(lambda p, s: Raw(content=ANSWER, wire=huge_header)), False,
           ("gave up",), at=("chat/whole/sdk",)),
    Round4("vllm_error_object_400", twice(vllm_error(VLLM_400)), False,
           ("BadRequestError", "maximum context length"),
           at=ALL6),
    Round4("vllm_error_object_500", twice(vllm_error(VLLM_500)), False, ("engine died", "gave up"),
           at=("chat/stream/http", "responses/whole/http")),
    Round4("usage_counts_negative", twice(usage_counts(-50)), False, ("gave up",),
           at=ALL6),
    Round4("usage_counts_not_numbers", twice(usage_counts("many")), False, ("gave up",),
           at=("anthropic/whole/http", "anthropic/stream/sdk")),
    Round4("retry_after_infinite", twice(lambda p, s: Reply(status=503, body=b"busy", headers={
        "retry-after": "1e999"})), False, ("HTTP 503", "Retry-After too long"), at=("responses/whole/sdk",)),
    Round4("401_html_login_page", twice(status_page(401, "401 Authorization Required")), False,
           ("HTTP 401", "Authorization Required", "API_KEY"), at=("chat/whole/sdk", "anthropic/stream/http")),
    Round4("cloudflare_524_page", twice(status_page(524, "A timeout occurred")), False,
           ("HTTP 524", "A timeout occurred", "gave up"), at=("anthropic/stream/sdk",)),
    Round4("402_payment_required", twice(lambda p, s: Reply(status=402, error_body={"error": {
        "message": "Insufficient credits", "code": 402}})), False, ("HTTP 402", "Insufficient credits"),
           at=("responses/whole/sdk",)),
    Round4("br_label_on_a_plain_body", twice(lambda p, s: Raw(content=ANSWER, wire=relabel(b"br"))), False,
           ("br", "cannot decode"), at=("anthropic/whole/http", "responses/whole/sdk")),
    Round4("deflate_label_on_a_gzip_body", twice(lambda p, s: Raw(content=ANSWER, wire=relabel(
        b"deflate", gzipped=True))), False, ("does not decode", "gave up"), at=("chat/whole/http",)),
    Round4("chat_whole_answer_without_a_finish_reason", twice(lambda p, s: Reply.text(
        ANSWER, edit=chat_finish(None))), False, ("unknown reason", "None"), at=("chat/whole/http",)),
    Round4("chat_content_filter_mid_stream", twice(lambda p, s: Reply.text(ANSWER, edit=filtered_mid_stream)),
           False, ("refused or filtered", "content_filter"), stop="model_refused", at=("chat/stream/http",)),
    Round4("responses_failed_rate_limited", twice(lambda p, s: Reply.text(ANSWER, edit=responses_final(
        status="failed", output=[], error={"code": "rate_limit_exceeded", "message": "Slow down"}))), False,
           ("rate_limit_exceeded", "Slow down", "gave up"),
           at=("responses/whole/http", "responses/stream/sdk")),
    *[Round4(f"{code}_html_page", twice(status_page(code, title)), False, said, at=(at,))
      for code, (title, said, at) in HTML_STATUSES.items()],
    Round4("responses_incomplete_for_an_unknown_reason", twice(lambda p, s: Reply.text(
        ANSWER, edit=responses_final(status="incomplete", incomplete_details={"reason": "tether_future"}))),
           False, ("tether_future",), at=("responses/stream/http",)),
]  # fmt: skip


def round_params(cases: list[Round4]) -> list[Any]:
    """Each case once per provider, mode and transport it runs on (case names are unique)."""
    assert len({c.name for c in cases}) == len(cases)
    return [
        pytest.param(case, provider, mode, transport, id=f"{case.name}-{provider}-{mode}-{transport}")
        for case in cases
        for provider, mode, transport in case.combos()
    ]


PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round4_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    assert_outcome(case, *run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4))


@pytest.mark.parametrize(
    ("provider", "transport"), [("openai-chat", "http"), ("anthropic", "sdk"), ("openai-responses", "http")]
)
def test_a_redirect_to_another_loopback_server_is_not_followed_and_carries_no_key(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, provider: str, transport: str
) -> None:
    """A 308 to another server that would answer well: the run ends at once, naming where it
    was sent, and that server never sees a request (nor the key in its headers)."""
    secret = "sk-round4-not-for-elsewhere"
    monkeypatch.setenv("ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY", secret)
    server = SERVERS4[provider]
    with server(scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as elsewhere:
        target = elsewhere.url + server.endpoint.removeprefix("/v1")
        moved = Reply(status=308, body=b"moved", headers={"location": target})
        with server(scripted([moved, moved])) as origin:
            model = {"provider": provider, "name": "m-1", "base_url": origin.url, "transport": transport,
                     "max_retries": 1, "timeout_s": 3}  # fmt: skip
            path = write_agent(tmp_path, model)
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = main(["run", "Why is 742 open?", "--agent", str(path), "--json"])
            summary = json.loads(out.getvalue().strip().split("\n")[-1])
            assert (code != 0, summary["stop_reason"], len(origin.received)) == (True, "model_error", 1)
            assert "HTTP 308" in summary["message"] and target in summary["message"]
            assert secret in str(origin.received[0].headers)  # the key went where it was meant to
        assert elsewhere.received == []
