"""A twentieth round of held-out faults and legitimate variants, driven as the others are (an agent
file naming ``model.provider`` and ``tether run``, in process and in its own) against real servers
on 127.0.0.1 speaking each protocol, on the SDK transport and plain httpx2. This round's answers
name a call, or say what goes back with it, in a form the readers took as it came.

Faults fixed this round (never accepted; retried as an unusable answer, then ``model_error``): a
Responses output item that is a call the client must answer, of a kind the run never offers (a
``custom_tool_call``, a ``local_shell_call``: an item with a ``call_id``) beside the answer's text
(before: passed over as an item of a type the API added later, and the text, a preamble to an
action no tool here performs, accepted as the final answer, exit 0; ``_said.client_call``), and
the same call where a stream gives it and its terminal output lists the message alone, or where
the stream only adds it (``_said._with_left_out``, ``_Said.items``).
A tool the server runs itself (``web_search_call``: no ``call_id``) and a call's output a proxy
echoed (``function_call_output``) are still passed over, the answer accepted.

A tool call id sent as another JSON value than a string (``4242``, ``true``, an object), on every
protocol, whole and streamed: the call runs and its result goes back under the id as text
(before: a chat stream's or a Responses answer's number went back as a number, which the API
refuses, and an object ended the run ``model_error`` with an internal ``TypeError: unhashable
type``, never retried; ``_backend._ids_as_text``). A call whose id an earlier turn's call has is
renamed to an id of at most 40 characters, the longest OpenAI's chat API takes (before: an
OpenAI-length id and its suffix were 42 characters, and the next request was refused;
``_base.unique_call_ids``). An Anthropic thinking block whose
``content_block_start`` already carries the signature its ``signature_delta`` then gives goes back
with that signature once, as the official SDK's accumulator sets it (before: appended, the
signature twice over, which the API refuses on the next request; ``_anthropic._Blocks.delta``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS, run_case, twice, write_agent
from test_faults_round3 import assert_outcome, walk
from test_faults_round4 import SERVERS4, Round4, round_params
from test_faults_round10 import run_agent

from tether_testing.fake_server import Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

Edit = Callable[[list[Any]], list[Any]]
RESPONSES = ("responses/whole/sdk", "responses/whole/http", "responses/stream/http", "responses/stream/sdk")
CUSTOM = {
    "type": "custom_tool_call",
    "id": "ctc_9",
    "call_id": "call_c9",
    "name": "read_order",
    "input": "742",
}
SHELL = {
    "type": "local_shell_call",
    "id": "lsc_9",
    "call_id": "call_s9",
    "action": {"type": "exec", "command": ["rm", "-rf", "/srv/orders"]},
}
WEB_SEARCH = {"type": "web_search_call", "id": "ws_9", "action": {"type": "search", "query": "order 742"}}
ECHOED = {"type": "function_call_output", "id": "fco_9", "call_id": "call_e9", "output": "{}"}


def _is(item: Any, kind: str) -> bool:
    return isinstance(item, dict) and item.get("type") == kind


# -- Responses: an output item of another kind beside the answer ---------------------------------


def beside(extra: dict[str, Any], *, done: bool = True, listed: bool = True) -> Edit:
    """Responses: ``extra`` listed after the answer's message, whole or streamed (added at the
    next output index; ``done``: done there too; ``listed``: in the terminal output too, else
    that output lists the message alone, a proxy that rebuilds it from the text)."""

    def edit(items: list[Any]) -> list[Any]:
        item = {**extra, "status": "completed"}
        if not any(_is(i, "response.completed") for i in items):  # whole: the one response object
            items[0]["output"].append(item)
            return items
        at = next(n for n, i in enumerate(items) if _is(i, "response.completed"))
        index = len(items[at]["response"]["output"])
        if listed:
            items[at]["response"]["output"].append(item)
        added = {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress"},
        }
        items[at:at] = [
            added,
            *([{"type": "response.output_item.done", "output_index": index, "item": item}] * done),
        ]
        return items

    return edit


def text_beside(extra: dict[str, Any], **kw: bool) -> Callable[[str, bool], Reply]:
    return lambda p, s: Reply.text(ANSWER, edit=beside(extra, **kw))


def answer_beside(extra: dict[str, Any]) -> Callable[[str, bool], list[Reply]]:
    return lambda p, s: [Reply.calls(ORDER), Reply.text(ANSWER, edit=beside(extra))]


CASES = [
    # -- legitimate variants -----------------------------------------------------------------
    Round4("responses_a_server_tool_call_beside_the_answer", answer_beside(WEB_SEARCH), True,
           at=("responses/whole/sdk", "responses/stream/http")),
    Round4("responses_an_echoed_call_output_beside_the_answer", answer_beside(ECHOED), True,
           at=("responses/whole/http", "responses/stream/http")),
    # -- faults ------------------------------------------------------------------------------
    Round4("responses_a_custom_tool_call_beside_the_text", twice(text_beside(CUSTOM)), False,
           ("a custom_tool_call item (call_id 'call_c9')", "a call of a kind this run does not offer",
            "gave up"), at=RESPONSES),
    Round4("responses_a_custom_tool_call_the_terminal_output_leaves_out", twice(text_beside(
        CUSTOM, listed=False)), False, ("a custom_tool_call item", "gave up"), at=RESPONSES[2:]),
    Round4("responses_a_custom_tool_call_only_added", twice(text_beside(CUSTOM, done=False, listed=False)),
           False, ("a custom_tool_call item", "gave up"), at=("responses/stream/http",)),
    Round4("responses_a_local_shell_call_beside_the_text", twice(text_beside(SHELL)), False,
           ("a local_shell_call item", "does not offer", "gave up"),
           at=("responses/whole/http", "responses/stream/http")),
]  # fmt: skip

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round20_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    assert_outcome(case, *run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4))


# -- a call id that is not a string ---------------------------------------------------------------


def ids_as(value: object) -> Edit:
    """Every tool call's id (chat's ``id``, Anthropic's ``tool_use`` id, Responses' ``call_id``)
    sent as ``value``, a JSON value that is not a string."""

    def fix(d: dict[str, Any]) -> None:
        if isinstance(d.get("call_id"), str):
            d["call_id"] = value
        elif ("function" in d or d.get("type") == "tool_use") and isinstance(d.get("id"), str):
            d["id"] = value

    return lambda items: walk(items, fix)


def results_named(provider: str, body: dict[str, Any]) -> list[object]:
    """The ids the tool results of a request name."""
    if provider == "openai-chat":
        return [m["tool_call_id"] for m in body["messages"] if m.get("role") == "tool"]
    if provider == "anthropic":
        blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
        return [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
    return [i["call_id"] for i in body["input"] if i.get("type") == "function_call_output"]


WHERE = [
    (provider, stream, transport)
    for provider in sorted(SERVERS)
    for stream, transport in ((False, "sdk"), (True, "http"))
]


@pytest.mark.parametrize(("provider", "stream", "transport"), WHERE)
@pytest.mark.parametrize("value", [4242, {"n": 7}], ids=["number", "object"])
def test_a_call_id_that_is_not_a_string_runs_and_goes_back_as_text(
    tmp_path: Path, provider: str, stream: bool, transport: str, value: object
) -> None:
    """The call runs, the run is accepted with the answer, and the next request names its result
    by the id as text, the same id its call goes back with (before: a number went back as a
    number, which the API refuses; an object ended the run ``model_error`` with an internal
    ``TypeError``, never retried)."""
    replies = [Reply.calls(ORDER, edit=ids_as(value)), Reply.text(ANSWER)]
    model = {"provider": provider, "name": "m-1", "streaming": stream, "transport": transport}
    with SERVERS[provider](scripted(replies)) as server:
        code, out, _ = run_agent(
            tmp_path, {**model, "base_url": server.url, "max_retries": 1, "timeout_s": 10}
        )
        bodies = server.bodies()
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert [c["status"] for c in out["calls"]] == ["ok"] and len(bodies) == 2, out
    named = results_named(provider, bodies[1])
    assert len(named) == 1 and isinstance(named[0], str) and named[0], named
    assert json.dumps(bodies[1]).count(json.dumps(named[0])) == 2  # the call, and its result


# -- a call id an earlier turn used, renamed within the length the API takes ---------------------

OPENAI_ID = "call_" + "Xy7" * 8  # as OpenAI writes one: ``call_`` and 24 characters


def one_long_id(items: list[Any]) -> list[Any]:
    """Chat: every call's id the same OpenAI-length id on every turn (a caching proxy that
    replays an answer, a server whose ids repeat)."""
    return walk(items, lambda d: d.update(id=OPENAI_ID) if "function" in d and d.get("id") else None)


def refuses_long_or_repeated_ids(replies: list[Reply]) -> Any:
    """A chat server that, as OpenAI's (and Azure's) does, refuses a call id of more than 40
    characters ("string too long. Expected a string with maximum length 40", HTTP 400), and one
    that repeats."""

    def respond(request: dict[str, Any], index: int) -> Reply:
        calls = [c["id"] for m in request["messages"] for c in m.get("tool_calls") or ()]
        if len(set(calls)) < len(calls) or any(len(c) > 40 for c in calls):
            return Reply.error(400, f"Invalid 'messages[].tool_calls[].id': string too long: {calls}")
        return replies[index] if index < len(replies) else Reply.error(400, "script exhausted")

    return respond


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_id_an_earlier_turn_used_is_renamed_within_the_length_the_api_takes(
    tmp_path: Path, stream: bool
) -> None:
    """Two turns of calls under one OpenAI-length id, then the answer: the second call is renamed
    (its result naming it) to an id of at most 40 characters, and the run is accepted (before:
    the id and a 13-character suffix, 42, which the API refuses: the third request failed, the
    run ended ``model_error`` after both tools had run)."""
    turns = [
        Reply.calls(("read_order", json.dumps({"order_id": n})), edit=one_long_id) for n in ("742", "743")
    ]
    model = {"provider": "openai-chat", "name": "m-1", "streaming": stream, "transport": "http"}
    with SERVERS["openai-chat"](refuses_long_or_repeated_ids([*turns, Reply.text(ANSWER)])) as server:
        code, out, responses = run_agent(tmp_path, {**model, "base_url": server.url, "max_retries": 0})
        last = server.bodies()[-1]
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    [[old, new]] = responses[1]["call_ids_renamed"]
    assert old == OPENAI_ID and len(new) <= 40 and new != old and new.startswith(OPENAI_ID[:20]), new
    assert [m["tool_call_id"] for m in last["messages"] if m.get("role") == "tool"] == [OPENAI_ID, new]


# -- Anthropic: a signature given in the block's start and again as its delta ----------------------


def signature_in_start(items: list[Any]) -> list[Any]:
    """Anthropic: the thinking block's ``content_block_start`` carries the signature its
    ``signature_delta`` then gives (a proxy that fills the start block from the whole answer)."""
    said = next(
        i["delta"]["signature"] for i in items if (i.get("delta") or {}).get("type") == "signature_delta"
    )
    for item in items:
        if _is(item, "content_block_start") and item["content_block"]["type"] == "thinking":
            item["content_block"]["signature"] = said
    return items


@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_a_signature_given_in_the_start_and_as_a_delta_goes_back_once(tmp_path: Path, transport: str) -> None:
    replies = [
        Reply(tool_calls=(ORDER,), reasoning="Read it first.", edit=signature_in_start),
        Reply.text(ANSWER),
    ]
    model = {"provider": "anthropic", "name": "m-1", "streaming": True, "transport": transport}
    with SERVERS["anthropic"](scripted(replies)) as server:
        code, out, _ = run_agent(
            tmp_path, {**model, "base_url": server.url, "max_retries": 0, "timeout_s": 10}
        )
        turn = server.bodies()[1]["messages"][1]
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    thinking = turn["content"][0]
    said = hashlib.sha256(b"Read it first.").hexdigest()  # the signature the server gives
    assert (thinking["type"], thinking["thinking"], thinking["signature"]) == (
        "thinking",
        "Read it first.",
        said,
    )


# -- the command in its own process ---------------------------------------------------------------


RUNS = [
    ("openai-responses", False, [text_beside(CUSTOM)("openai-responses", False)] * 2, 7, "model_error"),
    (
        "openai-responses",
        True,
        [Reply.calls(ORDER), Reply.text(ANSWER, edit=beside(WEB_SEARCH))],
        0,
        "accepted",
    ),
    ("openai-chat", True, [Reply.calls(ORDER, edit=ids_as({"n": 7})), Reply.text(ANSWER)], 0, "accepted"),
    ("anthropic", True, [Reply.calls(ORDER, edit=ids_as(4242)), Reply.text(ANSWER)], 0, "accepted"),
]
RUN_IDS = ["responses-custom-call", "responses-web-search", "chat-object-id", "anthropic-number-id"]


@pytest.mark.parametrize(("provider", "stream", "replies", "code", "stop"), RUNS, ids=RUN_IDS)
def test_the_command_in_its_own_process_exits_by_how_the_answer_ended(
    tmp_path: Path, provider: str, stream: bool, replies: list[Reply], code: int, stop: str
) -> None:
    """``python -m tether.cli run`` with the agent file: a preamble beside a call of a kind the run
    does not offer exits 7 ``model_error`` after its retry (before: 0, ``accepted``); the answer
    beside a tool the server ran, and calls whose ids are not strings, exit 0 with the answer."""
    with SERVERS[provider](scripted(replies)) as server:
        model = {"provider": provider, "name": "m-1", "base_url": server.url, "streaming": stream}
        path = write_agent(tmp_path, {**model, "timeout_s": 10, "max_retries": 1})
        argv = [sys.executable, "-m", "tether.cli", "run", "Why is 742 open?", "--agent", str(path), "--json"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert (done.returncode, out["stop_reason"]) == (code, stop), done.stderr[-2000:]
        assert len(server.bodies()) == len(replies) and "Traceback" not in done.stdout + done.stderr
    assert out["answer"] == (ANSWER if code == 0 else None), out
