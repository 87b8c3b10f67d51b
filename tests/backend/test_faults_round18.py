"""An eighteenth round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run`` in
process) against real servers on 127.0.0.1 speaking each protocol; each case runs where its path
differs (``Round4.at``). This round's faults contradict themselves inside one streamed message,
where a reader that merges what it hears would run a call the message never settled on.

Faults fixed this round (never run; retried as an unusable answer, then ``model_error``): a chat
stream call renamed mid-call — another name after its arguments began, or under its own id said
again (before: the names were joined into a third, refused as an unknown tool, and the run went
on to be ``accepted``; ``_openai._add_call_delta``); a Responses ``output_item.done`` naming
another tool, ``call_id``, item id or type than its ``output_item.added`` (before: the done item
silently took its place and the call ran under the name it ended with; ``_said._same_item``);
a Responses answer whose ``status`` says completed while an item it lists is still
``in_progress`` (a call whose arguments may be cut; before: run; now ended as incomplete, its
calls not run; ``_responses._unfinished``); an Anthropic ``content_block_start`` reusing the index
of a call not stopped whose input is not yet whole JSON (before: the first call was read with its
cut input, refused as malformed, the second run, and the run ``accepted``; ``_anthropic._Blocks``),
as round 17's chat call begun over a cut one is.

Held as they were (pinned here): variants — a chat call's name streamed in pieces, a proxy that
repeats the call's id and whole name in every delta, a chat ``stop`` finish beside calls (servers
that always say ``stop``), an Anthropic ``end_turn`` beside a tool block, Anthropic calls all
numbered 0 (with their block stops, or none at all); faults — Responses
``function_call_arguments.done`` contradicting its deltas, a chat ``tool_calls`` finish or an
Anthropic ``tool_use`` stop with no call (retried as unusable).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, run_case, twice
from test_faults_round3 import OTHER, assert_outcome, walk
from test_faults_round4 import SERVERS4, Round4, round_params, then_good

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

CHAT_STREAMS = ("chat/stream/http", "chat/stream/sdk")
RESPONSES = ("responses/stream/http", "responses/whole/http")


def _is_event(item: Any, kind: str) -> bool:
    return isinstance(item, dict) and item.get("type") == kind


def _call_deltas(items: list[Any]) -> list[dict[str, Any]]:
    """Chat: the tool-call deltas of a stream, in order."""
    return [
        tc
        for item in items
        if isinstance(item, dict)
        for choice in item.get("choices") or ()
        for tc in (choice.get("delta") or {}).get("tool_calls") or ()
    ]


def renamed_after_arguments(items: list[Any]) -> list[Any]:
    """Chat: the call's second argument piece also names it ``delete_order`` (no id)."""
    _call_deltas(items)[2]["function"]["name"] = "delete_order"
    return items


def renamed_under_its_id(items: list[Any]) -> list[Any]:
    """Chat: the call's first argument piece says its id again with another name."""
    deltas = _call_deltas(items)
    deltas[1].update(id=deltas[0]["id"], type="function")
    deltas[1]["function"]["name"] = "delete_order"
    return items


def name_in_pieces(items: list[Any]) -> list[Any]:
    """Chat: the call's name streamed in two pieces (``read_``, ``order``) before its arguments."""
    deltas = _call_deltas(items)
    deltas[0]["function"]["name"] = "read_"
    deltas[1]["function"]["name"] = "order"
    return items


def id_and_name_in_every_delta(items: list[Any]) -> list[Any]:
    """Chat: a proxy that repeats the call's id and whole name in every delta."""
    deltas = _call_deltas(items)
    for d in deltas[1:]:
        d.update(id=deltas[0]["id"], type="function")
        d["function"]["name"] = deltas[0]["function"]["name"]
    return items


def done_item(**fields: Any) -> Callable[[list[Any]], list[Any]]:
    """Responses: the call's ``output_item.done`` (and the terminal output) with ``fields``."""

    def edit(items: list[Any]) -> list[Any]:
        for item in items:
            if _is_event(item, "response.output_item.done"):
                item["item"].update(fields)
            if _is_event(item, "response.completed"):
                for out in item["response"]["output"]:
                    out.update(fields)
        return items

    return edit


