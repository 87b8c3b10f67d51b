"""Model faults, round twenty-seven: held-out shapes driven as the other rounds are (an agent
file naming ``model.provider``, ``tether run`` in process, streamed and whole, over the SDK
transport and plain httpx) against real servers on 127.0.0.1 speaking chat completions, the
Responses API and the Anthropic Messages API.

Fixed here:

- a model that answers a call to a tool name of 50,000 characters (no offered tool's): the call
  was refused as an unknown tool (round 26), but the run kept the whole name wherever it
  named the call: the call's ``reason``, the summary's ``calls`` and ``message`` (300 KB of
  JSON), the trace's ``model_response``, ``tool_proposed`` and ``tool_error`` events (200 KB),
  and the history sent back on every later turn (25,000 tokens more each turn, paid for). A
  name longer than every offered name (and than ``_base.MAX_ANSWERED_NAME``) is now kept as
  its start, its length and a digest (``_base.shown_call_names``): still no offered tool's, so
  refused and never run, the model's answer after it standing, the run flagged (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_faults_heldout import ANSWER, ORDER, Case, Make, case_params, run_case

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]


def named(name: str) -> Make:
    """A call to ``name``, then the answer."""
    return lambda p, s: [Reply.calls((name, ORDER[1])), Reply.text(ANSWER)]


LONG = "read_order" * 5000  # 50,000 characters
NAMES = [
    Case("a_tool_name_of_50000_characters", named(LONG), False),
    Case("a_long_name_with_control_characters", named("\x1b[2J" + LONG), False),
]


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(NAMES))
def test_a_call_to_a_name_of_50_kb_is_refused_and_kept_bounded(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    """The call is refused as an unknown tool and never run, the run flagged (exit 2, the
    answer after it standing); what the run keeps of the name is bounded and says how long it
    was: the call's reason, the summary, every trace event."""
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, transport)
    assert (code, out["stop_reason"], out["answer"], requests) == (2, "accepted", ANSWER, 2), out
    assert "did not run" in out["message"], out["message"]
    [call] = out["calls"]
    assert call["status"] == "rejected" and "unknown tool" in call["reason"], call
    assert " characters, sha256 " in call["reason"] and len(call["reason"]) < 400, call["reason"]
    assert "\x1b" not in call["reason"]  # escaped, as before (the human view escapes all)
    assert len(json.dumps(out)) < 4000, len(json.dumps(out))
    [trace] = (tmp_path / "traces").glob("*.jsonl")
    events = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert all(len(json.dumps(e)) < 2000 for e in events), [len(json.dumps(e)) for e in events]
    proposed = [e for e in events if e["kind"] == "tool_proposed"]
    assert len(proposed) == 1 and " characters, sha256 " in proposed[0]["tool"], proposed
    # the next request carried the bounded name back, not 50 KB
    composed = [e["request_bytes"] for e in events if e["kind"] == "context_composed"]
    assert len(composed) == 2 and composed[1] < composed[0] + 2000, composed


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(
    [Case("an_unknown_name_of_256_characters", named("r" * 256), False, modes=("stream",))]))  # fmt: skip
def test_an_unknown_name_within_the_bound_is_kept_whole(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    """A name no longer than ``MAX_ANSWERED_NAME`` (256) is kept as it came: refused as an
    unknown tool under its own name."""
    code, out, _, _ = run_case(tmp_path, provider, case, mode, transport)
    assert code == 2 and out["calls"][0]["reason"] == f"unknown tool {'r' * 256!r}", out


def test_a_name_no_longer_than_an_offered_one_is_kept_and_one_past_all_is_stable() -> None:
    """The bound rises to the longest name offered, in any protocol's shape (a host tool named
    past 256 characters still gets its calls); a name past every one is shown the same way each
    time (a stream and its retry name the same call)."""
    from tether.core.messages import AssistantMessage, ToolCall, UserMessage
    from tether.models._base import ModelRequest, ModelResponse, shown_call_names

    long, longer = "t" * 400, "t" * 401
    reply = ModelResponse(AssistantMessage("", (ToolCall("c1", long, "{}"), ToolCall("c2", longer, "{}"))))
    for tools in ({"type": "function", "function": {"name": long}}, {"name": long, "input_schema": {}}):
        request = ModelRequest((UserMessage("hi"),), tools=(tools,))
        kept, again = shown_call_names(request, reply), shown_call_names(request, reply)
        first, second = (c.name for c in kept.message.tool_calls)
        assert first == long and second.startswith("t" * 64 + "…[401 characters, sha256 "), second
        assert kept == again and kept.meta["call_names_shortened"] == [[second, 401]]
    plain = ModelResponse(AssistantMessage("", (ToolCall("c1", "read_order", "{}"),)))
    assert shown_call_names(ModelRequest((UserMessage("hi"),)), plain) is plain
