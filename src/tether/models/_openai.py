"""A backend for any server that speaks chat completions (OpenAI, vLLM, Ollama, llama.cpp …).

Transport: ``httpx2`` through its public API (default, needs no SDK), or with
``transport="sdk"`` (or ``"openai"``) the official ``openai`` client's low-level ``post``
(``pip install tether[openai]``; see ``tether.models._backend``). Neither path uses the typed
``chat.completions.create``: that re-validates and re-serialises the whole history on every
call, so its cost per step grows with the run. Here every message is encoded to JSON once and
its bytes reused (``bench/overhead.py``: ``tether_no_message_cache``), the tool list is
encoded once per session, and the body is joined from those pieces. Fixed fields come first
and ``messages`` last, so consecutive requests of a session share a byte-identical prefix (C1).

Contract of ``complete``: returns one assistant message (text and/or tool calls, several per
turn) with usage and cost, or raises ``ModelError``; never an empty or half-received answer.
Its finish is reported in tether's words (``meta["finish"]``: an answer cut at ``length``, a
``content_filter`` or a ``refusal`` never passes for a whole one, see ``finish_problem``), and
``timeout_s`` bounds each attempt whole, every byte of the body included. Timeouts, 429
(honouring ``Retry-After``), 5xx, connection errors and *unusable responses* are retried with
capped exponential backoff and jitter; other HTTP errors are not. Unusable means:
a stream that ends without a finish reason (the server died mid-answer; ``[DONE]`` may be
missing: a stream that reached its finish reason is whole),
a stream event that is not JSON or is an ``error`` event, a whole response that is not a chat
completion, and a response with neither text nor tool calls. Once retries are spent the run
ends ``model_error``. A stream's answer is choice 0, else the lowest numbered (as a whole
answer's is), and a completion begun again mid-stream under a new id (a proxy that retried
upstream) starts over (``_Stream``). Tool-call arguments are returned raw — malformed JSON and unknown tool
names are the host gate's business, which hands them back to the model as recoverable errors.

``reasoning_content`` (models that think aloud) is stored on the ``AssistantMessage`` and sent
back according to ``reasoning``:

- ``"drop"`` never resend it (the OpenAI protocol has no such field; DeepSeek R1 asked for this),
- ``"keep"`` resend every assistant message's reasoning unchanged (DeepSeek V4, Kimi K2, GLM-5
  return HTTP 400 when reasoning is missing from a tool-using conversation),
- ``"since_last_user"`` resend only the reasoning after the last user-role message (Qwen3's
  chat template keeps exactly that).

``reasoning=None`` picks the rule from the model name (``reasoning_rule``); unknown models drop.

The API key is read from the environment variable named by ``api_key_env``; it is never part
of ``repr``, error messages or traces (error text is scrubbed of it before it is raised).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, Literal, Unpack

from pydantic_core import to_json

from tether.core.messages import AssistantMessage, Message, ToolCall, ToolMessage, Usage, UserMessage
from tether.errors import ConfigError
from tether.models._backend import BackendOptions, OpenAIBackend, arguments_text
from tether.models._base import (
    MAX_CALL_ID,
    ModelRequest,
    ModelResponse,
    count,
    larger_usage,
    openai_usage,
    short_call_id,
)
from tether.models._content import calls_alike, offered_call, parts_text, refusal_text
from tether.models._failures import is_error
from tether.models._json import loads
from tether.models._memo import ConversationMemo
from tether.models._retrying import Retryable, RetryPolicy, billed, streamed
from tether.models._sse import Ending, ErrorData, named_error, sse_data, until_cut

__all__ = ["OpenAICompatible", "ReasoningRule", "RetryPolicy", "reasoning_rule"]

ReasoningRule = Literal["drop", "keep", "since_last_user"]

# Model-name prefixes -> how their servers want reasoning back (see the module docstring).
_REASONING_RULES: tuple[tuple[str, ReasoningRule], ...] = (
    ("deepseek-reasoner", "drop"),
    ("deepseek-r1", "drop"),
    ("deepseek", "keep"),
    ("kimi", "keep"),
    ("moonshot", "keep"),
    ("glm", "keep"),
    ("qwen3", "since_last_user"),
)


def reasoning_rule(model: str) -> ReasoningRule:
    """The documented default rule for a model name (case-insensitive prefix match)."""
    name = model.lower().rsplit("/", 1)[-1]
    for prefix, rule in _REASONING_RULES:
        if name.startswith(prefix):
            return rule
    return "drop"


def _dumps(value: Any) -> bytes:
    # pydantic-core's encoder: the bytes of json.dumps(value, ensure_ascii=False, separators=(",",
    # ":")) for strings, several times faster on long tool results.
    return to_json(value)


class OpenAICompatible(OpenAIBackend):
    """A ``Model`` that talks to a chat-completions endpoint (``POST {base_url}/chat/completions``).

    ``base_url`` defaults to ``$OPENAI_BASE_URL`` or OpenAI's; the key comes from
    ``$<api_key_env>`` (``OPENAI_API_KEY``; required only for api.openai.com). ``stream_usage``
    asks a stream for its usage; ``reasoning`` is the rule for sending reasoning back (see the
    module docstring); ``cache_bytes`` bounds the encoded-message cache (0: none). A whole response
    costs the client less per step than a stream (one read, one parse) and gives the run the
    same message. The other options are every backend's (``tether.models._backend.HTTPBackend``).
    """

    provider = "openai-chat"
    reserved = frozenset(
        {"model", "messages", "tools", "tool_choice", "stream", "stream_options", "max_tokens"}
    )
    path = "/chat/completions"
    answer_key = "choices"

    def __init__(
        self,
        model: str,
        *,
        stream_usage: bool = True,
        reasoning: ReasoningRule | None = None,
        cache_bytes: int = 8 * 1024 * 1024,
        **options: Unpack[BackendOptions],
    ) -> None:
        super().__init__(model, **options)
        self.stream_usage = stream_usage
        self.reasoning: ReasoningRule = reasoning or reasoning_rule(model)
        if self.reasoning not in ("drop", "keep", "since_last_user"):
            raise ConfigError(f"unknown reasoning rule {self.reasoning!r}")
        # Fixed request fields, encoded once: everything but messages (and the tool part).
        fixed: dict[str, Any] = {"model": model}
        if self.stream:
            fixed["stream"] = True
            if stream_usage:
                fixed["stream_options"] = {"include_usage": True}
        fixed.update(self.extra_body)
        self._fixed = _dumps(fixed)[1:-1]
        if cache_bytes < 0:
            raise ConfigError("cache_bytes must be 0 (no cache) or more")
        # Encoded messages by message identity, least recently used first; bounded by the sum
        # of the encoded sizes, not by a count, so long tool results cannot make it grow unseen.
        # Bytes and messages in two dicts (the same keys), not (message, bytes) pairs: no tuple
        # per message for the garbage collector to walk while it is cached.
        self._cache: dict[int, bytes] = {}
        self._held: dict[int, Message] = {}  # holding the message keeps its id from being reused
        self._cache_bytes = cache_bytes
        self._cache_used = 0
        self._tools: tuple[Any, bytes] = ((), b"")
        # Each conversation's last request and its messages' bytes, bounded by the same limit.
        self._conversations: ConversationMemo[bytes] = ConversationMemo(len, cache_bytes)

    # -- request body -------------------------------------------------------------------------

    def _message_bytes(self, message: Message, keep_reasoning: bool) -> bytes:
        key = id(message) * 2 + keep_reasoning
        cache, held = self._cache, self._held
        hit = cache.pop(key, None)
        if hit is not None:
            if held[key] is message:
                cache[key] = hit  # now the most recently used
                return hit
            self._cache_used -= len(hit)  # a stale entry for a reused id
            del held[key]
        wire = message.wire()
        if isinstance(message, ToolMessage) and len(message.tool_call_id) > MAX_CALL_ID:
            wire["tool_call_id"] = short_call_id(message.tool_call_id)  # another server's long id
        if isinstance(message, AssistantMessage):
            for call in wire.get("tool_calls", ()):
                call["id"] = short_call_id(call["id"])
            if wire.get("content") is None and message.tool_calls:
                # A turn of tool calls only: "" rather than null, which llama.cpp's Python server
                # refuses (its validation wants a string; its chat templates read the field).
                wire["content"] = ""
            if keep_reasoning and message.reasoning:
                wire["reasoning_content"] = message.reasoning
        data = _dumps(wire)
        size = len(data)
        if size > self._cache_bytes:
            return data  # larger than the whole cache: encoded each time, never held
        cache[key] = data
        held[key] = message
        used = self._cache_used + size
        while used > self._cache_bytes:
            oldest = next(iter(cache))  # the least recently used first
            used -= len(cache.pop(oldest))
            del held[oldest]
        self._cache_used = used
        return data

    def _forget(self, message: Message) -> None:
        for key in (id(message) * 2, id(message) * 2 + 1):
            if self._held.get(key) is message:
                del self._held[key]
                self._cache_used -= len(self._cache.pop(key))

    def cache_stats(self) -> dict[str, int]:
        """The encoded-message cache now: ``entries``, ``bytes`` (encoded sizes summed; the
        messages it holds are not counted) and ``limit_bytes``; ``conversations`` and
        ``conversation_bytes``: the last requests kept per conversation (their bytes mostly
        the cache's own objects, counted again here; bounded by ``limit_bytes`` too)."""
        return {
            "entries": len(self._cache),
            "bytes": self._cache_used,
            "limit_bytes": self._cache_bytes,
            "conversations": len(self._conversations),
            "conversation_bytes": self._conversations.bytes,
        }

    def _tool_bytes(self, tools: tuple[dict[str, Any], ...]) -> bytes:
        if self._tools[0] is not tools:
            self._tools = (tools, _dumps(list(tools)))
        return self._tools[1]

    def encode(self, request: ModelRequest) -> bytes:
        """The request body: fixed fields, tools, tool_choice, then messages (append-only)."""
        parts = [b"{", self._fixed]
        if request.tools:
            parts += [
                b',"tools":',
                self._tool_bytes(request.tools),
                b',"tool_choice":',
                _dumps(request.tool_choice),
            ]
        limit = request.max_tokens if request.max_tokens is not None else self.max_tokens
        if limit is not None:
            parts += [b',"max_tokens":', str(int(limit)).encode()]
        parts.append(b',"messages":[')
        encoded = self._encoded_messages(request.messages)
        if encoded:  # the messages and their commas go into the one join: the body is copied once
            joined = [b","] * (2 * len(encoded) - 1)
            joined[::2] = encoded  # interleaved in C, not a Python step per message
            parts += joined
        parts.append(b"]}")
        return b"".join(parts)

    def _encoded_messages(self, messages: tuple[Message, ...]) -> list[bytes]:
        """Each message's bytes. Each conversation's previous request is kept (messages and
        bytes, found by its first message): when this request repeats it (an agent's next
        step: the same history, new messages after it, the status line replaced), only the new
        messages are looked up, so a step costs O(new messages), not O(history), however many
        conversations share the backend. Compared as a tuple: by identity for the same objects,
        by value for equal ones, whose bytes are equal. What these memos hold is bounded by
        ``cache_bytes`` too, the least recently used conversation dropped first."""
        rule = self.reasoning
        if rule == "since_last_user":  # which messages keep their reasoning moves with each user turn
            boundary = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=-1)
            return [
                self._message_bytes(m, i > boundary and isinstance(m, AssistantMessage) and bool(m.reasoning))
                for i, m in enumerate(messages)
            ]
        keep = rule == "keep"
        message_bytes = self._message_bytes
        return self._conversations.pieces(
            tuple(messages),  # a list could change after this call; the memo must not
            lambda m: message_bytes(m, keep and isinstance(m, AssistantMessage) and bool(m.reasoning)),
            on_replaced=self._forget,  # the replaced status line is not asked for again
        )

    # -- responses ----------------------------------------------------------------------------

    def _usage(self, raw: Mapping[str, Any] | None) -> Usage:
        return openai_usage(raw, "prompt", "completion") if raw else Usage()

    def _whole(self, data: dict[str, Any]) -> ModelResponse:
        choice = _answer_choice(data["choices"])  # 0 (n > 1), else the lowest numbered, as a stream's
        wire = _said(choice, "message")
        if not isinstance(wire, dict):
            raise Retryable("unusable_response", f"response has no message: {str(data)[:200]}")
        calls = tuple(
            ToolCall(
                id=str(offered_call(c).get("id") or _call_id()),
                name=str((c.get("function") or {}).get("name") or ""),
                arguments=arguments_text((c.get("function") or {}).get("arguments")),
            )
            for c in _listed(wire.get("tool_calls")) or _legacy_call(wire)
        )
        reasoning = parts_text(wire.get("reasoning_content") or wire.get("reasoning"), any_kind=True)
        content, finish = parts_text(wire.get("content")), choice.get("finish_reason")
        refusal = wire.get("refusal") or refusal_text(wire.get("content"))
        if refusal:  # OpenAI's refusal field, or refusal parts: the answer is a refusal (``_REFUSED``)
            content, finish = content or str(refusal), "refusal"
        message = AssistantMessage(content=content, tool_calls=calls, reasoning=reasoning)
        return self._answer(message, self._usage(data.get("usage")), data.get("model", ""), finish)

    async def _read_stream(self, response: Any) -> ModelResponse:
        stream = _Stream(self.on_delta)
        usage: Usage | None = None
        model = ""
        lines = sse_data(response, self.max_response_bytes)
        # A cut once the finish reason is read loses only usage and [DONE]: the answer is whole
        # (unless content came after the finish: ``Ending``).
        async for line in until_cut(lines, stream.whole):
            if type(line) is ErrorData:
                raise named_error(line, self.failures)
            payload = line.strip()
            if not payload:
                continue  # an event with empty data (a keep-alive) carries nothing
            if payload == b"[DONE]":
                stream.done = True
                break
            try:
                chunk = loads(payload)
            except ValueError:
                why = f"stream event is not JSON: {payload[:200]!r}"
                raise Retryable("stream_unreadable", why) from None
            if not isinstance(chunk, dict):
                raise Retryable("stream_unreadable", f"stream event is not an object: {payload[:200]!r}")
            if is_error(chunk):
                raise self.failures.reported(chunk, "mid-stream")
            model = chunk.get("model") or model
            if chunk.get("usage"):  # the last chunk's, or every chunk's running count: billed if it fails
                billed(usage := larger_usage(usage, self._usage(chunk["usage"])))
            stream.chunk(chunk)
        answer = stream.answer()
        finish = answer.ending.finish
        if finish is None or not stream.whole():  # one that reached its finish is whole, [DONE] or not
            why = "the stream ended without a finish reason" + ("" if stream.done else " and [DONE]")
            if finish is not None:  # out of order: what followed the finish may be cut
                why = "content came after the finish reason, and the stream ended without [DONE]"
            if not stream.choices and stream.unusable:  # as a whole answer with it is refused
                why += f"; no choice had a usable index ({stream.unusable})"
            received = f"{len(''.join(answer.text))} characters of text, {len(answer.calls)} tool call(s)"
            raise Retryable("stream_incomplete", f"{why} (after {received})")
        tool_calls = tuple(
            ToolCall(id=c["id"] or _call_id(), name=c["name"], arguments="".join(c["arguments"]))
            for _, c in sorted(answer.calls.items())
        )
        text = answer.text
        if answer.refused:  # OpenAI's refusal deltas: the answer is a refusal (``_REFUSED``)
            finish = "refusal"
            text = text or answer.refused
        message = AssistantMessage(
            content="".join(text) if text else None,
            tool_calls=tool_calls,
            reasoning="".join(answer.thought) if answer.thought else None,
        )
        meta = {"stream_restarts": stream.restarts} if stream.restarts else {}
        return self._answer(message, usage or Usage(), model, finish, **meta)


