"""Model faults, round thirty-one: held-out shapes driven as the other rounds are (an agent file
naming ``model.provider``, ``tether run`` in process, streamed and whole, over the SDK transport
and plain httpx) against real servers on 127.0.0.1 speaking chat completions, the Responses API
and the Anthropic Messages API. This round's streams name a call in two places that disagree.

Fixed here (each an unreadable stream, retried once, then ``model_error``; the call never run):

- a Responses stream whose ``output_item.added`` and ``output_item.done`` name one tool and whose
  terminal output lists the same call (its item id and ``call_id``) under another tool's name:
  the terminal output's call ran (``read_order``, offered, where the stream said
  ``read_orders``), accepted, exit 0. So did one whose terminal output lists the call under
  another ``call_id``, or lists another call in its place (another id, ``call_id`` and name: the
  streamed call vanished). The terminal output's calls must be the stream's now, as a done item
  must be its added one (``_said._same_calls``);
- a Responses call whose terminal output lists its arguments as a JSON object (a server that
  does not encode them) other than the streamed ones: never compared, the terminal output's ran
  (``{"order_id": "999"}`` where the deltas said ``742``); a done item or
  ``function_call_arguments.done`` that gives them so was passed over. They are compared as the
  JSON text they run as now (``_said._as_text``), the same object accepted, another unreadable;
- a chat stream whose last chunk gives the whole message (round 28's quirk) with a call's
  arguments as an object, or spaced otherwise than its deltas wrote them: refused as said
  otherwise on every try (``model_error``), the same call. The same JSON is the same call now
  (``_content.calls_alike``); other arguments are still an unreadable stream;
- an Anthropic stream whose ``content_block_start`` gives a ``tool_use`` input and whose
  ``input_json_delta`` pieces say another: the deltas' input ran whatever the start said. Which
  is the call? Unreadable now, as a ``message_start`` block said again otherwise is
  (``_content.streamed_input``); the same input written otherwise is still read once.

Probed, all already honest; pinned here so they stay so: a terminal output that lists the
stream's call without its item id (matched by its ``call_id``: accepted); a call's ``arguments``
``""`` or ``null`` (whole: the host's gate refuses the call, missing its field; the run flagged,
exit 2); arguments holding ``NaN`` (refused, ``non_standard_json``); a ``null`` among an answer's
calls, blocks or output items, invalid UTF-8 in a body, a token count of 5,000 digits (past
Python's integer-text limit): each unusable, retried, then ``model_error``, no traceback.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_faults_heldout import ANSWER, ORDER, Case, Make, case_params, good, only, run_case, sse
from test_faults_round4 import SERVERS4
from test_faults_round15 import walk_dicts
from test_faults_round28 import ends_as_its_case_says, whole_message_last

from tether.core.messages import UserMessage
from tether.errors import ModelError
from tether.models import AnthropicMessages, ModelRequest, OpenAIResponses, RetryPolicy
from tether_testing.fake_server import Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

C, A, R = ("openai-chat",), ("anthropic",), ("openai-responses",)
STREAM, WHOLE = ("stream",), ("whole",)
Edit = Callable[[str, bool, list[Any]], list[Any]]


# -- edits ----------------------------------------------------------------------------------------


def terminal_calls(**fields: Any) -> Edit:
    """Responses, streamed: each call the terminal output lists with ``fields`` set (``None``:
    left out); the stream's events say the call as it was (their items are copies)."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        # the fake server gives the done events and the terminal output the same item objects
        items = [*items[:-1], copy.deepcopy(items[-1])]
        for item in items[-1]["response"]["output"]:
            if item.get("type") == "function_call":
                item.update(fields)
                for k in [k for k, v in fields.items() if v is None]:
                    del item[k]
        return items

    return edit


