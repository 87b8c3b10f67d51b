"""Model faults, round thirty-three: probes driven as the other rounds are (an agent file naming
``model.provider``, ``tether run`` in process, streamed and whole, over the SDK transport and
plain httpx) against real servers on 127.0.0.1 speaking chat completions, the Responses API and
the Anthropic Messages API. Every probe held; each is pinned here so it stays so.

Faults (a typed stop, a non-zero exit, the streamed call never run):

- a stream that says a complete tool call and then its protocol's error event (Anthropic
  ``error``, Responses ``error``, a chat chunk with ``error``), before its end or in place of
  it, or a chat finish chunk that carries an ``error`` beside it; a Responses stream that ends
  ``response.failed`` after the call: retried once, then ``model_error`` quoting the server;
- a Responses stream whose terminal ``response.completed`` says ``status`` ``failed`` (retried,
  ``model_error``) or ``incomplete`` (``truncated``), after a complete call;
- a Responses stream ending ``response.incomplete`` (``max_output_tokens``), an Anthropic one
  ending ``max_tokens`` or ``refusal``, after a complete call: ``truncated`` / ``model_refused``,
  final, the call named as not run;
- an Anthropic ``stop_reason: "tool_use"`` with no ``tool_use`` block (streamed and whole), and
  a stream whose ``message_start`` comes again after the call (a message begun again: its
  blocks are the new message's, none): unusable, retried, ``model_error``;
- a Responses ``response.output_text.done`` whose text is not its deltas': unreadable, retried;
- a completed Responses answer whose ``function_call`` item is ``incomplete``: final, the call
  named as not run;
- keep-alives (SSE comments, Anthropic ``ping``, Responses ``in_progress``) past the call's
  timeout: the timeout bounds the whole call, retried, ``model_error``.

Quirks (accepted with the answer, the call run): a chat stream's usage chunk after ``[DONE]``
(not read: the usage is estimated); ``tool_calls[].index`` counted from 1; a chat call's name
streamed in pieces; an Anthropic stream without ``content_block_stop``; a whole JSON answer to
a stream request labelled ``application/json`` or ``text/event-stream``; a whole answer to a
whole request labelled ``text/event-stream``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, Case, case_params, good, only, run_case
from test_faults_round4 import SERVERS4

from tether_testing.fake_server import Pause, Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

C, A, R = ("openai-chat",), ("anthropic",), ("openai-responses",)
STREAM, WHOLE = ("stream",), ("whole",)
Edit = Callable[[str, bool, list[Any]], list[Any]]

ANTHROPIC_ERROR = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded mid-stream"}}
RESPONSES_ERROR = {"type": "error", "code": "server_error", "message": "Overloaded mid-stream", "param": None}
CHAT_ERROR = {"error": {"message": "Overloaded mid-stream", "type": "server_error", "code": 500}}


def _kind(i: Any) -> str:
    return str(i.get("type", "")) if isinstance(i, dict) else ""


def error_after_call(p: str, s: bool, items: list[Any]) -> list[Any]:
    """A stream that says a complete tool call, then its protocol's error event, then ends."""
    if p == "anthropic":
        at = max(n for n, i in enumerate(items) if _kind(i) == "content_block_stop") + 1
        return [*items[:at], ANTHROPIC_ERROR, *items[at:]]
    if p == "openai-responses":
        at = max(n for n, i in enumerate(items) if _kind(i) == "response.output_item.done") + 1
        return [*items[:at], RESPONSES_ERROR, *items[at:]]
    at = next(n for n, i in enumerate(items) if isinstance(i, bytes) and b"[DONE]" in i)
    return [*items[:at], CHAT_ERROR, *items[at:]]


def error_instead_of_end(p: str, s: bool, items: list[Any]) -> list[Any]:
    """The complete call, then the error event in place of the stream's end."""
    if p == "anthropic":
        at = max(n for n, i in enumerate(items) if _kind(i) == "content_block_stop") + 1
        return [*items[:at], ANTHROPIC_ERROR]
    if p == "openai-responses":
        at = max(n for n, i in enumerate(items) if _kind(i) == "response.output_item.done") + 1
        return [*items[:at], RESPONSES_ERROR]
    at = next(n for n, i in enumerate(items) if isinstance(i, bytes) and b"[DONE]" in i)
    return [*items[: at - 1], CHAT_ERROR]


def response_failed_after_call(p: str, s: bool, items: list[Any]) -> list[Any]:
    last = dict(
        items[-1]["response"], status="failed", error={"code": "server_error", "message": "boom late"}
    )
    return [*items[:-1], {"type": "response.failed", "response": last}]


