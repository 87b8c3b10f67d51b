"""A tenth round of held-out faults and legitimate variants, driven as the others are
(``test_faults_heldout.run_case``: an agent file naming ``model.provider`` and ``tether run`` in
process) against real servers on 127.0.0.1; each case runs where its path differs
(``Round4.at``). This round sends events out of order.

Variants end ``accepted`` with the answer: a stream whose finish comes before its content (a chat
finish chunk right after the role chunk, an Anthropic ``message_delta`` right after
``message_start``) and that still ends with its terminal event (``[DONE]``, ``message_stop``);
an empty piece after the finish of a stream that then ends without its terminal event; an
Anthropic stream whose ``message_start`` holds every block whole, with no block events (a proxy
that turns a whole answer into a stream; before: no text, no call, retried to ``model_error``,
where the official SDK's accumulator reads them);
an Anthropic stream a proxy replayed after the first attempt was cut at ``max_tokens`` (the
replay's own stop reason counts, not the lost attempt's); a Responses terminal output that lists
a call's arguments as the same JSON written otherwise, or lists a call the stream only added; a
Responses event sent again under its ``sequence_number`` (a proxy that resumed the stream from
earlier): a text delta of an answer said only as deltas (before: that piece twice in the
accepted answer), an argument delta (before: garbled, the run ended ``model_error``); a
503 whose ``retry-after`` is an HTTP date in a year past any calendar, then a good answer.

Faults end with a typed stop and a non-zero exit: the same out-of-order streams cut, or ended
without their terminal event, after the first piece of text (before: the piece was accepted as
the whole answer, since a finish had been said); two calls with the finish between them, the
stream ending as the second begins (before: the first ran, the second with no arguments); an
Anthropic stream replayed after the first
attempt's stop reason and cut in the replay (before: the replay's first piece was accepted, with
the lost attempt's ``end_turn``); a Responses terminal output that lists a call with other
arguments than its deltas, ``arguments.done`` and ``output_item.done`` said (before: the call ran
with the terminal output's, unlike the stream said; now garbled, as deltas that disagree with
the done arguments are); that 503 forever (asked again as any 503, then ``model_error`` naming
it, not the date parser's ``OverflowError``).

Budgets: a server that reports no usage (or no completion count) has the counts it left out
estimated from the request and the answer, named in ``model_response`` (``usage_estimated``),
so its token and cost budgets trip (before: it counted 0 tokens and $0, and a budget two turns
pass never stopped six); one that reports its counts keeps them; an Anthropic stream whose
``message_delta`` lost its output count has it estimated (before: ``message_start``'s count so
far, 1 token, stood for the whole answer). A fallback chain whose every
model fails otherwise ends ``model_error`` naming each; a token budget counts across the models
of a chain.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS, good, run_case, twice, write_agent
from test_faults_round3 import OTHER, assert_outcome, walk
from test_faults_round4 import SERVERS4, Raw, Round4, round_params
from test_faults_round7 import deltas_only

from tether.cli import main
from tether_testing.fake_server import Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]


# -- edits ---------------------------------------------------------------------------------------


def _kind(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    if item.get("choices"):
        choice = item["choices"][0]
        return "finish" if choice.get("finish_reason") else "text" if choice["delta"].get("content") else ""
    return str(item.get("type"))


def finish_first(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """The event that says how the answer ended moved right after the first event (a chat finish
    chunk after the role chunk; Anthropic's ``message_delta`` after ``message_start``), the rest
    in order, the terminal event (``[DONE]``, ``message_stop``) last."""
    ends = "finish" if p == "openai-chat" else "message_delta"
    finish = next(i for i in items if _kind(i) == ends)
    rest = [i for i in items if i is not finish]
    return [rest[0], finish, *rest[1:]]


def empty_after_the_finish(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """An empty piece after the finish, before the terminal event, which never comes (a chat
    chunk with ``content: ""``, an Anthropic ``text_delta`` of ``""``): nothing after the finish."""
    ends = "finish" if p == "openai-chat" else "message_delta"
    at = next(n for n, i in enumerate(items) if _kind(i) == ends)
    if p == "openai-chat":
        empty = {**items[at], "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]}
    else:
        empty = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ""}}
    return [*items[: at + 1], empty]


def first_text_only(items: list[Any]) -> list[Any]:
    """The events up to the first piece of text; nothing after it (no terminal event)."""
    first = next(n for n, i in enumerate(items) if _kind(i) in ("text", "content_block_delta"))
    return items[: first + 1]


def finish_first_then_end(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """``finish_first``, the stream ending cleanly after the first piece of text."""
    return first_text_only(finish_first(p, stream, items))


def _second_call_begins(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    if item.get("choices"):
        calls = item["choices"][0]["delta"].get("tool_calls") or [{}]
        return calls[0].get("index") == 1 and bool(calls[0].get("id"))
    return item.get("type") == "content_block_start" and item.get("index") == 1


def finish_between_two_calls_then_end(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Two calls; the finish moved between them, the stream ending cleanly right after the
    second call begins (its name said, its arguments not)."""
    ends = "finish" if p == "openai-chat" else "message_delta"
    finish = next(i for i in items if _kind(i) == ends)
    rest = [i for i in items if i is not finish]
    second = next(n for n, i in enumerate(rest) if _second_call_begins(i))
    return [*rest[:second], finish, rest[second]]


def cut_after_first_text(data: bytes) -> bytes:
    """The connection dies right after the first event that carries text (no last HTTP chunk)."""
    head, body = data.split(b"\r\n\r\n", 1)
    at = min(body.find(marker) for marker in (b'"content": "Order', b'"text": "Order') if marker in body)
    return head + b"\r\n\r\n" + body[: body.index(b"\n\n", at) + 2]


def replayed(first_stop: str, *, whole: bool) -> Any:
    """Anthropic: a proxy that retried upstream sends the first attempt (its text lost, its
    ``message_delta`` saying ``first_stop``, no ``message_stop``), then the second attempt from
    its ``message_start``: whole, or ending after its first piece of text."""

    def edit(items: list[Any]) -> list[Any]:
        first = json.loads(json.dumps(items[:-1]))
        for i in first:
            if i.get("type") == "content_block_delta":
                i["delta"]["text"] = "Lost first "
            if i.get("type") == "message_delta":
                i["delta"]["stop_reason"] = first_stop
        return [*first, *(items if whole else first_text_only(items))]

    return edit


def terminal_arguments(arguments: str) -> Any:
    """Responses: the terminal event's output lists each call with ``arguments`` (its deltas,
    ``arguments.done`` and ``output_item.done`` say what they said)."""

    def edit(items: list[Any]) -> list[Any]:
        items = json.loads(json.dumps(items))  # the terminal output's items apart from the done ones
        for item in items[-1]["response"]["output"]:
            if item.get("type") == "function_call":
                item["arguments"] = arguments
        return items

    return edit


def said_only_in_the_terminal_output(items: list[Any]) -> list[Any]:
    """Responses: a call only ``output_item.added`` (its arguments ``""``) before the terminal
    event lists it whole: no deltas, no ``arguments.done``, no ``output_item.done``."""
    dropped = ("response.function_call_arguments.delta", "response.function_call_arguments.done")
    calls = {"response.output_item.done"}
    return [
        i
        for i in items
        if i.get("type") not in dropped
        and not (i.get("type") in calls and i["item"].get("type") == "function_call")
    ]


def content_in_message_start(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: every block whole in ``message_start``'s message (a proxy that turns a whole
    answer into a stream), no block events."""
    blocks: dict[int, dict[str, Any]] = {}
    pieces: dict[int, list[str]] = {}
    for i in items:
        if i.get("type") == "content_block_start":
            blocks[i["index"]] = dict(i["content_block"])
        elif i.get("type") == "content_block_delta" and i["delta"]["type"] == "text_delta":
            blocks[i["index"]]["text"] += i["delta"]["text"]
        elif i.get("type") == "content_block_delta" and i["delta"]["type"] == "input_json_delta":
            pieces.setdefault(i["index"], []).append(i["delta"]["partial_json"])
    for n, json_pieces in pieces.items():
        blocks[n]["input"] = json.loads("".join(json_pieces))
    items[0]["message"]["content"] = [blocks[n] for n in sorted(blocks)]
    return [i for i in items if not str(i.get("type")).startswith("content_block")]


def sent_again(kind: str, *, only_deltas: bool = False) -> Any:
    """Responses: the first event of ``kind`` sent again right after it, the same event under
    the same ``sequence_number`` (a proxy that resumed the stream from an event earlier);
    ``only_deltas``: the items said only as ``output_item.added`` and deltas."""

    def edit(p: str, stream: bool, items: list[Any]) -> list[Any]:
        items = deltas_only(p, stream, items) if only_deltas else items
        at = next(n for n, i in enumerate(items) if isinstance(i, dict) and i.get("type") == kind)
        return [*items[: at + 1], json.loads(json.dumps(items[at])), *items[at + 1 :]]

    return edit


# An HTTP date whose year no calendar holds: read as no date (as ``retry-after: soon`` is), the
# policy's backoff waited instead. Before: the date parser's OverflowError escaped the error's
# sorting (``http``: the run ended on the bare exception, never asked again; the SDK: a retried
# "connection" failure).
YEAR_PAST_ANY = "Thu, 03 Dec 999999999999999999999 07:30:00 GMT"


def busy(**headers: str) -> Any:
    return lambda p, s: Reply(status=503, body=b"busy", headers=headers)


CASES = [
    # -- legitimate variants: accepted with the answer ----------------------------------------
    Round4(
        "finish_before_the_content_then_the_terminal_event",
        lambda p, s: [Reply.calls(ORDER), Reply.text(ANSWER, edit=lambda i: finish_first(p, s, i))],
        True,
        at=("chat/stream/http", "anthropic/stream/http", "anthropic/stream/sdk"),
    ),
    Round4(
        "an_empty_piece_after_the_finish_then_the_end",
        lambda p, s: [
            Reply.calls(ORDER, edit=lambda i: empty_after_the_finish(p, s, i)),
            Reply.text(ANSWER, edit=lambda i: empty_after_the_finish(p, s, i)),
        ],
        True,
        at=("chat/stream/http", "anthropic/stream/http"),
    ),
    Round4(
        "anthropic_every_block_whole_in_message_start",
        lambda p, s: [
            Reply.calls(ORDER, edit=lambda i: content_in_message_start(p, s, i)),
            Reply.text(ANSWER, edit=lambda i: content_in_message_start(p, s, i)),
        ],
        True,
        at=("anthropic/stream/http", "anthropic/stream/sdk"),
    ),
    Round4(
        "anthropic_replayed_whole_after_a_first_attempt_cut_at_max_tokens",
        lambda p, s: [Reply.calls(ORDER), Reply.text(ANSWER, edit=replayed("max_tokens", whole=True))],
        True,
        at=("anthropic/stream/http", "anthropic/stream/sdk"),
    ),
    Round4(
        "responses_terminal_output_lists_the_same_arguments_written_otherwise",
        lambda p, s: [
            Reply.calls(ORDER, edit=terminal_arguments('{"order_id":"\\u0037\\u00342"}')),
            Reply.text(ANSWER),
        ],
        True,
        at=("responses/stream/http", "responses/stream/sdk"),
    ),
    Round4(
        "responses_call_said_only_in_the_terminal_output",
        lambda p, s: [Reply.calls(ORDER, edit=said_only_in_the_terminal_output), Reply.text(ANSWER)],
        True,
        at=("responses/stream/http",),
    ),
    Round4(
        "responses_a_text_delta_sent_again_said_only_as_deltas",
        lambda p, s: [
            Reply.calls(ORDER),
            Reply.text(
                ANSWER, edit=lambda i: sent_again("response.output_text.delta", only_deltas=True)(p, s, i)
            ),
        ],
        True,
        at=("responses/stream/http", "responses/stream/sdk"),
    ),
    Round4(
        "responses_an_argument_delta_sent_again",
        lambda p, s: [
            Reply.calls(ORDER, edit=lambda i: sent_again("response.function_call_arguments.delta")(p, s, i)),
            Reply.text(ANSWER),
        ],
        True,
        at=("responses/stream/http",),
    ),
    Round4(
        "503_retry_after_a_date_past_any_year_then_good",
        lambda p, s: [busy(**{"retry-after": YEAR_PAST_ANY})(p, s), Reply.calls(ORDER), Reply.text(ANSWER)],
        True,
        requests=3,
        at=("chat/whole/http", "anthropic/stream/sdk", "responses/whole/sdk"),
    ),
    # -- faults: a typed stop, a non-zero exit -----------------------------------------------
    Round4(
        "503_retry_after_a_date_past_any_year_forever",
        twice(busy(**{"retry-after": YEAR_PAST_ANY})),
        False,
        ("HTTP 503", "busy", "gave up"),
        at=("chat/whole/http", "responses/stream/sdk"),
    ),
    Round4(
        "responses_terminal_output_lists_other_arguments",
        twice(lambda p, s: Reply.calls(ORDER, edit=terminal_arguments('{"order_id": "743"}'))),
        False,
        ("are listed as", "gave up"),
        at=("responses/stream/http", "responses/stream/sdk"),
    ),
    Round4(
        "finish_before_the_content_then_the_end",
        twice(lambda p, s: Reply.text(ANSWER, edit=lambda i: finish_first_then_end(p, s, i))),
        False,
        ("gave up", "after"),
        at=("chat/stream/http", "chat/stream/sdk", "anthropic/stream/http", "anthropic/stream/sdk"),
    ),
    Round4(
        "finish_before_the_content_then_cut",
        twice(
            lambda p, s: Raw(content=ANSWER, edit=lambda i: finish_first(p, s, i), wire=cut_after_first_text)
        ),
        False,
        ("gave up",),
        at=("chat/stream/http", "anthropic/stream/sdk"),
    ),
    Round4(
        "finish_between_two_calls_then_the_end",
        twice(
            lambda p, s: Reply.calls(ORDER, OTHER, edit=lambda i: finish_between_two_calls_then_end(p, s, i))
        ),
        False,
        ("gave up",),
        at=("chat/stream/http", "anthropic/stream/sdk"),
    ),
    Round4(
        "anthropic_replayed_after_its_stop_reason_then_the_end",
        twice(lambda p, s: Reply.text(ANSWER, edit=replayed("end_turn", whole=False))),
        False,
        ("gave up", "without message_stop"),
        at=("anthropic/stream/http", "anthropic/stream/sdk"),
    ),
]

PARAMS = round_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round10_fault_ends_honestly_and_a_variant_is_accepted(
    tmp_path: Any, case: Round4, provider: str, mode: str, transport: str
) -> None:
    code, out, requests, took = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    assert_outcome(case, code, out, requests, took)


@pytest.mark.parametrize("provider", ["openai-chat", "anthropic"])
def test_the_command_in_its_own_process_refuses_a_stream_cut_after_an_early_finish(
    tmp_path: Path, provider: str
) -> None:
    """``python -m tether.cli run`` with the agent file: the stream whose finish came first and
    which then ended after its first piece of text exits 7 ``model_error`` after its retry (before:
    0, ``accepted`` with the piece); in order, the same answer exits 0 with the whole of it."""
    early = Reply.text(ANSWER, edit=lambda i: finish_first_then_end(provider, True, i))
    for replies, code, stop in (([early, early], 7, "model_error"), ([Reply.text(ANSWER)], 0, "accepted")):
        with SERVERS[provider](scripted(replies)) as server:
            model = {"provider": provider, "name": "m-1", "base_url": server.url, "streaming": True}
            path = write_agent(tmp_path, {**model, "timeout_s": 10, "max_retries": 1})
            argv = [
                sys.executable,
                "-m",
                "tether.cli",
                "run",
                "Why is 742 open?",
                "--agent",
                str(path),
                "--json",
            ]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            out = json.loads(done.stdout.strip().splitlines()[-1])
            assert (done.returncode, out["stop_reason"]) == (code, stop), done.stderr[-2000:]
            assert len(server.bodies()) == len(replies) and "Traceback" not in done.stdout + done.stderr
        assert out["answer"] == (ANSWER if code == 0 else None), out


# -- a server that reports no usage ---------------------------------------------------------------


def no_usage(items: list[Any]) -> list[Any]:
    """Every ``usage`` left out (a proxy that drops it; an old local server that never sends it)."""
    return walk(items, lambda d: d.pop("usage", None))


def only_prompt_counted(items: list[Any]) -> list[Any]:
    """Every completion count left out, the prompt's kept (and the total, from which the
    completion would be read as what it leaves beyond the prompt: round 40)."""
    return walk(
        items, lambda d: [d.pop(k, None) for k in ("completion_tokens", "output_tokens", "total_tokens")]
    )


def run_agent(tmp_path: Path, model: dict[str, Any]) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """``tether run --agent`` with ``model``: exit code, JSON summary, its ``model_response`` events."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", "Why is 742 open?", "--agent", str(write_agent(tmp_path, model)), "--json"])
    summary = json.loads(out.getvalue().strip().split("\n")[-1])
    events = [json.loads(line) for line in Path(summary["trace"]).read_text().splitlines()]
    return code, summary, [e for e in events if e["kind"] == "model_response"]


