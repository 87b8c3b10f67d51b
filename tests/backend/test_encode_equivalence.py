"""The native backends' incremental encoders (``ConversationMemo``) send the bytes the
straightforward encoder would: every message encoded anew, the body built in one pass. Checked
over many generated conversations, each step a request of its own conversation, several
conversations interleaved on one backend: appended turns, a replaced status line, system
messages mid-history, consecutive user-role messages, thinking blocks, a rewritten history."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from pydantic_core import to_json

from tether.core.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from tether.models._anthropic import (
    _CACHE_CONTROL,
    _ROLES,
    DEFAULT_MAX_TOKENS,
    AnthropicMessages,
)
from tether.models._base import ModelRequest
from tether.models._responses import OpenAIResponses

TOOLS = ({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},)
URL = "http://127.0.0.1:9"


def anthropic_reference(backend: AnthropicMessages, request: ModelRequest) -> bytes:
    """The Anthropic body built the straightforward way: every message's blocks encoded, the
    turns merged, the breakpoints placed, in one pass over the history."""
    messages = request.messages
    system: list[bytes] = []
    turns: list[tuple[str, list[bytes]]] = []
    stable_end: tuple[int, int] | None = None
    tail = len(messages)
    while tail and getattr(messages[tail - 1], "origin", None) == "harness":
        tail -= 1
    for i, message in enumerate(messages):
        role, blocks = backend._message_blocks(message)
        encoded = [to_json(block) for block in blocks]
        if role == "system":
            system.extend(encoded)
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(encoded)
        else:
            turns.append((role, encoded))
        if i < tail:
            stable_end = (len(turns) - 1, len(turns[-1][1]) - 1)
    if backend.cache and system:
        system[-1] = system[-1][:-1] + _CACHE_CONTROL
    if backend.cache and stable_end is not None:
        t, b = stable_end
        turns[t][1][b] = turns[t][1][b][:-1] + _CACHE_CONTROL
    limit = request.max_tokens if request.max_tokens is not None else backend.max_tokens
    cap = limit or DEFAULT_MAX_TOKENS + (backend.thinking_budget or 0)
    parts = [b'{"model":', to_json(backend.model), b',"max_tokens":', str(int(cap)).encode()]
    if system:
        parts += [b',"system":[', b",".join(system), b"]"]
    params: dict[str, Any] = {}
    tools = request.tools
    if not tools and any(isinstance(m, AssistantMessage) and m.tool_calls for m in messages):
        tools = backend._tools[0]
    if tools:
        params["tools"] = backend._tool_defs(tools)
        params["tool_choice"] = {"type": "none" if not request.tools else request.tool_choice}
    if backend.thinking_budget and cap > backend.thinking_budget:
        params["thinking"] = {"type": "enabled", "budget_tokens": backend.thinking_budget}
    params.update(backend.extra_body)
    if backend.stream:
        params["stream"] = True
    if params:
        parts += [b",", to_json(params)[1:-1]]
    body = b"".join(parts) + b',"messages":['
    body += b",".join(
        b'{"role":"' + _ROLES[role] + b'","content":[' + b",".join(blocks) + b"]}" for role, blocks in turns
    )
    return body + b"]}"


def responses_reference(backend: OpenAIResponses, request: ModelRequest) -> bytes:
    """The Responses body built the straightforward way: the system prompts joined as
    ``instructions``, every message's items encoded, in one pass over the history."""
    instructions = [m.content for m in request.messages if isinstance(m, SystemMessage)]
    params: dict[str, Any] = {"model": backend.model}
    if instructions:
        params["instructions"] = "\n\n".join(instructions)
    if request.tools:
        params["tools"] = backend._tool_defs(request.tools)
        params["tool_choice"] = request.tool_choice
    params["store"] = backend.store
    params["prompt_cache_key"] = backend._cache_key(params.get("instructions", ""))
    items = [
        to_json(item)
        for m in request.messages
        if not isinstance(m, SystemMessage)
        for item in backend._message_items(m)
    ]
    return to_json(params)[:-1] + b',"input":[' + b",".join(items) + b"]}"