def arguments_as(value: Any, where: str) -> Edit:
    """Responses, streamed: the call's arguments as ``value`` (a JSON object, not its text) in
    the terminal output (``where`` "terminal"), or in its ``function_call_arguments.done`` and
    ``output_item.done`` ("done"); the deltas still say the ``ORDER`` arguments."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        items = [copy.deepcopy(i) for i in items]  # each event its own items
        for i in items:
            kind = i.get("type") if isinstance(i, dict) else None
            if where == "terminal" and kind == "response.completed":
                for item in i["response"]["output"]:
                    if item.get("type") == "function_call":
                        item["arguments"] = value
            elif (
                where == "done"
                and kind == "response.output_item.done"
                and i["item"]["type"] == "function_call"
            ):
                i["item"]["arguments"] = value
            elif where == "done" and kind == "response.function_call_arguments.done":
                i["arguments"] = value
        return items

    return edit


def whole_message_with_arguments(value: Any) -> Edit:
    """Chat, streamed: the deltas say the call's arguments without spaces; the finish chunk
    gives the whole message (round 28's quirk) with the arguments as ``value``, a JSON object."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        for i in whole_message_last(False)(p, s, items):
            for c in i.get("choices") or () if isinstance(i, dict) else ():
                for tc in (c.get("delta") or {}).get("tool_calls") or ():
                    if tc["function"].get("arguments"):
                        tc["function"]["arguments"] = tc["function"]["arguments"].replace(" ", "")
                for tc in (c.get("message") or {}).get("tool_calls") or ():
                    tc["function"]["arguments"] = value
        return items

    return edit


def start_input(value: Any) -> Edit:
    """Anthropic, streamed: each ``tool_use`` block's ``content_block_start`` gives ``value`` as
    its input; its ``input_json_delta`` pieces still say the call's arguments."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        for item in items:
            block = item.get("content_block") if isinstance(item, dict) else None
            if isinstance(block, dict) and block.get("type") == "tool_use":
                block["input"] = value
        return items

    return edit


def calls_then_answer(name: str, edit: Edit, times: int = 2) -> Make:
    """A call to ``name`` (the ``ORDER`` arguments) changed by ``edit`` ``times`` times, then the
    answer."""

    def make(p: str, s: bool) -> list[Reply]:
        call = Reply.calls((name, ORDER[1]), edit=lambda items: edit(p, s, items))
        return [call] * times + [Reply.text(ANSWER)]

    return make


def twice(edit: Edit, calls: bool = True) -> Make:
    """The call (or the answer's text), changed by ``edit``, twice (a retry), then the answer."""

    def make(p: str, s: bool) -> list[Reply]:
        bad = (
            Reply.calls(ORDER, edit=lambda i: edit(p, s, i))
            if calls
            else Reply.text(ANSWER, edit=lambda i: edit(p, s, i))
        )
        return [bad, bad, Reply.text(ANSWER)]

    return make


def on_wire(fn: Callable[[bytes], bytes]) -> Edit:
    """Each event (or the whole answer) as the bytes it is sent as, changed by ``fn``."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        wire = [(sse(p, i) if s else json.dumps(i).encode()) if isinstance(i, dict) else i for i in items]
        return [fn(b) for b in wire]

    return edit


def null_first(p: str, s: bool, items: list[Any]) -> list[Any]:
    """A ``null`` before the first of an answer's calls (chat), blocks (Anthropic) or output items."""

    def fix(d: dict[str, Any]) -> None:
        for k in ("tool_calls", "content", "output"):
            if isinstance(d.get(k), list) and d[k]:
                d[k] = [None, *d[k]]

    return walk_dicts(items, fix)


def usage_of_digits(p: str, s: bool, items: list[Any]) -> list[Any]:
    """The prompt (input) count written as an integer of 5,000 digits."""

    def fix(d: dict[str, Any]) -> None:
        for k in ("prompt_tokens", "input_tokens"):
            if isinstance(d.get(k), int):
                d[k] = "@DIGITS@"

    return on_wire(lambda b: b.replace(b'"@DIGITS@"', b"7" * 5000))(p, s, walk_dicts(items, fix))


def arguments_whole(value: Any) -> Edit:
    """A whole answer's call with ``value`` as its arguments (an Anthropic ``input``: ``null``,
    or ``{}`` for ``""``)."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        def fix(d: dict[str, Any]) -> None:
            if isinstance(d.get("arguments"), str):
                d["arguments"] = value
            if d.get("type") == "tool_use":
                d["input"] = None if value is None else {}

        return walk_dicts(items, fix)

    return edit


def nan_arguments(p: str, s: bool, items: list[Any]) -> list[Any]:
    """A whole answer's call whose arguments hold ``NaN`` (text, or an Anthropic input object)."""

    def fix(d: dict[str, Any]) -> None:
        if isinstance(d.get("arguments"), str):
            d["arguments"] = '{"order_id": NaN}'
        if d.get("type") == "tool_use":
            d["input"] = "@NAN@"

    return on_wire(lambda b: b.replace(b'"@NAN@"', b'{"order_id": NaN}'))(p, s, walk_dicts(items, fix))


# -- the cases ------------------------------------------------------------------------------------

CASES = [
    # -- fixed: unreadable, retried once, the call never run --------------------------------------
    Case("terminal_output_names_another_tool", only(R, calls_then_answer("read_orders", terminal_calls(
        name="read_order"))), False, ("is listed with name 'read_order' in the terminal output", "gave up"),
         modes=STREAM),
    Case("terminal_output_names_another_call_id", only(R, twice(terminal_calls(call_id="call_other"))), False,
         ("is listed with call_id 'call_other'", "gave up"), modes=STREAM),
    Case("terminal_output_lists_another_call", only(R, calls_then_answer("read_orders", terminal_calls(
        id="fc_other", call_id="call_other", name="read_order"))), False,
         ("'read_orders') is not listed in the terminal output", "gave up"), modes=STREAM),
    Case("terminal_output_lists_other_arguments_as_an_object", only(R, twice(arguments_as(
        {"order_id": "999"}, "terminal"))), False, ("are listed as", "in the terminal output", "gave up"),
         modes=STREAM),
    Case("done_events_give_other_arguments_as_an_object", only(R, twice(arguments_as(
        {"order_id": "999"}, "done"))), False, ("are done as", "gave up"), modes=STREAM),
    Case("whole_message_gives_other_arguments_as_an_object", only(C, twice(whole_message_with_arguments(
        {"order_id": "999"}))), False, ("whole message otherwise than its deltas", "gave up"), modes=STREAM),
    Case("block_start_gives_another_input", only(A, twice(start_input({"order_id": "999"}))), False,
         ("began with input", "gave up"), modes=STREAM),
    Case("block_start_gives_another_input_as_text", only(A, twice(start_input('{"order_id": "7420"}'))),
         False, ("began with input", "gave up"), modes=STREAM),
    # -- pinned: accepted with the answer ------------------------------------------------------------
    Case("pinned_terminal_output_lists_the_call_without_its_id", only(R, good(edit=terminal_calls(id=None))),
         True, modes=STREAM),
    Case("terminal_output_lists_the_arguments_as_an_object", only(R, good(edit=arguments_as(
        {"order_id": "742"}, "terminal"))), True, modes=STREAM),
    Case("done_events_give_the_arguments_as_an_object", only(R, good(edit=arguments_as(
        {"order_id": "742"}, "done"))), True, modes=STREAM),
    Case("whole_message_gives_the_arguments_as_an_object", only(C, good(edit=whole_message_with_arguments(
        {"order_id": "742"}))), True, modes=STREAM),
    Case("pinned_block_start_gives_the_same_input", only(A, good(edit=start_input({"order_id": "742"}))),
         True, modes=STREAM),
    Case("pinned_block_start_gives_the_same_input_as_text", only(A, good(edit=start_input(
        '{ "order_id" : "742" }'))), True, modes=STREAM),
    Case("pinned_block_start_gives_an_empty_input_as_text", only(A, good(edit=start_input("{ }"))), True,
         modes=STREAM),
    # -- pinned: unusable, retried once, then model_error ---------------------------------------------
    Case("pinned_a_null_among_the_parts", twice(null_first), False, ("not shaped like", "gave up"),
         modes=WHOLE),
    Case("pinned_a_null_among_the_chat_calls", only(C, twice(null_first)), False,
         ("not shaped like", "gave up"), modes=STREAM),
    Case("pinned_invalid_utf8_in_the_text", twice(on_wire(lambda b: b.replace(b"\\u2713", b"\xff")),
         calls=False), False, ("gave up",)),
    Case("pinned_a_count_of_5000_digits", twice(usage_of_digits, calls=False), False, ("gave up",)),
]  # fmt: skip

assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(CASES))
def test_a_round31_fault_ends_honestly_and_a_quirk_is_accepted(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    ends_as_its_case_says(tmp_path, case, provider, mode, transport)


FLAGGED = [
    # arguments the gate refuses (whole answers): the call rejected, never run, the run flagged
    Case("arguments_empty_text", good(edit=arguments_whole("")), False, ("missing_field",), modes=WHOLE),
    Case("arguments_null", good(edit=arguments_whole(None)), False, ("missing_field",), modes=WHOLE),
    Case("arguments_with_nan", good(edit=nan_arguments), False, ("non_standard_json",), modes=WHOLE),
]


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(FLAGGED))
def test_arguments_the_gate_refuses_flag_the_run_and_never_run(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    """Pinned: the call is rejected by the host's gate (never run), the model's answer after its
    refusal stands, and the run exits 2, its message naming why."""
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    assert (code, out["stop_reason"], out["answer"], requests) == (2, "accepted", ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["rejected"], out
    assert case.said[0] in out["message"], out["message"]


# -- the backends, called directly -----------------------------------------------------------------

REQUEST = ModelRequest(
    messages=(UserMessage("Why is 742 open?"),),
    tools=(
        {
            "type": "function",
            "function": {
                "name": "read_order",
                "description": "Read one work order.",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            },
        },
    ),
)


def ask_twice(backend: Any) -> tuple[BaseException | None, Any]:
    """The backend asked twice: what the first call raised (None: nothing), the second's answer."""

    async def go() -> tuple[BaseException | None, Any]:
        try:
            try:
                await backend.complete(REQUEST)
            except ModelError as err:
                first: BaseException | None = err
            else:
                first = None
            return first, await backend.complete(REQUEST)
        finally:
            await backend.aclose()

    return anyio.run(go)


@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_a_responses_terminal_call_that_is_not_the_streamed_one_is_never_returned(transport: str) -> None:
    """The backend, asked once (no retries): the stream's call to ``read_orders`` listed as
    ``read_order`` in the terminal output is a ``ModelError`` naming both; listed alike (its
    arguments spaced otherwise), the call comes back as the stream said it."""
    other = Reply.calls(
        ("read_orders", ORDER[1]), edit=lambda i: terminal_calls(name="read_order")("", True, i)
    )
    spaced = Reply.calls(
        ORDER, edit=lambda i: terminal_calls(arguments='{ "order_id" : "742" }')("", True, i)
    )
    with SERVERS4["openai-responses"](scripted([other, spaced])) as server:
        backend = OpenAIResponses(
            "m-1", base_url=server.url, transport=transport, stream=True, retry=RetryPolicy(0), timeout_s=10
        )
        error, response = ask_twice(backend)
    assert "'read_orders' is listed with name 'read_order' in the terminal output" in str(error), error
    [call] = response.message.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("read_order", {"order_id": "742"})


@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_an_anthropic_block_started_with_another_input_is_never_returned(transport: str) -> None:
    """The backend, asked once: a ``tool_use`` begun with ``{"order_id": "999"}`` and streamed as
    ``{"order_id": "742"}`` is a ``ModelError`` naming both; begun with ``{}`` (as the API sends
    it), the call comes back with the streamed input."""
    other = Reply.calls(ORDER, edit=lambda i: start_input({"order_id": "999"})("", True, i))
    with SERVERS4["anthropic"](scripted([other, Reply.calls(ORDER)])) as server:
        backend = AnthropicMessages(
            "m-1", base_url=server.url, transport=transport, stream=True, retry=RetryPolicy(0), timeout_s=10
        )
        error, response = ask_twice(backend)
    assert "began with input" in str(error) and "999" in str(error) and "742" in str(error), error
    [call] = response.message.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("read_order", {"order_id": "742"})
