"""A seventeenth round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run`` in
process) against real servers on 127.0.0.1 speaking each protocol; each case runs where its path
differs (``Round4.at``). This round garbles who a call is and which block a piece belongs to.

Faults fixed this round (a typed stop, a non-zero exit, retried as an unusable answer): a tool
call without a name, on every protocol — a call the server sent with an empty name, a chat
call of type ``custom`` (no ``function``), a chat stream whose argument deltas jump to an index
no call began (before: each was read as a call to the tool ``''``, refused by the host as
unknown, the turn's real call run with no arguments, and the run went on to be ``accepted``:
the model had been handed a garbled turn's results as if it had asked for them;
``HTTPBackend._answer``); an Anthropic delta of one kind sent to a block of another — the call's
``input_json_delta`` numbered for the text block before it, a ``text_delta`` numbered for a
``tool_use`` block (before: the input went to the text block and the call was read with the
input its start gave, ``{}``; the text was dropped and the turn accepted; ``_anthropic._Blocks``);
a chat stream that begins a second call (its own id and name) under the index of a call whose
arguments are not yet whole (before: the two were read as one call, their arguments run
together, refused as malformed, and the run went on to be ``accepted``; ``_openai._add_call_delta``).
An empty delta sent to a block of another kind still carries nothing and is passed over.

Held as they were (pinned here): variants accepted with the answer — an event of a type the
protocol does not define mid-stream, text sent after the terminal event (``[DONE]``,
``message_stop``, ``response.completed``: not added to the answer), the final events sent twice,
a ``deflate`` body, an Anthropic block of an unknown type before the text, a Responses output
item of an unknown type, Responses argument deltas addressed to an item never added (the done
item's arguments stand); faults — the protocol's own error body sent with status 200 (its
message named; an overloaded error retried, an authentication error final), a JSON list as the
answer, ``usage`` as a list or text, cached-token counts negative or text, ``choices: []``,
gzip with a wrong CRC or cut short, a ``content-length`` longer than the body, an Anthropic
``refusal`` stop (``model_refused``), two calls under one id in one message (never run, retried
as unusable); arguments that are JSON but no object (never run, refused ``not_an_object``).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, good, run_case, twice
from test_faults_round3 import OTHER, assert_outcome, walk
from test_faults_round4 import ALL6, SERVERS4, Raw, Round4, head_body, round_params, then_good

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

STREAMS = ("chat/stream/http", "anthropic/stream/http", "responses/stream/http")
WHOLES = ("chat/whole/http", "anthropic/whole/http", "responses/whole/http")


# -- edits ---------------------------------------------------------------------------------------


def _is_event(item: Any, kind: str) -> bool:
    return isinstance(item, dict) and item.get("type") == kind


def body_is(body: bytes) -> Callable[[bytes], bytes]:
    """The answer's body replaced by ``body`` (status 200, JSON, its length)."""

    def wire(data: bytes) -> bytes:
        head = data.split(b"\r\n")[0]
        return head + b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body

    return wire


def protocol_error(p: str, kind: str, message: str) -> bytes:
    if p == "anthropic":
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": kind}}).encode()


def error_as_200(kind: str) -> Callable[[str, bool], Reply]:
    """The protocol's own error body, sent with status 200 as the whole answer (a gateway that
    relays an upstream error in a 200)."""
    return lambda p, s: Raw(content=ANSWER, wire=body_is(protocol_error(p, kind, "Upstream says no")))


def unknown_event(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """An event of a type the protocol does not define, after the first event (Anthropic, Responses)
    or a chunk with an unknown delta field (chat)."""
    if p == "openai-chat":
        odd = {**items[0], "choices": [{"index": 0, "delta": {"tether_future": 1}, "finish_reason": None}]}
    elif p == "anthropic":
        odd = {"type": "tether_future_event", "payload": {"x": 1}}
    else:
        odd = {"type": "response.tether_future.delta", "sequence_number": 1, "delta": "x"}
    return [items[0], odd, *items[1:]]


def text_after_terminal(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """More text after the stream's terminal event ([DONE], message_stop, response.completed)."""
    if p == "openai-chat":
        first = next(i for i in items if isinstance(i, dict))
        delta = {"index": 0, "delta": {"content": " EXTRA"}, "finish_reason": None}
        extra: Any = {**first, "choices": [delta]}
    elif p == "anthropic":
        extra = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " EXTRA"}}
    else:
        item = next((i for i in items if _is_event(i, "response.output_text.delta")), None)
        if item is None:
            return items
        extra = {**item, "delta": " EXTRA", "sequence_number": 999}
    return [*items, extra]


