"""Model faults, round thirty-six: protocol features a server sends that tether never asks for,
driven as the other rounds are (an agent file naming ``model.provider``, ``tether run`` in
process, streamed and whole, over the SDK transport and plain httpx) against real servers on
127.0.0.1 speaking chat completions, the Responses API and the Anthropic Messages API.

Fixed here:

- a chat tool call of a type other than ``function`` (``custom``: a free-text tool's call, or a
  kind the protocol adds later) that also carried a ``function`` naming an offered tool ran that
  tool: its ``type`` was never read. Such a call is now a call of a kind this run never offers,
  an unusable answer, retried and never run (``_content.offered_call``), as a Responses
  ``custom_tool_call`` item already was; a call that leaves ``type`` out is still read.

Probed, all already honest; pinned here so they stay so (the tests after ``PINNED``):

- harmless extras beside a normal answer are accepted: Anthropic ``server_tool_use``,
  ``web_search_tool_result`` and ``redacted_thinking`` blocks, ``citations`` on text, a
  ``container``; Responses ``web_search_call``/``file_search_call`` items, an encrypted-only
  ``reasoning`` item, ``output_text`` with annotations and logprobs; chat ``audio``,
  ``annotations``, ``refusal: null`` and ``logprobs``; a legacy ``function_call`` and a call
  without ``type`` run as calls;
- ends that are no answer are never accepted: Anthropic ``pause_turn`` (with text, or after a
  ``server_tool_use`` only) and ``refusal``; a Responses ``refusal`` part beside text, an output
  of only a ``web_search_call`` or only encrypted reasoning; chat ``refusal`` set beside content;
- calls of a kind never offered never run: a ``server_tool_use`` or ``mcp_tool_use`` block naming
  an offered tool under ``stop_reason: tool_use``; Responses ``computer_call`` and
  ``custom_tool_call`` items (alone, or beside a ``function_call``), streamed or whole.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER
from test_faults_round35 import run_turns

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

Edit = Callable[[list[Any]], list[Any]]


def each(change: Callable[[dict[str, Any]], None]) -> Edit:
    """Every dict the server would send (the whole body, or each stream event), changed."""

    def edit(items: list[Any]) -> list[Any]:
        out = []
        for item in items:
            if isinstance(item, dict):
                item = copy.deepcopy(item)
                change(item)
            out.append(item)
        return out

    return edit


def chat_calls(item: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        tc
        for c in item.get("choices") or ()
        for tc in (c.get("message") or c.get("delta") or {}).get("tool_calls") or ()
    ]


def custom_type(item: dict[str, Any]) -> None:
    for tc in chat_calls(item):
        if "id" in tc or "type" in tc:  # a stream says the type in a call's first delta
            tc["type"] = "custom"


def custom_beside_function(item: dict[str, Any]) -> None:
    for tc in chat_calls(item):
        if "id" in tc or "type" in tc:
            tc["type"], tc["custom"] = "custom", {"name": "read_order", "input": "742"}


def no_type(item: dict[str, Any]) -> None:
    for tc in chat_calls(item):
        tc.pop("type", None)


# -- fixed: a chat call of another type than ``function`` is never run ---------------------------


@pytest.mark.parametrize("transport", ["sdk", "http"])
@pytest.mark.parametrize("mode", ["stream", "whole"])
@pytest.mark.parametrize(
    "change", [custom_type, custom_beside_function], ids=["custom", "custom_and_function"]
)
def test_a_chat_call_of_a_kind_never_offered_is_not_run(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], mode: str, transport: str
) -> None:
    """Each try a ``custom`` call naming ``read_order`` with its ``function`` arguments: none
    runs, the run gives up (exit 7, ``model_error``) saying why (before: the tool ran each turn
    and the run stopped ``repetition``)."""
    replies = [Reply.calls(ORDER, edit=each(change))] * 2 + [Reply.text(ANSWER)]
    code, out, bodies = run_turns(tmp_path, "openai-chat", replies, mode=mode, transport=transport)
    assert (code, out["stop_reason"], out["answer"], out["calls"], len(bodies)) == (
        7,
        "model_error",
        None,
        [],
        2,
    )
    assert "a 'custom' tool call" in out["message"] and "does not offer" in out["message"], out["message"]


@pytest.mark.parametrize("mode", ["stream", "whole"])
def test_a_chat_call_without_a_type_still_runs(tmp_path: Path, mode: str) -> None:
    """The legitimate side: a server that leaves ``type`` out; its call runs, the answer stands."""
    replies = [Reply.calls(ORDER, edit=each(no_type)), Reply.text(ANSWER)]
    code, out, bodies = run_turns(tmp_path, "openai-chat", replies, mode=mode)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out


# -- PINNED: extras beside a normal answer; ends that are no answer; calls never offered --------


def whole(change: Callable[[dict[str, Any]], None]) -> Edit:
    """The whole body (``mode="whole"``), changed."""
    return lambda items: [(change(body := copy.deepcopy(items[0])), body)[1]]


def anthropic_extras(body: dict[str, Any]) -> None:
    body["content"] = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "742"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
         "content": [{"type": "web_search_result", "url": "https://x", "title": "t",
                      "encrypted_content": "e"}]},
        {"type": "redacted_thinking", "data": "EnC0deD"},
        *body["content"],
    ]  # fmt: skip
    for block in body["content"]:
        if block["type"] == "text":
            block["citations"] = [{"type": "web_search_result_location", "url": "https://x", "title": "t",
                                   "encrypted_index": "e", "cited_text": "x"}]  # fmt: skip
    body["container"] = {"id": "cntr_1", "expires_at": "2026-12-06T00:00:00Z"}


def responses_extras(body: dict[str, Any]) -> None:
    for item in body["output"]:
        for part in item.get("content") or ():
            part["annotations"] = [
                {"type": "url_citation", "start_index": 0, "end_index": 5, "url": "https://x"}
            ]
            part["logprobs"] = []
    body["output"] = [
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
        {
            "type": "file_search_call",
            "id": "fs_1",
            "status": "completed",
            "queries": ["742"],
            "results": None,
        },
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"},
        *body["output"],
    ]


def chat_message(
    change: Callable[[dict[str, Any], dict[str, Any]], None],
) -> Callable[[dict[str, Any]], None]:
    return lambda body: change(body["choices"][0]["message"], body["choices"][0])


def chat_extras(message: dict[str, Any], choice: dict[str, Any]) -> None:
    message.update(refusal=None, annotations=[], audio={"id": "a_1", "data": "UklGR", "expires_at": 0,
                                                       "transcript": ANSWER})  # fmt: skip
    choice["logprobs"] = {"content": [{"token": "O", "logprob": -0.1, "bytes": [79], "top_logprobs": []}]}


def legacy_call(message: dict[str, Any], choice: dict[str, Any]) -> None:
    message["function_call"] = message.pop("tool_calls")[0]["function"]
    choice["finish_reason"] = "function_call"


ACCEPTED: list[tuple[str, str, Callable[[dict[str, Any]], None], bool]] = [
    ("anthropic", "server_tools_redacted_thinking_citations_container", anthropic_extras, False),
    ("anthropic", "the_same_beside_a_call", anthropic_extras, True),
    ("openai-responses", "search_items_encrypted_reasoning_annotations", responses_extras, False),
    ("openai-responses", "the_same_beside_a_call", responses_extras, True),
    ("openai-chat", "audio_annotations_null_refusal_logprobs", chat_message(chat_extras), False),
    ("openai-chat", "a_legacy_function_call", chat_message(legacy_call), True),
]


@pytest.mark.parametrize("transport", ["sdk", "http"])
@pytest.mark.parametrize(
    ("provider", "name", "change", "call"), ACCEPTED, ids=[c[1] + "-" + c[0] for c in ACCEPTED]
)
def test_a_normal_answer_with_harmless_extras_is_accepted(
    tmp_path: Path,
    provider: str,
    name: str,
    change: Callable[[dict[str, Any]], None],
    call: bool,
    transport: str,
) -> None:
    first = Reply.calls(ORDER, edit=whole(change)) if call else Reply.text(ANSWER, edit=whole(change))
    replies = [first, Reply.text(ANSWER)] if call else [first]
    code, out, bodies = run_turns(tmp_path, provider, replies, mode="whole", transport=transport)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, len(replies)), (
        out
    )
    assert [c["status"] for c in out["calls"]] == (["ok"] if call else []), out


def set_to(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda body: body.update(copy.deepcopy(fields))


SERVER_CALL = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "read_order",
    "input": {"order_id": "742"},
}
MCP_CALL = {**SERVER_CALL, "type": "mcp_tool_use", "server_name": "orders"}
CUSTOM = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_c", "name": "read_order",
          "input": "742", "status": "completed"}  # fmt: skip
COMPUTER = {"type": "computer_call", "id": "cu_1", "call_id": "call_x", "action": {"type": "screenshot"},
            "pending_safety_checks": [], "status": "completed"}  # fmt: skip
ENCRYPTED = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"}
SEARCH = {"type": "web_search_call", "id": "ws_1", "status": "completed"}


def responses_refusal(body: dict[str, Any]) -> None:
    message = next(item for item in body["output"] if item["type"] == "message")
    message["content"].append({"type": "refusal", "refusal": "I can't help with that."})


def beside_the_call(item: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda body: body["output"].append(copy.deepcopy(item))


NO_ANSWER: list[tuple[str, str, Callable[[dict[str, Any]], None], str, str]] = [
    ("anthropic", "pause_turn", set_to(stop_reason="pause_turn"), "model_error", "paused"),
    ("anthropic", "pause_turn_after_a_server_call", set_to(stop_reason="pause_turn", content=[SERVER_CALL]),
     "model_error", "paused"),
    ("anthropic", "refusal", set_to(stop_reason="refusal"), "model_refused", "refused"),
    ("anthropic", "server_tool_use_naming_an_offered_tool",
     set_to(stop_reason="tool_use", content=[SERVER_CALL]), "model_error", "neither text nor tool calls"),
    ("anthropic", "mcp_tool_use_naming_an_offered_tool",
     set_to(stop_reason="tool_use", content=[MCP_CALL]), "model_error", "neither text nor tool calls"),
    ("openai-responses", "refusal_part_beside_text", responses_refusal, "model_refused", "refused"),
    ("openai-responses", "only_a_web_search", set_to(output=[SEARCH]), "model_error", "neither text"),
    ("openai-responses", "only_encrypted_reasoning", set_to(output=[ENCRYPTED]), "model_error",
     "neither text"),
    ("openai-responses", "a_custom_tool_call", set_to(output=[CUSTOM]), "model_error", "does not offer"),
    ("openai-responses", "a_computer_call", set_to(output=[COMPUTER]), "model_error", "does not offer"),
    ("openai-responses", "a_custom_call_beside_a_function_call", beside_the_call(CUSTOM), "model_error",
     "does not offer"),
    ("openai-chat", "refusal_beside_content", chat_message(lambda m, c: m.update(refusal="I can't help.")),
     "model_refused", "refused"),
]  # fmt: skip


@pytest.mark.parametrize("transport", ["sdk", "http"])
@pytest.mark.parametrize(
    ("provider", "name", "change", "stop", "said"), NO_ANSWER, ids=[c[1] for c in NO_ANSWER]
)
def test_an_end_that_is_no_answer_or_a_call_never_offered_is_never_accepted_nor_run(
    tmp_path: Path, provider: str, name: str, change: Callable[[dict[str, Any]], None], stop: str, said: str,
    transport: str,
) -> None:  # fmt: skip
    """Every try so: exit 7, nothing run, the reason said; a refusal or a pause keeps its text
    but never stands as the answer (``accepted``)."""
    first = Reply.calls(ORDER, edit=whole(change)) if "beside_a_function" in name else None
    replies = [first or Reply.text(ANSWER, edit=whole(change))] * 2 + [Reply.text(ANSWER)]
    code, out, _ = run_turns(tmp_path, provider, replies, mode="whole", transport=transport)
    assert (code, out["stop_reason"], out["calls"]) == (7, stop, []), out
    assert said in out["message"], out["message"]


STREAMED: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("anthropic", lambda e: [b.update(type="server_tool_use") for b in [e.get("content_block") or {}]
                             if b.get("type") == "tool_use"]),
    ("openai-responses", lambda e: [o.update(type="custom_tool_call", input=o.pop("arguments", ""))
                                    for o in [e.get("item") or {},
                                              *((e.get("response") or {}).get("output") or ())]
                                    if o.get("type") == "function_call"]),
]  # fmt: skip


@pytest.mark.parametrize("transport", ["sdk", "http"])
@pytest.mark.parametrize(("provider", "change"), STREAMED, ids=[c[0] for c in STREAMED])
def test_a_streamed_call_never_offered_is_not_run(
    tmp_path: Path, provider: str, change: Callable[[dict[str, Any]], None], transport: str
) -> None:
    """A stream whose call is a ``server_tool_use`` block, or a ``custom_tool_call`` item, naming
    ``read_order``: never run, the run gives up (exit 7)."""
    replies = [Reply.calls(ORDER, edit=each(change))] * 2 + [Reply.text(ANSWER)]
    code, out, bodies = run_turns(tmp_path, provider, replies, transport=transport)
    assert (code, out["stop_reason"], out["answer"], out["calls"], len(bodies)) == (
        7,
        "model_error",
        None,
        [],
        2,
    )


def anthropic_stream_extras(items: list[Any]) -> list[Any]:
    """A ``server_tool_use`` block (its input streamed) and a ``web_search_tool_result`` block
    before the answer's blocks, and a ``citations_delta`` on each text block."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, dict) and str(item.get("type")).startswith("content_block"):
            item = {**item, "index": item["index"] + 2}
        out.append(item)
        if isinstance(item, dict) and item.get("type") == "message_start":
            out += [
                {"type": "content_block_start", "index": 0,
                 "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                                   "input": {}}},
                {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "input_json_delta", "partial_json": '{"query": "742"}'}},
                {"type": "content_block_stop", "index": 0},
                {"type": "content_block_start", "index": 1,
                 "content_block": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                                   "content": []}},
                {"type": "content_block_stop", "index": 1},
            ]  # fmt: skip
        block = item.get("content_block") if isinstance(item, dict) else None
        if (block or {}).get("type") == "text" and item.get("type") == "content_block_start":
            cite = {"type": "web_search_result_location", "url": "https://x", "cited_text": "x"}
            out.append({"type": "content_block_delta", "index": item["index"],
                        "delta": {"type": "citations_delta", "citation": cite}})  # fmt: skip
    return out