def arguments_done_as(arguments: str) -> Callable[[list[Any]], list[Any]]:
    """Responses: ``function_call_arguments.done`` says other arguments than the deltas."""

    def edit(items: list[Any]) -> list[Any]:
        for item in items:
            if _is_event(item, "response.function_call_arguments.done"):
                item["arguments"] = arguments
        return items

    return edit


def items_status(status: str, *, done: bool = True) -> Callable[[list[Any]], list[Any]]:
    """Responses: every listed output item says ``status`` (the response says completed): in a
    whole answer, in a stream's terminal output and, with ``done``, in its ``output_item.done``."""

    def edit(items: list[Any]) -> list[Any]:
        def fix(d: dict[str, Any]) -> None:
            if d.get("type") == "function_call" and "status" in d:
                d["status"] = status

        items = json.loads(json.dumps(items))  # the done item and the terminal output's, apart
        for item in items:
            if isinstance(item, dict) and item.get("object") == "response":  # a whole answer
                walk(item.get("output"), fix)
            elif _is_event(item, "response.completed"):
                walk(item["response"]["output"], fix)
            elif _is_event(item, "response.output_item.done") and done:
                fix(item["item"])
        return items

    return edit


def _anthropic_two_calls_at(index: int, *, cut_first: bool, stops: bool) -> Callable[[list[Any]], list[Any]]:
    """Anthropic: both calls' blocks numbered ``index``; ``cut_first``: the first call's last
    input piece lost and its stop not sent (the second begins over it); ``stops``: block stops
    kept (else none is sent)."""

    def edit(items: list[Any]) -> list[Any]:
        first = next(n for n, i in enumerate(items) if _is_event(i, "content_block_stop"))
        out = []
        for n, item in enumerate(items):
            if cut_first and n in (first - 1, first):
                continue  # the first call's last input piece and its stop
            if _is_event(item, "content_block_stop") and not stops:
                continue
            if isinstance(item, dict) and isinstance(item.get("index"), int):
                item = {**item, "index": index}
            out.append(item)
        return out

    return edit


def finish(reason: str) -> Callable[[list[Any]], list[Any]]:
    """The finish (chat ``finish_reason``, Anthropic ``stop_reason``) replaced by ``reason``."""

    def edit(items: list[Any]) -> list[Any]:
        def fix(d: dict[str, Any]) -> None:
            for key in ("finish_reason", "stop_reason"):
                if d.get(key):
                    d[key] = reason

        return walk(items, fix)

    return edit


def calls(edit: Callable[[list[Any]], list[Any]]) -> Callable[[str, bool], Reply]:
    return lambda p, s: Reply.calls(ORDER, edit=edit)


def good_with(edit: Callable[[list[Any]], list[Any]]) -> Callable[[str, bool], list[Reply]]:
    return lambda p, s: [Reply.calls(ORDER, edit=edit), Reply.text(ANSWER)]