def calls_then(edit: Edit) -> Callable[[str, bool], list[Reply]]:
    def make(p: str, s: bool) -> list[Reply]:
        bad = Reply.calls(ORDER, edit=lambda items: edit(p, s, items))
        return [bad, bad, Reply.text(ANSWER)]

    return make


def usage_after_done(p: str, s: bool, items: list[Any]) -> list[Any]:
    usage = [i for i in items if isinstance(i, dict) and i.get("usage") and not i.get("choices")]
    rest = [i for i in items if not any(i is u for u in usage)]
    return [*rest, *usage]


def stop_tool_use_without_block(items: list[Any]) -> list[Any]:
    for i in items:
        if isinstance(i, dict):
            if _kind(i) == "message_delta":
                i["delta"]["stop_reason"] = "tool_use"
            elif _kind(i) == "message":
                i["stop_reason"] = "tool_use"
    return items


def text_done_otherwise(items: list[Any]) -> list[Any]:
    for i in items:
        if _kind(i) == "response.output_text.done":
            i["text"] = "Order 742 is CLOSED"
    return items


def index_from_one(p: str, s: bool, items: list[Any]) -> list[Any]:
    for item in items:
        for choice in item.get("choices") or () if isinstance(item, dict) else ():
            for tc in (choice.get("delta") or {}).get("tool_calls") or ():
                tc["index"] = tc.get("index", 0) + 1
    return items


def incomplete_after_call(p: str, s: bool, items: list[Any]) -> list[Any]:
    last = dict(
        items[-1]["response"], status="incomplete", incomplete_details={"reason": "max_output_tokens"}
    )
    return [*items[:-1], {"type": "response.incomplete", "response": last}]


def anthropic_stop_after_call(value: str) -> Edit:
    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        for i in items:
            if _kind(i) == "message_delta":
                i["delta"]["stop_reason"] = value
            elif _kind(i) == "message":
                i["stop_reason"] = value
        return items

    return edit


def error_beside_finish(p: str, s: bool, items: list[Any]) -> list[Any]:
    for i in items:
        for c in i.get("choices") or () if isinstance(i, dict) else ():
            if c.get("finish_reason"):
                i["error"] = {"message": "Overloaded beside finish", "type": "server_error"}
    return items


