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
@pytest.mark.parametrize("change", [custom_type, custom_beside_function], ids=["custom", "custom_and_function"])
def test_a_chat_call_of_a_kind_never_offered_is_not_run(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], mode: str, transport: str
) -> None:
    """Each try a ``custom`` call naming ``read_order`` with its ``function`` arguments: none
    runs, the run gives up (exit 7, ``model_error``) saying why (before: the tool ran each turn
    and the run stopped ``repetition``)."""
    replies = [Reply.calls(ORDER, edit=each(change))] * 2 + [Reply.text(ANSWER)]
    code, out, bodies = run_turns(tmp_path, "openai-chat", replies, mode=mode, transport=transport)
    assert (code, out["stop_reason"], out["answer"], out["calls"], len(bodies)) == (7, "model_error", None, [], 2)
    assert "a 'custom' tool call" in out["message"] and "does not offer" in out["message"], out["message"]


@pytest.mark.parametrize("mode", ["stream", "whole"])
def test_a_chat_call_without_a_type_still_runs(tmp_path: Path, mode: str) -> None:
    """The legitimate side: a server that leaves ``type`` out; its call runs, the answer stands."""
    replies = [Reply.calls(ORDER, edit=each(no_type)), Reply.text(ANSWER)]
    code, out, bodies = run_turns(tmp_path, "openai-chat", replies, mode=mode)
    assert (code, out["stop_reason"], out["answer"], len(bodies)) == (0, "accepted", ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["ok"], out
