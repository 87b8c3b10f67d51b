"""Model faults, round thirty: tool calls as models really send them, driven as the other rounds
are (an agent file naming ``model.provider`` and ``tether run`` in process, streamed and whole,
over the SDK transport and plain httpx) against real servers on 127.0.0.1 speaking chat
completions, the Responses API and the Anthropic Messages API.

Fixed here:

- a call whose tool name is no offered tool's but means exactly one: space around it
  (``"read_order\\n"``: no provider takes space in a tool name), a namespace the model wrote
  before it (``functions.read_order``, as OpenAI's models see their tools and open-weight ones
  leak into the name; ``default_api.read_order``, Gemini's; ``mcp__srv__tool``, Claude Code's name
  for what tether offers as ``srv__tool``), or other letter case where one offered name alone
  matches (``Read_Order``). The call was an unknown tool's, refused, the run ending with its
  question unanswered from the tool (exit 2). Read as the offered name now, on every protocol,
  transport and mode, the call still judged by that tool's contract and rules with the
  arguments as sent; ``meta["call_names_read"]`` keeps each ``[sent, read]``
  (``_base.offered_call_names``). Another namespace (``admin.read_order``) or a case match of
  two offered names is still an unknown tool's.

Probed, already honest on every protocol, transport and mode (pinned here where cheap):
arguments that are not one JSON object (double-encoded, an array, ``null``, trailing data, a
Python dict in single quotes, ``NaN``, a key twice, a byte-order mark) are refused by the gate
with their reason, never run; two calls of one answer under one id are a model error, retried;
a name after its arguments in a chat stream is the call's name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, Case, case_params, run_case
from test_faults_round4 import SERVERS4

from tether.core.messages import AssistantMessage, ToolCall, UserMessage
from tether.errors import PolicyError
from tether.models import _base
from tether.models._base import ModelRequest, ModelResponse
from tether.policy._intake import parse_arguments
from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

ARGS = '{"order_id": "742"}'


def called(name: str, arguments: str = ARGS) -> Any:
    """A call of ``name`` with ``arguments``, then the answer."""
    return lambda p, stream: [Reply.calls((name, arguments)), Reply.text(ANSWER), Reply.text(ANSWER)]


READ = [  # fixed: the call runs as the offered tool's
    Case("a_name_with_a_newline_after_it", called("read_order\n"), True),
    Case("a_name_with_space_around_it", called("  read_order "), True),
    Case("a_name_after_functions_dot", called("functions.read_order"), True),
    Case("a_name_after_default_api_dot", called("default_api.read_order"), True),
    Case("a_name_in_other_case", called("Read_Order"), True),
]
REFUSED = [  # pinned: refused by the gate with its reason, the tool never run
    Case("another_namespace", called("admin.read_order"), False, ("unknown tool 'admin.read_order'",)),
    Case("a_double_encoded_object", called("read_order", json.dumps(ARGS)), False, ("not_an_object",)),
    Case("an_array", called("read_order", '["742"]'), False, ("not_an_object",)),
    Case("trailing_data", called("read_order", ARGS + ' {"order_id": "999"}'), False, ("invalid_json",)),
    Case("a_key_twice", called("read_order", '{"order_id": "742", "order_id": "999"}'), False,
         ("duplicate_key",)),
    Case("nan", called("read_order", '{"order_id": NaN}'), False, ("non_standard_json",)),
]  # fmt: skip
WIRE_TEXT = (
    "openai-chat",
    "openai-responses",
)  # arguments sent as the text written (Anthropic's is an object)


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(READ))
def test_a_name_that_means_one_offered_tool_is_read_as_it(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    assert (code, out["stop_reason"], out.get("answer"), requests) == (0, "accepted", ANSWER, 2), out
    assert [(c["tool"], c["status"]) for c in out["calls"]] == [("read_order", "ok")], out


@pytest.mark.parametrize(
    ("case", "provider", "mode", "transport"),
    [p for p in case_params(REFUSED) if p.values[1] in WIRE_TEXT or p.values[0].name == "another_namespace"],
)
def test_arguments_or_names_the_model_did_not_mean_are_refused_never_run(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    assert code == 2 and requests == 2, out
    [call] = out["calls"]
    assert call["status"] == "rejected", out
    for piece in case.said:
        assert piece in out["message"], out["message"]


def _answer(*names: str) -> ModelResponse:
    calls = tuple(ToolCall(f"c{i}", n, ARGS) for i, n in enumerate(names))
    return ModelResponse(message=AssistantMessage(content=None, tool_calls=calls))


def _request(*offered: str) -> ModelRequest:
    tools = tuple({"type": "function", "function": {"name": n, "parameters": {}}} for n in offered)
    return ModelRequest(messages=(UserMessage("q"),), tools=tools)


def test_only_a_name_that_means_exactly_one_offered_tool_is_read_so() -> None:
    request = _request("read_order", "srv__lookup", "delete_order", "DELETE_ORDER", "functions.raw")
    sent = (
        "read_order",  # offered: as it is
        "\tread_order\n",
        "functions.read_order",
        "default_api.read_order",
        "mcp__srv__lookup",
        "READ_ORDER",
        "Delete_Order",  # two offered names match in case: which? unknown
        "admin.read_order",  # another namespace: unknown
        "functions.raw",  # offered with its dot: as it is
        "functions.nothing",  # nothing offered under it
    )
    response = _base.offered_call_names(request, _answer(*sent))
    names = [c.name for c in response.message.tool_calls]
    assert names == [
        "read_order",
        "read_order",
        "read_order",
        "read_order",
        "srv__lookup",
        "read_order",
        "Delete_Order",
        "admin.read_order",
        "functions.raw",
        "functions.nothing",
    ]
    assert response.meta["call_names_read"] == [
        ["\tread_order\n", "read_order"],
        ["functions.read_order", "read_order"],
        ["default_api.read_order", "read_order"],
        ["mcp__srv__lookup", "srv__lookup"],
        ["READ_ORDER", "read_order"],
    ]
    # ids and arguments are the model's as sent
    assert [(c.id, c.arguments) for c in response.message.tool_calls] == [(f"c{i}", ARGS) for i in range(10)]


def test_every_name_offered_or_none_meant_is_the_same_response() -> None:
    request = _request("read_order")
    for answer in (_answer("read_order"), _answer("admin.read_order"), _answer()):
        assert _base.offered_call_names(request, answer) is answer


def test_a_name_read_so_keeps_its_arguments_for_the_gate() -> None:
    bad = ModelResponse(message=AssistantMessage(None, (ToolCall("c0", "functions.read_order", '["742"]'),)))
    [call] = _base.offered_call_names(_request("read_order"), bad).message.tool_calls
    assert call.name == "read_order" and call.arguments == '["742"]'
    with pytest.raises(PolicyError) as err:
        parse_arguments(call.arguments)
    assert err.value.reason == "not_an_object"