# _REFUSED: a turn that says it refused is a refusal, whatever else it carries: tool calls
# beside it are not run (``finish_problem``), as an Anthropic ``refusal`` stop reason's are not.
_Calls = dict[tuple[int, int], dict[str, Any]]  # streamed calls by (index, which call under it)
# The fields of a chunk's delta that carry the answer (one after the finish reason: out of order).
_CARRIES = ("content", "refusal", "reasoning_content", "reasoning", "tool_calls", "function_call")


class _Choice:
    """One choice of a chat stream as its deltas build it: text, reasoning, refusal, calls, and
    how far it has said it ended (``Ending``)."""

    __slots__ = ("calls", "ending", "refused", "text", "thought")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.thought: list[str] = []
        self.refused: list[str] = []
        self.calls: _Calls = {}
        self.ending = Ending()

    def add(self, choice: Mapping[str, Any], on_delta: Any) -> None:
        """A chunk's delta for this choice (``on_delta`` None: not shown, another choice's)."""
        delta = _said(choice, "delta") or {}
        if delta is choice.get("message") and (self.text or self.calls) and isinstance(delta, dict):
            delta = self.repeated(delta)
        ending = self.ending
        if ending.finish is not None and any(delta.get(k) for k in _CARRIES):
            ending.content()  # before its own finish: a chunk may carry both
        ending.said(choice.get("finish_reason"))
        piece = delta.get("content")
        if piece and not isinstance(piece, str):
            if said := refusal_text(piece):  # a list of parts: its refusal parts, if any
                self.refused.append(said)
            piece = parts_text(piece)
        _piece(self.text, piece, "text", on_delta)
        piece = delta.get("refusal")
        if piece:
            self.refused.append(piece)
        piece = parts_text(delta.get("reasoning_content") or delta.get("reasoning"), any_kind=True)
        _piece(self.thought, piece, "reasoning", on_delta)
        legacy = "function_call" in delta and not delta.get("tool_calls")
        calls = _legacy_call(delta) if legacy else _listed(delta.get("tool_calls"))
        if delta is choice.get("message"):  # a whole message's calls: each its own, in order
            calls = [{"index": n, **tc} if isinstance(tc, dict) else tc for n, tc in enumerate(calls)]
        for tc in calls:
            _add_call_delta(self.calls, tc, on_delta)

    def repeated(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """A whole ``message`` in a chunk after deltas said pieces of it (a server that ends the
        stream with the message whole): what the deltas said is not said again (before: its
        text was added again, the answer doubled and accepted); what they did not is returned,
        as a delta; text or calls said otherwise than the deltas said are an unreadable stream."""
        text = parts_text(message.get("content"))
        calls = [c for c in _listed(message.get("tool_calls")) if isinstance(c, dict)]
        fns = [c.get("function") or {} for c in calls]
        listed = [(f.get("name"), arguments_text(f.get("arguments"))) for f in fns]
        said = [(c["name"], "".join(c["arguments"])) for _, c in sorted(self.calls.items())]
        if (text and self.text and text != "".join(self.text)) or (
            listed and said and not calls_alike(listed, said)
        ):
            raise Retryable("stream_unreadable", "a chunk gave the whole message otherwise than its deltas")
        new: dict[str, Any] = {"content": text} if text and not self.text else {}
        if listed and not said:
            new["tool_calls"] = [{"index": n, **c} for n, c in enumerate(calls)]
        return new


class _Stream:
    """A chat stream's choices by ``index``, as its chunks build them. The answer is choice 0,
    else the lowest numbered one (a server that numbers its only choice 1), as a whole answer's
    is (``_answer_choice``); only its pieces are shown (``on_delta``).

    A completion begun again (a proxy that retried upstream mid-stream and sends the new
    completion from its first chunk after what it had passed on of the first) starts the
    choices over, as an Anthropic ``message_start`` does: a chunk under another ``id`` than the
    completion's, once two chunks shared that id (a server that gives every chunk a new id
    never restarts), whose delta opens a turn (``role``, and no finish: ``_opens``). Before, the
    two completions' text ran together and the garbled answer was accepted."""

    __slots__ = ("choices", "done", "id", "on_delta", "restarts", "stable", "unusable")

    def __init__(self, on_delta: Any) -> None:
        self.choices: dict[int, _Choice] = {}
        self.on_delta = on_delta
        self.done = False  # [DONE] came
        self.id: object = None  # the completion's id (its first chunk's)
        self.stable = False  # two chunks shared ``id``: ids name the completion, not the chunk
        self.restarts = 0
        self.unusable = ""  # the first choice index that is no index (``_index``), as written

    def chunk(self, chunk: Mapping[str, Any]) -> None:
        choices = chunk.get("choices") or ()
        said = chunk.get("id")
        if isinstance(said, str) and said:
            if said == self.id:
                self.stable = True
            elif self.id is None:
                self.id = said
            elif self.stable and any(_opens(c) for c in choices):
                self.choices, self.id, self.stable = {}, said, False
                self.restarts += 1
        if len(choices) > 1:
            _once(choices)  # two under one index: garbled, as in a whole answer
        for choice in choices:
            index = _index(choice.get("index"))
            if index is None:  # no usable index: never the answer's choice (``_answer_choice``)
                self.unusable = self.unusable or repr(choice.get("index"))[:80]
                continue
            state = self.choices.get(index)
            if state is None:
                state = self.choices[index] = _Choice()
            shown = index == 0 or index == min(self.choices)
            state.add(choice, self.on_delta if shown else None)

    def answer(self) -> _Choice:
        """The answer's choice: 0, else the lowest numbered (none yet: an empty one)."""
        choices = self.choices
        return choices.get(0) or (choices[min(choices)] if choices else _Choice())

    def whole(self) -> bool:
        return self.done or self.answer().ending.whole()


def _said(choice: Mapping[str, Any], field: str) -> Any:
    """What a choice says: its ``field`` (``message`` in a whole answer, ``delta`` in a chunk),
    else the other where it has only that (a proxy that turns a whole answer into a stream of
    one event holding the ``chat.completion`` whole, or writes a whole answer's message as a
    ``delta``), as an Anthropic ``message_start`` may hold its blocks whole (before: an empty
    answer, or an unusable one, on every try)."""
    said = choice.get(field)
    return choice.get("delta" if field == "message" else "message") if said is None else said


def _opens(choice: Mapping[str, Any]) -> bool:
    """Whether a chunk's choice opens a completion: its delta gives the role, and it says no
    finish (a proxy's own closing chunk under its own id, role and all, ends the completion
    under way; it does not begin another)."""
    return bool((choice.get("delta") or {}).get("role")) and not choice.get("finish_reason")


def _answer_choice(choices: list[Any]) -> Any:
    """A whole answer's choice: index 0 (``n`` > 1, wherever listed), else the lowest numbered
    (a server that numbers its only choice 1), as a stream's is. Where no choice has a usable
    index (``[0]``, ``-1``, ``true``), none is the answer's, as none is in a stream, which then
    ends without a finish reason: an unusable answer (before: the first listed was accepted,
    while the same answer streamed was refused)."""
    numbered = _once(choices)
    if not numbered:
        said = [c.get("index") if isinstance(c, dict) else c for c in choices[:3]]
        raise Retryable("unusable_response", f"no choice has a usable index: {str(said)[:200]}")
    return min(numbered, key=lambda pair: pair[0])[1]


def _once(choices: Any) -> list[tuple[int, Any]]:
    """The choices (a whole answer's, or one chunk's) with a usable index, by it. Two listed
    under one index are a garbled answer, for both readers (which is the answer? before: a
    stream ran the two texts together, a whole answer took the first)."""
    numbered = [(i, c) for c in choices if isinstance(c, dict) and (i := _index(c.get("index"))) is not None]
    if len({i for i, _ in numbered}) < len(numbered):
        why = f"two choices under one index: {sorted(i for i, _ in numbered)[:8]}"
        raise Retryable("unusable_response", why)
    return numbered


def _index(value: object) -> int | None:
    """An ``index`` (a choice's, as both readers take it, a whole answer's and a stream's; a
    streamed tool call's) as a number: a number, or its digits as text (a server that quotes
    it: ``"0"`` is 0, the same as ``0`` in the next chunk); none is 0 (a server that sends only
    one choice and leaves it out); anything else (``true``, ``"first"``) is no index (None):
    never the answer's choice, and a call delta with it is one without an index."""
    try:
        return count(value)
    except ValueError:
        return None


def _piece(into: list[str], piece: str | None, kind: str, on_delta: Any) -> None:
    """A streamed piece of text or reasoning: kept, counted (``_retrying.streamed``), shown."""
    if piece:
        into.append(piece)
        streamed(piece)
        if on_delta is not None:
            on_delta(kind, piece)


def _add_call_delta(calls: _Calls, tc: Mapping[str, Any], on_delta: Any) -> None:
    """One streamed tool-call delta into the call it continues: by ``index``; a server that
    omits it gets the call by id, or the last one when the delta has no id. Under one index, a
    delta with a name and another id after a call whose arguments are whole JSON begins a new
    call (servers that number every parallel call 0); one whose call there is not yet whole is
    an unreadable stream (the two would be read as one call). A name is streamed in pieces or sent
    once; a delta that repeats the whole name so far (some proxies send it in every delta) adds
    none, and one that names the call otherwise once its arguments began, or under its id again,
    is an unreadable stream (two names for one call)."""
    index, fn = tc.get("index"), offered_call(tc).get("function") or {}
    index = None if index is None else _index(index)  # "1" is 1, as in the chunk before
    if index is None:  # the call with its id; without one, the call begun last; else a new one
        ids = {c["id"]: key for key, c in calls.items() if c["id"]}
        last = max(calls, default=(-1, 0))
        key = ids.get(tc["id"], (last[0] + 1, 0)) if tc.get("id") else max(last, (0, 0))
    else:
        key = max((k for k in calls if k[0] == index), default=(index, 0))
        slot = calls.get(key)
        if slot and fn.get("name") and tc.get("id") not in (None, "", slot["id"]):
            if _whole_json(slot):
                key = (index, key[1] + 1)
            elif slot["id"]:  # two calls' names and arguments would run together as one
                why = f"call {tc['id']!r} began at index {index} before call {slot['id']!r} there was whole"
                raise Retryable("stream_unreadable", why)
    slot = calls.get(key)
    if slot is None:
        slot = calls[key] = {"id": "", "name": "", "arguments": []}
    again = bool(tc.get("id")) and tc["id"] == slot["id"]  # the call's id said again
    if tc.get("id"):
        slot["id"] = tc["id"]
    if fn.get("name") and fn["name"] != slot["name"]:  # a name repeated in every delta is said once
        if slot["name"] and (slot["arguments"] or again):
            # Another name for a call already named (its arguments begun, or its id said again):
            # which tool is it? Read as pieces, the two names would join into a third.
            why = f"call {slot['id']!r} named {slot['name']!r} was renamed {fn['name']!r} mid-call"
            raise Retryable("stream_unreadable", why)
        slot["name"] += fn["name"]
        if on_delta is not None:
            on_delta("tool_call", fn["name"])
    if fn.get("arguments"):
        slot["arguments"].append(arguments_text(fn["arguments"]))
        streamed(slot["arguments"][-1])


def _whole_json(call: dict[str, Any]) -> bool:
    """Whether a streamed call's arguments so far are a whole JSON value (the call is done)."""
    try:
        json.loads("".join(call["arguments"]))
    except ValueError:
        return False
    return True


def _listed(calls: Any) -> Any:
    """A message's (or delta's) ``tool_calls``: one call sent as an object, not a list of one (a
    server that writes a single call bare), is that list, as content sent as one part object is
    (``_content.parts_text``); none is no calls; a list as sent."""
    return [calls] if isinstance(calls, dict) else calls or ()


def _legacy_call(message: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """A ``function_call`` (the protocol's older single call, still documented) as a tool call."""
    fn = message.get("function_call")
    return ({"index": 0, "function": fn},) if isinstance(fn, dict) else ()


def _call_id() -> str:
    # Some servers omit ids; a tool result must still name the call it answers.
    return "call_" + uuid.uuid4().hex[:16]
