"""An eighth round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run`` in
process) against real servers on 127.0.0.1; each case runs where its path differs
(``Round4.at``). This round attacks what round seven built: a Responses stream's items from
``output_item.added`` and deltas (``_Said``), arguments ``done`` compared with their deltas, the
SDK transport reading error bodies itself.

Variants end ``accepted`` with the answer: two calls whose ``output_item.added`` and argument
deltas interleave (no ``output_item.done``, the terminal output empty); arguments done as the
same JSON written with ``\\u`` escapes, its numbers as a JavaScript encoder writes them
(``1.0`` as ``1``); a reasoning item given only as ``output_item.added`` and summary deltas
(kept and sent back with the call, as the API requires of a reasoning model's call); a whole
chat answer whose ``choices`` list a second choice first (the answer is choice 0, as a
stream's is).

Faults end with a typed stop and a non-zero exit: a Responses refusal said only as
``response.refusal.delta`` (refused, not an empty answer); arguments streamed with ``true``
and done with ``1`` (Python's ``True == 1``: garbled, not the same JSON); a 429 with
``retry-after: 0`` forever (bounded by ``max_retries``); two calls of one turn with one id; on
the SDK transport a 503 whose body is chunked, and one over HTTP/1.0 delimited by the
connection's close.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, good, run_case, twice, write_agent
from test_faults_round3 import OTHER, assert_outcome, walk
from test_faults_round4 import SERVERS4, Raw, Round4, head_body, round_params
from test_faults_round7 import arguments_done_as, deltas_only

from tether.cli import main
from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]


# -- edits ---------------------------------------------------------------------------------------


def interleaved(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Responses: every ``output_item.added`` first, then the items' argument deltas taken in
    turn (index 0, 1, 0, 1 …), then the rest; no ``output_item.done``, the terminal output empty."""

    def kind(i: Any) -> str:
        return str(i.get("type")) if isinstance(i, dict) else ""

    added = [i for i in items if kind(i) == "response.output_item.added"]
    deltas: dict[int, list[Any]] = {}
    for i in items:
        if kind(i) == "response.function_call_arguments.delta":
            deltas.setdefault(i["output_index"], []).append(i)
    mixed = [d for turn in itertools.zip_longest(*deltas.values()) for d in turn if d is not None]
    head = items[:2]  # created, in_progress
    rest = [i for i in items[2:] if i not in added and i not in mixed]
    return deltas_only(p, stream, [*head, *added, *mixed, *rest])


FLAGGED = ("read_order", '{"order_id": "742", "urgent": true, "qty": 1.0}')  # not run: the stream is garbled
BOOL_AS_ONE = '{"order_id": "742", "urgent": 1, "qty": 1.0}'