WHERE = [("openai-chat", False, "http"), ("anthropic", True, "sdk"), ("openai-responses", True, "http")]


@pytest.mark.parametrize(("provider", "stream", "transport"), WHERE)
def test_a_server_that_reports_no_usage_is_counted_by_estimate_and_its_budgets_trip(
    tmp_path: Path, provider: str, stream: bool, transport: str
) -> None:
    """Six turns of calls, then the answer, from a server that never reports usage, under a token
    budget two turns pass: the run stops ``budget`` (before: it counted 0 tokens and $0, so
    neither budget ever tripped, and it ran to the end ``accepted``), each turn's
    ``model_response`` naming the counts it estimated. Under a budget it does not reach, the
    same answer is accepted; a server that reports its counts keeps them, none estimated."""
    both, completion = ["prompt_tokens", "completion_tokens"], ["completion_tokens"]
    turns = [
        Reply.calls(("read_order", json.dumps({"order_id": str(742 + n)})), edit=no_usage) for n in range(6)
    ]
    model: dict[str, Any] = {"provider": provider, "name": "m-1", "streaming": stream, "transport": transport}
    model.update(max_retries=0, timeout_s=5, limits={"max_tokens": 150, "final_turn_on_budget": False})
    with SERVERS[provider](scripted([*turns, Reply.text(ANSWER, edit=no_usage)])) as server:
        code, out, responses = run_agent(tmp_path, {**model, "base_url": server.url})
        assert (code != 0, out["stop_reason"]) == (True, "budget"), out
        assert 2 <= len(server.bodies()) < 7 and out["tokens"] > 150, out
        assert all(r["usage_estimated"] == both for r in responses), responses
    model["limits"] = {"max_tokens": 100_000}
    for edit, estimated in ((no_usage, both), (only_prompt_counted, completion), (None, None)):
        replies = [Reply.calls(ORDER, edit=edit), Reply.text(ANSWER, edit=edit)]
        with SERVERS[provider](scripted(replies)) as server:
            code, out, responses = run_agent(tmp_path, {**model, "base_url": server.url})
        assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
        assert [r.get("usage_estimated") for r in responses] == [estimated] * 2, responses
        assert all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 for r in responses), responses
        if edit is None:  # counted as reported (the servers' 100 + 10 a turn), not estimated
            assert out["tokens"] == 220, out


