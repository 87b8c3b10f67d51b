"""A ninth round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run`` in
process) against real servers on 127.0.0.1; each case runs where its path differs
(``Round4.at``).

Variants end ``accepted`` with the answer: a ``425 Too Early`` (RFC 8470: the request may be
sent again) then a good answer; an error object in a 200 answer, whole or mid-stream, whose
``retry-after`` the next try waits for (as a 429's or 503's is); a ``503`` whose ``retry-after``
is a fraction of a second; a 400 that says ``x-should-retry: true`` (the server's word, which
both official SDKs obey before the status) then a good answer; a Responses call whose
``output_item.done`` and terminal output leave its arguments out, or whose done item does and
the terminal output is empty (the deltas said them: the call runs with them, not with none); a
whole chat answer with tool calls and no ``finish_reason`` at all (the calls run: the server
said nothing).

Faults end with a typed stop and a non-zero exit: a Responses answer ``completed`` whose output
item says it is ``incomplete`` (the worse word wins, as for ``incomplete_details``); a streamed
Responses terminal event whose response carries an error object (as a whole answer's does);
tool calls in a turn whose provider said it ended otherwise than normally, in a word tether
does not know or one that is no end (a Responses answer ``incomplete`` without its reason, or
``completed`` with the call's item ``incomplete``, or ``cancelled``; a chat ``error`` finish; an
Anthropic ``pause_turn``): not run, where they ran before; a 503 that says ``x-should-retry:
false`` (final at once, not asked again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, good, run_case, twice
from test_faults_round3 import assert_outcome, walk
from test_faults_round4 import SERVERS4, Round4, chat_finish, responses_final, round_params

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]


@dataclass(frozen=True)
class Round9(Round4):
    waits_s: float = 0.0  # the least the run takes: a retry-after it must honour


# -- edits ---------------------------------------------------------------------------------------

RATE = {"error": {"message": "slow down, retry later", "type": "rate_limit_error"}}


def error_in_200(p: str, stream: bool, **headers: str) -> Reply:
    """A 200 answer that is an error object (whole), or whose stream reports one after its
    opening events, with ``headers``."""
    if stream:
        return Reply.text(ANSWER, headers=headers, edit=lambda items: [*items[:2], RATE])
    return Reply.text(ANSWER, headers=headers, edit=lambda items: [RATE])


def item_status(status: str) -> Any:
    """Responses: every message item (done, and in the terminal output) says ``status``."""

    def edit(items: list[Any]) -> list[Any]:
        return walk(items, lambda d: d.update(status=status) if d.get("type") == "message" else None)

    return edit


def done_without_arguments(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Responses: the call's ``output_item.done`` item and the terminal output's leave out its
    ``arguments`` (the deltas and ``arguments.done`` said them)."""

    def fix(d: dict[str, Any]) -> None:
        if d.get("type") == "function_call":
            d.pop("arguments", None)

    return walk(items, fix)


