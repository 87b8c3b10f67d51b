"""The one seam every model backend implements."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from tether.core.messages import AssistantMessage, Message, ToolCall, Usage
from tether.core.types import StopReason

__all__ = [
    "Model",
    "ModelRequest",
    "ModelResponse",
    "count",
    "finish_of",
    "finish_problem",
    "halved",
    "larger_usage",
    "later_finish",
    "may_hold_half",
    "openai_usage",
    "paired",
    "repeated_prefix",
    "short_call_id",
    "shown_call_names",
    "spelled",
    "unique_call_ids",
    "whole_json",
    "whole_text",
]

# How a model turn ended, the same words for every provider. A backend puts it in
# ``ModelResponse.meta["finish"]`` beside the provider's own value (``meta["finish_reason"]``).
Finish = Literal["stop", "tool_calls", "length", "refused", "paused", "unknown"]

_FINISHES: dict[str, Finish] = {
    # a normal end of the answer
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "eos": "stop",
    "eos_token": "stop",
    "completed": "stop",
    # the model asks for tools
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "tool_use": "tool_calls",
    # cut at a token limit
    "length": "length",
    "max_tokens": "length",
    "max_output_tokens": "length",
    "model_length": "length",
    "model_context_window_exceeded": "length",
    # the provider refused or filtered the answer
    "content_filter": "refused",
    "refusal": "refused",
    "safety": "refused",
    "recitation": "refused",
    # the provider paused a long turn (Anthropic's server tools): not an answer yet
    "pause_turn": "paused",
}


# Words that name, inside a finish this table lacks, what it is: a filter or a refusal (Gemini's
# ``PROHIBITED_CONTENT``, ``BLOCKLIST``, ``SPII``, ``IMAGE_SAFETY``; Bedrock's ``content_filtered``,
# ``guardrail_intervened``; Cohere's ``ERROR_TOXIC``), or a token limit (``context_length_exceeded``,
# ``max_completion_tokens``). A refusal word wins over a limit word.
_REFUSED_WORDS = frozenset(
    {
        "blocked",
        "blocklist",
        "censored",
        "filter",
        "filtered",
        "guardrail",
        "moderated",
        "moderation",
        "prohibited",
        "recitation",
        "refusal",
        "refused",
        "safety",
        "spii",
        "toxic",
    }
)
# (``tokens``, not ``token``: a stop token, ``eot_token``, names a normal end the table may lack)
_LENGTH_WORDS = frozenset({"length", "tokens", "truncated", "context"})
_WORD = re.compile(r"[a-z]+")


def finish_of(raw: object) -> Finish:
    """A provider's finish or stop reason in tether's words; one the table lacks is read by its
    words (``_REFUSED_WORDS``: refused; ``_LENGTH_WORDS``: length), else ``unknown`` (a missing
    value included). A normal end is only ever one the table names: an unknown finish never
    passes for one."""
    if not isinstance(raw, str):
        return "unknown"
    name = spelled(raw)
    known = _FINISHES.get(name)
    if known is not None:
        return known
    words = set(_WORD.findall(name))
    if words & _REFUSED_WORDS:
        return "refused"
    return "length" if words & _LENGTH_WORDS else "unknown"


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\s\-.]+")


def spelled(raw: str) -> str:
    """A finish as the table spells it: in lower case, its words joined by ``_`` however the
    server joined them (``endTurn``, ``tool-calls``, ``END TURN``, `` stop\\n``: before, each an
    unknown finish, a normal answer refused and a turn's calls never run)."""
    name = raw.lower() if raw.islower() else _CAMEL.sub("_", raw).lower()
    return _SEPARATORS.sub("_", name.strip()).strip("_") if not name.isidentifier() else name


def later_finish(previous: str | None, raw: object) -> str | None:
    """A stream's finish once another arrives (``raw``; none: the one it had): the later one,
    unless the earlier said the answer was cut, filtered or paused. A proxy that appends its
    own normal end (a chat chunk ``finish_reason: "stop"``, an Anthropic ``message_delta``
    ``end_turn``) cannot make such an answer whole."""
    if not raw or not isinstance(raw, str):
        return previous
    if previous is not None and finish_of(previous) in ("length", "refused", "paused"):
        return previous
    return raw


def larger_usage(previous: Usage | None, new: Usage) -> Usage:
    """A stream's usage once another report of it arrives: each count the larger of the two.
    The counts a stream reports are running totals, so the largest is the turn's; a later
    report that leaves a count out or zeroes it (a proxy that fills what it does not know with
    0) cannot take spent tokens back, and a token budget is not undercounted."""
    if previous is None:
        return new
    extra = dict(previous.extra)
    for key, value in new.extra.items():
        extra[key] = max(extra.get(key, 0), value)
    return Usage(
        max(previous.prompt_tokens, new.prompt_tokens),
        max(previous.completion_tokens, new.completion_tokens),
        max(previous.cached_tokens, new.cached_tokens),
        extra,
    )


def finish_problem(response: ModelResponse) -> tuple[StopReason, str] | None:
    """Why a turn must not be acted on, as the stop reason and its detail; None for a normal
    end. A final answer (a turn without tool calls) must have ended normally to be accepted;
    the tool calls of a turn are run only where it ended normally or the provider gave no
    reason at all (a server that leaves ``finish_reason`` or ``status`` out): not where it said
    the turn was cut, refused, paused, or ended in a way tether does not know (a Responses
    ``incomplete`` without its reason, ``cancelled``, a chat ``error``), since the last call
    may be cut mid-arguments and still parse. A response with no ``finish`` in its meta (a
    test double) counts as a normal end."""
    finish = response.meta.get("finish", "stop")
    calls = len(response.message.tool_calls)
    raw = response.meta.get("finish_reason")
    if finish in ("stop", "tool_calls") or (calls and finish == "unknown" and not raw):
        return None
    said = f" (the provider said {raw!r})" + (f"; its {calls} tool call(s) were not run" if calls else "")
    if finish == "length":
        return StopReason.TRUNCATED, "the answer was cut at the output-token limit" + said
    if finish == "refused":
        return StopReason.MODEL_REFUSED, "the provider refused or filtered the answer" + said
    if finish == "paused":
        return StopReason.MODEL_ERROR, "the provider paused the turn before an answer" + said
    return StopReason.MODEL_ERROR, "the answer ended for an unknown reason" + said


MAX_COUNT = 2**53 - 1  # the largest integer every JSON reader holds exactly
_DIGITS = re.compile(r"[0-9]{1,19}(\.[0-9]{0,9})?")  # a count as text: digits, maybe a fraction


def count(value: object) -> int:
    """A token count as a provider reports it: zero to ``MAX_COUNT``, as a number (a fraction
    cut off) or as text (digits, maybe a fraction: ``"12"``, ``"12.0"``); none (``null``, left
    out) is 0. Anything else is a ``ValueError``, so the answer counts as unusable: a negative
    count, once priced, would hand
    spent budget back, a count that is no number cannot be charged at all, and one past any
    model's reach (``10**30``) is no count (priced, it would spend every budget at once; stored,
    it overflows a database's integers)."""
    if value is None:
        return 0
    if type(value) is int and 0 <= value <= MAX_COUNT:  # the usual case: a JSON integer
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        value = float(value) if "." in value else int(value)  # "12", or "12.0" (a float as text)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return int(value)
    raise ValueError(f"a token count of {value!r}")


def openai_usage(raw: Mapping[str, Any], into: str, out: str) -> Usage:
    """A usage as OpenAI's protocols write it (chat: ``prompt``/``completion``, Responses:
    ``input``/``output`` tokens, each with its ``…_tokens_details``; DeepSeek's
    ``prompt_cache_hit_tokens``). Its output count is at least its reasoning tokens (a part of
    the output, which the provider bills as output) and at least what ``total_tokens`` says was
    spent beyond the prompt: Gemini's OpenAI-compatible endpoint, and gateways that translate
    it, write the output without the model's thoughts (``completion_tokens: 0`` beside
    ``reasoning_tokens: 60`` and ``total_tokens: 81``); read as written, the reasoning counted
    no tokens and cost nothing, and no token or cost budget saw it. A usage that adds up is
    read as written."""
    cached = (raw.get(f"{into}_tokens_details") or {}).get("cached_tokens") or raw.get(
        "prompt_cache_hit_tokens"
    )
    reasoning = count((raw.get(f"{out}_tokens_details") or {}).get("reasoning_tokens"))
    prompt = count(raw.get(f"{into}_tokens"))
    try:  # a total that is no count is left unread, as before: the counts it would check are read
        beyond = count(raw.get("total_tokens")) - prompt
    except ValueError:
        beyond = 0
    output = max(count(raw.get(f"{out}_tokens")), reasoning, beyond)
    return Usage(prompt, output, count(cached), {"reasoning_tokens": reasoning} if reasoning else {})


_HALF = re.compile("[\ud800-\udfff]")  # one half of a UTF-16 surrogate pair


def rejoined(message: AssistantMessage) -> AssistantMessage:
    """The message with each character a server split between two pieces at its UTF-16
    surrogates (a delta that ends inside an emoji, each half escaped in its JSON) whole again,
    in its text, reasoning, tool arguments and the provider items it sends back (a thinking
    block, a reasoning item: JSON that cannot hold a half would fail the next request's
    encoding). A half with no partner becomes U+FFFD in text, and its ``\\u`` escape in a
    call's arguments (the JSON it stood for, which the host's gate refuses as not UTF-8, as it
    does when a server sent the escape itself: the tool never runs with a replaced character).
    The same message when there is none (the usual case)."""
    texts = (message.content or "", message.reasoning or "", *(c.arguments for c in message.tool_calls))
    if not any(map(_HALF.search, texts)) and not any(map(halved, message.provider_items)):
        return message
    calls = tuple(replace(c, arguments=whole_json(c.arguments)) for c in message.tool_calls)
    content, reasoning = (t and whole_text(t) for t in (message.content, message.reasoning))
    items = tuple(_whole_value(item) for item in message.provider_items)
    return replace(message, content=content, reasoning=reasoning, tool_calls=calls, provider_items=items)


def paired(text: str) -> str:
    """``text`` with each surrogate pair joined into its character; a half with no partner kept."""
    if not _HALF.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def whole_text(text: str) -> str:
    """``text`` with its surrogate pairs joined and a half with no partner U+FFFD."""
    return _HALF.sub("\ufffd", paired(text)) if _HALF.search(text) else text


def whole_json(text: str) -> str:
    """JSON text with its surrogate pairs joined and a half with no partner written as its
    ``\\u`` escape: the same JSON, as the server meant it, now encodable."""
    return _HALF.sub(lambda m: f"\\u{ord(m.group()):04x}", paired(text)) if _HALF.search(text) else text


def may_hold_half(text: str) -> bool:
    """Whether JSON ``text`` may read as a value holding a surrogate half: only a ``\\u`` escape
    or a half in the text itself gives one (``halved`` need not walk what it reads otherwise)."""
    return "\\u" in text or _HALF.search(text) is not None


def halved(value: object) -> bool:
    """Whether a JSON value holds a surrogate half in any string (key or value)."""
    if isinstance(value, str):
        return _HALF.search(value) is not None
    if isinstance(value, dict):
        return any(halved(k) or halved(v) for k, v in value.items())
    if isinstance(value, list):
        return any(map(halved, value))
    return False


def _whole_value(value: Any) -> Any:
    """A JSON value with ``whole_text`` applied to every string in it."""
    if isinstance(value, str):
        return whole_text(value)
    if isinstance(value, dict):
        return {whole_text(k): _whole_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_value(v) for v in value]
    return value


# The longest tool call id a renamed call gets: OpenAI's chat API (and Azure's) refuses a longer
# one in the next request ("string too long. Expected a string with maximum length 40", HTTP 400),
# and its own ids (``call_`` and 24 characters) with the suffix were 42.
MAX_CALL_ID = 40


def short_call_id(call_id: str) -> str:
    """A call's id as a chat API that takes at most ``MAX_CALL_ID`` characters accepts it: as it
    is, or, for a longer one (vLLM's ``chatcmpl-tool-`` and 32 hex digits, 46 characters, sent to
    OpenAI after a fallback), its first characters and a digest of the whole (two ids that
    differ only past the cut stay two). The same id always gives the same one: a call and its
    result still pair."""
    if len(call_id) <= MAX_CALL_ID:
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{call_id[: MAX_CALL_ID - 13]}_{digest}"


def unique_call_ids(messages: tuple[Message, ...], response: ModelResponse) -> ModelResponse:
    """The response with each tool call whose id an earlier call of the conversation already
    has (a server that numbers calls per answer: ``toolu_0`` on every turn) given a new one,
    the old id (its first characters, so the new one has at most ``MAX_CALL_ID`` characters) and
    a suffix: a call's result names the call it answers, and a provider refuses a conversation
    whose call ids repeat (Anthropic: "tool_use ids must be unique"), so the next request would
    fail. So is a call whose id an earlier call of the same answer has (``call_0`` twice): the
    host refuses a turn's calls that share an id (``chokepoint._calls.shared_ids``).
    ``meta["call_ids_renamed"]`` lists each ``[old, new]``. The same response when no id
    repeats (the usual case)."""
    calls = response.message.tool_calls
    if not calls:
        return response
    used = {c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls}
    if used.isdisjoint(c.id for c in calls) and len({c.id for c in calls}) == len(calls):
        return response
    renamed: list[list[str]] = []
    fresh: list[ToolCall] = []
    for call in calls:
        if call.id in used:
            renamed.append([call.id, f"{call.id[: MAX_CALL_ID - 13]}_{uuid.uuid4().hex[:12]}"])
            call = replace(call, id=renamed[-1][1])
        used.add(call.id)
        fresh.append(call)
    message = replace(response.message, tool_calls=tuple(fresh))
    return replace(response, message=message, meta={**response.meta, "call_ids_renamed": renamed})


# The longest tool name an answer keeps as it came when no offered tool's name is longer: four
# times what every provider takes in a definition (``core._names.MAX_TOOL_NAME``, 64).
MAX_ANSWERED_NAME = 256


def _offered_names(tools: tuple[dict[str, Any], ...]) -> list[str]:
    """The names of the request's tool definitions, in any protocol's shape (``name`` at the top
    (Anthropic, Responses) or under ``function`` (chat))."""
    names: list[str] = []
    for tool in tools:
        inner = tool.get("function")
        if isinstance(name := (inner if isinstance(inner, dict) else tool).get("name"), str):
            names.append(name)
    return names


def shown_call_names(request: ModelRequest, response: ModelResponse) -> ModelResponse:
    """The response with each tool call whose name is longer than every name offered (and
    than ``MAX_ANSWERED_NAME``) named by its start, its length and a digest of the whole
    (``read_orderread_or…[50000 characters, sha256 1a2b…]``): no offered tool has that name,
    so the call is still an unknown tool's, refused and never run, but what the run keeps of
    it (the call's reason, the trace, the summary, the console, the history sent on every later
    turn) is bounded, not the model's 50 KB. The same name always gives the same one.
    ``meta["call_names_shortened"]`` lists each ``[shown, length]``. The same response when no
    name is that long (the usual case)."""
    calls = response.message.tool_calls
    if all(len(c.name) <= MAX_ANSWERED_NAME for c in calls):
        return response  # within the least limit: no offered name needs reading (the usual case)
    limit = max([MAX_ANSWERED_NAME, *map(len, _offered_names(request.tools))])
    if all(len(c.name) <= limit for c in calls):
        return response
    shortened: list[list[Any]] = []
    fresh: list[ToolCall] = []
    for call in calls:
        if len(call.name) > limit:
            digest = hashlib.sha256(call.name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
            shown = f"{call.name[:64]}…[{len(call.name)} characters, sha256 {digest}]"
            shortened.append([shown, len(call.name)])
            call = replace(call, name=shown)
        fresh.append(call)
    message = replace(response.message, tool_calls=tuple(fresh))
    return replace(response, message=message, meta={**response.meta, "call_names_shortened": shortened})


def repeated_prefix(previous: tuple[object, ...], items: tuple[object, ...]) -> int:
    """How many leading items of ``items`` the previous request of a session had, as a step
    repeats them: all of them (pure append), all but its last (the dynamic tail, such as the
    status line, was replaced), or none. Compared as tuples: by identity for the same objects,
    by value for equal ones."""
    k = len(previous)
    if k and items[:k] == previous:
        return k
    if k > 1 and items[: k - 1] == previous[: k - 1]:
        return k - 1
    return 0


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What the host sends: structured messages and the tool definitions (wire format)."""

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str = "auto"  # "auto" | "none"
    max_tokens: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    message: AssistantMessage
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    cost_usd: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)  # backend facts for the trace (finish reason …)


@runtime_checkable
class Model(Protocol):
    """A model proposes; it never decides. ``complete`` may raise ``ModelError``."""

    name: str

    async def complete(self, request: ModelRequest) -> ModelResponse: ...
