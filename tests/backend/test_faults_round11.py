"""An eleventh round of faults and legitimate variants, driven as the others are (an agent file
naming ``model.provider`` and ``tether run`` in process, ``test_faults_heldout.run_case``)
against real servers on 127.0.0.1 speaking each protocol.

A turn that asks for more tool calls than ``limits.max_calls_per_turn`` (default 32; the agent
file sets it) ends the run ``model_error``, traced, none of its calls run (before: a server that
answered with hundreds of parallel calls had them all run in one step); a turn at the limit runs.

What the provider billed for an attempt that then failed counts (before: only the attempt that
succeeded did): an Anthropic stream cut after ``message_start`` reported its input, a chat
stream garbled after its usage chunk, a Responses answer refused after its terminal event
reported usage; across retries, into the ``ModelError`` when every attempt fails, and across
the models of a fallback chain; priced too.

Responses: text the stream said as deltas that its done item or the terminal output lists
otherwise is a garbled stream, retried (before: the terminal text was accepted unflagged, as
calls no longer were); text either leaves out (a proxy that trims it) is the deltas'. A
reasoning item without an ``id`` is not sent back (the API requires one and refuses the next
request with HTTP 400; before: it went back without one, and that next turn failed), counted in
the answer's meta (``reasoning_not_kept``); one with ``summary: null`` goes back with ``[]``.
Anthropic: a turn of calls whose thinking block lost its signature is retried (it cannot be
sent back, and the API refuses a tool-use turn without its thinking; before: the calls ran and
the next request carried the unsigned block), a final answer's is not kept.

Chat: a choice ``index`` written as text (``"0"``) is choice 0 in a stream as in a whole answer
(before: the stream skipped it, retried to ``model_error``, while the whole answer with it was
accepted); a streamed tool call's ``index`` written as text in some deltas is the same call as
the number in the others (before: the reader compared text with numbers, a ``TypeError``, and
the run ended ``model_error``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS, run_case, twice
from test_faults_round3 import DONE, OTHER, assert_outcome, walk
from test_faults_round4 import SERVERS4, Raw, Round4, round_params
from test_faults_round10 import chain, cut_after_first_text, run_agent

from tether.agents._spec import LimitsSpec
from tether_testing.fake_server import Reply, scripted
from tether_testing.servers import FakeResponsesServer

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

THIRD = ("read_order", '{"order_id": "744"}')
OTHER_TEXT = "Order 743 is closed"


# -- a cap on the tool calls of one turn ----------------------------------------------------------


def many_calls(n: int) -> Reply:
    return Reply.calls(*(("read_order", json.dumps({"order_id": str(700 + i)})) for i in range(n)))


def trace_of(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(out["trace"]).read_text().splitlines()]


WHERE = [("openai-chat", False, "http"), ("anthropic", True, "sdk"), ("openai-responses", True, "http")]


@pytest.mark.parametrize(("provider", "stream", "transport"), WHERE)
def test_a_turn_over_the_tool_call_cap_runs_none_of_its_calls(
    tmp_path: Path, provider: str, stream: bool, transport: str
) -> None:
    """33 parallel calls in one turn, over the default cap of 32: the run ends ``model_error``
    at once (the server asked once, not again), none of the calls run, the trace's
    ``model_error`` naming the cap (before: all 33 ran, and the run went on). Under an agent
    file's ``max_calls_per_turn: 2``, three calls end it the same way, and two run and the
    answer is accepted."""
    model: dict[str, Any] = {"provider": provider, "name": "m-1", "streaming": stream, "transport": transport}
    model.update(max_retries=1, timeout_s=5)
    for replies, cap in (
        ([many_calls(33), Reply.text(ANSWER)], None),
        ([Reply.calls(ORDER, OTHER, THIRD)], 2),
    ):
        with SERVERS[provider](scripted(replies)) as server:
            limits = {"max_calls_per_turn": cap} if cap else {}
            code, out, _ = run_agent(tmp_path, {**model, "base_url": server.url, "limits": limits})
            asked = len(server.bodies())
        assert (code, out["stop_reason"], asked, out["calls"]) == (7, "model_error", 1, []), out
        assert "max_calls_per_turn" in out["message"], out["message"]
        errors = [e for e in trace_of(out) if e["kind"] == "model_error"]
        assert len(errors) == 1 and "none ran" in errors[0]["error"], errors
        assert not [e for e in trace_of(out) if e["kind"] == "tool_result"], out
    with SERVERS[provider](scripted([Reply.calls(ORDER, OTHER), Reply.text(ANSWER)])) as server:
        limits = {"max_calls_per_turn": 2}
        code, out, _ = run_agent(tmp_path, {**model, "base_url": server.url, "limits": limits})
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert [c["status"] for c in out["calls"]] == ["ok", "ok"], out


def test_the_cap_is_an_agent_file_field_documented_in_the_schema() -> None:
    described = LimitsSpec.model_json_schema()["properties"]["max_calls_per_turn"]
    assert "tool calls one model turn" in described["description"], described
    assert LimitsSpec(max_calls_per_turn=5).build().max_calls_per_turn == 5
    assert LimitsSpec().build().max_calls_per_turn == 32


# -- what failed attempts were billed ---------------------------------------------------------------


def garbled_after_usage(items: list[Any]) -> list[Any]:
    """Chat (streamed): an event that is not JSON after the usage chunk, before ``[DONE]``: the
    stream is unreadable (retried) after the server reported what the attempt cost."""
    at = items.index(DONE)
    return [*items[:at], b"data: {not json\n\n", *items[at:]]


def terminal_text(text: str) -> Any:
    """Responses: the terminal output lists the message's text as ``text`` (its deltas and its
    done item say what they said)."""

    def edit(items: list[Any]) -> list[Any]:
        items = json.loads(json.dumps(items))
        output = items[-1]["response"]["output"] if "response" in items[-1] else items[-1]["output"]
        walk(output, lambda d: d.update(text=text) if d.get("type") == "output_text" else None)
        return items

    return edit


def done_text(text: str) -> Any:
    """Responses: the message's done item lists its text as ``text``; the terminal output lists
    no output (the items came one by one)."""

    def edit(items: list[Any]) -> list[Any]:
        for i in items:
            if i.get("type") == "response.output_item.done" and i["item"].get("type") == "message":
                i["item"] = json.loads(json.dumps(i["item"]))  # its own parts: the part events keep theirs
                walk(i["item"], lambda d: d.update(text=text) if d.get("type") == "output_text" else None)
        items[-1]["response"]["output"] = []
        return items

    return edit


def text_left_out(where: str) -> Any:
    """Responses: the message's text left out of the terminal output (its message items dropped)
    or of its done item (``content: []``), a proxy that trims them; the deltas say it."""

    def edit(items: list[Any]) -> list[Any]:
        if where == "terminal":
            final = items[-1]["response"]
            final["output"] = [i for i in final["output"] if i.get("type") != "message"]
        for i in items:
            if i.get("type") == "response.output_item.done" and i["item"].get("type") == "message":
                i["item"]["content"] = [] if where == "done" else i["item"]["content"]
        return items

    return edit


BILLED = [
    # provider, transport, the first (failing) attempt, what it was billed (the servers' counts;
    # Anthropic's: the input its message_start said and the text it streamed after, 4 tokens
    # estimated (round 27: its message_start's output count is not the whole))
    ("anthropic", "http", Raw(content=ANSWER, wire=cut_after_first_text), 104),
    ("anthropic", "sdk", Raw(content=ANSWER, wire=cut_after_first_text), 104),
    ("openai-chat", "http", Reply.text(ANSWER, edit=garbled_after_usage), 110),
    ("openai-responses", "http", Reply.text(ANSWER, edit=terminal_text(OTHER_TEXT)), 110),
]


@pytest.mark.parametrize(("provider", "transport", "failing", "spent"), BILLED)
def test_what_a_failed_attempt_was_billed_counts(
    tmp_path: Path, provider: str, transport: str, failing: Reply, spent: int
) -> None:
    """The first attempt fails after its server reported usage, the retry answers: the run's
    tokens are the failed attempt's and both turns' (before: the two turns' only, 220), the
    turn's ``model_response`` saying what the failed attempt cost; priced, its cost counts too.
    Every attempt failing: the run ends ``model_error`` with both attempts' tokens counted
    (before: 0)."""
    prices = {"m-1": {"input": 1_000_000.0, "output": 1_000_000.0}}  # $1 a token: the cost is the count
    model: dict[str, Any] = {"provider": provider, "name": "m-1", "streaming": True, "transport": transport}
    model.update(max_retries=1, timeout_s=5, prices=prices)
    with SERVERS4[provider](scripted([failing, Reply.calls(ORDER), Reply.text(ANSWER)])) as server:
        code, out, responses = run_agent(tmp_path, {**model, "base_url": server.url})
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert (out["tokens"], out["cost_usd"]) == (220 + spent, 220 + spent), out
    assert responses[0]["failed_attempts_billed"]["cost_usd"] == spent, responses[0]
    assert "failed_attempts_billed" not in responses[1], responses[1]
    with SERVERS4[provider](scripted([failing, failing])) as server:
        code, out, _ = run_agent(tmp_path, {**model, "base_url": server.url})
    assert (code, out["stop_reason"], out["tokens"], out["cost_usd"]) == (
        7,
        "model_error",
        2 * spent,
        2 * spent,
    )
    errors = [e for e in trace_of(out) if e["kind"] == "model_error"]
    assert errors[0]["prompt_tokens"] + errors[0]["completion_tokens"] == 2 * spent, errors


def test_a_fallback_chain_counts_what_the_model_it_left_was_billed(tmp_path: Path) -> None:
    """The first model's two attempts each fail after reporting 110 tokens; the second answers
    both turns (110 each): the run counts 440 tokens (before: 220), the first answer saying what
    the models it fell back from were billed; every model failing so, the ``model_error``
    counts them all."""
    garbled = Reply.text(ANSWER, edit=garbled_after_usage)
    servers = (SERVERS["openai-chat"], SERVERS["anthropic"], SERVERS["openai-responses"])
    scripts = ([garbled, garbled], [Reply.calls(ORDER), Reply.text(ANSWER)], [])
    ups = [kind(scripted(script)) for kind, script in zip(servers, scripts, strict=True)]
    with ups[0] as a, ups[1] as b, ups[2] as c:
        model = chain(a.url, b.url, c.url)
        model["streaming"] = True
        code, out, responses = run_agent(tmp_path, model)
    assert (code, out["stop_reason"], out["answer"], out["tokens"]) == (0, "accepted", ANSWER, 440), out
    assert responses[0]["fallback_billed"]["prompt_tokens"] == 200, responses[0]
    terminal = Reply.text(ANSWER, edit=terminal_text(OTHER_TEXT))
    scripts = ([garbled, garbled], [Raw(content=ANSWER, wire=cut_after_first_text)] * 2, [terminal] * 2)
    names = ("openai-chat", "anthropic", "openai-responses")
    ups = [SERVERS4[name](scripted(script)) for name, script in zip(names, scripts, strict=True)]
    with ups[0] as a, ups[1] as b, ups[2] as c:
        model = chain(a.url, b.url, c.url)
        model["streaming"] = model["fallback"][0]["streaming"] = True  # Anthropic's input said at its start
        code, out, _ = run_agent(tmp_path, model)
    assert (code, out["stop_reason"], out["tokens"]) == (7, "model_error", 220 + 208 + 220), out


# -- cases driven as the other rounds' ------------------------------------------------------------


def index_as_text(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: every choice's ``index`` written as text (``"0"``)."""
    return walk(items, lambda d: d.update(index=str(d["index"])) if "finish_reason" in d else None)


def call_index_as_text_in_every_other_delta(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat (streamed): every other tool-call delta's ``index`` written as text (``"1"``), the
    rest as numbers (a proxy that re-encodes some chunks)."""
    seen: list[dict[str, Any]] = []
    walk(items, lambda d: seen.append(d) if "index" in d and "function" in d else None)
    for d in seen[::2]:
        d["index"] = str(d["index"])
    return items


def reasoning_without_id(items: list[Any]) -> list[Any]:
    """Responses: every reasoning item without its ``id`` (a proxy that drops it)."""
    return walk(items, lambda d: d.pop("id", None) if d.get("type") == "reasoning" else None)


def reasoning_without_summary(items: list[Any]) -> list[Any]:
    """Responses: every reasoning item with ``summary: null`` (a proxy that nulls what it trims)."""
    return walk(items, lambda d: d.update(summary=None) if d.get("type") == "reasoning" else None)


def unsigned_thinking(items: list[Any]) -> list[Any]:
    """Anthropic: thinking blocks without their signature (a proxy that drops ``signature_delta``
    events and the field)."""
    items = [i for i in items if (i.get("delta") or {}).get("type") != "signature_delta"]
    return walk(items, lambda d: d.pop("signature", None) if d.get("type") == "thinking" else None)


def thinking_and_calls(p: str, stream: bool) -> Reply:
    return Reply(reasoning="Read the order.", tool_calls=(ORDER,), edit=unsigned_thinking)


CASES = [
    # -- legitimate variants: accepted with the answer ----------------------------------------
    Round4(
        "chat_choice_index_as_text",
        lambda p, s: [
            Reply.calls(ORDER, edit=lambda i: index_as_text(p, s, i)),
            Reply.text(ANSWER, edit=lambda i: index_as_text(p, s, i)),
        ],
        True,
        at=("chat/stream/http", "chat/stream/sdk", "chat/whole/http"),
    ),
    Round4(
        "chat_tool_call_index_as_text_in_some_deltas",
        lambda p, s: [
            Reply.calls(ORDER, OTHER, edit=lambda i: call_index_as_text_in_every_other_delta(p, s, i)),
            Reply.text(ANSWER),
        ],
        True,
        calls=("ok", "ok"),
        at=("chat/stream/http",),
    ),
    Round4(
        "responses_text_left_out_of_the_terminal_output",
        lambda p, s: [
            Reply(content="Let me read it.", tool_calls=(ORDER,), edit=text_left_out("terminal")),
            Reply.text(ANSWER, edit=text_left_out("terminal")),
        ],
        True,
        at=("responses/stream/http", "responses/stream/sdk"),
    ),
    Round4(
        "responses_text_left_out_of_its_done_item",
        lambda p, s: [
            Reply(content="Let me read it.", tool_calls=(ORDER,), edit=text_left_out("done")),
            Reply.text(ANSWER, edit=text_left_out("done")),
        ],
        True,
        at=("responses/stream/http",),
    ),
    # -- faults: a typed stop, a non-zero exit -----------------------------------------------
    Round4(
        "responses_terminal_output_lists_other_text",
        twice(lambda p, s: Reply.text(ANSWER, edit=terminal_text(OTHER_TEXT))),
        False,
        ("listed as", "terminal output", "gave up"),
        at=("responses/stream/http", "responses/stream/sdk"),
    ),
    Round4(
        "anthropic_unsigned_thinking_with_calls",
        twice(thinking_and_calls),
        False,
        ("without its signature", "gave up"),
        at=("anthropic/whole/http", "anthropic/stream/sdk", "anthropic/stream/http"),
    ),
    Round4(
        "responses_done_item_lists_other_text",
        twice(lambda p, s: Reply.text(ANSWER, edit=done_text(OTHER_TEXT))),
        False,
        ("listed as", "done item", "gave up"),
        at=("responses/stream/http",),
    ),
]

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round11_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    code, out, requests, took = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    assert_outcome(case, code, out, requests, took)


def refuses_reasoning_without_id(replies: list[Reply]) -> Any:
    """A Responses server that, as the API does, refuses a request whose input holds a
    reasoning item without its ``id`` (HTTP 400, not retried)."""

    def respond(request: dict[str, Any], index: int) -> Reply:
        items = [
            i for i in request.get("input") or [] if isinstance(i, dict) and i.get("type") == "reasoning"
        ]
        if any(not i.get("id") or not isinstance(i.get("summary"), list) for i in items):
            return FakeResponsesServer.error(400, "Missing required parameter: 'input[1].id'.")
        return replies[index] if index < len(replies) else Reply.error(400, "script exhausted")

    return respond


@pytest.mark.parametrize(("stream", "transport"), [(False, "http"), (True, "sdk")])
def test_a_reasoning_item_without_an_id_is_not_sent_back(
    tmp_path: Path, stream: bool, transport: str
) -> None:
    """The call's turn comes with a reasoning item without its ``id``: it is not sent back (the
    next request holds no reasoning item), the run is accepted, the turn's ``model_response``
    counting the item not kept (before: it went back without an id, the API's 400 ended the run
    ``model_error``); one with its id is sent back as it came, with ``summary: []`` where it
    came with none (before: ``null``, which the API refuses too)."""
    model: dict[str, Any] = {"provider": "openai-responses", "name": "m-1", "streaming": stream}
    model.update(transport=transport, max_retries=1, timeout_s=5)
    for edit, kept in ((reasoning_without_id, False), (reasoning_without_summary, True), (None, True)):
        replies = [Reply(reasoning="Read the order.", tool_calls=(ORDER,), edit=edit), Reply.text(ANSWER)]
        with FakeResponsesServer(refuses_reasoning_without_id(replies)) as server:
            code, out, responses = run_agent(tmp_path, {**model, "base_url": server.url})
            second = server.bodies()[1]["input"]
        assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
        sent = [i for i in second if i.get("type") == "reasoning"]
        assert len(sent) == (1 if kept else 0) and all(i["id"].startswith("rs_") for i in sent), second
        assert responses[0].get("reasoning_not_kept") == (None if kept else 1), responses[0]


@pytest.mark.parametrize(("stream", "transport"), [(False, "http"), (True, "sdk")])
def test_an_unsigned_thinking_block_of_a_final_answer_is_not_kept(
    tmp_path: Path, stream: bool, transport: str
) -> None:
    """Anthropic: the final answer comes with a thinking block without its signature: accepted,
    the block not kept (it could not be sent back), counted in the answer's meta; signed, it is
    kept (the turn's reasoning either way)."""
    model: dict[str, Any] = {"provider": "anthropic", "name": "m-1", "streaming": stream}
    model.update(transport=transport, max_retries=1, timeout_s=5)
    for edit, not_kept in ((unsigned_thinking, 1), (None, None)):
        replies = [Reply.calls(ORDER), Reply(content=ANSWER, reasoning="It is open.", edit=edit)]
        with SERVERS["anthropic"](scripted(replies)) as server:
            code, out, responses = run_agent(tmp_path, {**model, "base_url": server.url})
        assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
        assert responses[1].get("reasoning_not_kept") == not_kept, responses[1]
