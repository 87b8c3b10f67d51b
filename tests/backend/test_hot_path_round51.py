"""Pins for perf round 51's per-step cuts. Each cut skips work only where its result was known
not to change anything, so each test checks both: the skipped work is not done on the common
path (a spy that fails if it runs), and the uncommon path still gets it (a 50 KB tool name; a
rate limit under any name of the tool)."""

from __future__ import annotations

from typing import Any

import pytest

from tether import Host
from tether.chokepoint import _authority
from tether.core.messages import AssistantMessage, ToolCall, UserMessage
from tether.core.ratelimit import TokenBucket
from tether.core.types import Effect, ToolSpec
from tether.models import _base
from tether.models._base import ModelRequest, ModelResponse, shown_call_names

# -- the backend: a call's name against the offered tools' ----------------------------------


def _answer(name: str) -> ModelResponse:
    return ModelResponse(AssistantMessage("", (ToolCall("c", name, "{}"),)))


def test_short_call_names_are_kept_without_reading_the_offered_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tuple({"type": "function", "function": {"name": f"t{i}"}} for i in range(50))
    request = ModelRequest((UserMessage("go"),), tools=tools)
    response = _answer("lookup")

    def refused(tools: Any) -> list[str]:
        raise AssertionError("offered names read")

    with monkeypatch.context() as patched:
        patched.setattr(_base, "_offered_names", refused)
        assert shown_call_names(request, response) is response
        assert shown_call_names(request, _answer("x" * _base.MAX_ANSWERED_NAME)).message.tool_calls[
            0
        ].name == ("x" * _base.MAX_ANSWERED_NAME)
    huge = shown_call_names(request, _answer("x" * 50_000))
    (call,) = huge.message.tool_calls
    assert len(call.name) < 200 and "50000 characters" in call.name
    assert huge.meta["call_names_shortened"] == [[call.name, 50_000]]
    # An offered name longer than the least limit still keeps a call of that name whole.
    long_name = "y" * 300
    offered = ModelRequest((UserMessage("go"),), tools=({"name": long_name},))
    assert shown_call_names(offered, _answer(long_name)).message.tool_calls[0].name == long_name


# -- the chokepoint: rate limits ------------------------------------------------------------

SPEC = ToolSpec(
    "erp__refund", "Refund.", {"type": "object"}, Effect.WRITE, source="erp", remote_name="refund"
)


def test_no_name_is_folded_for_rate_limits_when_none_are_set(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(name: str) -> str:
        raise AssertionError("folded")

    monkeypatch.setattr(_authority, "folded", refused)
    assert Host()._buckets(SPEC, "erp") == []


def test_a_rate_limit_under_any_name_of_the_tool_still_applies() -> None:
    by_remote, by_source = TokenBucket(rate=1.0), TokenBucket(rate=2.0)
    host = Host(rate_limits={"Refund": by_remote, "ERP": by_source})
    assert host._buckets(SPEC, "erp") == [by_remote, by_source]
    later = Host()
    later.rate_limits["erp__REFUND"] = by_remote  # a limit set after the host was built holds too
    assert later._buckets(SPEC, "erp") == [by_remote]
