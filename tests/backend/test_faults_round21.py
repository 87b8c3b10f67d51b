"""A twenty-first round: the run-level paths around a model call, driven as the others are (an
agent file naming ``model.provider`` and ``model.fallback``, ``tether run`` in process and in
its own) against real servers on 127.0.0.1 speaking each protocol.

Fault fixed this round: a call id longer than the 40 characters OpenAI's chat API takes (vLLM
names its calls ``chatcmpl-tool-`` and 32 hex digits, 46 characters), sent back to an OpenAI
chat server after a fallback: the call and its result go with the id cut to 40 characters and a
digest of the whole, the two still paired (before: sent as they came, refused with HTTP 400,
every model failed, ``model_error``; ``_base.short_call_id``, used by the chat encoder). An id
of 40 characters or fewer goes as it came.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS
from test_faults_round10 import run_agent
from test_faults_round12 import ids_in

from tether_testing.fake_server import Reply, scripted

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

VLLM_ID = "chatcmpl-tool-" + "9f" * 16  # 46 characters, as vLLM names a call


def vllm_ids(items: list[Any]) -> list[Any]:
    """Chat: every call's id as vLLM writes it (``chatcmpl-tool-`` and 32 hex digits)."""
    for i in items:
        for choice in i.get("choices") or () if isinstance(i, dict) else ():
            for call in (choice.get("message") or choice.get("delta") or {}).get("tool_calls") or ():
                if call.get("id"):
                    call["id"] = VLLM_ID
    return items


def refuses_long_ids(replies: list[Reply]) -> Any:
    """An OpenAI chat server that, as the API does, refuses a call id or a result's
    ``tool_call_id`` over 40 characters (HTTP 400), or a result that names no call sent."""

    def respond(request: dict[str, Any], index: int) -> Reply:
        calls, results = ids_in("openai-chat", request)
        if any(len(i) > 40 for i in calls + results) or sorted(calls) != sorted(results):
            why = "string too long. Expected a string with maximum length 40"
            return Reply.error(400, f"Invalid 'messages[2].tool_calls[0].id': {why}: {calls} / {results}")
        return replies[index] if index < len(replies) else Reply.error(400, "script exhausted")

    return respond


@pytest.mark.parametrize("transport", ["http", "sdk"])
def test_a_fallback_to_openai_chat_sends_a_long_call_id_as_it_accepts_it(
    tmp_path: Path, transport: str
) -> None:
    """A vLLM-like chat model calls ``read_order`` under a 46-character id, then fails (503,
    retried once); the chain falls back to an OpenAI chat model whose API refuses ids over 40
    characters: the call and its result go under one id of 40 characters, and the run is
    accepted (before: refused, every model failed, ``model_error``). The same id goes back to
    the first server on its retry (every chat server takes it); an id of 40 characters goes to
    the fallback as it came."""
    each: dict[str, Any] = {"max_retries": 1, "timeout_s": 5}
    down = Reply.error(503, "down")
    for edit, kept in ((vllm_ids, False), (None, True)):
        with (
            SERVERS["openai-chat"](scripted([Reply.calls(ORDER, edit=edit), down, down])) as a,
            SERVERS["openai-chat"](refuses_long_ids([Reply.text(ANSWER)])) as b,
        ):
            second = {"provider": "openai-chat", "name": "m-b", "base_url": b.url, "transport": transport}
            model = {
                "provider": "openai-chat",
                "name": "m-a",
                "base_url": a.url,
                "fallback": [{**second, **each}],
            }
            model.update(each)
            code, out, responses = run_agent(tmp_path, model)
            first_id = a.bodies()[1]["messages"][2]["tool_calls"][0]["id"]
            calls, results = ids_in("openai-chat", b.bodies()[0])
        assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER), out
        assert [c["status"] for c in out["calls"]] == ["ok"], out
        assert calls == results == [first_id] and len(first_id) <= 40, (calls, first_id)
        [given] = responses[0]["tool_calls"]
        assert (given["id"] == first_id) == kept and (given["id"] == VLLM_ID) != kept, (given, first_id)