def done_without_arguments_output_empty(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Responses: as ``done_without_arguments``, and the terminal event lists no output."""
    items = done_without_arguments(p, stream, items)
    items[-1]["response"]["output"] = []
    return items


def call_item_status(status: str) -> Any:
    """Responses: every call item (done, and in the terminal output) says ``status``."""

    def edit(items: list[Any]) -> list[Any]:
        return walk(items, lambda d: d.update(status=status) if d.get("type") == "function_call" else None)

    return edit


def terminal_error(items: list[Any]) -> list[Any]:
    """Responses: the terminal event's response carries an error object beside its status."""
    items[-1]["response"]["error"] = {"code": "server_error", "message": "the upstream died"}
    return items


NOT_RUN = "1 tool call(s) were not run"

CASES = [
    # -- legitimate variants: accepted with the answer ----------------------------------------
    Round9("425_too_early_then_good", lambda p, s: [Reply(status=425, body=b"Too Early", headers={
        "retry-after": "1"}), Reply.calls(ORDER), Reply.text(ANSWER)], True, requests=3, waits_s=1.0,
           at=("chat/whole/http", "anthropic/stream/sdk", "responses/whole/sdk")),
    Round9("error_in_a_200_with_retry_after_then_good", lambda p, s: [
        error_in_200(p, s, **{"retry-after": "1"}), Reply.calls(ORDER), Reply.text(ANSWER)], True, requests=3,
           waits_s=1.0, at=("chat/whole/http", "chat/stream/sdk", "anthropic/whole/sdk",
                            "anthropic/stream/http", "responses/whole/http", "responses/stream/sdk")),
    Round9("503_retry_after_a_fraction_then_good", lambda p, s: [Reply(status=503, body=b"busy", headers={
        "retry-after": "0.6"}), Reply.calls(ORDER), Reply.text(ANSWER)], True, requests=3, waits_s=0.6,
           at=("chat/stream/http", "anthropic/whole/http")),
    Round9("responses_done_item_without_arguments", good(edit=done_without_arguments), True,
           at=("responses/stream/http", "responses/stream/sdk")),
    Round9("responses_done_item_without_arguments_and_no_final_output", good(
        edit=done_without_arguments_output_empty), True, at=("responses/stream/http",)),
    Round9("400_that_says_x_should_retry_true_then_good", lambda p, s: [Reply(status=400, body=b"try again",
        headers={"x-should-retry": "true"}), Reply.calls(ORDER), Reply.text(ANSWER)], True, requests=3,
           at=("chat/whole/http", "anthropic/stream/sdk", "responses/whole/sdk")),
    Round9("chat_whole_calls_without_a_finish_reason", lambda p, s: [
        Reply.calls(ORDER, edit=chat_finish(None)), Reply.text(ANSWER)], True, at=("chat/whole/http",)),
    # -- faults: a typed stop, a non-zero exit -----------------------------------------------
    Round9("responses_completed_with_an_incomplete_item", twice(lambda p, s: Reply.text(
        ANSWER, edit=item_status("incomplete"))), False, ("incomplete",),
           at=("responses/whole/http", "responses/stream/sdk")),
    Round9("responses_terminal_event_with_an_error_object", twice(lambda p, s: Reply.text(
        ANSWER, edit=terminal_error)), False, ("the upstream died", "gave up"),
           at=("responses/stream/http", "responses/stream/sdk")),
    Round9("responses_call_in_an_answer_incomplete_without_a_reason", twice(lambda p, s: Reply.calls(
        ORDER, edit=responses_final(status="incomplete"))), False, ("'incomplete'", NOT_RUN),
           at=("responses/whole/http", "responses/stream/sdk")),
    Round9("responses_call_item_incomplete_in_a_completed_answer", twice(lambda p, s: Reply.calls(
        ORDER, edit=call_item_status("incomplete"))), False, ("'incomplete'", NOT_RUN),
           at=("responses/whole/sdk", "responses/stream/http")),
    Round9("responses_call_in_a_cancelled_answer", twice(lambda p, s: Reply.calls(
        ORDER, edit=responses_final(status="cancelled"))), False, ("'cancelled'", NOT_RUN),
           at=("responses/whole/http",)),
    Round9("chat_calls_that_end_in_error", twice(lambda p, s: Reply.calls(
        ORDER, finish_reason="error")), False, ("'error'", NOT_RUN),
           at=("chat/whole/http", "chat/stream/sdk")),
    Round9("anthropic_calls_in_a_paused_turn", twice(lambda p, s: Reply.calls(
        ORDER, finish_reason="pause_turn")), False, ("paused", NOT_RUN),
           at=("anthropic/whole/http", "anthropic/stream/sdk")),
    Round9("503_that_says_x_should_retry_false", twice(lambda p, s: Reply(status=503, body=b"down", headers={
        "x-should-retry": "false"})), False, ("HTTP 503", "x-should-retry: false"),
           at=("chat/stream/sdk", "anthropic/whole/http", "responses/stream/http")),
]  # fmt: skip

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round9_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round9, provider: str, mode: str, transport: str
) -> None:
    code, out, requests, took = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    assert_outcome(case, code, out, requests, took)
    assert took >= case.waits_s, (took, case.waits_s)
