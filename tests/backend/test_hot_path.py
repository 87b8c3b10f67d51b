"""The per-step caches keep answers identical to a full recomputation (they only save time).

Composing request N must not cost O(history): token estimates, prefix-meter bytes and the
pairing check reuse what they computed for request N-1 (bench/overhead.py measures it)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tether.context._compression import CompressionConfig, Compressor
from tether.context._incremental import ItemMemo
from tether.context._meter import PrefixMeter, common_prefix_len, request_bytes
from tether.context._pairing import ContextIntegrityError, PairingMemo, check_pairing
from tether.context._status import CallLimit, StatusBar, StatusConfig
from tether.context._store import FrozenStore
from tether.context._tokens import TokenAccount, estimate_request
from tether.core.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from tether.errors import ConfigError
from tether.models._anthropic import AnthropicMessages
from tether.models._base import ModelRequest
from tether.models._openai import OpenAICompatible
from tether.models._responses import OpenAIResponses
from tether.policy._trusted import TrustedContext
from tether.runs._values import CallRecord, RunState

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


def test_incremental_token_counts_and_prefix_bytes_equal_a_full_recomputation() -> None:
    account, meter = TokenAccount(), PrefixMeter()
    requests = [ModelRequest(messages=tuple(m), tools=TOOLS) for m in session(6)]
    # a rewrite in the middle of the session (compression): the prefix changes, answers must not
    first = requests[0].messages
    requests.insert(
        3, ModelRequest(messages=(first[0], UserMessage("[COMPRESSED] q"), *first[2:]), tools=TOOLS)
    )
    previous = b""
    for request in requests:
        assert account.count(request) == estimate_request(request)
        sample = meter.measure(request)
        data = request_bytes(request)
        assert sample.request_bytes == len(data)
        assert sample.common_bytes == (common_prefix_len(previous, data) if previous else 0)
        previous = data


def test_item_memo_computes_each_object_once() -> None:
    seen: list[object] = []
    memo: ItemMemo[int] = ItemMemo(lambda item: seen.append(item) or 1)
    a, b, c, d = (UserMessage(x) for x in "abcd")
    assert memo.values([a, b, c]) == [1, 1, 1]
    assert memo.values([a, b, d]) == [1, 1, 1]  # tail replaced
    assert memo.values([a, b, d, a]) == [1, 1, 1, 1]  # appended; a is cached
    assert seen == [a, b, c, d]
    # a replaced tail (the status line of the step before) is not held for the rest of the run
    statuses = [UserMessage(f"status {i}") for i in range(50)]
    for status in statuses:
        assert memo.values([a, b, d, status]) == [1] * 4
    assert len(memo._held) <= 4 and seen[-50:] == statuses
    assert memo.values([a, b, d, statuses[0]]) == [1] * 4 and seen[-1] is statuses[0]  # computed again


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


def test_encoded_message_cache_stays_within_its_byte_bound_and_still_hits() -> None:
    limit = 10_000  # about four 2 KB tool results
    backend = OpenAICompatible("m", base_url="http://127.0.0.1:9", cache_bytes=limit)
    uncached = OpenAICompatible("m", base_url="http://127.0.0.1:9", cache_bytes=0)
    history: list[Message] = [SystemMessage("s"), UserMessage("q")]
    for i in range(30):
        history += [
            AssistantMessage(tool_calls=(ToolCall(f"c{i}", "lookup", "{}"),)),
            ToolMessage(f"c{i}", "r" * 2048),
        ]
        request = ModelRequest(messages=tuple(history), tools=TOOLS)
        assert backend.encode(request) == uncached.encode(request)  # the cache never changes the body
        stats = backend.cache_stats()
        assert 0 < stats["bytes"] <= limit and stats["limit_bytes"] == limit
        assert stats["bytes"] == sum(len(data) for data in backend._cache.values())
        assert backend._cache.keys() == backend._held.keys()
    assert uncached.cache_stats() == {
        "entries": 0,
        "bytes": 0,
        "limit_bytes": 0,
        "conversations": 0,
        "conversation_bytes": 0,
    }
    assert backend.cache_stats()["conversation_bytes"] <= limit  # this history is larger: not kept
    # the newest message is a hit: the very same bytes object comes back, nothing re-encoded
    newest = history[-1]
    first = backend._message_bytes(newest, False)
    assert backend._message_bytes(newest, False) is first
    # a message read again becomes the most recently used, so it outlives newer ones
    system = history[0]
    held = backend._message_bytes(system, False)
    for i in range(6):
        backend._message_bytes(ToolMessage(f"x{i}", "y" * 1500), False)
        assert backend._message_bytes(system, False) is held
    assert backend._message_bytes(newest, False) is not first  # evicted meanwhile, encoded anew
    # a message larger than the whole cache is encoded but never held
    before = backend.cache_stats()
    big = ToolMessage("big", "z" * (limit + 1))
    assert len(backend._message_bytes(big, False)) > limit
    assert backend.cache_stats()["bytes"] <= limit and all(m is not big for m in backend._held.values())
    assert backend.cache_stats()["entries"] == before["entries"]


def test_cache_bytes_must_not_be_negative() -> None:
    with pytest.raises(ConfigError):
        OpenAICompatible("m", base_url="http://127.0.0.1:9", cache_bytes=-1)


def test_status_counts_kept_up_to_date_equal_a_recount() -> None:
    limits = (CallLimit("call", 2, per="company"), CallLimit("lookup", 5))
    bar = StatusBar(StatusConfig(limits=limits, show_time=False))
    bar.targets = {"lookup": "key"}
    state = RunState("r", "q", TrustedContext(tenant="t"), 0.0, datetime.now(UTC))
    records = [
        CallRecord("1", "lookup", {"key": "a"}, "ok"),
        CallRecord("2", "call", {"company": "Acme"}, "ok"),
        CallRecord("3", "lookup", "{bad", "rejected", "invalid json"),
        CallRecord("4", "call", {"company": "Acme"}, "error", "upstream_error"),
        CallRecord("5", "delete", {}, "denied", "not allowed"),
        CallRecord("6", "lookup", {"key": "b"}, "ok"),
    ]
    for record in records:
        state.calls.append(record)
        fresh = StatusBar(StatusConfig(limits=limits, show_time=False))
        fresh.targets = dict(bar.targets)
        assert bar.render(state) == fresh.render(state)  # counted from the new records only
    state.calls = records[:2]  # a list replaced (a resumed run): counted again from the start
    fresh = StatusBar(StatusConfig(limits=limits, show_time=False), targets={"lookup": "key"})
    assert bar.render(state) == fresh.render(state) and "refused" not in bar.render(state)


def test_frozen_view_keeps_one_object_per_rewrite() -> None:
    store = FrozenStore()
    compressor = Compressor(CompressionConfig(), store=store)
    history: list[Message] = [SystemMessage("s"), UserMessage("q"), *turn(0), *turn(1)]
    first = compressor.view(history)
    assert first == history and all(a is b for a, b in zip(first, history, strict=True))
    store.freeze("tool:c0", "[COMPRESSED] r")
    second, third = compressor.view(history), compressor.view([*history, *turn(2)])
    assert second[3] == ToolMessage("c0", "[COMPRESSED] r") and second[3] is third[3]  # not a new object
    assert [m for i, m in enumerate(second) if i != 3] == [m for i, m in enumerate(history) if i != 3]


@pytest.mark.parametrize("reasoning", ["drop", "keep", "since_last_user"])
def test_request_bodies_reusing_the_previous_request_equal_a_fresh_encoding(reasoning: str) -> None:
    backend = OpenAICompatible("m", base_url="http://127.0.0.1:9", reasoning=reasoning)  # type: ignore[arg-type]

    def fresh(request: ModelRequest) -> bytes:
        return OpenAICompatible(
            "m", base_url="http://127.0.0.1:9", reasoning=reasoning, cache_bytes=0
        ).encode(  # type: ignore[arg-type]
            request
        )

    a, b = session(5), session(3)
    thought = [AssistantMessage("why", reasoning="because"), UserMessage("go on")]
    requests = [
        *a[:3],
        [*a[2][:-1], *thought],  # a different tail after the same history
        [a[2][0], UserMessage("[COMPRESSED] q"), *a[2][2:]],  # a rewrite in the middle
        [*(SystemMessage(m.content) if isinstance(m, SystemMessage) else m for m in a[3])],  # equal, not same
        b[0],  # another conversation in between
        a[4],
        list(a[4]),  # a list, as a caller may pass one, then changed: never reused as it was
    ]
    for messages in requests:
        request = ModelRequest(messages=tuple(messages), tools=TOOLS)
        assert backend.encode(request) == fresh(request)
    mutable = list(a[4])
    backend.encode(ModelRequest(messages=mutable, tools=TOOLS))  # type: ignore[arg-type]
    mutable[2] = ToolMessage("c0", "changed")
    assert backend.encode(ModelRequest(messages=mutable, tools=TOOLS)) == fresh(  # type: ignore[arg-type]
        ModelRequest(messages=tuple(mutable), tools=TOOLS)
    )


def test_interleaved_conversations_each_encode_only_their_new_messages() -> None:
    # A backend shared by concurrent runs sees their requests interleaved; each conversation's
    # previous request is still found, so a step looks up its new messages only.
    backend = OpenAICompatible("m", base_url="http://127.0.0.1:9")
    fresh = OpenAICompatible("m", base_url="http://127.0.0.1:9", cache_bytes=0)
    looked_up: list[Message] = []
    lookup = backend._message_bytes

    def counted(message: Message, keep: bool) -> bytes:
        looked_up.append(message)
        return lookup(message, keep)

    backend._message_bytes = counted  # type: ignore[method-assign]
    conversations = [session(6) for _ in range(5)]
    for step in range(6):
        for requests in conversations:
            looked_up.clear()
            request = ModelRequest(messages=tuple(requests[step]), tools=TOOLS)
            assert backend.encode(request) == fresh.encode(request)
            new = requests[step] if step == 0 else requests[step][len(requests[step - 1]) - 1 :]
            assert looked_up == new  # the turn's two messages and the new status line
    assert backend.cache_stats()["conversations"] == 5
    # a replaced status line leaves the cache: only each conversation's current one is held
    held = [m for m in backend._held.values() if isinstance(m, UserMessage) and "agent_status" in m.content]
    assert len(held) == 5 and backend._cache.keys() == backend._held.keys()
    assert backend.cache_stats()["bytes"] == sum(map(len, backend._cache.values()))


def test_conversation_memos_stay_within_the_byte_bound() -> None:
    limit = 20_000
    backend = OpenAICompatible("m", base_url="http://127.0.0.1:9", cache_bytes=limit)
    for _ in range(30):
        history: list[Message] = [SystemMessage("s"), UserMessage("q"), ToolMessage("c", "x" * 3000)]
        backend.encode(ModelRequest(messages=tuple(history), tools=TOOLS))
        stats = backend.cache_stats()
        assert stats["conversation_bytes"] <= limit and stats["conversations"] <= limit // 3000
    assert backend.cache_stats()["conversations"] > 1


@pytest.mark.parametrize("backend_type", [AnthropicMessages, OpenAIResponses])
def test_native_backends_encode_each_step_as_a_fresh_backend_would(backend_type: type[Any]) -> None:
    # Two conversations interleaved on one backend, each step replacing its status line and one
    # step rewriting its history (compression): every body equals a fresh backend's, whose memo is
    # empty, and each message is encoded once per conversation while the prefix holds.
    def steps(label: str) -> list[tuple[Message, ...]]:
        history: list[Message] = [SystemMessage(f"Look things up ({label})."), UserMessage("go")]
        out = []
        for i in range(6):
            history += turn(i)
            out.append((*history, UserMessage(f"status {label} {i}", origin="harness")))
        out.append((history[0], UserMessage("summary of the run so far"), *turn(9)))  # rewritten
        return out

    kept = backend_type("m", base_url="http://127.0.0.1:9", transport="http")
    encoded: list[object] = []
    piece = kept._piece
    kept._piece = lambda m, *prev: encoded.append(m) or piece(m, *prev)
    a, b = steps("a"), steps("b")
    for request in (r for pair in zip(a, b, strict=True) for r in pair):
        fresh = backend_type("m", base_url="http://127.0.0.1:9", transport="http")
        assert kept.encode(ModelRequest(request, TOOLS)) == fresh.encode(ModelRequest(request, TOOLS))
    repeated = [m for m in encoded if not (isinstance(m, UserMessage) and m.origin == "harness")]
    rewritten = 2 + len(turn(9))  # a rewritten history is encoded anew, its first message too
    assert len(repeated) == 2 * (len(a[-2]) - 1 + rewritten)
    assert len(kept._memo) == 2 and kept._memo.bytes <= kept._memo.limit_bytes