def pings_forever(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Keep-alives every 0.1 s (comments and the protocol's pings), far past the call's timeout."""
    ping = (
        {"type": "ping"} if p == "anthropic" else items[1] if p == "openai-responses" else b": keep-alive\n\n"
    )
    return [*items[:2], *[x for _ in range(40) for x in (ping, b": ping\n\n", Pause(0.1))], *items[2:]]


def second_message_start(p: str, s: bool, items: list[Any]) -> list[Any]:
    at = max(n for n, i in enumerate(items) if _kind(i) == "content_block_stop") + 1
    return [*items[:at], items[0], *items[at:]]


SSE_LABEL = {"content-type": "text/event-stream"}


def name_in_pieces(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Chat: the call's name streamed in two pieces (``read_``, then ``order``), as its arguments are."""
    out: list[Any] = []
    for i in items:
        delta = (i.get("choices") or [{}])[0].get("delta") or {} if isinstance(i, dict) else {}
        head = (delta.get("tool_calls") or [{}])[0]
        if (head.get("function") or {}).get("name"):
            rest = copy.deepcopy(i)
            head["function"]["name"] = "read_"
            rest["choices"][0]["delta"]["tool_calls"][0] = {
                "index": 0,
                "function": {"name": "order", "arguments": ""},
            }
            out += [i, rest]
        else:
            out.append(i)
    return out


def call_item_incomplete(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Responses: each ``function_call`` item ``incomplete`` (its arguments cut), in a completed response."""
    items = copy.deepcopy(items)

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            if v.get("type") == "function_call":
                v["status"] = "incomplete"
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(items)
    return items


def no_block_stop(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Anthropic: no ``content_block_stop`` (the message's stop ends its blocks)."""
    return [i for i in items if _kind(i) != "content_block_stop"]


def completed_status(value: str) -> Edit:
    """Responses: the terminal ``response.completed`` event's response ``status`` is ``value``."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        items = copy.deepcopy(items)
        items[-1]["response"]["status"] = value
        if value == "incomplete":
            items[-1]["response"]["incomplete_details"] = {"reason": "max_output_tokens"}
        return items

    return edit


def whole_twice(edit: Callable[[list[Any]], list[Any]]) -> Callable[[str, bool], list[Reply]]:
    """The answer's text, changed by ``edit``, twice (retried), then the answer."""
    return lambda p, s: [Reply.text(ANSWER, edit=edit)] * 2 + [Reply.text(ANSWER)]


CASES = [
    # -- faults after a complete call: retried once, then model_error, the call never run --------
    Case("error_event_after_a_complete_call", calls_then(error_after_call), False, ("mid-stream", "gave up"),
         modes=STREAM),
    Case("error_event_in_place_of_the_end", calls_then(error_instead_of_end), False,
         ("Overloaded mid-stream", "gave up"), modes=STREAM),
    Case("chat_error_beside_the_finish", only(C, calls_then(error_beside_finish)), False,
         ("Overloaded beside finish", "gave up"), modes=STREAM),
    Case("response_failed_after_a_complete_call", only(R, calls_then(response_failed_after_call)), False,
         ("boom late", "gave up"), modes=STREAM),
    Case("message_start_again_after_the_call", only(A, calls_then(second_message_start)), False,
         ("gave up",), modes=STREAM),
    Case("completed_event_status_failed", only(R, calls_then(completed_status("failed"))), False,
         ("failed response", "gave up"), modes=STREAM),
    Case("keep_alives_past_the_timeout", calls_then(pings_forever), False,
         ("did not complete within 1", "gave up"), modes=STREAM, timeout_s=1.0),
    # -- cut or refused after a complete call: final, the call named as not run -------------------
    Case("response_incomplete_after_the_call", only(R, calls_then(incomplete_after_call)), False,
         ("max_output_tokens", "1 tool call(s) were not run"), modes=STREAM, stop="truncated"),
    Case("completed_event_status_incomplete", only(R, calls_then(completed_status("incomplete"))), False,
         ("max_output_tokens", "1 tool call(s) were not run"), modes=STREAM, stop="truncated"),
    Case("max_tokens_after_the_call", only(A, calls_then(anthropic_stop_after_call("max_tokens"))), False,
         ("max_tokens", "1 tool call(s) were not run"), stop="truncated"),
    Case("refusal_after_the_call", only(A, calls_then(anthropic_stop_after_call("refusal"))), False,
         ("refusal", "1 tool call(s) were not run"), stop="model_refused"),
    Case("call_item_incomplete", only(R, calls_then(call_item_incomplete)), False,
         ("'incomplete'", "1 tool call(s) were not run")),
    # -- said otherwise: unusable, retried, model_error -------------------------------------------
    Case("tool_use_stop_without_a_block", only(A, whole_twice(stop_tool_use_without_block)), False,
         ("'tool_use'", "gave up")),
    Case("output_text_done_otherwise", only(R, whole_twice(text_done_otherwise)), False,
         ("is done as 'Order 742 is CLOSED'", "gave up"), modes=STREAM),
    # -- quirks: accepted --------------------------------------------------------------------------
    Case("usage_after_done", only(C, good(edit=usage_after_done)), True, modes=STREAM),
    Case("tool_call_name_in_pieces", only(C, good(edit=name_in_pieces)), True, modes=STREAM),
    Case("no_content_block_stop", only(A, good(edit=no_block_stop)), True, modes=STREAM),
    Case("tool_call_index_from_one", only(C, good(edit=index_from_one)), True, modes=STREAM),
    Case("whole_json_to_a_stream_request", good(), True, modes=STREAM, ignore_stream=True),
    Case("whole_json_labelled_sse_to_a_stream_request", good(headers=SSE_LABEL), True, modes=STREAM,
         ignore_stream=True),
    Case("whole_json_labelled_sse", good(headers=SSE_LABEL), True, modes=WHOLE),
]  # fmt: skip


assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(CASES))
def test_a_round33_fault_ends_honestly_and_a_quirk_is_accepted(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    """A quirk is accepted with the answer, its call run; a fault ends with its case's stop
    reason and words, non-zero, retried once where it "gave up", no call run, no answer."""
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    if case.ok:
        assert (code, out["stop_reason"], out["answer"], requests) == (0, "accepted", ANSWER, 2), out
        assert [c["status"] for c in out["calls"]] == ["ok"], out
        return
    assert (code != 0, out["stop_reason"], out["answer"]) == (True, case.stop or "model_error", None), out
    assert requests == (2 if "gave up" in case.said else 1) and out["calls"] == [], out
    for piece in case.said:
        assert piece in out["message"], out["message"]
    assert "Traceback" not in out["message"]
