"""A backend for the Anthropic Messages API: over ``httpx2`` (default), or with
``transport="sdk"`` on the official ``anthropic`` SDK (``pip install 'tether[anthropic]'``;
imported on first use); the same body and the same answer either way (``tether.models._backend``).

The request: tool definitions as ``input_schema`` tools, the system prompt as a ``system``
block, tool results as ``tool_result`` blocks in the user turn that follows the calls
(consecutive user-role messages merged into one turn, results first), each call's id as the
API accepts one (``_tool_id``: another provider's, before a fallback, rewritten). Two ``cache_control``
breakpoints: at the end of the composer's stable prefix (tools, then the system prompt) and
at the end of the trajectory, before the dynamic tail (trailing status messages), so each
step reads the previous step's prefix from Anthropic's cache. Each message's blocks are built
the same way on every step, so the prefix is byte-identical across turns.

The answer: text, ``tool_use`` blocks (their input as the raw JSON the model wrote when
streamed: partial-JSON deltas joined, never re-parsed), ``thinking`` and ``redacted_thinking``
blocks. Thinking blocks are kept on the message (``provider_items``) with their signatures and
sent back unchanged before the turn's other blocks, as the API requires when a thinking model
uses tools; one without its signature (``redacted_thinking`` without its data) cannot be: a
turn of calls with one is retried (the API would refuse the next request), a final answer's is
not kept (``meta["reasoning_not_kept"]``). Usage maps to ``prompt_tokens`` = input + cache
reads + cache writes (Anthropic counts the three apart), ``cached_tokens`` = cache reads,
``cache_write_tokens`` in the usage's extra; the price table prices each
(``Price.cache_write``). A stream's output count is ``message_delta``'s (``message_start``'s is
the count so far); one that never gives it has it estimated.

Errors: 429 (``retry-after`` honoured), 5xx, 529 ``overloaded_error``, an ``error`` event in
the stream (``overloaded_error``, ``api_error``), a stream that ends before ``message_delta``
gave its stop reason (one that ends or is cut after it, without ``message_stop``, is whole, as
a chat stream past its finish reason is) and a turn with neither text nor a tool call are
retried (``tether.models._retrying``); other
statuses are final. ``stop_reason`` is kept and mapped (``end_turn`` → stop, ``max_tokens`` →
length, ``refusal`` → refused, ``pause_turn`` → paused …): a final answer that did not end
normally never ends the run ``accepted`` (``tether.models._base.finish_problem``).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from operator import itemgetter
from typing import Any, Unpack

from pydantic_core import to_json

from tether.core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from tether.models._backend import BackendOptions, HTTPBackend, arguments_text
from tether.models._base import MAX_COUNT, ModelRequest, ModelResponse, count, halved, may_hold_half
from tether.models._content import block_said, streamed_input, text_of
from tether.models._content import listed_blocks as _listed
from tether.models._content import piece as _piece
from tether.models._memo import ConversationMemo
from tether.models._retrying import Retryable, billed, streamed
from tether.models._sse import Ending, events, until_cut

__all__ = ["AnthropicMessages"]

PROVIDER = "anthropic"
# The ``anthropic-version`` header on the "http" transport: the version the official SDK pins
# (anthropic 2.15), so both transports speak the same API (tests compare their headers).
API_VERSION = "2026-10-21"
DEFAULT_MAX_TOKENS = 4096  # the Messages API requires a cap on every response
_CACHE_CONTROL = b',"cache_control":{"type":"ephemeral"}}'
_ROLES = {"user": b"user", "assistant": b"assistant"}
# A message's piece: the role of the turn open after it (b"": none yet), its segment of the
# ``messages`` array (b"" for a system message), the system blocks so far, its own bytes.
_Piece = tuple[bytes, bytes, tuple[bytes, ...], int]
_segment = itemgetter(1)
_size = itemgetter(3)


class AnthropicMessages(HTTPBackend):
    """A ``Model`` on the Anthropic Messages API (``POST {base_url}/v1/messages``).

    ``base_url`` defaults to ``$ANTHROPIC_BASE_URL`` or Anthropic's; the key comes from
    ``$<api_key_env>`` (``ANTHROPIC_API_KEY``; required for api.anthropic.com only).
    ``max_tokens`` caps each response (the API requires one; default 4096, plus the thinking
    budget) unless the request sets its own. ``thinking_budget`` turns extended thinking on with
    that many tokens (a turn capped under it is asked without thinking). ``cache`` places the
    ``cache_control`` breakpoints (on by default). The other options are every backend's
    (``tether.models._backend.HTTPBackend``).
    """

    provider = PROVIDER
    base_url_env = "ANTHROPIC_BASE_URL"
    default_base_url = "https://api.anthropic.com"
    default_key_env = "ANTHROPIC_API_KEY"
    reserved = frozenset(
        {"model", "messages", "system", "tools", "tool_choice", "stream", "max_tokens", "thinking"}
    )
    path = "/v1/messages"
    answer_key = "content"
    sdk = ("anthropic", "AsyncAnthropic")
    default_transport = "sdk"

    def __init__(
        self,
        model: str,
        *,
        thinking_budget: int | None = None,
        cache: bool = True,
        **options: Unpack[BackendOptions],
    ) -> None:
        super().__init__(model, **options)
        self.thinking_budget = thinking_budget
        self.cache = cache
        self._tools: tuple[Any, list[dict[str, Any]]] = ((), [])
        self._memo: ConversationMemo[_Piece] = ConversationMemo(_size)
        self._heads: tuple[object, object, bytes] = (None, None, b"")  # tools, key, head (``_head``)

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}", "anthropic-version": API_VERSION}

    # -- request ------------------------------------------------------------------------------

    def _tool_defs(self, tools: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
        if self._tools[0] is not tools:
            defs = []
            for t in tools:
                fn = t.get("function", t)
                entry: dict[str, Any] = {"name": fn["name"]}
                if fn.get("description"):
                    entry["description"] = fn["description"]
                entry["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
                defs.append(entry)
            self._tools = (tools, defs)
        return self._tools[1]

    @staticmethod
    def _message_blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
        """A message as (role, content blocks), the same for the same message on every step (so
        ``encode`` keeps its bytes for the conversation's next request)."""
        if isinstance(message, ToolMessage):
            return "user", [
                {
                    "type": "tool_result",
                    "tool_use_id": _tool_id(message.tool_call_id),
                    "content": message.content,
                }
            ]
        if isinstance(message, UserMessage):
            return "user", [{"type": "text", "text": message.content or " "}]
        if isinstance(message, AssistantMessage):
            blocks: list[dict[str, Any]] = [
                {k: v for k, v in item.items() if k != "provider"}
                for item in message.provider_items
                if item.get("provider") == PROVIDER
            ]
            if message.content and message.content.strip():
                blocks.append({"type": "text", "text": message.content})
            for call in message.tool_calls:
                blocks.append(
                    {"type": "tool_use", "id": _tool_id(call.id), "name": call.name, "input": _input(call)}
                )
            return "assistant", blocks or [{"type": "text", "text": " "}]
        return "system", [{"type": "text", "text": message.content}]

    def _piece(self, message: Message, previous: _Piece | None) -> _Piece:
        """A message's segment of the ``messages`` array, given the piece before it: its blocks,
        opening a turn or continuing the previous one (consecutive user-role messages are one
        turn); a system message adds its blocks to ``system`` and nothing to the array."""
        role, blocks = self._message_blocks(message)
        encoded = [to_json(block) for block in blocks]
        last, system = (previous[0], previous[2]) if previous is not None else (b"", ())
        if role == "system":
            return last, b"", (*system, *encoded), sum(map(len, encoded))
        name = _ROLES[role]
        joined = b",".join(encoded)
        if name == last:
            segment = b"," + joined
        else:
            segment = b"".join((b']},{"role":"' if last else b'{"role":"', name, b'","content":[', joined))
        return name, segment, system, len(segment)

    def encode(self, request: ModelRequest) -> bytes:
        """The request's body as sent (the Messages API's ``POST /v1/messages``): each message's
        segment encoded once per conversation (``ConversationMemo.chain``), the body joined
        from them, the breakpoints placed on a copy of the list."""
        messages = request.messages
        pieces = self._memo.chain(messages, self._piece)
        tail = len(messages)
        while tail and getattr(messages[tail - 1], "origin", None) == "harness":
            tail -= 1  # the dynamic tail: not worth a breakpoint, it changes every step
        stable_end = tail - 1  # the last block of the trajectory: its last non-system message
        while stable_end >= 0 and not pieces[stable_end][1]:
            stable_end -= 1
        segments = list(map(_segment, pieces))
        if self.cache and stable_end >= 0:
            segments[stable_end] = _cached(segments[stable_end])
        parts = [self._head(request, pieces[-1][2] if pieces else ()), *segments]  # one join: one copy
        if pieces and pieces[-1][0]:
            parts.append(b"]}")  # the last turn's end
        parts.append(b"]}")
        return b"".join(parts)

    def _head(self, request: ModelRequest, system_blocks: tuple[bytes, ...]) -> bytes:
        """The body up to the ``messages`` array's items: every other field, encoded once while
        the request's tools (the same tuple), tool choice, cap and system blocks stay the same,
        as on every step of a run (the backend's own settings are fixed once it is built)."""
        tools = request.tools
        if not tools and any(isinstance(m, AssistantMessage) and m.tool_calls for m in request.messages):
            tools = self._tools[0]  # a history with tool_use blocks must still define its tools
        limit = request.max_tokens if request.max_tokens is not None else self.max_tokens
        cap = limit or DEFAULT_MAX_TOKENS + (self.thinking_budget or 0)
        key = (system_blocks, bool(request.tools), request.tool_choice, cap, self.stream)
        held = self._heads
        if held[0] is tools and held[1] == key:
            return held[2]
        system = list(system_blocks)
        if self.cache and system:
            system[-1] = _cached(system[-1])
        parts = [b'{"model":', to_json(self.model), b',"max_tokens":', str(int(cap)).encode()]
        if system:
            parts += [b',"system":[', b",".join(system), b"]"]
        params: dict[str, Any] = {}
        if tools:
            params["tools"] = self._tool_defs(tools)
            params["tool_choice"] = {"type": "none" if not request.tools else request.tool_choice}
        if self.thinking_budget and cap > self.thinking_budget:
            # The API wants the budget under the cap: a turn capped below it (the budget's last
            # turn) is asked without thinking rather than refused.
            params["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        params.update(self.extra_body)
        if self.stream:
            params["stream"] = True
        if params:
            parts += [b",", to_json(params)[1:-1]]
        parts.append(b',"messages":[')  # last: the prefix holds across turns
        head = b"".join(parts)
        self._heads = (tools, key, head)
        return head

    # -- call ---------------------------------------------------------------------------------

    def _whole(self, message: dict[str, Any]) -> ModelResponse:
        content = _listed(message.get("content"))
        if not isinstance(content, list):
            raise Retryable("unusable_response", f"the answer is not a message: {str(message)[:200]}")
        turn = _Turn()
        for block in content:
            kind = block.get("type")
            if kind == "text":
                turn.text.append(text_of(block.get("text"), "a text block"))
            elif kind == "tool_use":
                arguments = arguments_text(block.get("input")) or "{}"
                turn.calls.append([str(block.get("id") or ""), str(block.get("name") or ""), [arguments]])
            elif kind in ("thinking", "redacted_thinking"):
                turn.items.append(block)
        turn.usage(message.get("usage") or {})
        return self._response(turn, message.get("stop_reason"), str(message.get("model") or ""))

    async def _read_stream(self, response: Any) -> ModelResponse:
        turn = _Turn()
        blocks = _Blocks()
        ending = Ending()
        model = ""
        on_delta = self.on_delta
        source = events(response, self.failures, self.max_response_bytes)
        # A cut once ``message_delta`` gave the stop reason loses only ``message_stop``: the
        # answer is whole (every block ends before it), as a chat stream past its finish is;
        # unless a block began or grew after it (``Ending``).
        async for event in until_cut(source, ending.whole):
            kind = event.get("type")
            if ending.done:  # message_stop came before the stop reason: read on for it alone
                if kind == "message_delta" and _stop_said(event, ending, turn):
                    break
                continue
            if kind == "content_block_start" or (kind == "content_block_delta" and _carries(event)):
                ending.content()
            if kind == "content_block_delta":
                blocks.delta(event, on_delta)
            elif kind == "content_block_start":
                block = blocks.start(event.get("index"), dict(event.get("content_block") or {}))
                if block.get("type") == "tool_use":
                    block["_json"] = []
                    if on_delta is not None:
                        on_delta("tool_call", str(block.get("name", "")))
            elif kind == "content_block_stop":
                blocks.stop(event.get("index"))
            elif kind == "message_start":
                message = event.get("message") or {}
                model = str(message.get("model") or model)
                # Its output count is the count so far (1), not the answer's, which message_delta
                # gives: a stream that never does has it estimated (``HTTPBackend.complete``).
                turn.usage({k: v for k, v in (message.get("usage") or {}).items() if k != "output_tokens"})
                billed(turn.to_usage())  # counted even if the stream then fails
                # A message begun again (a proxy that retried upstream): its blocks and its end.
                blocks = _Blocks.held(message.get("content"))
                ending.restart()
                # Null as the API sends it; a proxy that turns a whole answer into a stream may
                # give the stop reason here and send no message_delta (the SDK's accumulator
                # keeps it): a block said after it is content after the finish (``Ending``).
                ending.said(message.get("stop_reason"))
            elif kind == "message_delta":
                _stop_said(event, ending, turn)
            elif kind == "message_stop":
                ending.done = True
                if ending.finish is not None:
                    break  # the answer is whole: what follows (or a body held open) is not read
            # ping and event types added later carry nothing to keep
        if not ending.whole():
            why = "the stream ended without message_stop or a stop reason"
            if ending.finish is not None:  # out of order: what followed the stop reason may be cut
                why = "a block began or grew after the stop reason, and the stream ended without message_stop"
            why += f" ({len(blocks.order)} blocks)"
            raise Retryable("stream_incomplete", why)
        for block in blocks.settled():
            btype = block.get("type")
            if btype == "text":
                turn.text.append(_piece(block.get("text")))
            elif btype == "tool_use":
                raw = streamed_input(block, arguments_text(block.get("input")))
                call = [str(block.get("id", "")), str(block.get("name", "")), [raw]]
                turn.calls.append(call)
            elif btype in ("thinking", "redacted_thinking"):
                turn.items.append(block)
        return self._response(turn, ending.finish, model)

    def _response(self, turn: _Turn, stop_reason: str | None, model: str) -> ModelResponse:
        calls = tuple(
            ToolCall(id=i or "toolu_" + uuid.uuid4().hex[:16], name=n, arguments="".join(a))
            for i, n, a in turn.calls
        )
        text = "".join(turn.text)
        items = turn.items
        thought = "".join(_piece(item.get("thinking")) for item in items) if items else ""
        usage = turn.to_usage()
        kept = [item for item in items if _sendable(item)] if items else items
        if len(kept) < len(turn.items) and calls:
            # The API refuses a tool-use turn sent back without its thinking (when thinking is
            # on) and a thinking block without its signature: the next request would fail.
            billed(usage)
            why = (
                "a thinking block without its signature (or redacted data) cannot be sent back with the calls"
            )
            raise Retryable("unusable_response", why)
        message = AssistantMessage(
            content=text or None,
            tool_calls=calls,
            reasoning=thought or None,
            provider_items=tuple({"provider": PROVIDER, **item} for item in kept) if kept else (),
        )
        meta: dict[str, Any] = (
            {"reasoning_not_kept": len(turn.items) - len(kept)} if len(kept) < len(turn.items) else {}
        )
        if written := usage.extra.get("cache_write_tokens"):
            meta["cache_write_tokens"] = written
        return self._answer(message, usage, model, stop_reason, **meta)


def _stop_said(event: Mapping[str, Any], ending: Ending, turn: _Turn) -> bool:
    """A ``message_delta``: its stop reason and output count read (the count billed); whether
    the stream has now said a stop reason. One after ``message_stop`` (a proxy that reorders
    the last two events) is still read: it says how the turn ended (before: never read, the
    turn had no stop reason, so its calls ran, even past ``max_tokens``, while a text-only
    turn ended ``model_error``). Nothing else after ``message_stop`` is: the message ended."""
    ending.said((event.get("delta") or {}).get("stop_reason"))
    turn.usage(event.get("usage") or {})
    billed(turn.to_usage())
    return ending.finish is not None


class _Blocks:
    """A streamed message's content blocks, in the order they began (``order``), and the block
    each ``index`` names now (``at``). Every ``content_block_start`` begins a new block, as the
    official SDK's accumulator appends one: a start at an index already used (a translating
    proxy that numbers every block 0) does not overwrite the block before it and lose its text.
    A delta goes to the block its index names; without an index (a proxy that drops it), to
    the block begun last, as a chat tool-call delta without one continues the call begun last.
    A start at the index of a call not stopped whose input is begun but not whole JSON is an
    unreadable stream, as a chat call begun over such a call is (``_openai._add_call_delta``)."""

    def __init__(self) -> None:
        self.order: list[dict[str, Any]] = []
        self.at: dict[object, dict[str, Any]] = {}
        self.stopped: set[int] = set()  # the blocks (by ``id``) a ``content_block_stop`` ended
        self.given: dict[object, dict[str, Any]] = {}  # the blocks ``message_start`` held, by index

    @classmethod
    def held(cls, content: Any) -> _Blocks:
        """A message's blocks as ``message_start`` begins it: those its ``content`` already holds
        (none, as the API sends it; a proxy that turns a whole answer into a stream may put them
        all there), as the official SDK's accumulator reads them."""
        blocks = cls()
        content = _listed(content)
        for block in content if isinstance(content, list) else ():
            blocks.start(None, {**block, "_json": []} if block.get("type") == "tool_use" else dict(block))
        blocks.given = dict(blocks.at)
        return blocks

    def start(self, index: object, block: dict[str, Any]) -> dict[str, Any]:
        index = _block_index(index)
        was = self.at.get(index) if index is not None else None
        if was is not None and id(was) not in self.stopped and (_cut_input(was) or _unbegun_call(was)):
            # A block begun over a call still open, its input not yet whole JSON (cut), or not
            # begun at all (the call would run with no arguments, one the model never finished):
            # what follows under the index would be read as whose?
            why = f"a {block.get('type')} block began at index {index} over a call whose input is not whole"
            raise Retryable("stream_unreadable", why)
        again = self.given.pop(index, None) if index is not None else None
        if again is not None and again.get("type") == block.get("type"):
            block["_again"] = again  # the block ``message_start`` held, begun again (``settled``)
        self.order.append(block)
        self.at[len(self.order) - 1 if index is None else index] = block
        return block

    def settled(self) -> list[dict[str, Any]]:
        """The blocks in order, each that ``message_start`` held whole and the events then began
        again at its index (a proxy that gives the message whole and streams it too) read once:
        said again as it was, the repeat stands for it (before: its text was read twice, the
        answer doubled and accepted); said otherwise, which is the answer's? Unreadable."""
        order = self.order
        for block in [b for b in order if "_again" in b]:
            was = block.pop("_again")
            if block_said(block) != block_said(was):
                why = f"a {block.get('type')} block message_start gave whole was said again otherwise"
                raise Retryable("stream_unreadable", why)
            order = [b for b in order if b is not was]
        return order

    def stop(self, index: object) -> None:
        """A block said whole. A stop for an index no block began (its ``content_block_start``
        and deltas lost: a proxy that dropped events) is an unreadable stream: the answer read
        so far lacks that block (before: passed over, the rest accepted as the whole answer). A
        stop without an index (a proxy that drops them) says nothing of which block."""
        block = self.at.get(at := _block_index(index))
        if block is not None:
            self.stopped.add(id(block))
        elif at is not None:
            raise Retryable("stream_unreadable", f"a content_block_stop for block {at}, never started")

    def delta(self, event: Mapping[str, Any], on_delta: Any) -> None:
        index = _block_index(event.get("index"))
        block = self.at.get(index) if index is not None else (self.order[-1] if self.order else None)
        if block is None:
            raise Retryable("stream_unreadable", f"a delta for block {index}, never started")
        delta = event.get("delta") or {}
        dtype = delta.get("type")
        if id(block) in self.stopped and _carries(event):
            # A block its content_block_stop said was whole grows after it (a proxy that
            # replays or reorders events): the text or input read so far was not the block's.
            raise Retryable("stream_unreadable", f"a {dtype} for block {index} after its content_block_stop")
        btype = block.get("type")
        wants = _DELTA_BLOCKS.get(str(dtype))
        if btype and wants and not str(btype).endswith(wants) and _carries(event):
            # A delta numbered for another block (input for the text, text for a call): the
            # call would run with the input its start gave, the text lose a piece. An empty
            # one carries nothing to lose.
            raise Retryable("stream_unreadable", f"a {dtype} for block {index}, a {btype} block")
        streamed(delta.get("text") or delta.get("partial_json") or delta.get("thinking"))
        # A piece sent as null (a translating proxy's) is none, as an empty one is (``_piece``).
        if dtype == "text_delta":
            block["text"] = _piece(block.get("text")) + (piece := _piece(delta.get("text")))
            if on_delta is not None:
                on_delta("text", piece)
        elif dtype == "input_json_delta":  # a tool_use's, or a server tool's (not kept)
            block.setdefault("_json", []).append(_piece(delta.get("partial_json")))
        elif dtype == "thinking_delta":
            block["thinking"] = _piece(block.get("thinking")) + (piece := _piece(delta.get("thinking")))
            if on_delta is not None:
                on_delta("reasoning", piece)
        elif dtype == "signature_delta" and delta.get("signature") is not None:
            # The block's signature, whole, as the official SDK's accumulator sets it (not a piece
            # to append: a proxy that also gives it in ``content_block_start`` would send it back
            # twice over, and the API refuses the next request's thinking block).
            block["signature"] = delta["signature"]


def _block_index(value: object) -> object:
    """A block's ``index``: digits written as text (``"0"``, a proxy that quotes it) are that
    number, the same block as ``0`` in the event before, as a chat call's index is; else as sent."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


def _cut_input(block: Mapping[str, Any]) -> bool:
    """Whether a tool_use block's streamed input is begun but not whole JSON."""
    if block.get("type") != "tool_use" or not (raw := "".join(block.get("_json") or ())).strip():
        return False
    try:
        json.loads(raw)
    except ValueError:
        return True
    return False


def _unbegun_call(block: Mapping[str, Any]) -> bool:
    """Whether a tool_use block has no input yet: none in its start, no input delta."""
    return block.get("type") == "tool_use" and not block.get("_json") and not block.get("input")


# The block each delta type belongs to (its type, or how its type ends: a server tool's
# ``server_tool_use``); a delta type added later goes to any block.
_DELTA_BLOCKS = {
    "text_delta": "text",
    "citations_delta": "text",
    "input_json_delta": "tool_use",
    "thinking_delta": "thinking",
    "signature_delta": "thinking",
}


_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class _Turn:
    """What one answer has gathered so far."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[list[Any]] = []  # [id, name, [argument pieces]]
        self.items: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}

    def usage(self, raw: Mapping[str, Any]) -> None:
        # message_start has the input side, message_delta the running output count (and, from
        # newer servers, the input side again): each count is cumulative, so the largest value
        # of each field is the total. A field a later event leaves out, nulls or zeroes (a proxy
        # that fills what it does not know with 0) keeps its count: the turn is not undercounted.
        counts = self.counts
        for key in _USAGE_FIELDS:
            value = raw.get(key)
            if value is not None:
                # A count as the API sends it (an int in range) is taken as it is; any other
                # value is read (or refused) by ``count``.
                n = value if type(value) is int and 0 <= value <= MAX_COUNT else count(value)
                counts[key] = max(counts.get(key, 0), n)

    def to_usage(self) -> Usage:
        c = self.counts
        read, write = c.get("cache_read_input_tokens", 0), c.get("cache_creation_input_tokens", 0)
        extra = {"cache_write_tokens": write} if write else {}
        return Usage(c.get("input_tokens", 0) + read + write, c.get("output_tokens", 0), read, extra)


def _sendable(block: Mapping[str, Any]) -> bool:
    """Whether a thinking block can be sent back as the API requires it: a ``thinking`` block
    with its ``signature``, a ``redacted_thinking`` block with its ``data`` (a proxy that drops
    ``signature_delta`` events leaves neither)."""
    field = "signature" if block.get("type") == "thinking" else "data"
    return isinstance(block.get(field), str) and bool(block[field])


def _carries(event: Mapping[str, Any]) -> bool:
    """Whether a block delta adds anything (text, input JSON, thinking …; an empty one: no)."""
    return any(v for k, v in (event.get("delta") or {}).items() if k != "type")


_ID = re.compile(r"[a-zA-Z0-9_-]+")  # what the API accepts as a tool_use id


def _tool_id(call_id: str) -> str:
    """A call's id as the API accepts it (``^[a-zA-Z0-9_-]+$``; it refuses the request
    otherwise): as it is, or, for an id another provider gave (a chat server's
    ``functions.read_order:0``, before a fallback to this one), each other character ``_`` and
    a digest of the id (two ids that differ only there stay two). The same id always gives the
    same one: a call and its result still pair."""
    if _ID.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{re.sub(r'[^a-zA-Z0-9_-]', '_', call_id)[:200]}_{digest}"


def _cached(block: bytes) -> bytes:
    """An encoded block with a ``cache_control`` breakpoint as its last field."""
    return block[:-1] + _CACHE_CONTROL


def _input(call: ToolCall) -> Any:
    """A call's input object as the API wants it back; arguments that were not a JSON object,
    or held a character that is not UTF-8 (a lone ``\\ud83d`` escape: JSON cannot send it
    back), go back as an empty object (the host refused them): the tool result says what was
    wrong."""
    text = call.arguments
    try:
        value = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError):  # not JSON, or nested past reading
        return {}
    if not isinstance(value, dict):
        return {}
    # A string of the object can hold a surrogate half only where the text has a ``\u`` escape
    # or a half itself: only then is the object walked (each step encodes the turn's calls).
    return {} if may_hold_half(text) and halved(value) else value
