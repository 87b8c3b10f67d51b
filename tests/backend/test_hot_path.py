"""The per-step caches keep answers identical to a full recomputation (they only save time).

Composing request N must not cost O(history): token estimates, prefix-meter bytes and the
pairing check reuse what they computed for request N-1 (bench/overhead.py measures it)."""

from __future__ import annotations

import pytest

from tether.context.meter import PrefixMeter, common_prefix_len, request_bytes
from tether.context.pairing import ContextIntegrityError, PairingMemo, check_pairing
from tether.context.tokens import TokenAccount, estimate_request
from tether.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from tether.models.base import ModelRequest

TOOLS = ({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},)


def turn(i: int) -> list[Message]:
    return [
        AssistantMessage(tool_calls=(ToolCall(f"c{i}", "lookup", "{}"),)),
        ToolMessage(f"c{i}", "r" * (i + 1)),
    ]


def session(steps: int) -> list[list[Message]]:
    """The message lists of successive requests: append-only, status bar replaced at the end."""
    history: list[Message] = [SystemMessage("s"), UserMessage("q")]
    out = []
    for i in range(steps):
        history += turn(i)
        out.append([*history, UserMessage(f"<agent_status>step {i}</agent_status>", "harness")])
    return out


def test_cached_token_estimates_and_prefix_bytes_equal_the_uncached_ones() -> None:
    tokens: dict[int, tuple[object, int]] = {}
    lines: dict[int, tuple[object, bytes]] = {}
    for messages in session(6):
        request = ModelRequest(messages=tuple(messages), tools=TOOLS)
        assert estimate_request(request, cache=tokens) == estimate_request(request)
        assert request_bytes(request, lines) == request_bytes(request)
    account = TokenAccount()
    assert account.count(request) == estimate_request(request)


def test_prefix_meter_fast_path_measures_like_the_chunked_scan() -> None:
    a, b = b"x" * 10_000, b"x" * 10_000 + b"tail"
    assert common_prefix_len(a, b) == 10_000 == common_prefix_len(b, a)
    assert common_prefix_len(a[:5000] + b"y" + a[5001:], b) == 5000
    meter = PrefixMeter()
    for messages in session(3):
        sample = meter.measure(ModelRequest(messages=tuple(messages), tools=TOOLS))
    assert sample.reuse is not None and 0.9 < sample.reuse < 1.0  # only the status line changed


@pytest.mark.spec("C1")
def test_pairing_memo_still_catches_a_break_after_a_valid_prefix() -> None:
    memo = PairingMemo()
    requests = session(4)
    for messages in requests[:-1]:
        check_pairing(messages, memo=memo)  # valid, incremental
    # Next request: everything the last one held but its replaced status line is known valid.
    assert memo.known_valid(requests[-1]) == len(requests[-2]) - 1
    check_pairing(requests[-1], memo=memo)

    broken = [*requests[-1][:-1], AssistantMessage(tool_calls=(ToolCall("c9", "lookup", "{}"),))]
    with pytest.raises(ContextIntegrityError, match=r"tool calls \['c9'\] have no result"):
        check_pairing(broken, memo=memo)
    stray = [*requests[-1][:-1], ToolMessage("c1", "again")]  # a result re-answering an old call
    with pytest.raises(ContextIntegrityError, match="answers no open call"):
        check_pairing(stray, memo=memo)
    rewritten = [requests[-1][0], UserMessage("q"), *turn(0)[1:]]  # a rewrite that split a pair
    with pytest.raises(ContextIntegrityError, match="without its call"):
        check_pairing(rewritten, memo=memo)
