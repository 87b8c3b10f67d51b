"""Model faults, round twenty-six: held-out shapes driven as the other rounds are (an agent file
naming ``model.provider``, ``tether run`` in process, streamed and whole, over the SDK transport
and plain httpx) against real servers on 127.0.0.1 speaking chat completions, the Responses API
and the Anthropic Messages API. This round's answers say which part is the answer in a way the
two readers (whole and streamed) took differently, or say how they ended after they ended.

Fixed here:

- a chat answer whose choices have no usable ``index`` (``[0]``, ``-1``): a whole answer took
  the first listed and accepted it (its calls ran), while the same answer streamed ended
  "without a finish reason". Both readers now own one rule (``_openai._once``): a choice
  without a usable index is never the answer's; none with one is an unusable answer, retried;
- a chat answer (or one chunk) listing two choices under one index: a stream ran their texts
  together, a whole answer took the first. Garbled, retried, for both;
- an Anthropic ``message_delta`` after ``message_stop`` (a proxy that reorders the last two
  events): its stop reason was never read, so a turn of calls ran with no stop reason (even one
  cut at ``max_tokens``), while a text-only turn ended ``model_error``. The stop reason after
  ``message_stop`` is read now, and nothing else after it (``_anthropic._stop_said``): a normal
  end is accepted, ``max_tokens`` ends ``truncated``, the calls never run;
- a Responses ``response.created`` again under the response's own id, followed by only the
  events after what had been said (a proxy that resends the tail): the tail was read as the
  whole answer (the text before it lost). The same response begun again must begin again every
  item it had said (``_said._Said.lacks``); else the stream is garbled, retried;
- events that carry ``id:`` fields, some sent again under their ids with the same data (a proxy
  that resumed from a ``Last-Event-ID`` it misjudged): their text or arguments were read twice
  (a chat call's arguments then no JSON, an Anthropic call lost). An event sent again under its
  own id is read once (``_sse._Resent``), as a Responses event under its ``sequence_number``
  is; an id given to two different events (every event under the completion's id) tells no
  event apart from then on, so equal pieces of text under it are each read.

Probed, all already honest; pinned here so they stay so: an Anthropic ``stop_sequence`` stop
with whole ``tool_use`` blocks and a chat ``finish_reason: "stop"`` with tool calls (accepted,
the calls run, as OpenAI-compatible servers send them); a cached count above the prompt count
(accepted; priced no lower than the prompt, ``Price.cost``); a negative reasoning count (an
unusable answer, retried); a tool name of 50,000 characters or one with control characters
(the call is rejected as an unknown tool, never run; the run exits non-zero).

Left alone (a limit): what follows a terminal event (``[DONE]``, ``message_stop`` after the stop
reason, ``response.completed``) is not read, an error event included: a server may hold the
body open after it, and the answer the terminal event said was whole stands.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, Case, Make, case_params, good, only, run_case, sse
from test_faults_round24 import ends_as_its_case_says, faulty_call

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

C, A, R = ("openai-chat",), ("anthropic",), ("openai-responses",)
STREAM = ("stream",)


def choice_index(value: Any) -> Any:
    """Chat: every choice numbered ``value``."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        for i in items:
            for c in i.get("choices") or () if isinstance(i, dict) else ():
                c["index"] = value
        return items

    return edit


