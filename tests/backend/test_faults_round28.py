"""Model faults, round twenty-eight: held-out shapes driven as the other rounds are (an agent
file naming ``model.provider``, ``tether run`` in process, streamed and whole, over the SDK
transport and plain httpx) against real servers on 127.0.0.1 speaking chat completions, the
Responses API and the Anthropic Messages API. This round's answers say their text in a field,
a part, a status or a word the readers took at its face.

Fixed here:

- a chat content part of a kind that is no answer text (Mistral's ``thinking`` part, a
  ``reasoning`` part with a ``text`` of its own), whole or streamed: its text was joined into
  the accepted answer (the model's hidden reasoning shown as its answer, exit 0). Only parts of
  a text kind (``text``, ``output_text``, none named) are the answer's (``_content.parts_text``);
- a text field holding another JSON value than a string (an object, as OpenAI's Assistants API
  writes its text, ``{"value": ..., "annotations": []}``; a number; ``true``; a list): an
  Anthropic whole answer was accepted as the value's Python ``repr`` (``"{'value': …}"``,
  ``"True"``), a chat answer's ``true`` as ``"True"`` (streamed: ``"TrueTrueTrue"``), where the
  same value streamed from Anthropic, or in a Responses answer, was refused. Unusable now,
  retried, on every protocol (``_content.text_of``);
- a ``206 Partial Content`` (a cache or proxy that answers with a range of an answer no range
  was asked for) was read as the answer: the tail of a chat stream, from an event boundary on,
  was accepted as the whole answer (its first words lost, exit 0). A 206, or a 226 (a delta of
  an answer), is unusable now, retried, on every protocol and transport (``_backend._PARTIAL``);
- a chat stream whose last chunk gives the whole ``message`` beside its finish (a server that
  ends the stream with the message whole, after its deltas said it): its text was added again,
  the answer doubled and accepted. Said already, it adds nothing now; one that says other text
  or other calls than the deltas did is an unreadable stream, retried (``_openai._Choice.repeated``);
- an Anthropic stream whose ``message_start`` holds the blocks whole and whose block events then
  say them too (a proxy that gives the message whole and streams it as well): each block was
  read twice, the answer doubled and accepted. A block the events begin again at the index of
  one ``message_start`` held is read once where the two say it alike, and is an unreadable
  stream where they differ (``_anthropic._Blocks.settled``);
- a Responses output that lists a message of another role than the assistant's (a proxy that
  echoes the user's input into the output): its text was joined into the answer. Only the
  assistant's messages are the answer's now (``_responses._parse``);
- an ``error`` object that says nothing (every field ``null``: a translating proxy that writes
  every field of its schema) beside a good answer, whole or in every stream event, on every
  protocol: the answer was refused as an error and retried to ``model_error``. An error that
  says nothing is none (``_failures.is_error``), as ``"error": null`` already was;
- a Responses ``status`` spelled in capitals: ``Completed`` beside ``incomplete_details`` (the
  answer cut at ``max_output_tokens``) passed for a normal end, the cut answer accepted (exit 0);
  a stale ``IN_PROGRESS`` in ``response.completed`` was an unknown end (``model_error``). Read
  as the API spells it now (``_responses._status``);
- a finish or stop reason spelled in another case style (``endTurn``, ``toolCalls``,
  ``tool-calls``, ``END TURN``, `` STOP ``, as translating proxies and SDKs of other languages
  write them): an unknown finish, the normal answer refused and a turn's calls never run
  (``model_error`` at once). Read as the table spells it now (``_base._spelled``); a word the
  table lacks is still unknown.

Probed, all already honest; pinned here so they stay so: a ``205 Reset Content`` and a ``101
Switching Protocols`` answer (retried, then a model error); a Responses answer whose text is
no string (refused, as before).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, Case, Make, case_params, good, only, run_case
from test_faults_round4 import SERVERS4, Raw, head_body
from test_faults_round15 import walk_dicts
from test_faults_round26 import text_twice

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

C, A, R = ("openai-chat",), ("anthropic",), ("openai-responses",)
STREAM, WHOLE = ("stream",), ("whole",)


def ends_as_its_case_says(tmp_path: Path, case: Case, provider: str, mode: str, transport: str) -> None:
    """Run ``case`` by the agent file (a server that can rewrite its answers on the wire): a
    quirk is accepted with the answer, its call run; a fault ends with the case's stop reason
    and words, non-zero, retried once where it "gave up", its answer never accepted."""
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    if case.ok:
        assert (code, out["stop_reason"], out["answer"], requests) == (0, "accepted", ANSWER, 2), out
        assert [c["status"] for c in out["calls"]] == ["ok"], out
        return
    assert code != 0 and out["stop_reason"] == (case.stop or "model_error"), out
    assert requests == (2 if "gave up" in case.said else 1), out
    for piece in case.said:
        assert piece in out["message"], out["message"]
    assert "Traceback" not in out["message"]


def each_choice(p: str, s: bool, items: list[Any], fn: Callable[[dict[str, Any]], None]) -> list[Any]:
    """Chat: ``fn`` on each choice's ``delta`` (streamed) or ``message`` (whole)."""
    for i in items:
        for c in i.get("choices") or () if isinstance(i, dict) else ():
            if isinstance(c.get("delta" if s else "message"), dict):
                fn(c["delta" if s else "message"])
    return items


