"""A twelfth round of faults and legitimate variants, driven as the others are (an agent file
naming ``model.provider`` and ``tether run`` in process, ``test_faults_round10.run_agent``)
against real servers on 127.0.0.1 speaking each protocol; the same fault ends the same honest
way on all three.

Characters past U+FFFF split between two deltas at their UTF-16 surrogates (a server whose
strings are UTF-16 cuts an emoji in two, each half escaped in its event's JSON) are whole again
wherever a stream carries them: a Responses answer's text (before: its deltas' halves disagreed
with the text its done item lists, a garbled stream retried to ``model_error``) and a call's
argument deltas (the same, for the arguments it is done with); an Anthropic thinking block's
deltas (before: the block kept the halves, and the next request, which sends it back, failed to
encode: ``model_error`` after the tool had run), as chat text and reasoning already were. A half
with no partner in a call's arguments is refused by the host's gate (``not_utf8``) on every
protocol, the run going on (before: an Anthropic whole answer's input object had it replaced by
U+FFFD and the tool ran with the replaced character; an Anthropic stream's call, refused, then
failed the next request's encoding: ``model_error``); one in a thinking block or a reasoning item
is U+FFFD (before: the next request failed to encode).

A refusal beside tool calls (chat's ``refusal``, a Responses ``refusal`` part) ends the run
``model_refused``, its calls not run, as Anthropic's ``refusal`` stop reason does (before: the
refusal was dropped and the calls ran). Arguments sent as an object that names a key twice are
refused by the gate (``duplicate_key``) as the same text is (before: the last value ran). An
error object whose status code is text (``"code": "503"``, LiteLLM's form) is sorted as the
number: retried for a 5xx (before: final at once). A call whose id an earlier turn's call has
(``toolu_0`` every turn) gets a new one, so a server that refuses repeated ids (as Anthropic's
API does) accepts the next request; a call id another provider gave (``functions.read_order:0``)
goes to Anthropic after a fallback as its API accepts ids, still paired with its result.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS
from test_faults_round10 import run_agent

from tether_testing.fake_server import Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

PROVIDERS = ("openai-chat", "anthropic", "openai-responses")
EMOJI = "\U0001f44d"
EMOJI_ORDER = ("read_order", json.dumps({"order_id": f"742 {EMOJI}"}, ensure_ascii=False))
EMOJI_TEXT = f"Order 742 is open {EMOJI} awaiting part P-17"
THOUGHT = f"Read the order {EMOJI} first."
LONE = ("read_order", '{"order_id": "742\\ud83d"}')  # a half with no partner, as the JSON escape


# -- an edit: every streamed string with a character past U+FFFF cut at its surrogates -------------

# Where each protocol's deltas carry a string: chat text, reasoning and arguments; Anthropic
# text, input JSON and thinking; a Responses delta (text, arguments, reasoning summary).
DELTAS: tuple[tuple[object, ...], ...] = (
    ("choices", 0, "delta", "content"),
    ("choices", 0, "delta", "reasoning_content"),
    ("choices", 0, "delta", "tool_calls", 0, "function", "arguments"),
    ("delta", "text"),
    ("delta", "partial_json"),
    ("delta", "thinking"),
    ("delta",),
)


def _at(event: Any, path: tuple[object, ...]) -> Any:
    for key in path:
        try:
            event = event[key]
        except (KeyError, IndexError, TypeError):
            return None
    return event


def _put(event: Any, path: tuple[object, ...], value: str) -> None:
    for key in path[:-1]:
        event = event[key]
    event[path[-1]] = value


def _halves(text: str) -> tuple[str, str] | None:
    """``text`` cut inside its first character past U+FFFF: (up to its high half, the rest)."""
    for n, ch in enumerate(text):
        if ord(ch) > 0xFFFF:
            v = ord(ch) - 0x10000
            return text[:n] + chr(0xD800 + (v >> 10)), chr(0xDC00 + (v & 0x3FF)) + text[n + 1 :]
    return None


def split_at_surrogates(items: list[Any]) -> list[Any]:
    """Each delta whose string holds an emoji sent as two deltas, the first ending with the
    emoji's high half, the second starting with its low half (each half a ``\\u`` escape in
    its event's JSON); the second delta of a chat call without its id and name, a Responses
    event under a sequence number of its own."""
    out: list[Any] = []
    for event in items:
        for path in DELTAS if isinstance(event, dict) else ():
            text = _at(event, path)
            if isinstance(text, str) and (cut := _halves(text)):
                first, second = json.loads(json.dumps(event)), json.loads(json.dumps(event))
                _put(first, path, cut[0])
                _put(second, path, cut[1])
                if "tool_calls" in path:
                    call = second["choices"][0]["delta"]["tool_calls"][0]
                    call.pop("id", None)
                    call["function"].pop("name", None)
                if "sequence_number" in second:
                    second["sequence_number"] += 10_000
                out += [first, second]
                break
        else:
            out.append(event)
    return out


def model_of(provider: str, url: str, stream: bool) -> dict[str, Any]:
    return {
        "provider": provider,
        "name": "m-1",
        "base_url": url,
        "streaming": stream,
        "transport": "http",
        "max_retries": 1,
        "timeout_s": 5,
    }


def result_sent(request: dict[str, Any]) -> str:
    """The tool result the request sends back (each protocol's form), as text."""
    found: list[str] = []
    for m in request.get("messages") or request.get("input") or ():
        for block in [m, *(m.get("content") if isinstance(m.get("content"), list) else ())]:
            if not isinstance(block, dict):
                continue
            if block.get("role") == "tool" or block.get("type") == "function_call_output":
                found.append(str(block.get("content") or block.get("output")))
            elif block.get("type") == "tool_result":
                found.append(str(block.get("content")))
    assert len(found) == 1, request
    return found[0]


def reasoning_sent(provider: str, request: dict[str, Any]) -> list[str]:
    """The thinking blocks' text (Anthropic) or reasoning items' summaries (Responses) the
    request sends back."""
    if provider == "anthropic":
        blocks = [b for m in request["messages"] if isinstance(m["content"], list) for b in m["content"]]
        return [b["thinking"] for b in blocks if b.get("type") == "thinking"]
    items = [i for i in request.get("input") or () if i.get("type") == "reasoning"]
    return [s["text"] for i in items for s in i["summary"]]


# -- legitimate: an emoji split at its surrogates is whole again -----------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_emoji_split_at_its_surrogates_in_text_arguments_and_thinking_is_whole(
    tmp_path: Path, provider: str
) -> None:
    """Streamed, every emoji of the call's arguments, the turn's thinking (or reasoning) and the
    final text split between two deltas at its surrogates: the run is accepted with the text
    whole, the tool ran with the emoji whole in its arguments (its result sent back says so),
    and the thinking block or reasoning item goes back with it whole (before: a Responses
    answer's text and arguments were a garbled stream, retried to ``model_error``; an Anthropic
    thinking block kept the halves and the next request failed to encode, ``model_error``)."""
    replies = [
        Reply(reasoning=THOUGHT, tool_calls=(EMOJI_ORDER,), edit=split_at_surrogates, chunks=1),
        Reply.text(EMOJI_TEXT, edit=split_at_surrogates, chunks=1),
    ]
    with SERVERS[provider](scripted(replies)) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, True))
        bodies = server.bodies()
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", EMOJI_TEXT, 2), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out
    assert f"742 {EMOJI}" in result_sent(bodies[1]), bodies[1]
    if provider != "openai-chat":  # chat's reasoning is not sent back (``reasoning: drop``)
        assert reasoning_sent(provider, bodies[1]) == [THOUGHT], bodies[1]
    # The same answer unsplit, whole and streamed, is accepted as it was.
    for stream in (False, True):
        plain = [Reply(reasoning=THOUGHT, tool_calls=(EMOJI_ORDER,)), Reply.text(EMOJI_TEXT)]
        with SERVERS[provider](scripted(plain)) as server:
            code, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
            assert f"742 {EMOJI}" in result_sent(server.bodies()[1])
        assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", EMOJI_TEXT), out