def twin_choice(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Chat: every choice listed twice under its index, the second's text another."""
    for i in items:
        if isinstance(i, dict) and i.get("choices"):
            twin = copy.deepcopy(i["choices"][0])
            for part in (twin.get("delta"), twin.get("message")):
                if isinstance(part, dict) and part.get("content"):
                    part["content"] = "X" + part["content"]
            i["choices"].append(twin)
    return items


def stop_reason(value: str) -> Any:
    """The stop reason (Anthropic) or finish reason (chat) said as ``value``."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        for i in items:
            if not isinstance(i, dict):
                continue
            if i.get("type") == "message_delta":
                i["delta"]["stop_reason"] = value
            elif p == "anthropic" and "stop_reason" in i:
                i["stop_reason"] = value
            for c in i.get("choices") or ():
                if c.get("finish_reason"):
                    c["finish_reason"] = value
        return items

    return edit


def stop_before_delta(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Anthropic: ``message_stop`` before ``message_delta``."""
    delta = next(i for i in items if i.get("type") == "message_delta")
    stop = next(i for i in items if i.get("type") == "message_stop")
    return [*(i for i in items if i is not delta and i is not stop), stop, delta]


def max_tokens_after_stop(p: str, s: bool, items: list[Any]) -> list[Any]:
    return stop_before_delta(p, s, stop_reason("max_tokens")(p, s, items))


def tail_again(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Responses: after the first item's ``output_item.done``, ``response.created`` again under
    the response's id, then only the events after that item, unnumbered (a proxy that resends
    the tail); the terminal output left empty (the stream says it all)."""
    at = next(k for k, i in enumerate(items) if i.get("type") == "response.output_item.done") + 1
    tail = [{k: v for k, v in i.items() if k != "sequence_number"} for i in items[at:]]
    again = {k: v for k, v in copy.deepcopy(items[0]).items() if k != "sequence_number"}
    tail[-1]["response"]["output"] = []
    return [*items[:at], again, *tail]


def text_tail_again(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Responses, a text answer: ``response.created`` again under its id after the first text
    delta, then only the deltas after it and the ends (no part's done event, the done item and
    the terminal output listing no text: the stream says it all)."""
    first = next(k for k, i in enumerate(items) if i.get("type") == "response.output_text.delta") + 1
    for i in items:
        if i.get("type") == "response.output_item.done":
            i["item"]["content"] = []
        if i.get("type") in ("response.output_text.done", "response.content_part.done"):
            i["type"] = "response.ping"  # no part's done event: its text would say it all
    items[-1]["response"]["output"] = []
    tail = [{k: v for k, v in i.items() if k != "sequence_number"} for i in items[first:]]
    again = {k: v for k, v in copy.deepcopy(items[0]).items() if k != "sequence_number"}
    return [*items[:first], again, *tail]


def usage_edit(fn: Any) -> Any:
    """Every usage object the answer carries, changed by ``fn(provider, usage)``."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        def walk(v: Any) -> None:
            if isinstance(v, dict):
                if isinstance(v.get("usage"), dict):
                    fn(p, v["usage"])
                for x in v.values():
                    walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)

        walk(items)
        return items

    return edit


def cached_over_prompt(p: str, u: dict[str, Any]) -> None:
    if u.get("prompt_tokens"):
        u["prompt_tokens_details"] = {"cached_tokens": u["prompt_tokens"] + 500}
    elif u.get("input_tokens"):
        u["input_tokens_details"] = {"cached_tokens": u["input_tokens"] + 500}


def negative_reasoning(p: str, u: dict[str, Any]) -> None:
    details = "completion_tokens_details" if p == "openai-chat" else "output_tokens_details"
    u[details] = {"reasoning_tokens": -5}


def text_twice(edit: Any) -> Make:
    """The answer's text, changed by ``edit``, twice (a retry), then the answer."""

    def make(p: str, stream: bool) -> list[Reply]:
        reply = Reply.text(ANSWER, edit=lambda items: edit(p, stream, items))
        return [reply, reply, Reply.text(ANSWER)]

    return make


def preamble_and_call(edit: Any) -> Make:
    """Text and the tool call in one turn, changed by ``edit``, twice (a retry), then the answer."""

    def make(p: str, stream: bool) -> list[Reply]:
        reply = Reply(content="Let me look.", tool_calls=(ORDER,), edit=lambda items: edit(p, stream, items))
        return [reply, reply, Reply.text(ANSWER)]

    return make


def with_ids(p: str, items: list[Any], ids: list[str]) -> list[Any]:
    """Each event under the ``id:`` at its place in ``ids``."""
    pairs = zip(ids, items, strict=True)
    return [b"id: " + n.encode() + b"\n" + sse(p, i) if isinstance(i, dict) else i for n, i in pairs]


def resent_after_ids(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Every event under an ``id:`` of its own; after the third, the second and third sent again
    under their ids (a proxy that resumed from a ``Last-Event-ID`` it misjudged)."""
    wired = with_ids(p, items, [f"ev-{n}" for n in range(len(items))])
    return [*wired[:3], *wired[1:3], *wired[3:]]


def one_id_for_all(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Every event under the same ``id:`` (the completion's), the answer's text streamed in
    pieces where two pieces in a row are the same text."""
    return with_ids(p, items, ["cmpl-1"] * len(items))


def echoing(p: str, stream: bool) -> list[Reply]:
    """The call, then a text of equal pieces (``chunks`` cuts it in equal runs), both with
    ``one_id_for_all``."""
    edit = lambda items: one_id_for_all(p, stream, items)  # noqa: E731
    return [Reply.calls(ORDER, edit=edit), Reply.text("ha " * 8, chunks=8, edit=edit)]


ANY = ("openai-chat", "openai-responses")
CASES = [
    # -- fixed: a typed stop, a non-zero exit, the call never run ----------------------------
    Case("the_only_choice_indexed_by_a_list", only(C, text_twice(choice_index([0]))), False,
         ("usable index", "gave up")),
    Case("the_call_choice_indexed_negative", only(C, faulty_call(choice_index(-1))), False,
         ("usable index", "gave up")),
    Case("two_choices_under_one_index", only(C, text_twice(twin_choice)), False,
         ("two choices under one index", "gave up")),
    Case("a_call_choice_listed_twice", only(C, faulty_call(twin_choice)), False,
         ("two choices under one index", "gave up")),
    Case("max_tokens_said_after_message_stop", only(A, faulty_call(max_tokens_after_stop)), False,
         ("max_tokens", "were not run"), modes=STREAM, stop="truncated"),
    Case("the_same_response_begun_again_with_its_tail", only(R, preamble_and_call(tail_again)), False,
         ("stream_unreadable", "began again", "gave up"), modes=STREAM),
    Case("the_same_response_begun_again_mid_text", only(R, text_twice(text_tail_again)), False,
         ("stream_unreadable", "began again", "gave up"), modes=STREAM),
    # -- fixed: accepted with the same answer (a text-only turn was model_error) ---------------
    Case("message_stop_before_message_delta", only(A, good(edit=stop_before_delta)), True, modes=STREAM),
    Case("events_resent_under_their_ids", good(edit=resent_after_ids), True, modes=STREAM),
    # -- pinned quirks: accepted with the same answer ---------------------------------------
    Case("a_stop_sequence_stop_with_whole_calls", only(A, good(edit=stop_reason("stop_sequence"))), True),
    Case("a_chat_stop_finish_with_calls", only(C, good(edit=stop_reason("stop"))), True),
    Case("a_cached_count_over_the_prompt", only(ANY, good(edit=usage_edit(cached_over_prompt))), True),
    # -- pinned faults -----------------------------------------------------------------------
    Case("a_negative_reasoning_count", only(ANY, faulty_call(usage_edit(negative_reasoning))), False,
         ("token count of -5", "gave up")),
]  # fmt: skip

assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(CASES))
def test_a_round26_fault_ends_honestly_and_a_quirk_is_accepted(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    ends_as_its_case_says(tmp_path, case, provider, mode, transport)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(
    [Case("one_id_for_every_event", echoing, True, modes=STREAM)]))  # fmt: skip
def test_an_id_given_to_every_event_tells_no_event_apart(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    """A server that gives every event one ``id:``: equal pieces of text under it are each read
    (the id names no event), not taken for one sent again."""
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, transport)
    assert (code, out["stop_reason"], requests, out["answer"]) == (0, "accepted", 2, "ha " * 8), out


def named(name: str) -> Make:
    return lambda p, s: [Reply.calls((name, ORDER[1])), Reply.text(ANSWER)]


NAMES = [
    Case("a_tool_name_of_50000_characters", named("read_order" * 5000), False),
    Case("a_tool_name_with_control_characters", named("read_order\x1b[2J\nINFO all clear"), False),
]


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(NAMES))
def test_a_call_to_a_name_never_offered_is_rejected_and_never_runs(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    """A name that is no offered tool's (however long, whatever it holds) is an unknown tool:
    the call is rejected, never run, and the run exits non-zero; the model's answer after it
    stands."""
    code, out, _, _ = run_case(tmp_path, provider, case, mode, transport)
    assert code != 0 and out["answer"] == ANSWER, out
    assert [c["status"] for c in out["calls"]] == ["rejected"], out
    assert "unknown tool" in out["calls"][0]["reason"], out