def thinking_parts(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Chat: each piece of text as parts: a Mistral ``thinking`` part, a ``reasoning`` part
    with a ``text`` of its own, then the text part."""

    def fix(w: dict[str, Any]) -> None:
        if isinstance(w.get("content"), str) and w["content"]:
            w["content"] = [
                {"type": "thinking", "thinking": [{"type": "text", "text": "I think it is closed. "}]},
                {"type": "reasoning", "text": "HIDDEN "},
                {"type": "text", "text": w["content"]},
            ]

    return each_choice(p, s, items, fix)


def text_as(value: Callable[[str], Any]) -> Callable[[str, bool, list[Any]], list[Any]]:
    """Every text field of the answer (chat content, an Anthropic text block or delta, a
    Responses text part, delta or done text) holding ``value(text)`` in place of the text."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        def fix(v: dict[str, Any]) -> None:
            kind = v.get("type")
            texts = ("text", "output_text", "text_delta", "response.output_text.done")
            if kind in texts and isinstance(v.get("text"), str) and v["text"]:
                v["text"] = value(v["text"])
            if kind == "response.output_text.delta":
                v["delta"] = value(v["delta"])
            if p == "openai-chat" and isinstance(v.get("content"), str) and v["content"]:
                v["content"] = value(v["content"])

        return walk_dicts(items, fix)

    return edit


def finish_spelled(calls: str, final: str) -> Callable[[str, bool, list[Any]], list[Any]]:
    """The finish (chat) or stop reason (Anthropic) written ``calls`` in a turn of calls,
    ``final`` in the answer's."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        for i in items:
            if not isinstance(i, dict):
                continue
            for c in i.get("choices") or ():
                if c.get("finish_reason"):
                    c["finish_reason"] = calls if c["finish_reason"] == "tool_calls" else final
            holder = i.get("delta") if i.get("type") == "message_delta" else i
            if p == "anthropic" and isinstance(holder, dict) and holder.get("stop_reason"):
                holder["stop_reason"] = calls if holder["stop_reason"] == "tool_use" else final
        return items

    return edit


def whole_message_last(differs: bool) -> Callable[[str, bool, list[Any]], list[Any]]:
    """Chat, streamed: the finish chunk gives the whole message (its text, its calls) in place of
    a delta, as the deltas before it said it (or, ``differs``, with other text)."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        chunks = [i for i in items if isinstance(i, dict) and i.get("choices")]
        text = "".join((c.get("delta") or {}).get("content") or "" for i in chunks for c in i["choices"])
        calls: dict[int, dict[str, Any]] = {}
        for i in chunks:
            for tc in (i["choices"][0].get("delta") or {}).get("tool_calls") or ():
                call = calls.setdefault(
                    tc["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] = tc.get("id") or call["id"]
                for k in ("name", "arguments"):
                    call["function"][k] += tc["function"].get(k) or ""
        for i in chunks:
            c = i["choices"][0]
            if c.get("finish_reason"):
                c.pop("delta", None)
                said = ("Order 742 is closed." if differs else text) or None
                c["message"] = {
                    "role": "assistant",
                    "content": said,
                    "tool_calls": list(calls.values()) or None,
                }
        return items

    return edit


def calls_only_whole(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Chat, streamed, a preamble and a call: the call not in any delta, only in the finish chunk's
    whole message (with the preamble the deltas said)."""
    items = whole_message_last(False)(p, s, items)
    for i in items:
        for c in i.get("choices") or () if isinstance(i, dict) else ():
            (c.get("delta") or {}).pop("tool_calls", None)
    return items


def preamble_then_answer(edit: Callable[[str, bool, list[Any]], list[Any]]) -> Make:
    """Text and the call in one turn, changed by ``edit``, then the answer."""
    return lambda p, s: [
        Reply(content="Let me look.", tool_calls=(ORDER,), edit=lambda items: edit(p, s, items)),
        Reply.text(ANSWER),
    ]


def null_error(p: str, s: bool, items: list[Any]) -> list[Any]:
    """An ``error`` object of nulls beside the answer: in the whole answer (and a Responses
    terminal response), in every stream event."""
    nulls = {"message": None, "type": None, "code": None, "param": None}
    for i in items:
        if isinstance(i, dict):
            i["error"] = dict(nulls)
            if isinstance(i.get("response"), dict):
                i["response"]["error"] = dict(nulls)
    return items


def status_spelled(status: str) -> Callable[[str, bool, list[Any]], list[Any]]:
    """Responses: the response's status spelled ``status`` (a terminal ``response.incomplete``
    sent as ``response.completed``, its response saying so in that spelling)."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        for i in items:
            if i.get("type") == "response.incomplete":
                i["type"] = "response.completed"
            held = i.get("response") if s else i
            if isinstance(held, dict) and held.get("status") in ("completed", "incomplete"):
                held["status"] = status
        return items

    return edit


def cut_said_completed(p: str, s: bool) -> list[Reply]:
    edit = status_spelled("Completed")
    return [Reply.text(ANSWER, finish_reason="max_output_tokens", edit=lambda items: edit(p, s, items))]


def tail_as_206(data: bytes) -> bytes:
    """The answer (a stream, sent in HTTP chunks) as a ``206 Partial Content`` of its tail: the
    events from the fourth on, with the ``content-range`` they are."""
    head, body = head_body(data)
    whole, rest = b"", body
    while True:
        size, rest = rest.split(b"\r\n", 1)
        if not int(size, 16):
            break
        whole, rest = whole + rest[: int(size, 16)], rest[int(size, 16) + 2 :]
    tail = b"\n\n".join(whole.split(b"\n\n")[3:])
    first, n = len(whole) - len(tail), len(whole)
    kind = b"text/event-stream" if b"event-stream" in head else b"application/json"
    return (
        b"HTTP/1.1 206 Partial Content\r\ncontent-type: %s\r\ncontent-range: bytes %d-%d/%d\r\n"
        b"content-length: %d\r\n\r\n%s" % (kind, first, n - 1, n, len(tail), tail)
    )


def whole_as(status: bytes) -> Callable[[bytes], bytes]:
    """The whole answer (headers and body as they were) under another status line."""
    return lambda data: b"HTTP/1.1 " + status + b"\r\n" + data.split(b"\r\n", 1)[1]


def held_and_streamed(differs: bool) -> Callable[[str, bool, list[Any]], list[Any]]:
    """Anthropic, streamed: ``message_start`` holds every block whole (a proxy that turns a whole
    answer into a stream) and the block events then say them too (or, ``differs``, the held
    text is another)."""

    def edit(p: str, s: bool, items: list[Any]) -> list[Any]:
        blocks: list[dict[str, Any]] = []
        for i in items:
            if i.get("type") == "content_block_start":
                blocks.append({**i["content_block"], "_json": ""})
            elif i.get("type") == "content_block_delta":
                d = i["delta"]
                blocks[-1]["text" if "text" in d else "_json"] += d.get("text") or d.get("partial_json") or ""
        for b in blocks:
            raw = b.pop("_json")
            if b["type"] == "tool_use":
                b["input"] = json.loads(raw)
            elif differs:
                b["text"] = "Order 742 is closed."
        items[0]["message"]["content"] = blocks
        return items

    return edit


def user_echo(p: str, s: bool, items: list[Any]) -> list[Any]:
    """Responses, whole: the output lists the user's message (a proxy that echoes the input)
    before the answer's."""
    echo = {
        "type": "message",
        "id": "msg_in",
        "role": "user",
        "content": [{"type": "output_text", "text": "Why? "}],
    }
    items[0]["output"].insert(0, echo)
    return items


LONG = "Order 742 was closed last week. Order 742 is open again, awaiting part P-17."


def partial(p: str, s: bool) -> list[Reply] | None:
    """A 206 of the stream's tail (its first events lost), or of the whole answer; twice."""
    reply = Raw(content=LONG, chunks=8, wire=tail_as_206 if s else whole_as(b"206 Partial Content"))
    return [reply, reply, Reply.text(ANSWER)]


def status_only(status: bytes) -> Callable[[str, bool], list[Reply]]:
    def make(p: str, s: bool) -> list[Reply]:
        reply = Raw(content=ANSWER, wire=whole_as(status))
        return [reply, reply, Reply.text(ANSWER)]

    return make


def no_content(status: bytes) -> Callable[[str, bool], list[Reply]]:
    reply = Raw(content=ANSWER, wire=lambda d: b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\n\r\n")
    return lambda p, s: [reply, reply, Reply.text(ANSWER)]


# (name, the value for a text, what the message says beyond "no string": a chat content that is
# an object is a part, one without text, so an empty answer there, refused as one)
VALUES: list[tuple[str, Callable[[str], Any], tuple[str, ...]]] = [
    ("an_assistants_text_object", lambda t: {"value": t, "annotations": []}, ("a JSON object",)),
    ("a_number", lambda t: 742, ()),
    ("true", lambda t: True, ()),
]
CASES = [
    # -- fixed: accepted with the answer alone ------------------------------------------------
    Case("thinking_and_reasoning_parts_beside_the_text", only(C, good(edit=thinking_parts)), True),
    Case("finish_in_camel_case", only(C + A, good(edit=finish_spelled("toolCalls", "endTurn"))), True),
    Case("finish_kebab_and_capitals", only(C + A, good(edit=finish_spelled("tool-calls", "END TURN"))),
         True),
    Case("finish_padded", only(C + A, good(edit=finish_spelled(" tool_use\n", " STOP "))), True),
    Case("message_start_holds_the_blocks_the_events_say", only(A, good(edit=held_and_streamed(False))), True,
         modes=STREAM),
    Case("the_output_echoes_the_user_message", only(R, good(edit=user_echo)), True, modes=WHOLE),
    Case("the_whole_message_again_in_the_finish_chunk", only(C, good(edit=whole_message_last(False))), True,
         modes=STREAM),
    Case("a_call_only_in_the_whole_message_after_text", only(C, preamble_then_answer(calls_only_whole)), True,
         modes=STREAM),
    Case("an_error_object_of_nulls_beside_the_answer", good(edit=null_error), True),
    Case("a_responses_status_in_capitals", only(R, good(edit=status_spelled("COMPLETED"))), True),
    Case("a_stale_status_in_capitals", only(R, good(edit=status_spelled("IN_PROGRESS"))), True, modes=STREAM),
    Case("a_cut_answer_said_completed_in_capitals", only(R, cut_said_completed), False,
         ("max_output_tokens",),
         stop="truncated"),
    # -- fixed: a model error, retried once, never accepted ------------------------------------
    Case("another_message_in_the_finish_chunk", only(C, text_twice(whole_message_last(True))), False,
         ("whole message otherwise than its deltas", "gave up"), modes=STREAM),
    Case("message_start_holds_other_text", only(A, text_twice(held_and_streamed(True))), False,
         ("said again otherwise", "gave up"), modes=STREAM),
    Case("a_206_of_part_of_the_answer", partial, False, ("HTTP 206 Partial Content", "gave up")),
    Case("a_226_delta_of_the_answer", status_only(b"226 IM Used"), False, ("HTTP 226 IM Used", "gave up")),
    *(Case(f"text_as_{name}", only(A if said else A + C, text_twice(text_as(value))), False,
           ("no string", *said, "gave up"), modes=WHOLE) for name, value, said in VALUES),
    *(Case(f"streamed_text_as_{name}", only(C, text_twice(text_as(value))), False, ("no string", "gave up"),
           modes=STREAM) for name, value, _ in VALUES[1:]),
    # -- pinned: already honest -------------------------------------------------------------
    *(Case(f"pinned_text_as_{name}", only(A + R, text_twice(text_as(value))), False, ("gave up",),
           modes=STREAM) for name, value, _ in VALUES),
    Case("pinned_responses_text_as_a_number", only(R, text_twice(text_as(VALUES[1][1]))), False, ("gave up",),
         modes=WHOLE),
    Case("pinned_205_reset_content", no_content(b"205 Reset Content"), False, ("gave up",)),
    Case("pinned_101_switching_protocols", status_only(b"101 Switching Protocols\r\nupgrade: h2c"), False,
         ("gave up",)),
]  # fmt: skip

assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(CASES))
def test_a_round28_fault_ends_honestly_and_a_quirk_is_accepted(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    ends_as_its_case_says(tmp_path, case, provider, mode, transport)


def test_a_finish_is_read_however_it_is_spelled_and_an_unknown_word_stays_unknown() -> None:
    from tether.models._base import finish_of

    said = {
        "endTurn": "stop",
        "END TURN": "stop",
        " stop\n": "stop",
        "toolCalls": "tool_calls",
        "tool-calls": "tool_calls",
        "maxOutputTokens": "length",
        "content-filter": "refused",
        "PROHIBITED_CONTENT": "refused",
        "weird_reason": "unknown",
        "stopped": "unknown",
        "": "unknown",
    }
    assert {raw: finish_of(raw) for raw in said} == said


def test_chat_parts_of_a_text_kind_are_the_answer_and_others_are_not() -> None:
    from tether.models._content import parts_text

    parts = [{"type": "thinking", "thinking": "x"}, {"type": "reasoning", "text": "no"}, "a", {"text": "b"}]
    assert parts_text([*parts, {"type": "output_text", "text": "c"}, {"type": "text", "text": "d"}]) == "abcd"
    assert parts_text([{"type": "reasoning", "text": "why"}], any_kind=True) == "why"
    assert parts_text([{"type": "image_url", "image_url": {"url": "x"}}]) is None
    for value in (True, 742, [{"type": "text", "text": {"value": "x"}}]):
        with pytest.raises(Exception, match="no string"):
            parts_text(value)
    assert json.dumps(parts_text("plain")) == '"plain"'