def responses_stream_extras(items: list[Any]) -> list[Any]:
    """``response.web_search_call.*`` events and an ``output_text.annotation.added`` event."""
    out: list[Any] = []
    for item in items:
        out.append(item)
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "response.created":
            out += [{"type": f"response.web_search_call.{step}", "output_index": 0, "item_id": "ws_1"}
                    for step in ("in_progress", "completed")]  # fmt: skip
        if kind == "response.output_text.delta":
            note = {"type": "url_citation", "url": "https://x", "start_index": 0, "end_index": 1}
            out.append({"type": "response.output_text.annotation.added", "item_id": item.get("item_id"),
                        "output_index": 0, "content_index": 0, "annotation_index": 0,
                        "annotation": note})  # fmt: skip
    return out


@pytest.mark.parametrize("transport", ["sdk", "http"])
@pytest.mark.parametrize("call", [False, True], ids=["answer", "call_then_answer"])
@pytest.mark.parametrize(
    ("provider", "edit"),
    [("anthropic", anthropic_stream_extras), ("openai-responses", responses_stream_extras)],
    ids=["anthropic", "openai-responses"],
)
def test_a_streamed_answer_with_harmless_extras_is_accepted(
    tmp_path: Path, provider: str, edit: Edit, call: bool, transport: str
) -> None:
    first = Reply.calls(ORDER, edit=edit) if call else Reply.text(ANSWER, edit=edit)
    replies = [first, Reply.text(ANSWER)] if call else [first]
    code, out, bodies = run_turns(tmp_path, provider, replies, transport=transport)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, len(replies)), (
        out
    )
    assert [c["status"] for c in out["calls"]] == (["ok"] if call else []), out