def final_twice(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The events that end the stream sent twice (a proxy that replays its last writes)."""
    if p == "openai-chat":
        return [*items[:-1], items[-2], items[-1], items[-1]]
    if p == "anthropic":
        return [*items[:-1], items[-2], items[-1], items[-1]]
    last = json.loads(json.dumps(items[-1]))
    last["sequence_number"] += 1
    return [*items, last]


def usage_shape(value: Any) -> Callable[[list[Any]], list[Any]]:
    """``usage`` replaced by ``value`` wherever it is reported."""

    def edit(items: list[Any]) -> list[Any]:
        def fix(d: dict[str, Any]) -> None:
            if d.get("usage") is not None:
                d["usage"] = value

        return walk(items, fix)

    return edit


def cached_tokens(value: Any) -> Callable[[str, bool], Reply]:
    """The answer, its cached-token count ``value`` (each protocol's field)."""

    def make(p: str, stream: bool) -> Reply:
        usage: dict[str, Any] = {"input_tokens": 100, "output_tokens": 10}
        if p == "anthropic":
            usage["cache_read_input_tokens"] = value
        elif p == "openai-responses":
            usage["input_tokens_details"] = {"cached_tokens": value}
        else:
            usage = {"prompt_tokens": 100, "completion_tokens": 10}
            usage["prompt_tokens_details"] = {"cached_tokens": value}
        return Reply.text(ANSWER, usage=usage)

    return make


def arguments_not_an_object(raw: str) -> Callable[[str, bool], list[Reply]]:
    return lambda p, s: [Reply.calls(("read_order", raw)), Reply.text(ANSWER)]


def same_id_twice(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Two calls in one message under the same id."""
    ids: dict[str, str] = {}

    def fix(d: dict[str, Any]) -> None:
        for key in ("id", "call_id"):
            v = d.get(key)
            if isinstance(v, str) and v.startswith(("call_", "toolu_")):
                d[key] = ids.setdefault(key, v)

    return walk(items, fix)


def empty_choices(items: list[Any]) -> list[Any]:
    return walk(items, lambda d: d.update(choices=[]) if "choices" in d else None)


def anthropic_unknown_block(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """An Anthropic block of a type the API does not define, before the text."""
    if not stream:
        items[0]["content"].insert(0, {"type": "tether_future", "data": "x"})
        return items
    start = next(n for n, i in enumerate(items) if _is_event(i, "content_block_start"))
    out = []
    for i in items:
        if isinstance(i, dict) and isinstance(i.get("index"), int):
            i = {**i, "index": i["index"] + 1}
        out.append(i)
    block = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tether_future", "data": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "tether_future_delta", "data": "x"}},
        {"type": "content_block_stop", "index": 0},
    ]
    return [*out[:start], *block, *out[start:]]


def responses_unknown_item(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """A Responses output item of a type the API does not define, beside the message."""
    odd = {"type": "tether_future_item", "id": "fx_1", "status": "completed"}
    if not stream:
        items[0]["output"].insert(0, odd)
        return items
    items[-1]["response"]["output"].insert(0, odd)
    return items


def chat_custom_call(items: list[Any]) -> list[Any]:
    """A chat tool call of type ``custom`` (free-form input, not JSON arguments)."""

    def fix(d: dict[str, Any]) -> None:
        if d.get("type") == "function" and "function" in d:
            fn = d.pop("function")
            d.update(type="custom", custom={"name": fn["name"], "input": "742"})

    return walk(items, fix)


def args_elsewhere(items: list[Any]) -> list[Any]:
    """Chat: the call's argument deltas numbered 1, its header 0 (an index that jumps)."""

    def fix(d: dict[str, Any]) -> None:
        if d.get("index") == 0 and "function" in d and "id" not in d:
            d["index"] = 1

    return walk(items, fix)


def second_call_over_a_cut_first(items: list[Any]) -> list[Any]:
    """Chat: two calls both numbered 0, the first's last argument piece lost, so the second
    begins (its own id and name) while the first's arguments are not yet whole JSON."""
    out: list[Any] = []
    pieces = [n for n, i in enumerate(items) if _call_delta(i) and "id" not in _call_delta(i)]
    headers = [n for n, i in enumerate(items) if _call_delta(i) and "id" in _call_delta(i)]
    lost = max(n for n in pieces if n < headers[1])
    for n, item in enumerate(items):
        if n != lost:
            out.append(walk(item, lambda d: d.update(index=0) if "function" in d and "index" in d else None))
    return out


def _call_delta(item: Any) -> dict[str, Any]:
    if not (isinstance(item, dict) and item.get("choices")):
        return {}
    calls = (item["choices"][0].get("delta") or {}).get("tool_calls") or [{}]
    return dict(calls[0])


def text_to_tool(items: list[Any]) -> list[Any]:
    """Anthropic: a text delta sent to the tool_use block, beside its input."""
    at = next(n for n, i in enumerate(items) if _is_event(i, "content_block_stop"))
    index = items[at]["index"]
    odd = {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": "hm"}}
    return [*items[:at], odd, *items[at:]]


def input_to_text(items: list[Any]) -> list[Any]:
    """Anthropic: the call's input deltas numbered for the text block before it."""

    def fix(d: dict[str, Any]) -> None:
        if (d.get("delta") or {}).get("type") == "input_json_delta":
            d["index"] = 0

    return walk(items, fix)


def responses_args_elsewhere(items: list[Any]) -> list[Any]:
    """Responses: the argument deltas name an item and index never added, the done events too."""

    def fix(d: dict[str, Any]) -> None:
        if str(d.get("type", "")).startswith("response.function_call_arguments"):
            d.update(item_id="fc_elsewhere", output_index=7)

    return walk(items, fix)


def body_coded(coding: bytes, code: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """The answer's body encoded by ``code``, labelled ``content-encoding: coding``, its length."""

    def wire(data: bytes) -> bytes:
        head, body = head_body(data)
        packed = code(body)
        lines = [h for h in head.split(b"\r\n") if not h.lower().startswith(b"content-length")]
        lines += [b"content-encoding: " + coding, b"content-length: %d" % len(packed)]
        return b"\r\n".join(lines) + b"\r\n\r\n" + packed

    return wire


def wrong_crc(body: bytes) -> bytes:
    packed = bytearray(gzip.compress(body))
    packed[-8] ^= 0xFF  # the CRC-32 of the body, wrong
    return bytes(packed)


def longer_length(data: bytes) -> bytes:
    """A ``content-length`` 100 bytes past the body, the connection then closed."""
    head, body = head_body(data)
    lines = [h for h in head.split(b"\r\n") if not h.lower().startswith(b"content-length")]
    return b"\r\n".join([*lines, b"content-length: %d" % (len(body) + 100)]) + b"\r\n\r\n" + body


def stop(reason: str) -> Callable[[str, bool], Reply]:
    return lambda p, s: Reply.text(ANSWER, finish_reason=reason)


NAMELESS = ("", '{"order_id": "742"}')  # a call its server sent with an empty name
DEFLATED = body_coded(b"deflate", zlib.compress)
WRONG_CRC = body_coded(b"gzip", wrong_crc)
CUT_GZIP = body_coded(b"gzip", lambda body: gzip.compress(body)[:-12])  # its last block and trailer lost

CASES = [
    # -- legitimate variants -----------------------------------------------------------------
    Round4("an_event_of_an_unknown_type", good(edit=unknown_event), True, at=STREAMS),
    Round4("text_after_the_terminal_event", good(edit=text_after_terminal), True, at=STREAMS),
    Round4("the_final_events_sent_twice", good(edit=final_twice), True, at=STREAMS),
    Round4("deflate_body", lambda p, s: [Raw(tool_calls=(ORDER,), wire=DEFLATED),
                                       Raw(content=ANSWER, wire=DEFLATED)], True, at=WHOLES),
    Round4("anthropic_unknown_block_type", good(edit=anthropic_unknown_block), True,
           at=("anthropic/stream/http", "anthropic/whole/http")),
    Round4("responses_arguments_to_an_unknown_item", good(edit=lambda p, s, i: responses_args_elsewhere(i)),
           True, at=("responses/stream/http",)),
    Round4("responses_unknown_item_type", good(edit=responses_unknown_item), True,
           at=("responses/stream/http", "responses/whole/http")),
    Round4("a_call_without_a_name_then_good", then_good(lambda p, s: Reply.calls(NAMELESS)),
           True, requests=3, at=ALL6),
    Round4("anthropic_input_deltas_to_the_text_block_then_good", then_good(lambda p, s: Reply(
        content="Reading it.", tool_calls=(ORDER,), edit=input_to_text)), True, requests=3,
           at=("anthropic/stream/http",)),
    Round4("chat_a_second_call_at_index_0_over_a_cut_first_then_good", then_good(lambda p, s: Reply.calls(
        ORDER, OTHER, edit=second_call_over_a_cut_first)), True, requests=3, at=("chat/stream/http",)),
    # -- faults ------------------------------------------------------------------------------
    Round4("the_protocols_error_as_a_200", twice(error_as_200("overloaded_error")), False,
           ("Upstream says no", "gave up"), at=ALL6),
    Round4("an_auth_error_as_a_200", twice(error_as_200("authentication_error")), False,
           ("Upstream says no",), at=ALL6),
    Round4("a_json_list_as_the_answer", twice(lambda p, s: Raw(content=ANSWER, wire=body_is(b"[]"))), False,
           ("gave up",), at=WHOLES),
    Round4("a_call_without_a_name", twice(lambda p, s: Reply.calls(NAMELESS)), False,
           ("without a name", "gave up"), at=ALL6),
    Round4("chat_arguments_on_another_index", twice(lambda p, s: Reply.calls(ORDER, edit=args_elsewhere)),
           False, ("without a name", "gave up"), at=("chat/stream/http",)),
    Round4("chat_a_second_call_at_index_0_over_a_cut_first", twice(lambda p, s: Reply.calls(
        ORDER, OTHER, edit=second_call_over_a_cut_first)), False, ("began at index 0 before call", "gave up"),
           at=("chat/stream/http", "chat/stream/sdk")),
    Round4("anthropic_text_delta_to_a_tool_block", twice(lambda p, s: Reply.calls(ORDER, edit=text_to_tool)),
           False, ("text_delta", "gave up"), at=("anthropic/stream/http",)),
    Round4("anthropic_input_deltas_to_the_text_block", twice(lambda p, s: Reply(
        content="Reading it.", tool_calls=(ORDER,), edit=input_to_text)), False,
           ("input_json_delta", "gave up"), at=("anthropic/stream/http", "anthropic/stream/sdk")),
    Round4("two_calls_under_one_id", twice(lambda p, s: Reply.calls(
        ORDER, OTHER, edit=lambda i: same_id_twice(p, s, i))), False, ("duplicate tool call id", "gave up"),
           at=ALL6),
    Round4("usage_as_a_list", twice(lambda p, s: Reply.text(ANSWER, edit=usage_shape([1, 2]))), False,
           ("gave up",), at=ALL6),
    Round4("usage_as_text", twice(lambda p, s: Reply.text(ANSWER, edit=usage_shape("lots"))), False,
           ("gave up",), at=ALL6),
    Round4("cached_tokens_negative", twice(cached_tokens(-5000)), False, ("gave up",), at=ALL6),
    Round4("cached_tokens_text", twice(cached_tokens("many")), False, ("gave up",), at=ALL6),
    Round4("empty_choices", twice(lambda p, s: Reply.text(ANSWER, edit=empty_choices)), False, ("gave up",),
           at=("chat/whole/http", "chat/stream/http")),
    Round4("gzip_with_a_wrong_crc", twice(lambda p, s: Raw(content=ANSWER, wire=WRONG_CRC)), False,
           ("gave up",), at=WHOLES),
    Round4("gzip_cut_short", twice(lambda p, s: Raw(content=ANSWER, wire=CUT_GZIP)), False,
           ("gave up",), at=WHOLES),
    Round4("content_length_longer_than_the_body", twice(lambda p, s: Raw(content=ANSWER, wire=longer_length)),
           False, ("gave up",), at=WHOLES),
    Round4("anthropic_refusal", twice(stop("refusal")), False, stop="model_refused",
           at=("anthropic/stream/http", "anthropic/whole/http")),
    Round4("chat_custom_tool_call", twice(lambda p, s: Reply.calls(ORDER, edit=chat_custom_call)), False,
           ("without a name", "gave up"), at=("chat/whole/http", "chat/stream/http", "chat/whole/sdk")),
]  # fmt: skip

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round17_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    assert_outcome(case, *run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4))


@pytest.mark.parametrize("raw", ["[1, 2]", '"742"', "42", "null", "true"])
@pytest.mark.parametrize(
    ("provider", "mode"), [("openai-chat", "stream"), ("anthropic", "stream"), ("openai-responses", "whole")]
)
def test_arguments_that_are_json_but_not_an_object_are_never_run(
    tmp_path: Any, provider: str, mode: str, raw: str
) -> None:
    """Arguments that parse but are no object (a list, a string, a number, null, true): the
    call is refused by the gate (``not_an_object``), never run, the model told so, and the run
    ends saying a requested call did not run (exit 2), not 0."""
    case = Round4("x", arguments_not_an_object(raw), True)
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, "http", servers=SERVERS4)
    assert (code, requests) == (2, 2), out
    refused = [(c["status"], c["reason"].split(":")[0]) for c in out["calls"]]
    assert refused == [("rejected", "not_an_object")], out
