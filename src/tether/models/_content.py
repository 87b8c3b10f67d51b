"""What an answer's text is, for every protocol's reader: a text field as the protocol writes it
(``text_of``: a string, or ``null`` for none; any other JSON value is no text), and a chat
message's content as text (``parts_text``: a string, or the text of its parts of a text kind;
``refusal_text``: the text of its refusal parts).

A text field that holds another JSON value (an object, as OpenAI's Assistants API writes its
text, ``{"value": ..., "annotations": []}``; a number; ``true``; a list) is an unusable answer,
retried: before, an Anthropic whole answer was accepted as the value's Python ``repr``
(``"{'value': ...}"``, ``"True"``) and a chat answer's ``true`` as ``"True"``, while the same
value streamed, or in a Responses answer, was already refused. A chat content part of a kind
that is no answer text (Mistral's ``thinking`` part, a ``reasoning`` part with a ``text`` of
its own) is not the answer: before, its text was joined into the accepted answer. And an
Anthropic message's blocks as a reader takes them (``listed_blocks``, ``piece``) and what one
says (``block_said``: a block ``message_start`` held whole and the events said again is read
once when they say it alike)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tether.models._failures import unusable
from tether.models._retrying import Retryable
from tether.models._said import _agree

__all__ = [
    "TEXT_PARTS",
    "block_said",
    "calls_alike",
    "listed_blocks",
    "offered_call",
    "parts_text",
    "piece",
    "refusal_text",
    "streamed_input",
    "text_of",
]

# The kinds of chat content part whose ``text`` is answer text: ``text`` (as requests write it),
# ``output_text`` (the Responses API's word, as translating proxies copy it), or none given.
TEXT_PARTS = frozenset({None, "text", "output_text"})


def text_of(value: object, what: str) -> str:
    """A text field's value: a string as sent, ``null`` as ``""``; anything else raises an
    unusable answer naming ``what`` (a text block, a content part …) and the value's type."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise unusable(f"{what} whose text is no string: a JSON {_kind(value)}: {str(value)[:120]}")


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, dict):
        return "object"
    return "list" if isinstance(value, list) else type(value).__name__


def parts_text(content: Any, *, any_kind: bool = False) -> str | None:
    """A chat message's content (or delta's) as text: a string as sent; a list of parts (one
    part sent bare, an object, is that list), the text of its strings and of its parts of a
    text kind (``TEXT_PARTS``) joined, none when they say none; parts of other kinds carry no
    answer (a ``thinking`` or ``reasoning`` part, an image, a ``refusal``: ``refusal_text``).
    Any other value (a number, ``true``) is an unusable answer (``text_of``). ``any_kind``: the
    text of parts of every kind (reasoning, which is never the answer, in parts of any name)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return text_of(content, "a message content")
    said = [
        p if isinstance(p, str) else text_of(p.get("text"), "a content part")
        for p in content
        if isinstance(p, str) or (isinstance(p, dict) and (any_kind or p.get("type") in TEXT_PARTS))
    ]
    return "".join(said) or None


def refusal_text(content: Any) -> str:
    """The text of a message content's ``refusal`` parts (``{"type": "refusal", "refusal":
    ...}``, as a request writes an assistant's refusal and some servers answer); "" for none."""
    parts = [content] if isinstance(content, dict) else content if isinstance(content, list) else ()
    return "".join(
        str(p.get("refusal") or "") for p in parts if isinstance(p, dict) and p.get("type") == "refusal"
    )


# -- an Anthropic message's blocks ----------------------------------------------------------


def listed_blocks(content: Any) -> Any:
    """A message's ``content`` as a list of blocks: text sent bare (a proxy that writes the
    answer as the request's string form) is its one text block, a block sent unlisted its one
    block (before: "not a message", unusable on every try); anything else as sent."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [content] if isinstance(content, dict) else content


def piece(value: Any) -> Any:
    """A piece of text, input JSON or thinking as a block or its delta gives it: ``null`` (a
    translating proxy that writes each field it has no value for) is ``""``, nothing, as the
    chat reader takes a ``null`` content (before: an internal ``TypeError``, the answer retried
    as unusable on every try); anything else as sent (a number is no piece: unusable)."""
    return "" if value is None else value


def block_said(block: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a block says: its type, text, thinking, call id, name and input (as read: its
    streamed JSON, else the input it was given)."""
    raw = "".join(block.get("_json") or ())
    try:
        given = json.loads(raw) if raw.strip() else block.get("input")
    except ValueError:
        given = raw
    said = (piece(block.get(k)) for k in ("text", "thinking"))
    return (block.get("type"), *said, block.get("id"), block.get("name"), given)


def streamed_input(block: dict[str, Any], given: str) -> str:
    """A streamed ``tool_use`` block's input as the raw JSON to run: its input deltas (taken
    off the block), else the input its ``content_block_start`` gave (``given``, as text; ``{}``
    when none). A start that gave an input (a proxy that puts it there and streams it too) and
    deltas that say another is an unreadable stream, as a ``message_start`` block said again
    otherwise is (``block_said``): which is the call? Before: the deltas' input ran, whatever the
    start said. The same JSON written otherwise is the same input (read once)."""
    raw = "".join(block.pop("_json", None) or ())
    if not raw.strip():  # no input deltas: the input as ``content_block_start`` gave it
        return given or "{}"
    if not _agree(given or "{}", "{}") and not _agree(given, raw):
        why = f"a tool_use block began with input {given[:80]!r} and streamed {raw[:80]!r}"
        raise Retryable("stream_unreadable", why)
    return raw


def calls_alike(a: list[tuple[Any, str]], b: list[tuple[Any, str]]) -> bool:
    """Whether two lists of calls, as (name, arguments text), say the same calls: the same names
    in order, their arguments the same text or the same JSON written otherwise (a chat stream's
    last chunk giving the whole message after its deltas, its arguments as an object a server did
    not encode, or spaced otherwise: before, refused as said otherwise, on every try)."""
    return len(a) == len(b) and all(n == m and _agree(x, y) for (n, x), (m, y) in zip(a, b, strict=True))


def offered_call(call: Mapping[str, Any]) -> Mapping[str, Any]:
    """A chat tool call (whole, or a stream's delta) whose ``type`` is ``function`` or left out
    (servers that omit it), as given; one of another type (``custom``: a free-text tool's call,
    or a kind the protocol adds later) is a call of a kind this run never offers: an unusable
    answer, retried and never run, as a Responses ``custom_tool_call`` item is (before: a
    ``custom`` call that also carried a ``function`` naming a tool ran that tool)."""
    kind = call.get("type")
    if kind not in (None, "", "function"):
        said = f"a {str(kind)[:40]!r} tool call (id {str(call.get('id'))[:80]!r})"
        fn = call.get("function")
        said += "" if isinstance(fn, dict) and fn.get("name") else " without a name"
        raise Retryable("unusable_response", f"{said}: a call of a kind this run does not offer")
    return call