# -- a half with no partner ------------------------------------------------------------------------


def lone_thinking(items: list[Any]) -> list[Any]:
    """A half with no partner at the end of every thinking text and reasoning summary (each of
    its deltas, its blocks, its items), escaped in the JSON as a server sends it."""

    def edit(d: dict[str, Any]) -> None:
        if d.get("type") in ("thinking_delta", "thinking") and d.get("thinking"):
            d["thinking"] += "\ud83d"
        elif d.get("type") == "summary_text" and d.get("text"):
            d["text"] += "\ud83d"
        elif d.get("type") == "response.reasoning_summary_text.delta":
            d["delta"] += "\ud83d"

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            edit(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(items)
    return items


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_lone_surrogate_in_arguments_is_refused_by_the_gate_on_every_protocol(
    tmp_path: Path, provider: str, stream: bool
) -> None:
    """A call whose arguments hold a half with no partner (``"742\\ud83d"``): on every protocol,
    whole and streamed, the gate refuses it (``not_utf8``), the tool does not run, the refusal
    goes back to the model and the run goes on to its answer, exit 2 as for any refused call
    (before: an Anthropic whole answer ran the tool with ``"742\\ufffd"``; an Anthropic stream
    ended ``model_error``, its next request failing to encode the refused input)."""
    with SERVERS[provider](scripted([Reply.calls(LONE), Reply.text(ANSWER)])) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
        bodies = server.bodies()
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (2, "accepted", ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["rejected"], out
    assert "not_utf8" in out["message"], out["message"]
    assert "not_utf8" in result_sent(bodies[1]), bodies[1]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", ["anthropic", "openai-responses"])
def test_a_lone_surrogate_in_thinking_does_not_break_the_next_request(
    tmp_path: Path, provider: str, stream: bool
) -> None:
    """The call's thinking block (reasoning item) ends with a half with no partner: the tool
    runs and the block goes back with U+FFFD in its place; the run is accepted (before: the
    next request failed to encode, ``model_error`` after the tool had run)."""
    replies = [
        Reply(reasoning="Read the order.", tool_calls=(ORDER,), edit=lone_thinking),
        Reply.text(ANSWER),
    ]
    with SERVERS[provider](scripted(replies)) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
        bodies = server.bodies()
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out
    sent = reasoning_sent(provider, bodies[1])
    assert len(sent) == 1 and sent[0].startswith("Read") and sent[0].endswith("\ufffd"), bodies[1]


# -- a refusal beside tool calls ------------------------------------------------------------------

REFUSAL = "I can't help with that."


def refusal_beside_calls(provider: str, stream: bool) -> Any:
    """The turn of calls also says it refused, in each protocol's form: chat's ``refusal`` field
    (a delta of its own when streamed), a Responses ``refusal`` part in a message before the
    call, Anthropic's ``refusal`` stop reason."""

    def edit(items: list[Any]) -> list[Any]:
        if provider == "anthropic":
            for i in items:
                for d in (i, i.get("delta") or {}):
                    if d.get("stop_reason") == "tool_use":
                        d["stop_reason"] = "refusal"
        elif provider == "openai-responses":
            part = {"type": "refusal", "refusal": REFUSAL}
            message = {"type": "message", "id": "msg_r", "status": "completed", "role": "assistant"}
            output = items[-1]["response"]["output"] if stream else items[0]["output"]
            output.insert(0, {**message, "content": [part]})
        elif stream:
            first = next(i for i in items if isinstance(i, dict) and i.get("choices"))
            said = json.loads(json.dumps(first))
            said["choices"][0].update(delta={"refusal": REFUSAL}, finish_reason=None)
            items.insert(items.index(first) + 1, said)
        else:
            items[0]["choices"][0]["message"]["refusal"] = REFUSAL
        return items

    return edit


def refusal_null(items: list[Any]) -> list[Any]:
    """Chat: ``refusal: null`` on the message and every delta, as OpenAI sends it."""
    for i in items:
        for choice in i.get("choices") or () if isinstance(i, dict) else ():
            (choice.get("message") or choice.setdefault("delta", {}))["refusal"] = None
    return items


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_refusal_beside_tool_calls_ends_model_refused_on_every_protocol(
    tmp_path: Path, provider: str, stream: bool
) -> None:
    """A turn of calls that also says it refused ends the run ``model_refused`` on every
    protocol, its calls not run, the server asked once (before: chat and Responses dropped the
    refusal and ran the calls to an ``accepted`` answer, where Anthropic's refusal stopped);
    the same calls without a refusal (chat's ``refusal: null`` on every message) run."""
    replies = [Reply.calls(ORDER, edit=refusal_beside_calls(provider, stream)), Reply.text(ANSWER)]
    with SERVERS[provider](scripted(replies)) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
        asked = len(server.bodies())
    assert (code, out["stop_reason"], out["calls"], asked) == (7, "model_refused", [], 1), out
    assert "1 tool call(s) were not run" in out["message"], out["message"]
    edit = refusal_null if provider == "openai-chat" else None
    with SERVERS[provider](
        scripted([Reply.calls(ORDER, edit=edit), Reply.text(ANSWER, edit=edit)])
    ) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out


# -- a key named twice in arguments sent as an object ---------------------------------------------

TWICE = '{"order_id": "742", "order_id": "999"}'


def arguments_as_object(provider: str, stream: bool, twice: bool) -> Any:
    """The call's arguments sent as a JSON object (Anthropic's ``input``, as it always sends
    it whole; chat and Responses from a server that does not encode them), naming
    ``order_id`` twice where ``twice``; streamed (Anthropic), whole in ``content_block_start``
    with no input deltas."""
    written = TWICE if twice else '{"order_id": "742"}'

    def as_bytes(event: dict[str, Any]) -> bytes:
        text = json.dumps(event)
        for form in ('{"order_id": "742"}', json.dumps('{"order_id": "742"}')):  # an object, or its text
            text = text.replace(form, written)
        return (f"event: {event.get('type')}\ndata: {text}\n\n" if stream else text).encode()

    def edit(items: list[Any]) -> list[Any]:
        if not stream:
            return [as_bytes(items[0])]
        out: list[Any] = []
        for i in items:
            delta = i.get("delta") or {}
            if delta.get("type") == "input_json_delta":
                continue
            block = i.get("content_block") or {}
            if block.get("type") == "tool_use":
                block["input"] = {"order_id": "742"}
                out.append(as_bytes(i))
            else:
                out.append(i)
        return out

    return edit


@pytest.mark.parametrize(
    ("provider", "stream"),
    [("openai-chat", False), ("anthropic", False), ("anthropic", True), ("openai-responses", False)],
)
def test_a_key_named_twice_in_arguments_sent_as_an_object_is_refused_as_in_text(
    tmp_path: Path, provider: str, stream: bool
) -> None:
    """A call whose arguments come as an object naming ``order_id`` twice (``"742"``, then
    ``"999"``): the gate refuses it (``duplicate_key``) on every protocol, as it refuses the
    same arguments sent as text, the tool does not run and the run goes on to its answer, exit 2
    (before: the object was read as ``{"order_id": "999"}`` and the tool ran with the last
    value, unlike the model's text); the same object naming it once runs."""
    for twice, code, status in ((True, 2, "rejected"), (False, 0, "ok")):
        replies = [Reply.calls(ORDER, edit=arguments_as_object(provider, stream, twice)), Reply.text(ANSWER)]
        with SERVERS[provider](scripted(replies)) as server:
            got, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
            sent = result_sent(server.bodies()[1])
        assert (got, out["stop_reason"], out["answer"]) == (code, "accepted", ANSWER), out
        assert [c["status"] for c in out["calls"]] == [status], out
        assert ("duplicate_key" in sent) == twice and ("999" in sent) is False, sent


# -- an error object whose status code is written as text ------------------------------------------


def litellm_error(provider: str, stream: bool, code: str) -> Any:
    """The answer replaced by an error object as LiteLLM's proxy writes one, every field text
    (``"type": "None"``, ``"code": "503"``): mid-stream after the first events (each
    protocol's form: chat's ``error`` chunk, Anthropic's ``error`` event, a Responses ``error``
    event with its ``code`` at the top), or as a whole 200 body."""
    error = {"message": "upstream said no", "type": "None", "param": "None", "code": code}
    if provider == "anthropic":
        said: dict[str, Any] = {"type": "error", "error": error}
    elif provider == "openai-responses":
        said = {"type": "error", "code": code, "message": "upstream said no", "param": None}
    else:
        said = {"error": error}
    return lambda items: [*items[:2], said] if stream else [said]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_error_object_whose_status_code_is_text_is_sorted_as_the_number(
    tmp_path: Path, provider: str, stream: bool
) -> None:
    """An error object in a 200 answer, or mid-stream, whose code is a 5xx written as text
    (``"503"``) is retried as a 503 is, and the run goes on to its answer (before: the text was
    read as a kind no retry helps, and the run ended ``model_error`` at once); one whose code is
    ``"400"`` still ends it at once, naming the code."""
    failing = Reply.text(ANSWER, edit=litellm_error(provider, stream, "503"))
    with SERVERS[provider](scripted([failing, Reply.calls(ORDER), Reply.text(ANSWER)])) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
        asked = len(server.bodies())
    assert (code, out["stop_reason"], out["answer"], asked) == (0, "accepted", ANSWER, 3), out
    final = Reply.text(ANSWER, edit=litellm_error(provider, stream, "400"))
    with SERVERS[provider](scripted([final, Reply.calls(ORDER), Reply.text(ANSWER)])) as server:
        code, out, _ = run_agent(tmp_path, model_of(provider, server.url, stream))
        asked = len(server.bodies())
    assert (code, out["stop_reason"], asked) == (7, "model_error", 1), out
    assert "400" in out["message"] and "upstream said no" in out["message"], out["message"]


# -- a call id an earlier turn used ----------------------------------------------------------------


def ids_in(provider: str, request: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The call ids a request sends back, and the ids its tool results name, in order."""
    calls: list[str] = []
    results: list[str] = []
    for m in request.get("messages") or request.get("input") or ():
        calls += [c["id"] for c in m.get("tool_calls") or ()]
        if m.get("role") == "tool":
            results.append(m["tool_call_id"])
        if m.get("type") == "function_call":
            calls.append(m["call_id"])
        elif m.get("type") == "function_call_output":
            results.append(m["call_id"])
        for block in (
            m.get("content") if provider == "anthropic" and isinstance(m.get("content"), list) else ()
        ):
            if block.get("type") == "tool_use":
                calls.append(block["id"])
            elif block.get("type") == "tool_result":
                results.append(block["tool_use_id"])
    return calls, results


def refuses_repeated_ids(provider: str, replies: list[Reply]) -> Any:
    """A server that, as the Anthropic API does ("tool_use ids must be unique"), refuses a
    request whose call ids repeat (HTTP 400, final), or whose results name no call it sent."""

    def respond(request: dict[str, Any], index: int) -> Reply:
        calls, results = ids_in(provider, request)
        if len(set(calls)) < len(calls) or sorted(results) != sorted(calls):
            return Reply.error(400, f"tool_use ids must be unique: {calls} / {results}")
        return replies[index] if index < len(replies) else Reply.error(400, "script exhausted")

    return respond


def one_call_id(items: list[Any]) -> list[Any]:
    """Every call's id ``toolu_0`` / ``call_0`` on every turn (a server that numbers calls per
    answer); a Responses call's item id too."""

    def fix(d: dict[str, Any]) -> None:
        for key in ("id", "call_id"):
            value = d.get(key)
            if isinstance(value, str) and value.startswith(("call_", "toolu_", "fc_")):
                d[key] = value.split("_")[0] + "_0"

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            fix(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(items)
    return items


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_call_id_an_earlier_turn_used_is_renamed_so_the_next_request_is_accepted(
    tmp_path: Path, provider: str, stream: bool
) -> None:
    """Three turns of calls, each call named ``toolu_0`` (``call_0``), then the answer, from a
    server that refuses a conversation whose call ids repeat: every call runs, each result
    names its own call, and the run is accepted (before: the third request sent ``toolu_0``
    twice, the 400 ended the run ``model_error`` on Anthropic; every protocol now sends unique
    ids); the renaming is in the turn's ``model_response`` (``call_ids_renamed``)."""
    others = [("read_order", json.dumps({"order_id": str(742 + n)})) for n in range(3)]
    replies = [*(Reply.calls(c, edit=one_call_id) for c in others), Reply.text(ANSWER)]
    with SERVERS[provider](refuses_repeated_ids(provider, replies)) as server:
        code, out, responses = run_agent(tmp_path, model_of(provider, server.url, stream))
        last = server.bodies()[-1]
    assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
    assert [c["status"] for c in out["calls"]] == ["ok", "ok", "ok"], out
    calls, results = ids_in(provider, last)
    assert len(set(calls)) == 3 and results == calls and calls[0].endswith("_0"), last
    assert "call_ids_renamed" not in responses[0] and len(responses[1]["call_ids_renamed"]) == 1, responses
    # Ids that do not repeat are sent back as they came.
    with SERVERS[provider](
        refuses_repeated_ids(provider, [*map(Reply.calls, others), Reply.text(ANSWER)])
    ) as server:
        code, out, responses = run_agent(tmp_path, model_of(provider, server.url, stream))
    assert (code, out["stop_reason"]) == (0, "accepted"), out
    assert not any("call_ids_renamed" in r for r in responses), responses


# -- a call id another provider gave, sent to Anthropic after a fallback ---------------------------

ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")


def kimi_ids(items: list[Any]) -> list[Any]:
    """Chat: every call's id as Kimi K2 writes it (``functions.read_order:0``)."""
    for i in items:
        for choice in i.get("choices") or () if isinstance(i, dict) else ():
            for call in (choice.get("message") or choice.get("delta") or {}).get("tool_calls") or ():
                if call.get("id"):
                    call["id"] = "functions.read_order:0"
    return items


def refuses_odd_tool_ids(replies: list[Reply]) -> Any:
    """An Anthropic server that, as the API does, refuses a tool_use id or a tool_result's
    tool_use_id outside ``^[a-zA-Z0-9_-]+$`` (HTTP 400), or a result that names no call."""

    def respond(request: dict[str, Any], index: int) -> Reply:
        calls, results = ids_in("anthropic", request)
        if not all(map(ANTHROPIC_ID.fullmatch, calls + results)) or sorted(calls) != sorted(results):
            return Reply.error(400, f"messages.1.content.0.tool_use.id: String should match pattern: {calls}")
        return replies[index] if index < len(replies) else Reply.error(400, "script exhausted")

    return respond


def test_a_fallback_to_anthropic_sends_another_providers_call_ids_as_it_accepts_them(tmp_path: Path) -> None:
    """A chat model calls ``read_order`` with the id ``functions.read_order:0`` (as Kimi K2 names
    its calls), then fails (503, retried once); the chain falls back to Anthropic, whose API
    refuses that id: the call and its result go with the id written as the API accepts it, the
    two still paired, and the run is accepted (before: the 400 ended it ``model_error``, every
    model failed). An id the API accepts goes as it came."""
    each: dict[str, Any] = {"max_retries": 1, "timeout_s": 5}
    down = Reply.error(503, "down")
    for edit, kept in ((kimi_ids, False), (None, True)):
        first = [Reply.calls(ORDER, edit=edit), down, down]
        with (
            SERVERS["openai-chat"](scripted(first)) as a,
            SERVERS["anthropic"](refuses_odd_tool_ids([Reply.text(ANSWER)])) as b,
        ):
            second = {"provider": "anthropic", "name": "m-b", "base_url": b.url, "transport": "http", **each}
            model = {
                "provider": "openai-chat",
                "name": "m-a",
                "base_url": a.url,
                "fallback": [second],
                **each,
            }
            code, out, _ = run_agent(tmp_path, model)
            chat_id = a.bodies()[1]["messages"][2]["tool_calls"][0]["id"]
            calls, results = ids_in("anthropic", b.bodies()[0])
        assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
        assert [c["status"] for c in out["calls"]] == ["ok"], out
        assert calls == results and (calls == [chat_id]) == kept and ANTHROPIC_ID.fullmatch(calls[0]), calls