CASES = [
    # -- legitimate variants -----------------------------------------------------------------
    Round4("chat_a_name_streamed_in_pieces", good_with(name_in_pieces), True, at=CHAT_STREAMS),
    Round4("chat_id_and_name_in_every_delta", good_with(id_and_name_in_every_delta), True, at=CHAT_STREAMS),
    Round4("chat_stop_beside_calls", good_with(finish("stop")), True,
           at=("chat/stream/http", "chat/whole/http")),
    Round4("anthropic_end_turn_beside_a_tool_block", good_with(finish("end_turn")), True,
           at=("anthropic/stream/http", "anthropic/whole/http")),
    Round4("responses_items_completed", good_with(items_status("completed")), True, at=RESPONSES),
    Round4("responses_a_terminal_output_from_a_stale_snapshot", good_with(items_status(
        "in_progress", done=False)), True, at=("responses/stream/http",)),
    Round4("chat_a_call_renamed_after_its_arguments_then_good", then_good(calls(renamed_after_arguments)),
           True, requests=3, at=("chat/stream/http",)),
    Round4("responses_done_item_names_another_tool_then_good", then_good(calls(done_item(
        name="delete_order"))), True, requests=3, at=("responses/stream/http",)),
    Round4("anthropic_two_calls_numbered_0", lambda p, s: [Reply.calls(
        ORDER, OTHER, edit=_anthropic_two_calls_at(0, cut_first=False, stops=True)), Reply.text(ANSWER)],
           True, calls=("ok", "ok"),
           at=("anthropic/stream/http",)),
    Round4("anthropic_two_calls_numbered_0_without_stops", lambda p, s: [Reply.calls(
        ORDER, OTHER, edit=_anthropic_two_calls_at(0, cut_first=False, stops=False)), Reply.text(ANSWER)],
           True, calls=("ok", "ok"), at=("anthropic/stream/http",)),
    # -- faults ------------------------------------------------------------------------------
    Round4("anthropic_a_call_begun_over_a_cut_call", twice(lambda p, s: Reply.calls(
        ORDER, OTHER, edit=_anthropic_two_calls_at(0, cut_first=True, stops=True))), False,
           ("began at index 0 over a call whose input is not whole", "gave up"),
           at=("anthropic/stream/http", "anthropic/stream/sdk")),
    Round4("chat_a_call_renamed_after_its_arguments", twice(calls(renamed_after_arguments)), False,
           ("renamed 'delete_order' mid-call", "gave up"), at=CHAT_STREAMS),
    Round4("chat_a_call_renamed_under_its_id", twice(calls(renamed_under_its_id)), False,
           ("renamed 'delete_order' mid-call", "gave up"), at=CHAT_STREAMS),
    Round4("responses_done_item_names_another_tool", twice(calls(done_item(name="delete_order"))), False,
           ("is done with name 'delete_order'", "gave up"), at=("responses/stream/http",)),
    Round4("responses_done_item_names_another_call_id", twice(calls(done_item(call_id="call_other"))), False,
           ("is done with call_id 'call_other'", "gave up"), at=("responses/stream/http",)),
    Round4("responses_done_item_of_another_type", twice(calls(done_item(type="custom_tool_call"))), False,
           ("is done with type", "gave up"), at=("responses/stream/http",)),
    Round4("responses_arguments_done_otherwise", twice(calls(arguments_done_as('{"order_id": "999"}'))),
           False, ("are done as", "gave up"), at=("responses/stream/http",)),
    Round4("chat_tool_calls_finish_without_calls", twice(lambda p, s: Reply.text(
        ANSWER, edit=finish("tool_calls"))), False, ("says the turn calls tools", "gave up"),
           at=("chat/stream/http", "chat/whole/http")),
    Round4("anthropic_tool_use_stop_without_a_tool_block", twice(lambda p, s: Reply.text(
        ANSWER, edit=finish("tool_use"))), False, ("says the turn calls tools", "gave up"),
           at=("anthropic/stream/http", "anthropic/whole/http")),
]  # fmt: skip

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round18_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    assert_outcome(case, *run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4))


@pytest.mark.parametrize("status", ["in_progress", "queued"])
@pytest.mark.parametrize("where", RESPONSES)
def test_a_completed_response_listing_a_call_still_under_way_never_runs_it(
    tmp_path: Any, where: str, status: str
) -> None:
    """A response that says completed but lists its call ``in_progress`` (its arguments may be
    cut): the call is not run and the run does not end accepted."""
    case = Round4("x", lambda p, s: [Reply.calls(ORDER, edit=items_status(status)), Reply.text(ANSWER)], True)
    _, mode, transport = where.split("/")
    code, out, _, _ = run_case(tmp_path, "openai-responses", case, mode, transport, servers=SERVERS4)
    assert code != 0 and out["stop_reason"] == "model_error", out
    assert out["calls"] == [] and "1 tool call(s) were not run" in out["message"], out