# -- a fallback chain whose every model fails otherwise ---------------------------------------------


def chain(*urls: str, **limits: Any) -> dict[str, Any]:
    """An agent file's model: chat, then Anthropic (``http``), then Responses (streamed), each at
    its URL, each asked once more on what may pass."""
    each: dict[str, Any] = {"max_retries": 1, "timeout_s": 5}
    second = {"provider": "anthropic", "name": "m-b", "base_url": urls[1], "transport": "http", **each}
    third = {"provider": "openai-responses", "name": "m-c", "base_url": urls[2], "streaming": True, **each}
    model = {"provider": "openai-chat", "name": "m-a", "base_url": urls[0], "fallback": [second, third]}
    return {**model, **each, "limits": {"deadline_s": 30, "final_turn_on_budget": False, **limits}}


TOO_LONG = Reply(status=503, body=b"down for the night", headers={"retry-after": "86400"})
BAD_KEY = Reply(
    status=401,
    error_body={"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
)


def test_a_fallback_chain_whose_every_model_fails_otherwise_ends_naming_each(tmp_path: Path) -> None:
    """A 503 whose wait is too long (final at once), a 401 (final), a stream cut before its
    terminal event (asked twice): the run ends ``model_error`` naming every model's error, one
    LLM call counted, each server asked as its failure warrants; with the last model answering
    instead, the run is accepted, each answer saying which models failed before it."""
    cut = Reply.text(ANSWER, cut="before_finish")
    servers = (SERVERS["openai-chat"], SERVERS["anthropic"], SERVERS["openai-responses"])
    scripts = ([TOO_LONG], [BAD_KEY], [cut, cut])
    with contextlib.ExitStack() as stack:
        up = [
            stack.enter_context(kind(scripted(script))) for kind, script in zip(servers, scripts, strict=True)
        ]
        code, out, _ = run_agent(tmp_path, chain(*(s.url for s in up)))
        asked = [len(s.bodies()) for s in up]
    assert (code, out["stop_reason"], out["llm_calls"], asked) == (7, "model_error", 1, [1, 1, 2]), out
    for said in ("every model failed", "m-a", "Retry-After too long", "m-b", "HTTP 401", "m-c", "gave up"):
        assert said in out["message"], out["message"]
    scripts = ([TOO_LONG], [BAD_KEY], [Reply.calls(ORDER), Reply.text(ANSWER)])
    with contextlib.ExitStack() as stack:
        up = [
            stack.enter_context(kind(scripted(script))) for kind, script in zip(servers, scripts, strict=True)
        ]
        code, out, responses = run_agent(tmp_path, chain(*(s.url for s in up)))
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert [len(r.get("fallback_from", ())) for r in responses] == [2, 0], responses


def test_a_token_budget_counts_across_the_models_of_a_fallback_chain(tmp_path: Path) -> None:
    """The first model answers a turn (110 tokens) and then fails (a 503 whose wait is too long);
    the second answers the next turn (110): a budget of 200 tokens stops the run after it,
    counted across both (and never reaching the third model)."""
    first = [Reply.calls(ORDER), TOO_LONG]
    second = [Reply.calls(("read_order", '{"order_id": "743"}')), Reply.text(ANSWER)]
    servers = (SERVERS["openai-chat"], SERVERS["anthropic"], SERVERS["openai-responses"])
    with contextlib.ExitStack() as stack:
        up = [
            stack.enter_context(kind(scripted(script)))
            for kind, script in zip(servers, (first, second, []), strict=True)
        ]
        code, out, responses = run_agent(tmp_path, chain(*(s.url for s in up), max_tokens=200))
        asked = [len(s.bodies()) for s in up]
    assert (code != 0, out["stop_reason"], out["tokens"], asked) == (True, "budget", 220, [2, 1, 0]), out
    assert [r["model"] for r in responses] == ["fake-model", "m-b"], responses


def delta_without_usage(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: ``message_delta`` without its ``usage`` (the answer's output count): only
    ``message_start``'s count so far (1 token) is left."""
    return [{**i, "usage": None} if i.get("type") == "message_delta" else i for i in items]


@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_an_anthropic_stream_whose_message_delta_lost_its_count_is_not_counted_as_one_token(
    tmp_path: Path, transport: str
) -> None:
    """Each turn's ``message_delta`` leaves out the output count: the answer's completion is
    estimated and named (before: ``message_start``'s placeholder, 1 token a turn, was counted,
    however long the answer); the input side ``message_start`` reported is kept (100 a turn).
    With the count there, it is taken as said (10 a turn), none estimated."""
    for edit, estimated in ((delta_without_usage, ["completion_tokens"]), (None, None)):
        case = Round4("message_delta_without_usage", good(edit=edit), True)
        code, out, requests, _ = run_case(tmp_path, "anthropic", case, "stream", transport, servers=SERVERS4)
        assert (code, out["stop_reason"], requests, out["answer"]) == (0, "accepted", 2, ANSWER), out
        events = [json.loads(line) for line in Path(out["trace"]).read_text().splitlines()]
        responses = [e for e in events if e["kind"] == "model_response"]
        assert [r.get("usage_estimated") for r in responses] == [estimated] * 2, responses
        assert [r["prompt_tokens"] for r in responses] == [100, 100], responses
        completion = [r["completion_tokens"] for r in responses]
        assert completion == [10, 10] if edit is None else all(c > 1 for c in completion), completion