def message(rng: random.Random, n: int) -> list[Message]:
    """One or two messages of a random kind."""
    kind = rng.randrange(7)
    text = rng.choice(["", " ", "plain", "é ünïcode \u2028", 'quote " and \\ slash', "x" * rng.randrange(50)])
    if kind == 0:
        return [SystemMessage(f"system {n} {text}")]
    if kind == 1:
        return [UserMessage(text)]
    if kind == 2:
        return [UserMessage(f"<agent_status>{n}</agent_status>", origin="harness")]
    calls = tuple(
        ToolCall(f"c{n}_{k}", "lookup", rng.choice(["{}", '{"key": "k"}', "not json", "[1]", ""]))
        for k in range(rng.randrange(3))
    )
    items: tuple[dict[str, Any], ...] = ()
    if rng.random() < 0.3:
        items = (
            {"provider": "anthropic", "type": "thinking", "thinking": "hm", "signature": "sig"},
            {"provider": "openai-responses", "type": "reasoning", "id": f"rs_{n}", "summary": []},
        )
    turn: list[Message] = [AssistantMessage(content=text or None, tool_calls=calls, provider_items=items)]
    return turn + [ToolMessage(c.id, f"result {c.id} {text}") for c in calls]


def conversation(rng: random.Random) -> list[tuple[Message, ...]]:
    """A session's requests: each appends messages, replaces the status line or (rarely)
    rewrites the history."""
    history: list[Message] = [SystemMessage("You look things up."), UserMessage("go")]
    if rng.random() < 0.2:
        history = history[1:]  # no system prompt
    out = []
    for n in range(rng.randrange(1, 14)):
        for _ in range(rng.randrange(3)):
            history += message(rng, n)
        if rng.random() < 0.1 and len(history) > 2:
            history = [history[0], UserMessage("summary"), *history[-2:]]  # rewritten
        status = [UserMessage(f"status {n}", origin="harness")] if rng.random() < 0.7 else []
        out.append((*history, *status))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_anthropic_incremental_body_equals_the_straightforward_one(seed: int) -> None:
    rng = random.Random(seed)
    options: dict[str, Any] = {
        "cache": rng.random() < 0.8,
        "thinking_budget": rng.choice([None, 1024]),
        "stream": rng.random() < 0.5,
        "max_tokens": rng.choice([None, 512, 8192]),
    }
    kept = AnthropicMessages("m", base_url=URL, transport="http", **options)
    reference = AnthropicMessages("m", base_url=URL, transport="http", **options)
    sessions = [conversation(rng) for _ in range(4)]
    steps = [r for step in range(14) for s in sessions if step < len(s) for r in [s[step]]]
    for messages in steps:
        request = ModelRequest(messages, TOOLS if rng.random() < 0.9 else ())
        body = kept.encode(request)
        assert body == anthropic_reference(reference, request)
        json.loads(body)  # and it is JSON
    assert kept._memo.bytes <= kept._memo.limit_bytes


@pytest.mark.parametrize("seed", range(20))
def test_responses_incremental_body_equals_the_straightforward_one(seed: int) -> None:
    rng = random.Random(seed)
    kept = OpenAIResponses("m", base_url=URL, transport="http")
    reference = OpenAIResponses("m", base_url=URL, transport="http")
    sessions = [conversation(rng) for _ in range(4)]
    steps = [r for step in range(14) for s in sessions if step < len(s) for r in [s[step]]]
    for messages in steps:
        request = ModelRequest(messages, TOOLS)
        assert kept.encode(request) == responses_reference(reference, request)


def test_an_empty_or_system_only_conversation_encodes_as_before() -> None:
    backend = AnthropicMessages("m", base_url=URL, transport="http")
    for messages in [(), (SystemMessage("s"),), (SystemMessage("s"), SystemMessage("t"))]:
        request = ModelRequest(messages, TOOLS)
        assert backend.encode(request) == anthropic_reference(backend, request)