def choice_1_first(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat, whole: a second choice (index 1, another answer) listed before choice 0."""
    data = items[0]
    other = {"index": 1, "message": {"role": "assistant", "content": "Order 742 is closed."},
             "finish_reason": "stop"}  # fmt: skip
    data["choices"] = [other, *data["choices"]]
    return items


def chunked_error(data: bytes) -> bytes:
    """A 503 whose body comes in HTTP chunks of 3 bytes (no content-length)."""
    head, body = head_body(data)
    head = b"\r\n".join(h for h in head.split(b"\r\n") if not h.lower().startswith(b"content-length"))
    cut = [body[n : n + 3] for n in range(0, len(body), 3)]
    pieces = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in cut)
    return head + b"\r\ntransfer-encoding: chunked\r\n\r\n" + pieces + b"0\r\n\r\n"


def close_delimited_error(data: bytes) -> bytes:
    """An HTTP/1.0 503 with no content-length: its body ends where the connection closes."""
    head, body = head_body(data)
    drop = (b"content-length", b"connection")
    lines = [h for h in head.split(b"\r\n")[1:] if not h.lower().startswith(drop)]
    return b"\r\n".join([b"HTTP/1.0 503 Service Unavailable", *lines]) + b"\r\n\r\n" + body


def one_call_id(d: dict[str, Any]) -> None:
    """Every call of the turn with the same id (``call_id``; a chat call's or a ``tool_use``'s)."""
    if "call_id" in d:
        d["call_id"] = "call_same"
    if ("function" in d and "id" in d) or d.get("type") == "tool_use":
        d["id"] = "call_same"


BUSY = {"error": {"message": "the server is busy", "type": "server_error"}}
RATE = {"error": {"message": "slow down", "type": "rate_limit_error"}}

CASES = [
    # -- legitimate variants: accepted with the answer ----------------------------------------
    Round4("responses_two_calls_interleaved_as_added_and_deltas", lambda p, s: [
        Reply.calls(ORDER, OTHER, edit=lambda i: interleaved(p, s, i)), Reply.text(ANSWER)], True,
           calls=("ok", "ok"), at=("responses/stream/http", "responses/stream/sdk")),
    Round4("responses_refusal_only_as_deltas", lambda p, s: [
        Reply.text(ANSWER, finish_reason="refusal", edit=lambda i: deltas_only(p, s, i))], False,
           ("refused or filtered",), stop="model_refused",
           at=("responses/stream/http", "responses/stream/sdk")),
    Round4("responses_arguments_streamed_true_done_as_1", twice(lambda p, s: Reply.calls(
        FLAGGED, edit=lambda items: arguments_done_as(BOOL_AS_ONE)(p, s, items))), False,
           ("are done as", "gave up"), at=("responses/stream/http",)),
    Round4("two_calls_with_one_id", twice(lambda p, s: Reply.calls(ORDER, OTHER, edit=lambda i: walk(
        i, one_call_id))), False, ("duplicate tool call id", "gave up"),
           at=("responses/stream/sdk", "responses/whole/http", "chat/whole/http", "chat/stream/sdk",
               "anthropic/stream/http")),
    Round4("chat_whole_choice_1_listed_first", good(edit=choice_1_first), True, at=("chat/whole/http",
                                                                                     "chat/whole/sdk")),
    Round4("rate_limited_with_retry_after_0_forever", lambda p, s: [Reply(
        status=429, error_body=RATE, headers={"retry-after": "0"})] * 20, False, ("HTTP 429", "gave up"),
           at=("chat/whole/http", "anthropic/stream/sdk", "responses/whole/sdk")),
    Round4("sdk_error_body_chunked", twice(lambda p, s: Raw(status=503, error_body=BUSY, wire=chunked_error)),
           False, ("HTTP 503", "busy", "gave up"),
           at=("chat/whole/sdk", "anthropic/stream/sdk", "responses/whole/sdk", "chat/whole/http")),
    Round4("sdk_error_body_close_delimited_http_1_0", twice(lambda p, s: Raw(
        status=503, error_body=BUSY, wire=close_delimited_error)), False, ("HTTP 503", "busy", "gave up"),
           at=("chat/whole/sdk", "anthropic/stream/sdk", "responses/whole/sdk", "responses/stream/http")),
]  # fmt: skip

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round8_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    code, out, requests, took = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    assert_outcome(case, code, out, requests, took)


def test_a_reasoning_item_said_only_as_added_and_deltas_is_sent_back_with_its_call(tmp_path: Any) -> None:
    """Responses, streamed: a reasoning item and a call, no ``output_item.done``, the terminal
    output empty: the next request carries the reasoning item (its id and encrypted content)
    before the call, as a reasoning model's call must be sent back."""
    replies = [
        Reply(tool_calls=(ORDER,), reasoning="Look the order up.", edit=lambda i: deltas_only("", True, i)),
        Reply.text(ANSWER),
    ]
    with SERVERS4["openai-responses"](lambda request, n: replies[n]) as server:
        model = {"provider": "openai-responses", "name": "m-1", "base_url": server.url, "streaming": True,
                 "max_retries": 0, "timeout_s": 3}  # fmt: skip
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["run", "Why is 742 open?", "--agent", str(write_agent(tmp_path, model)), "--json"])
        summary = json.loads(out.getvalue().strip().split("\n")[-1])
        assert (code, summary["stop_reason"], summary["answer"]) == (0, "accepted", ANSWER), summary
        items = [i for i in server.bodies()[1]["input"] if isinstance(i, dict)]
    kinds = [i.get("type") for i in items]
    assert "reasoning" in kinds and kinds.index("reasoning") < kinds.index("function_call"), kinds
    sent = next(i for i in items if i.get("type") == "reasoning")
    assert str(sent.get("encrypted_content", "")).startswith("enc:"), sent


def test_arguments_done_as_the_same_json_written_otherwise_are_the_same_and_true_is_not_1() -> None:
    """What a re-encoder changes (key order, ``\\u`` escapes, spacing, ``1.0`` written ``1`` as
    JavaScript writes it) leaves the arguments the same; ``true`` done as ``1``, ``false`` as
    ``0``, ``null`` as ``0`` are other arguments (Python's ``True == 1`` said they were the same)."""
    from tether.models._said import _same_json

    streamed = FLAGGED[1]
    for same in ('{"qty":1,"urgent":true,"order_id":"\\u0037\\u00342"}', '{ "order_id" : "742", "qty": 1.00,'
                 ' "urgent" : true }'):  # fmt: skip
        assert _same_json(same, streamed), same
    for other in (BOOL_AS_ONE, '{"order_id": "742", "urgent": true, "qty": true}', "[false]", "[null]"):
        assert not _same_json(other, streamed), other
    assert not _same_json("[false]", "[0]") and not _same_json("[null]", "[0]")
    assert _same_json("[1e2]", "[100]")
