"""A nineteenth round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run`` in
process) against real servers on 127.0.0.1 speaking each protocol; each case runs where its path
differs (``Round4.at``), on the SDK transport and plain httpx2. This round's streams say where a
part or a message ends in a place or a form the readers did not look at.

Faults fixed this round (never accepted; retried as an unusable answer, then ``model_error``): a
Responses ``output_text.done`` or ``content_part.done`` whose text is not the text its deltas said
(before: the deltas were read and the done events never looked at, so the answer was accepted
whatever the stream said it was done with, where arguments done otherwise than their deltas are
a garbled stream; ``_said._Said.part_done``); an Anthropic block delta after that block's
``content_block_stop`` (before: its text was appended, and the answer accepted with a piece the
block had said it did not have; ``_anthropic._Blocks.delta``); a Responses call added at the
output index of a call whose arguments are not yet whole JSON (whose are the pieces after it?).

A Responses stream whose items are all numbered ``output_index`` 0 (a translating proxy, as
Anthropic's blocks all numbered 0 are) now runs each call: an item added at an index another item
has is a new item, the events at that index its own from then on (``_said._Said._reused``).
Before: with only added items and deltas, the two calls' arguments ran together as one call, the
gate refused it, and the run went on to be ``accepted`` (the model handed a garbled turn's result
as if it had asked for it); with done events, the second call's deltas joined the first's and
disagreed with its done arguments, a garbled stream retried to ``model_error``; with a terminal
output that lists them, the same.

Variants fixed this round (accepted with the answer, where before they were retried to
``model_error``): a Responses stream whose text comes only in its done events (``output_text.done``
and ``content_part.done``; no deltas, no ``output_item.done``, the terminal output empty: before,
no text, an empty answer; a refusal said only in ``refusal.done`` is now ``model_refused``, not
an empty answer's ``model_error``); an Anthropic stream that ends with ``data: [DONE]`` in place
of ``message_stop`` (a proxy that ends every stream as chat's does: the openai SDK stops there,
the anthropic SDK passes over an event it does not name; before: "stream event is not JSON"),
each protocol's reader judging the stream as one that ended there (``_sse.events``); an
Anthropic stream whose stop reason is in ``message_start``'s message and that sends no
``message_delta`` (a proxy that turns a whole answer into a stream, as the SDK's accumulator
reads it; before: no stop reason, ``model_error``); an Anthropic block ``index`` written as text
in its deltas and stop (``"0"``, its start ``0``: before, a delta for a block never started), as
a chat call's index is.

Held as they were (pinned here): ``[DONE]`` after a Responses terminal event or an Anthropic
``message_stop`` (accepted); a chat call whose id changes mid-call (the call runs once, with its
arguments whole); ``[DONE]`` before the stop reason or the terminal event, and a stop reason in
``message_start`` followed by a stream cut after its first piece of text (faults, retried, now
named as a stream that ended early: before, "not JSON" and "no stop reason").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, run_case, twice
from test_faults_round3 import OTHER, assert_outcome
from test_faults_round4 import SERVERS4, Round4, round_params

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

DONE = b"data: [DONE]\n\n"
OTHER_TEXT = "Order 742 is closed"
REFUSAL = "I can't help with that."
RESPONSES_STREAMS = ("responses/stream/http", "responses/stream/sdk")
ANTHROPIC_STREAMS = ("anthropic/stream/http", "anthropic/stream/sdk")
Edit = Callable[[list[Any]], list[Any]]


def _is(item: Any, *kinds: str) -> bool:
    return isinstance(item, dict) and item.get("type") in kinds


# -- Responses: where a part says it is done ----------------------------------------------------


def done_says(kind: str, text: str) -> Edit:
    """Responses: the ``kind`` done event (``output_text.done``: its text; ``content_part.done``:
    its part's) says ``text``; the deltas, the done item and the terminal output say the answer."""

    def edit(items: list[Any]) -> list[Any]:
        for item in items:
            if _is(item, "response.output_text.done") and kind == "output_text":
                item["text"] = text
            elif _is(item, "response.content_part.done") and kind == "content_part":
                item["part"] = {**item["part"], "text": text}
        return items

    return edit


def only_done_events(items: list[Any]) -> list[Any]:
    """Responses: a message's text (or refusal) only in its done events: no deltas, no
    ``output_item.done`` for it, the terminal output empty (a server that says each part once)."""
    out = []
    for item in items:
        if _is(item, "response.output_text.delta", "response.refusal.delta"):
            continue
        if _is(item, "response.output_item.done") and item["item"].get("type") == "message":
            continue
        if _is(item, "response.completed"):
            item["response"]["output"] = [o for o in item["response"]["output"] if o.get("type") != "message"]
        out.append(item)
    return out


def refused(items: list[Any]) -> list[Any]:
    """Responses: the message's part a refusal (each event that carries it), as the API sends one."""
    for item in items:
        if _is(item, "response.output_text.done"):
            item.update(type="response.refusal.done", refusal=REFUSAL)
            item.pop("text")
        elif _is(item, "response.content_part.done", "response.content_part.added"):
            item["part"] = {"type": "refusal", "refusal": REFUSAL if "done" in item["type"] else ""}
    return items


def refused_in_done(items: list[Any]) -> list[Any]:
    """Responses: a refusal said only in its done events."""
    return only_done_events(refused(items))


def done_marker_before_terminal(items: list[Any]) -> list[Any]:
    """Responses: ``[DONE]`` where the terminal event should be (that event never sent)."""
    return [DONE if _is(i, "response.completed") else i for i in items]


# -- Anthropic: where a block or the message says it ended ---------------------------------------


def done_marker_for(kind: str) -> Edit:
    """Anthropic: ``[DONE]`` in place of each event of ``kind`` (and every event after it)."""

    def edit(items: list[Any]) -> list[Any]:
        at = next(n for n, i in enumerate(items) if _is(i, kind))
        return [*items[:at], DONE]

    return edit


def then_done_marker(items: list[Any]) -> list[Any]:
    """Any protocol: ``[DONE]`` after the stream's own terminal event."""
    return [*items, DONE]


def stop_reason_in_message_start(items: list[Any]) -> list[Any]:
    """Anthropic: ``message_delta``'s stop reason in ``message_start``'s message, no
    ``message_delta`` (a proxy that turns a whole answer into a stream)."""
    delta = next(i for i in items if _is(i, "message_delta"))
    items[0]["message"]["stop_reason"] = delta["delta"]["stop_reason"]
    return [i for i in items if not _is(i, "message_delta")]


def cut_after_first_text(items: list[Any]) -> list[Any]:
    """Anthropic: the stream ends cleanly right after its first text delta."""
    at = next(n for n, i in enumerate(items) if _is(i, "content_block_delta"))
    return items[: at + 1]


def text_after_block_stop(items: list[Any]) -> list[Any]:
    """Anthropic: a text delta for the text block after its ``content_block_stop``."""
    at = next(n for n, i in enumerate(items) if _is(i, "content_block_stop"))
    late = {"type": "content_block_delta", "index": items[at]["index"]}
    late["delta"] = {"type": "text_delta", "text": " (cancelled)"}
    return [*items[: at + 1], late, *items[at + 1 :]]


def index_as_text(items: list[Any]) -> list[Any]:
    """Anthropic: each block's deltas and stop number it as text (``"0"``), its start as a number."""
    for item in items:
        if _is(item, "content_block_delta", "content_block_stop"):
            item["index"] = str(item["index"])
    return items


def call_id_changes(items: list[Any]) -> list[Any]:
    """Chat: the call's second argument piece carries another id (no name)."""
    deltas = [
        tc
        for item in items
        if isinstance(item, dict)
        for choice in item.get("choices") or ()
        for tc in (choice.get("delta") or {}).get("tool_calls") or ()
    ]
    deltas[2]["id"] = "call_other"
    return items


def items_at_index_0(*, done: bool, terminal: bool, cut_first: bool = False) -> Edit:
    """Responses: every event's ``output_index`` 0 (a translating proxy that numbers each item
    0); ``done``: the done events kept (else only added and deltas); ``terminal``: the terminal
    output lists the items (else none); ``cut_first``: the first call's last argument delta lost,
    the second call added over it."""

    def edit(items: list[Any]) -> list[Any]:
        first_done = next(n for n, i in enumerate(items) if _is(i, "response.function_call_arguments.done"))
        out = []
        for n, item in enumerate(items):
            if isinstance(item, dict) and "output_index" in item:
                item["output_index"] = 0
            if cut_first and n == first_done - 1:
                continue
            if not done and _is(item, "response.output_item.done", "response.function_call_arguments.done"):
                continue
            if not terminal and _is(item, "response.completed"):
                item["response"]["output"] = []
            out.append(item)
        return out

    return edit


def cut_at_0(items: list[Any]) -> list[Any]:
    """Responses: two calls added at output index 0, the first cut (only added and deltas)."""
    return items_at_index_0(done=False, terminal=False, cut_first=True)(items)


def two_calls(edit: Edit) -> Callable[[str, bool], list[Reply]]:
    return lambda p, s: [Reply.calls(ORDER, OTHER, edit=edit), Reply.text(ANSWER)]


def good_with(edit: Edit) -> Callable[[str, bool], list[Reply]]:
    return lambda p, s: [Reply.calls(ORDER, edit=edit), Reply.text(ANSWER, edit=edit)]


def text(edit: Edit) -> Callable[[str, bool], Reply]:
    return lambda p, s: Reply.text(ANSWER, edit=edit)


CASES = [
    # -- legitimate variants -----------------------------------------------------------------
    Round4("responses_text_only_in_done_events", good_with(only_done_events), True, at=RESPONSES_STREAMS),
    Round4("anthropic_done_marker_for_message_stop", good_with(done_marker_for("message_stop")), True,
           at=ANTHROPIC_STREAMS),
    Round4("anthropic_done_marker_after_message_stop", good_with(then_done_marker), True,
           at=("anthropic/stream/http",)),
    Round4("responses_done_marker_after_completed", good_with(then_done_marker), True,
           at=("responses/stream/http",)),
    Round4("anthropic_stop_reason_in_message_start", good_with(stop_reason_in_message_start), True,
           at=ANTHROPIC_STREAMS),
    Round4("anthropic_block_index_as_text", good_with(index_as_text), True, at=ANTHROPIC_STREAMS),
    Round4("responses_items_all_at_output_index_0", two_calls(items_at_index_0(done=True, terminal=True)),
           True, calls=("ok", "ok"), at=RESPONSES_STREAMS),
    Round4("responses_items_all_at_output_index_0_terminal_empty", two_calls(items_at_index_0(
        done=True, terminal=False)), True, calls=("ok", "ok"), at=("responses/stream/http",)),
    Round4("responses_items_all_at_output_index_0_only_added", two_calls(items_at_index_0(
        done=False, terminal=False)), True, calls=("ok", "ok"), at=("responses/stream/http",)),
    Round4("chat_call_id_changes_mid_call", lambda p, s: [Reply.calls(ORDER, edit=call_id_changes),
           Reply.text(ANSWER)], True, at=("chat/stream/http", "chat/stream/sdk")),
    # -- faults ------------------------------------------------------------------------------
    Round4("responses_output_text_done_otherwise", twice(text(done_says("output_text", OTHER_TEXT))), False,
           ("a text part streamed as", "is done as 'Order 742 is closed'", "gave up"), at=RESPONSES_STREAMS),
    Round4("responses_content_part_done_otherwise", twice(text(done_says("content_part", OTHER_TEXT))), False,
           ("a text part streamed as", "gave up"), at=("responses/stream/http",)),
    Round4("responses_refusal_only_in_done_events", lambda p, s: [Reply.text(ANSWER, edit=refused_in_done)],
           False, ("refused",), stop="model_refused", at=RESPONSES_STREAMS),
    Round4("responses_done_marker_before_terminal", twice(text(done_marker_before_terminal)), False,
           ("without a terminal event", "gave up"), at=("responses/stream/http",)),
    Round4("responses_call_added_over_a_cut_call", twice(lambda p, s: Reply.calls(
        ORDER, OTHER, edit=cut_at_0)), False,
           ("added at output index 0 over a call whose arguments are not whole", "gave up"),
           at=("responses/stream/http",)),
    Round4("anthropic_text_after_block_stop", twice(text(text_after_block_stop)), False,
           ("a text_delta for block 0 after its content_block_stop", "gave up"), at=ANTHROPIC_STREAMS),
    Round4("anthropic_done_marker_before_stop_reason", twice(text(done_marker_for("message_delta"))), False,
           ("without message_stop or a stop reason", "gave up"), at=("anthropic/stream/http",)),
    Round4("anthropic_stop_reason_in_message_start_then_cut", twice(text(lambda i: cut_after_first_text(
        stop_reason_in_message_start(i)))), False, ("a block began or grew after the stop reason", "gave up"),
           at=("anthropic/stream/http",)),
]  # fmt: skip

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round19_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    assert_outcome(case, *run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4))
