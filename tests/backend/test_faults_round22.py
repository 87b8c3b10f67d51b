"""A twenty-second round: model servers of each protocol that fail (or are quirky) in new ways,
driven as the others are (an agent file naming ``model.provider``, ``tether run`` in process,
streamed and whole, over the SDK transport and plain httpx2; a fallback chain; the Python API)
against real servers on 127.0.0.1 speaking chat completions, the Responses API and the
Anthropic Messages API.

Faults fixed this round:

- A chat stream begun again mid-stream (a proxy that retried upstream and sends the new
  completion, under its own ``id``, from its first chunk after what it had passed on of the
  first): the choices start over, as an Anthropic ``message_start`` begun again does (before: the
  two completions' text ran together and the garbled answer was accepted, or a call begun again
  over its own cut arguments made the stream unreadable on every try). A server that gives every
  chunk a new id (and a role) is read as one completion, as before.
- A Responses stream begun again (a second ``response.created`` under another response id): its
  items start over (before: refused as garbled on every try, ``model_error``).
- A chat stream whose only choice is numbered other than 0 is that choice's answer, as a whole
  answer's is (before: every chunk was passed over as another choice's, the stream "ended
  without a finish reason" on every try, ``model_error``).
- A finish reason the table lacks is read by its words: a filter or refusal (Gemini's
  ``PROHIBITED_CONTENT``, Bedrock's ``guardrail_intervened`` …) ends the run ``model_refused``, a
  token limit (``context_length_exceeded`` …) ``truncated``, its calls never run (before: both
  ``model_error``, "an unknown reason"). A reason with neither kind of word stays unknown.
- An Anthropic block or delta whose text, input JSON or thinking is ``null`` (a translating proxy
  that writes every field it has no value for) says nothing, as an empty one does (before: an
  internal ``TypeError``, the answer retried as unusable on every try, ``model_error``).
- A Responses text part or reasoning summary whose text is ``null`` says nothing (before: an
  internal ``TypeError``, unusable on every try; a summary's ``null`` was read as "None").
- A chat stream of one event holding the whole ``chat.completion`` (its ``message``, not a
  ``delta``: a proxy that turns a whole answer into a stream), and a whole answer whose choice
  says its message as a ``delta``, are read as the answer they hold, as an Anthropic
  ``message_start`` holding its blocks whole is (before: an empty answer, or an unusable one, on
  every try). An Anthropic ``content`` sent as bare text is its one text block.
- A chat ``tool_calls`` sent as the one call's object, not a list of one, is that call, as content
  sent as one part object is (before: unusable on every try, ``model_error``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_faults_heldout import (
    ANSWER,
    ORDER,
    SERVERS,
    Case,
    case_params,
    good,
    only,
    run_case,
    twice,
    write_agent,
)
from test_faults_round10 import run_agent

from tether.core.messages import UserMessage
from tether.models import AnthropicMessages, ModelRequest, OpenAICompatible, OpenAIResponses, RetryPolicy
from tether.models._base import finish_of
from tether_testing.fake_server import Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]


# -- how the servers misbehave ------------------------------------------------------------------


def _finishes(item: Any) -> bool:
    return isinstance(item, dict) and any(c.get("finish_reason") for c in item.get("choices") or ())


def chat_begun_again(first_finish: str | None = None) -> Any:
    """Chat: a proxy that retried upstream: the first completion's chunks up to half its content
    (its text "Lost ", a call's arguments cut; ``first_finish``: then a chunk with that finish),
    under its own id, then the second completion whole, from its role chunk."""

    def edit(p: str, stream: bool, items: list[Any]) -> list[Any]:
        before = [i for i in items if isinstance(i, dict) and i.get("choices")]
        before = copy.deepcopy(before[: next(n for n, i in enumerate(before) if _finishes(i))])
        first = before[: max(2, len(before) // 2)]
        for chunk in first:
            chunk["id"] = "chatcmpl-lost"
            for choice in chunk["choices"]:
                if choice["delta"].get("content"):
                    choice["delta"]["content"] = "Lost "
        if first_finish is not None:
            first.append({**first[-1], "choices": [{"index": 0, "delta": {}, "finish_reason": first_finish}]})
        return [*first, *items]

    return edit


def chat_new_id_every_chunk(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: every chunk under a new id, each delta with the role (a proxy that writes each
    chunk afresh): one completion, not a restart per chunk."""
    for n, item in enumerate(items):
        if isinstance(item, dict):
            item["id"] = f"chatcmpl-{n}"
            for choice in item.get("choices") or ():
                choice["delta"]["role"] = "assistant"
    return items


def chat_closed_by_a_proxy(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: the chunk that says the finish under the proxy's own id, its delta giving the role:
    the completion under way ends; no other begins."""
    for item in items:
        if _finishes(item):
            item["id"] = "proxy-close"
            item["choices"][0]["delta"] = {"role": "assistant"}
    return items


def responses_begun_again(p: str, stream: bool, items: list[Any], *, same: bool = False) -> list[Any]:
    """Responses: a proxy that retried upstream: the first response's events up to its first
    delta (under its own response id), then the second response whole, from ``response.created``;
    ``same``: the same response sent again from its start, no event numbered."""
    at = next(n for n, e in enumerate(items) if str(e.get("type")).endswith(".delta"))
    first = copy.deepcopy(items[: at + 1])
    for event in (*first, *items) if same else ():
        event.pop("sequence_number", None)
    for event in first:
        if event.get("type") == "response.created" and not same:
            event["response"]["id"] = "resp_lost"
        if event.get("type") == "response.output_text.delta":
            event["delta"] = "Lost "
        if event.get("type") == "response.function_call_arguments.delta":
            event["delta"] = '{"order_id": "9'
    return [*first, *items]


def lone_choice_numbered(index: int) -> Any:
    """Chat: the only choice numbered ``index`` (not 0), in every chunk or the whole answer."""

    def edit(p: str, stream: bool, items: list[Any]) -> list[Any]:
        for item in items:
            for choice in item.get("choices") or () if isinstance(item, dict) else ():
                choice["index"] = index
        return items

    return edit


def null_pieces(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: each block begun with its text or input ``null``, and after each delta the same
    delta with its piece ``null`` (a translating proxy that writes every field it has no value
    for): nothing more said."""
    out: list[Any] = []
    for event in items:
        block = event.get("content_block") or {}
        if block.get("type") == "text":
            block["text"] = None
        out.append(event)
        if event.get("type") == "content_block_delta":
            delta = dict(event["delta"])
            out.append({**event, "delta": {k: v if k == "type" else None for k, v in delta.items()}})
    return out


def null_parts(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Responses: every message item (done, or in the terminal output) with one more text part
    whose text is ``null``, every reasoning item with one more summary whose text is ``null``."""
    for event in items:
        response = event.get("response", event)
        listed = [
            *(response.get("output") or ()),
            *([event["item"]] if isinstance(event.get("item"), dict) else ()),
        ]
        for item in listed:
            if item.get("type") == "message":
                item["content"] = [*(item.get("content") or ()), {"type": "output_text", "text": None}]
            if item.get("type") == "reasoning":
                item["summary"] = [*(item.get("summary") or ()), {"type": "summary_text", "text": None}]
    return items


def lone_call_bare(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: ``tool_calls`` as the one call's object, not a list of one."""
    for item in items:
        for choice in item.get("choices") or () if isinstance(item, dict) else ():
            wire = choice.get("delta") or choice.get("message") or {}
            if isinstance(wire.get("tool_calls"), list) and len(wire["tool_calls"]) == 1:
                wire["tool_calls"] = wire["tool_calls"][0]
    return items


def whole_as_one_event(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: a proxy that turns a whole answer into a stream: one event holding the
    ``chat.completion`` whole (its ``message``, not a ``delta``), then ``[DONE]``."""
    text, calls, finish, usage = "", {}, None, None
    for item in items:
        usage = (item.get("usage") if isinstance(item, dict) else None) or usage
        for choice in item.get("choices") or () if isinstance(item, dict) else ():
            text += choice["delta"].get("content") or ""
            for tc in choice["delta"].get("tool_calls") or ():
                call = calls.setdefault(tc["index"], {"id": tc.get("id"), "type": "function"})
                fn = call.setdefault("function", {"name": "", "arguments": ""})
                fn["name"] += tc["function"].get("name") or ""
                fn["arguments"] += tc["function"].get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message = {
        "role": "assistant",
        "content": text or None,
        **({"tool_calls": [*calls.values()]} if calls else {}),
    }
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "model": "m-1", "usage": usage}
    answer["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return [answer, b"data: [DONE]\n\n"]


def cumulative_message_beside(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: every chunk's choice carries, beside its ``delta``, a ``message`` with the text so
    far (as some servers add): the deltas are the answer, the text said once."""
    text = ""
    for item in items:
        for choice in item.get("choices") or () if isinstance(item, dict) else ():
            text += choice["delta"].get("content") or ""
            choice["message"] = {"role": "assistant", "content": text}
    return items


def message_as_delta(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Chat: a whole answer whose choice says its message as a ``delta``."""
    choice = items[0]["choices"][0]
    choice["delta"] = choice.pop("message")
    return items


def bare_text(p: str, stream: bool, items: list[Any]) -> list[Any]:
    """Anthropic: a whole answer of one text block whose ``content`` is that text, bare."""
    content = items[0]["content"]
    if [b["type"] for b in content] == ["text"]:
        items[0]["content"] = content[0]["text"]
    return items


FILTERS = {
    "openai-chat": "PROHIBITED_CONTENT",
    "anthropic": "guardrail_intervened",
    "openai-responses": "content_filtered",
}
LIMITS = {
    "openai-chat": "context_length_exceeded",
    "anthropic": "context_overflow",
    "openai-responses": "max_tokens_reached",
}


def finished_as(names: dict[str, str], calls: bool = False) -> Any:
    """The turn (text, and a call when ``calls``) ended with the provider's ``names[p]``: a chat
    ``finish_reason``, an Anthropic ``stop_reason``, a Responses ``incomplete`` reason."""

    def make(p: str, stream: bool) -> Reply:
        more: dict[str, Any] = {"tool_calls": (ORDER,)} if calls else {}
        if p != "openai-responses":
            return Reply(content="Order 742 is", finish_reason=names[p], **more)

        def edit(items: list[Any]) -> list[Any]:
            final = items[-1].get("response", items[-1])
            final.update(status="incomplete", incomplete_details={"reason": names[p]})
            if "response" in items[-1]:
                items[-1]["type"] = "response.incomplete"
            return items

        return Reply(content="Order 742 is", edit=edit, **more)

    return make


STREAM = ("stream",)
CASES = [
    # -- quirks: accepted with the same answer ----------------------------------------------
    Case("chat_completion_begun_again_mid_stream", only(("openai-chat",), good(edit=chat_begun_again())),
         True, modes=STREAM),
    Case("chat_completion_begun_again_after_a_first_cut_at_the_token_limit",
         only(("openai-chat",), good(edit=chat_begun_again("length"))), True, modes=STREAM),
    Case("chat_every_chunk_a_new_id_and_role", only(("openai-chat",), good(edit=chat_new_id_every_chunk)),
         True, modes=STREAM),
    Case("chat_closed_by_a_proxy_chunk_under_its_own_id", only(("openai-chat",), good(
        edit=chat_closed_by_a_proxy)), True, modes=STREAM),
    Case("responses_response_begun_again_mid_stream",
         only(("openai-responses",), good(edit=responses_begun_again)), True, modes=STREAM),
    Case("responses_resent_from_its_start_unnumbered", only(("openai-responses",), good(
        edit=lambda p, s, items: responses_begun_again(p, s, items, same=True))), True, modes=STREAM),
    Case("anthropic_null_pieces", only(("anthropic",), good(edit=null_pieces)), True, modes=STREAM),
    Case("responses_null_parts", only(("openai-responses",), good(edit=null_parts)), True),
    Case("chat_a_lone_call_not_in_a_list", only(("openai-chat",), good(edit=lone_call_bare)), True),
    Case("chat_a_whole_answer_as_one_stream_event", only(("openai-chat",), good(edit=whole_as_one_event)),
         True, modes=STREAM),
    Case("chat_a_cumulative_message_beside_every_delta", only(("openai-chat",), good(
        edit=cumulative_message_beside)), True, modes=STREAM),
    Case("chat_a_whole_answer_written_as_a_delta", only(("openai-chat",), good(edit=message_as_delta)), True,
         modes=("whole",)),
    Case("anthropic_content_as_bare_text", only(("anthropic",), good(edit=bare_text)), True,
         modes=("whole",)),
    Case("chat_lone_choice_numbered_1", only(("openai-chat",), good(edit=lone_choice_numbered(1))), True),
    Case("chat_lone_choice_numbered_7", only(("openai-chat",), good(edit=lone_choice_numbered(7))), True,
         modes=STREAM),
    # -- faults: the right stop reason, a non-zero exit -------------------------------------
    Case("a_filter_finish_by_another_name", twice(finished_as(FILTERS)), False,
         ("refused or filtered",), stop="model_refused"),
    Case("a_filter_finish_by_another_name_beside_a_call", twice(finished_as(FILTERS, calls=True)), False,
         ("refused or filtered", "1 tool call(s) were not run"), stop="model_refused"),
    Case("a_token_limit_finish_by_another_name_beside_a_call", twice(finished_as(LIMITS, calls=True)), False,
         ("token limit", "1 tool call(s) were not run"), stop="truncated"),
]  # fmt: skip

assert len({c.name for c in CASES}) == len(CASES)

PARAMS = case_params(CASES)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), PARAMS)
def test_a_round22_fault_ends_honestly_and_a_quirk_is_accepted(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, transport)
    if case.ok:
        assert (code, out["stop_reason"], requests) == (0, "accepted", 2), out
        assert out["answer"] == ANSWER and [c["status"] for c in out["calls"]] == ["ok"]
        return
    assert code != 0 and out["stop_reason"] == case.stop, out
    assert requests == 1 and out["calls"] == [], out  # final at once; no call run
    for piece in (*case.said, FILTERS[provider] if case.stop == "model_refused" else LIMITS[provider]):
        assert piece in out["message"], out["message"]


QUIRK = {
    "openai-chat": chat_begun_again(),
    "openai-responses": responses_begun_again,
    "anthropic": null_pieces,
}


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_the_command_in_its_own_process_accepts_a_quirk_and_exits_7_on_a_filter_of_another_name(
    tmp_path: Path, provider: str
) -> None:
    """``python -m tether.cli run`` on each protocol: a stream begun again (Anthropic: null
    pieces) is accepted, exit 0; an answer filtered under a name the table lacks stops
    ``model_refused``, exit 7, no traceback."""
    quirk = good(edit=QUIRK[provider])(provider, True)
    filtered = [finished_as(FILTERS)(provider, True)]
    for replies, code, stop in ((quirk, 0, "accepted"), (filtered, 7, "model_refused")):
        with SERVERS[provider](scripted(replies)) as server:
            model = {"provider": provider, "name": "m-1", "base_url": server.url, "streaming": True}
            path = write_agent(tmp_path, {**model, "timeout_s": 10, "max_retries": 0, "transport": "http"})
            command = [
                sys.executable,
                "-m",
                "tether.cli",
                "run",
                "Why is 742 open?",
                "--agent",
                str(path),
                "--json",
            ]
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            out = json.loads(done.stdout.strip().splitlines()[-1])
            assert (done.returncode, out["stop_reason"]) == (code, stop), done.stderr[-2000:]
            assert "Traceback" not in done.stdout + done.stderr
            assert len(server.bodies()) == len(replies)
        if code == 0:
            assert out["answer"] == ANSWER, out


@pytest.mark.parametrize(
    "name",
    [
        "tether_future_reason",
        "max_tool_calls",
        "MALFORMED_FUNCTION_CALL",
        "abort",
        "end",
        "",
        "cancelled",
        "eot_token",
    ],
)
def test_a_finish_without_a_word_of_either_kind_stays_unknown(name: str) -> None:
    """Only a filter or a token-limit word reads a finish the table lacks; anything else is
    unknown (``model_error``), never a normal end, and the table's own names are as they were."""
    assert finish_of(name) == "unknown"
    named = ("STOP", "end_turn", "max_tokens", "content_filter", "pause_turn", "tool_use")
    assert [finish_of(n) for n in named] == ["stop", "stop", "length", "refused", "paused", "tool_calls"]
    words = ("PROHIBITED_CONTENT", "content_filtered", "guardrail_intervened", "context_length_exceeded")
    assert [finish_of(n) for n in words] == ["refused", "refused", "refused", "length"]


# -- the Python API -----------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai-chat", "openai-responses"])
@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_the_python_api_reads_a_stream_begun_again_as_its_second_answer(
    provider: str, transport: str
) -> None:
    """``complete`` on a stream a proxy began again: the second answer, whole, once (its call's
    arguments as the second attempt said them), ``meta["stream_restarts"]`` saying so; the usage
    is the answer's, not the two added."""
    edit = chat_begun_again() if provider == "openai-chat" else responses_begun_again
    backend = {"openai-chat": OpenAICompatible, "openai-responses": OpenAIResponses}[provider]
    replies = [Reply.calls(ORDER, edit=lambda items: edit(provider, True, items))]

    async def go() -> Any:
        with SERVERS[provider](scripted(replies)) as server:
            model = backend(
                "m-1", base_url=server.url, stream=True, transport=transport, retry=RetryPolicy(0)
            )
            async with model:
                return await model.complete(ModelRequest(messages=(UserMessage(content="742?"),)))

    response = anyio.run(go)
    assert [(c.name, json.loads(c.arguments)) for c in response.message.tool_calls] == [
        (ORDER[0], json.loads(ORDER[1]))
    ]
    finish = {"openai-chat": "tool_calls", "openai-responses": "stop"}[provider]  # Responses: completed
    assert (response.meta["stream_restarts"], response.meta["finish"]) == (1, finish)
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (100, 10)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", ["anthropic", "openai-responses"])
def test_the_python_api_reads_a_null_piece_as_none(provider: str, stream: bool) -> None:
    """``complete`` on an answer whose thinking (Anthropic) or reasoning summary and text part
    (Responses) holds a ``null`` piece beside real ones: the text and reasoning the others say,
    no ``None`` written into either."""

    def edit(items: list[Any]) -> list[Any]:
        if provider == "openai-responses":
            return null_parts(provider, stream, items)
        for event in items:  # a thinking block (whole) or thinking delta (streamed) of null
            for block in (event.get("content") or ()) if not stream else ():
                if block.get("type") == "thinking":
                    event["content"] = [{**block, "thinking": None}, *event["content"]]
                    break
        return null_pieces(provider, stream, items) if stream else items

    backend = {"anthropic": AnthropicMessages, "openai-responses": OpenAIResponses}[provider]
    reply = Reply(content=ANSWER, reasoning="The order is open.", edit=edit)

    async def go() -> Any:
        with SERVERS[provider](scripted([reply])) as server:
            model = backend("m-1", base_url=server.url, stream=stream, transport="http", retry=RetryPolicy(0))
            async with model:
                return await model.complete(ModelRequest(messages=(UserMessage(content="742?"),)))

    response = anyio.run(go)
    assert (response.message.content, response.message.reasoning) == (ANSWER, "The order is open.")


# -- a fallback chain across a failing model ----------------------------------------------------


def usage_in_every_chunk_then_cut(items: list[Any]) -> list[Any]:
    """Chat: every chunk carries the running usage (100 + 10), and the stream is cut before its
    finish: the attempt was billed, and is no answer."""
    chunks = [i for i in items if isinstance(i, dict) and i.get("choices") and not _finishes(i)]
    return [{**c, "usage": {"prompt_tokens": 100, "completion_tokens": 10}} for c in chunks]


def test_a_fallback_chain_counts_a_failing_model_and_reads_the_next_ones_quirks(tmp_path: Path) -> None:
    """The chat model answers the first turn with a completion begun again (read once: 110
    tokens), then fails twice with streams cut after reporting their usage (110 each, billed);
    the Anthropic model takes over, calls the tool again (110) and answers (110). The run is
    accepted, its tokens every attempt's (550), the switch traced with what the failed model was
    billed. Under a budget of 400 tokens the chain stops ``budget`` before the last turn: the
    failed model's 220 counted (110 + 110 alone would not have tripped it)."""
    first = [
        Reply.calls(ORDER, edit=lambda items: chat_begun_again()("openai-chat", True, items)),
        *[Reply.text(ANSWER, edit=usage_in_every_chunk_then_cut)] * 2,
    ]
    again = [Reply.calls(("read_order", '{"order_id": "743"}')), Reply.text(ANSWER)]
    for limits, stop, tokens, asked_b in (({}, "accepted", 550, 2), ({"max_tokens": 400}, "budget", 440, 1)):
        with contextlib.ExitStack() as stack:
            chat = stack.enter_context(SERVERS["openai-chat"](scripted(first)))
            claude = stack.enter_context(SERVERS["anthropic"](scripted(again)))
            second = {"provider": "anthropic", "name": "m-b", "base_url": claude.url, "transport": "http"}
            model = {"provider": "openai-chat", "name": "m-a", "base_url": chat.url, "streaming": True}
            model.update(max_retries=1, timeout_s=5, fallback=[{**second, "max_retries": 0, "timeout_s": 5}])
            model["limits"] = {"deadline_s": 30, "final_turn_on_budget": False, **limits}
            code, out, responses = run_agent(tmp_path, model)
            asked = (len(chat.bodies()), len(claude.bodies()))
        assert (out["stop_reason"], out["tokens"], asked) == (stop, tokens, (3, asked_b)), out
        if stop == "accepted":
            assert (code, out["answer"]) == (0, ANSWER), out
            assert responses[0]["stream_restarts"] == 1, responses[0]
            billed = responses[1]["fallback_billed"]
            assert (billed["prompt_tokens"], billed["completion_tokens"]) == (200, 20), responses[1]
            assert [f["model"] for f in responses[1]["fallback_from"]] == ["m-a"], responses[1]
        else:
            assert code != 0, out
