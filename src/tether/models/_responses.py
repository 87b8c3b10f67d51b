"""A backend for the OpenAI Responses API: over ``httpx2`` (default), or with
``transport="sdk"`` on the official ``openai`` SDK (``pip install 'tether[openai]'``; imported
on first use); the same body and the same answer either way (``tether.models._backend``).

The request: the system prompt as ``instructions``; user turns, assistant turns, each tool
call as a ``function_call`` item and each result as a ``function_call_output`` item, in the
order of the trajectory; function tools (``strict`` off: the host validates arguments
itself). ``store`` is off by default — every request carries the whole conversation, nothing
is kept server-side — so reasoning items come back with their ``encrypted_content`` (asked
for with ``include`` when ``reasoning`` is set) and are sent back unchanged before the turn's
other items (``provider_items``), as the API requires for reasoning models across tool calls
(one without the ``id`` the API requires of it, or without ``store`` its ``encrypted_content``,
cannot be, and is not kept: ``_sendable``).
``prompt_cache_key`` defaults to a digest of the stable prefix (instructions and tool
names), so every step of every run of one agent lands on the same cache.

The answer: ``output_text`` parts (``text`` from some servers), ``refusal`` parts (finish
``refusal``), ``function_call`` items (arguments returned raw), ``reasoning`` items (their
summaries as the message's reasoning); a call of another kind the client must answer (an item
with a ``call_id``: a custom tool, a shell, a computer; or one that asks the client something:
``mcp_approval_request``) is a call the run never offers, retried as
an unusable answer; a stream's items as ``output_item.done`` gives them, or
as ``output_item.added`` and the deltas build them where neither that event nor the terminal
event lists them (argument deltas that disagree with the arguments a call is done with are a
garbled stream, retried, as is a terminal output that lists a call with other arguments than
the stream said, or a done item or terminal output that lists other text than the text deltas
said; a call whose done item or terminal output leaves its arguments out has those
its deltas said; an event sent again under its ``sequence_number`` is read once). ``status``
``completed`` is a normal end, unless ``incomplete_details`` gives a reason or an output item
says it is ``incomplete``; ``incomplete`` carries its reason (``max_output_tokens`` → length,
``content_filter`` → refused); any other is unknown: such a final answer never ends the run
``accepted``, nor are its calls run (``tether.models._base.finish_problem``). A
``response.failed`` or ``error`` event with a server error, a terminal response with an error
object, a stream that ends without a terminal event, 429 (``retry-after``) and 5xx are retried
(``tether.models._retrying``); other errors are final.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from operator import itemgetter
from typing import Any, Unpack

from pydantic_core import to_json

from tether.core.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, Usage
from tether.models._backend import BackendOptions, OpenAIBackend, arguments_text
from tether.models._base import ModelRequest, ModelResponse, openai_usage, spelled
from tether.models._failures import is_error
from tether.models._memo import ConversationMemo
from tether.models._retrying import Retryable, billed
from tether.models._said import DONE_EVENTS, _Said, _with_arguments, _with_left_out, client_call
from tether.models._sse import events

__all__ = ["OpenAIResponses"]

PROVIDER = "openai-responses"
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
# A message's piece: its segment of ``input`` (b"": no items), whether ``input`` has items so
# far, the system prompts so far (``instructions``), its own bytes.
_Piece = tuple[bytes, bool, tuple[str, ...], int]
_segment = itemgetter(0)
_size = itemgetter(3)


class OpenAIResponses(OpenAIBackend):
    """A ``Model`` on the OpenAI Responses API (``POST {base_url}/responses``).

    ``base_url`` defaults to ``$OPENAI_BASE_URL`` or OpenAI's; the key comes from
    ``$<api_key_env>`` (``OPENAI_API_KEY``; required for api.openai.com only). ``reasoning`` is
    the API's reasoning setting (``{"effort": "low"}`` …); ``store`` keeps responses server-side
    (off); ``prompt_cache_key`` overrides the derived one. The other options are every
    backend's (``tether.models._backend.HTTPBackend``).
    """

    provider = PROVIDER
    reserved = frozenset(
        {"model", "input", "instructions", "tools", "tool_choice", "stream", "max_output_tokens"}
    )
    path = "/responses"
    answer_key = "output"
    default_transport = "sdk"

    def __init__(
        self,
        model: str,
        *,
        reasoning: Mapping[str, Any] | None = None,
        store: bool = False,
        prompt_cache_key: str | None = None,
        **options: Unpack[BackendOptions],
    ) -> None:
        super().__init__(model, **options)
        self.reasoning = dict(reasoning) if reasoning else None
        self.store = store
        # The endpoint this backend speaks to, as its reasoning items are marked (``_sendable``):
        # a digest, so a checkpoint keeps no URL (nor credentials a URL may carry).
        self._origin = hashlib.sha256(self.base_url.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        self.prompt_cache_key = prompt_cache_key
        self._tools: tuple[Any, list[dict[str, Any]], str] = ((), [], "")
        self._key = ("", "")  # the stable prefix and its prompt_cache_key
        self._heads: tuple[object, object, bytes] = (None, None, b"")  # tools, key, head (``_head``)
        self._memo: ConversationMemo[_Piece] = ConversationMemo(_size)

    # -- request ------------------------------------------------------------------------------

    def _tool_defs(self, tools: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
        if self._tools[0] is not tools:
            defs = []
            for t in tools:
                fn = t.get("function", t)
                entry: dict[str, Any] = {"type": "function", "name": fn["name"]}
                if fn.get("description"):
                    entry["description"] = fn["description"]
                entry["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
                entry["strict"] = False
                defs.append(entry)
            self._tools = (tools, defs, ",".join(d["name"] for d in defs))
        return self._tools[1]

    def _message_items(self, message: Message) -> list[dict[str, Any]]:
        """A message as Responses input items, the same for the same message on every step.
        A reasoning item goes back only to the endpoint that gave it (its ``origin``; one kept
        without it, by an earlier release, goes to any): another endpoint of the protocol, a
        fallback model's, cannot read its ``encrypted_content`` and refuses the whole request
        (HTTP 400 "could not be verified"), so a chain that moved to it failed on a turn its
        model could answer; the conversation goes on without it there, as one that never
        reasoned aloud does."""
        if isinstance(message, ToolMessage):
            return [
                {"type": "function_call_output", "call_id": message.tool_call_id, "output": message.content}
            ]
        if isinstance(message, AssistantMessage):
            items: list[dict[str, Any]] = [
                {k: v for k, v in item.items() if k not in _MARKS}
                for item in message.provider_items
                if item.get("provider") == PROVIDER and item.get("origin", self._origin) == self._origin
            ]
            if message.content:
                items.append({"role": "assistant", "content": message.content})
            for call in message.tool_calls:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }
                )
            return items
        return [{"role": "user", "content": message.content}]

    def _piece(self, message: Message, previous: _Piece | None) -> _Piece:
        """A message's segment of ``input`` given the piece before it (its items, after a comma
        when items came before), and the system prompts so far (``instructions``)."""
        opened, instructions = (previous[1], previous[2]) if previous is not None else (False, ())
        if isinstance(message, SystemMessage):
            return b"", opened, (*instructions, message.content), 0
        items = [to_json(item) for item in self._message_items(message)]
        if not items:
            return b"", opened, instructions, 0
        segment = b",".join(items)
        if opened:
            segment = b"," + segment
        return segment, True, instructions, len(segment)

    def encode(self, request: ModelRequest) -> bytes:
        """The request's body as sent (the Responses API's ``POST /responses``): each message's
        items encoded once per conversation (``ConversationMemo``), the body joined from them
        after its head (``_head``)."""
        pieces = self._memo.chain(request.messages, self._piece)
        head = self._head(request, pieces[-1][2] if pieces else ())
        # ``input`` last: the byte prefix holds across turns
        return b"".join((head, *map(_segment, pieces), b"]}"))

    def _head(self, request: ModelRequest, instructions: tuple[str, ...]) -> bytes:
        """The body up to ``input``'s items: every field but ``input``, encoded once while the
        request's tools (the same tuple), tool choice, cap and system prompts stay the same, as
        on every step of a run (the backend's own settings are fixed once it is built)."""
        limit = request.max_tokens if request.max_tokens is not None else self.max_tokens
        key = (instructions, request.tool_choice, limit, self.stream)
        held = self._heads
        if held[0] is request.tools and held[1] == key:
            return held[2]
        params: dict[str, Any] = {"model": self.model}
        if instructions:
            params["instructions"] = "\n\n".join(instructions)
        if request.tools:
            params["tools"] = self._tool_defs(request.tools)
            params["tool_choice"] = request.tool_choice
        if limit is not None:
            params["max_output_tokens"] = limit
        params["store"] = self.store
        if self.reasoning is not None:
            params["reasoning"] = self.reasoning
            if not self.store:
                params["include"] = ["reasoning.encrypted_content"]
        params["prompt_cache_key"] = self._cache_key(params.get("instructions", ""))
        params.update(self.extra_body)
        if self.stream:
            params["stream"] = True
        head = to_json(params)[:-1] + b',"input":['
        self._heads = (request.tools, key, head)
        return head

    def _cache_key(self, instructions: str) -> str:
        """``prompt_cache_key``: the caller's, or a digest of the stable prefix (instructions and
        tool names), computed once while that prefix stays the same."""
        if self.prompt_cache_key is not None:
            return self.prompt_cache_key
        stable = instructions + "\x00" + self._tools[2]
        if self._key[0] != stable:
            self._key = (stable, "tether-" + hashlib.sha256(stable.encode()).hexdigest()[:24])
        return self._key[1]

    # -- call ---------------------------------------------------------------------------------

    def _whole(self, data: dict[str, Any]) -> ModelResponse:
        return self._parse(data, [])

    async def _read_stream(self, response: Any) -> ModelResponse:
        said = _Said()
        final: dict[str, Any] | None = None
        on_delta = self.on_delta
        begun: object = None  # ``response.created`` came: the response's id ("" when none)
        earlier: _Said | None = None  # what the same response said before it began again
        restarts = 0
        async for event in events(response, self.failures, self.max_response_bytes):
            if said.again(event):
                continue  # an event sent again (a proxy that resumed the stream from earlier)
            kind = event.get("type")
            if kind == "response.created":
                rid = (event.get("response") or {}).get("id") or ""
                if begun is not None:
                    # The response begun again (a proxy that retried upstream mid-stream, or
                    # resent the stream from its start without its sequence numbers): its items
                    # start over, as an Anthropic ``message_start`` begun again does (before: the
                    # two runs' text ran together and the stream was refused as garbled, on every
                    # try). The same event sent again under its number was passed over above.
                    earlier = said if rid and rid == begun else None
                    said, restarts = _Said(), restarts + 1
                begun = rid
            elif kind == "response.output_text.delta":
                said.piece(said.text, event, event.get("delta"))
                if on_delta is not None:
                    on_delta("text", str(event.get("delta", "")))
            elif kind == "response.function_call_arguments.delta":
                said.piece(said.arguments, event, event.get("delta"))
            elif kind == "response.refusal.delta":
                said.piece(said.refusal, event, event.get("delta"))
            elif kind == "response.reasoning_summary_text.delta":
                said.piece(said.thought, event, event.get("delta"))
                if on_delta is not None:
                    on_delta("reasoning", str(event.get("delta", "")))
            elif kind == "response.output_item.added":
                item = said.item(said.added, event)
                if on_delta is not None and item.get("type") == "function_call":
                    on_delta("tool_call", str(item.get("name", "")))
            elif kind in DONE_EVENTS:
                shown = said.part_done(kind, event)
                if on_delta is not None and shown is not None:
                    on_delta(*shown)
            elif kind == "response.function_call_arguments.done":
                said.check(event, event.get("arguments"))
            elif kind == "response.output_item.done":
                item = said.item(said.done, event)
                if item.get("type") == "function_call":
                    said.check(event, item.get("arguments"))
            elif kind in _TERMINAL:
                final = _final(kind, event.get("response") or {})
                break
        if final is None:
            why = f"the stream ended without a terminal event ({len(said.done)} items)"
            raise Retryable("stream_incomplete", why)
        if earlier is not None and (lost := said.lacks(earlier)):
            # The same response begun again (its id) must say again every item it had begun: a
            # proxy that resends only the tail would have the tail read as the whole answer.
            why = f"the response began again under its id and did not begin again its items {lost}"
            raise Retryable("stream_unreadable", why[:300])
        meta = {"stream_restarts": restarts} if restarts else {}
        return self._parse(final, said.items(), list(said.done.values()), **meta)

    def _parse(
        self, data: dict[str, Any], streamed: list[dict[str, Any]], done: list[Any] | None = None, **meta: Any
    ) -> ModelResponse:
        usage = _usage(data.get("usage") or {})
        billed(usage)  # counted even if the answer is then refused
        status = _status(data)  # ``Completed``, ``INCOMPLETE``: the API's words, however spelled
        if status == "failed" or is_error(data):
            # Failed, or an error object beside the output (a streamed terminal event's response:
            # a whole answer's is read before it gets here, in ``HTTPBackend._attempt``).
            where = "in a failed response" if status == "failed" else "beside the answer"
            raise self.failures.reported(data.get("error") or {}, where)
        output = _with_left_out(_with_arguments(data.get("output"), streamed), streamed) or streamed
        text: list[str] = []
        refusal: list[str] = []
        calls: list[ToolCall] = []
        kept: list[dict[str, Any]] = []
        thought: list[str] = []
        unsendable = 0  # reasoning items that could not be sent back
        for item in output:
            kind = item.get("type")
            if kind == "message" and item.get("role", "assistant") != "assistant":
                continue  # another role's message (a proxy that echoes the input): not the answer
            if kind == "message":
                for part in item.get("content") or ():
                    # a part's text null (a translating proxy's) is none, as an empty one is
                    if part.get("type") in ("output_text", "text"):
                        text.append(part.get("text") or "")
                    elif part.get("type") == "refusal":
                        refusal.append(part.get("refusal") or "")
            elif kind == "function_call":
                call_id = item.get("call_id") or "call_" + uuid.uuid4().hex[:16]
                calls.append(
                    ToolCall(call_id, str(item.get("name") or ""), arguments_text(item.get("arguments")))
                )
            elif kind == "reasoning":
                if (back := _sendable(item, self.store, self._origin)) is not None:
                    kept.append(back)
                else:
                    unsendable += 1
                thought.extend(str(s.get("text") or "") for s in item.get("summary") or ())
            elif client_call(item):
                # A call the client must answer, of a kind the run never offers (a custom tool, a
                # shell, a computer): the model asked for an action no tool here performs, so its
                # text is a preamble, not the final answer (before: the item was passed over as
                # one of a type the API added later, and the preamble accepted).
                key = "call_id" if item.get("call_id") else "id"
                said = f"a {kind} item ({key} {str(item.get(key))[:80]!r})"
                raise Retryable("unusable_response", f"{said}: a call of a kind this run does not offer")
        raw: str | None = status
        cut = (data.get("incomplete_details") or {}).get("reason")
        # Items still under way: a whole answer's as listed, a stream's as its done events gave them
        # (a terminal output copied from a stale snapshot says its items are in progress).
        listed = data.get("output") if done is None else done
        unfinished = _unfinished(listed) or any(_status(i) == "incomplete" for i in output)
        if status == "incomplete" or ((cut or unfinished) and status in ("completed", None)):
            # A response that says why it is incomplete, or has an item that says it is, is
            # incomplete whatever its status says (a server that always says completed): the
            # worse word wins.
            raw = cut or "incomplete"
        elif "".join(refusal):  # a refusal, whatever else the turn carries: its calls are not run
            raw = "refusal"
        content = "".join(text) or "".join(refusal) or None
        message = AssistantMessage(
            content=content,
            tool_calls=tuple(calls),
            reasoning="".join(thought) or None,
            provider_items=tuple(kept),
        )
        if unsendable:
            meta["reasoning_not_kept"] = unsendable
        return self._answer(message, usage, str(data.get("model") or ""), raw, **meta)


_MARKS = ("provider", "origin")  # what tether adds to a kept item, never sent


def _sendable(item: Mapping[str, Any], store: bool, origin: str) -> dict[str, Any] | None:
    """A reasoning item as the next request sends it back (without its ``status``, its
    ``summary`` a list, ``[]`` where it was left out): the API requires its ``id`` (and
    ``summary``) on an input reasoning item and refuses the request without it (HTTP 400: the
    next turn would fail, not this one). One without an ``id`` (a proxy that drops it) cannot be
    sent back: None, it is not kept (the answer's meta counts it, ``reasoning_not_kept``); the
    conversation goes on without it, as one that never reasoned aloud does. Without ``store``
    nothing is kept server-side, so the item is its ``encrypted_content``: one that came without
    it (a proxy that drops what it does not know) would be looked up by its id and refused
    (HTTP 404, the next turn failing), so it is not kept either. A kept item is marked with
    the endpoint it came from (``origin``): only that one can read it back."""
    if not isinstance(item.get("id"), str) or not item["id"]:
        return None
    if not store and not (isinstance(item.get("encrypted_content"), str) and item["encrypted_content"]):
        return None
    back = {k: v for k, v in item.items() if k != "status"}
    if not isinstance(back.get("summary"), list):
        back["summary"] = []
    return {**back, "provider": PROVIDER, "origin": origin}


_UNDER_WAY = ("in_progress", "queued")  # the statuses of a response not yet ended


def _unfinished(output: object) -> bool:
    """Whether an item the response lists says it did not finish: ``incomplete``, or still under
    way (``in_progress``: a call whose arguments, or text, may be cut) in a response that says it
    ended. A stream's items are asked as its ``output_item.done`` events gave them; those it
    built from ``output_item.added`` alone, or listed in a terminal output (a stale snapshot),
    only for ``incomplete`` (they say ``in_progress`` as added: a server that sends no done
    events, a proxy that copies its first snapshot)."""
    items = output if isinstance(output, list) else ()
    return any(isinstance(i, dict) and _status(i) in ("incomplete", *_UNDER_WAY) for i in items)


def _final(kind: str, response: Mapping[str, Any]) -> dict[str, Any]:
    """A terminal event's response with its status: the one the event's name says where the
    response leaves it out or still says it is under way (``in_progress``, ``queued``: a stale
    snapshot a proxy copied, which no ended response has), and always where the name says it
    ``failed`` or is ``incomplete``: a response that says ``completed`` cannot make such an
    answer whole. A ``response.completed`` whose response says it ended otherwise
    (``incomplete``, ``failed``, ``cancelled``) keeps that status: the worse word wins."""
    said = kind.removeprefix("response.")
    if said == "completed" and _status(response) not in (None, "", *_UNDER_WAY):
        return dict(response)
    return {**response, "status": said}


def _status(response: Mapping[str, Any]) -> Any:
    """A response's ``status`` as the API spells it (``_base.spelled``: ``Completed`` and
    ``INCOMPLETE`` are ``completed`` and ``incomplete``; before, a capitalised ``Completed``
    beside ``incomplete_details`` passed for a normal end, the cut answer accepted)."""
    status = response.get("status")
    return spelled(status) if isinstance(status, str) else status


def _usage(raw: Mapping[str, Any]) -> Usage:
    return openai_usage(raw, "input", "output")
