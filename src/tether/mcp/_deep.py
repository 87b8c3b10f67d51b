"""A ``tools/list`` answer the SDK cannot parse because a tool in it nests deeper than its JSON
parser goes (``PARSER_DEPTH``): the whole answer was refused, the server listed nothing and was
unavailable. Read here instead by Python's parser, each such tool is replaced by its name and
why (``CUT``), which ``usable_listing`` leaves out, named, as it leaves out a tool the SDK
refuses; the server's other tools are served. Events pass here on their way to the SDK, so an
event of more objects and arrays than it is given is refused here too (``_bulk``), and an event's
``retry`` (how long the SDK waits before reopening a stream) is held to ``MAX_RETRY_MS``: the SDK
divided any number of digits by 1000.0, and one of 400 digits raised ``OverflowError`` outside
its handlers, ending the session (at start, on the listen stream, the server never started)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from tether.mcp._bulk import MAX_CONTAINERS, counted, refusal
from tether.mcp._flood import NotificationGate
from tether.mcp._framing import FLOAT_ID, id_key, well_formed, whole_id
from tether.mcp._stdio import too_large

__all__ = ["CUT", "FOREIGN", "MAX_RETRY_MS", "PARSER_DEPTH", "cut_deep_tools", "cut_events", "foreign_answer"]

PARSER_DEPTH = 200  # the SDK's JSON parser (pydantic's) refuses a message nested deeper
CUT = "x-tether-cut"  # the key under which a cut tool says why
_AROUND = 3  # the levels around a tool in an answer: the message, its result, the tools array
# The end of an event in an event stream: a line ending, then an empty line (a line ends with
# CRLF, LF or CR, and a stream may mix them: ``\n\r\n`` ends an event as ``\n\n`` does); a CR
# last in what has come is a line's end only once the next byte is not LF (as the SDK reads it).
_BLANK = re.compile(rb"(?:\r\n|\n|\r(?=[^\n]))(?:\r\n|\n|\r(?=[^\n]))")
_LINE = re.compile(rb"\r\n|\r|\n")
MAX_RETRY_MS = 60_000  # the longest wait before reopening an event stream a server may ask for
FOREIGN = "the server answered this request with the id of another request (a forged answer)"


def cut_deep_tools(raw: bytes) -> bytes | None:
    """``raw`` (a message the SDK refused) with each tool of its ``tools/list`` result nested
    deeper than the parser goes replaced by ``{"name": ..., CUT: why}``; ``None`` when it is no
    such answer, Python cannot read it either, or no tool is that deep."""
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    result = message.get("result") if isinstance(message, dict) else None
    tools = result.get("tools") if isinstance(result, dict) else None
    if not isinstance(tools, list):
        return None
    limit = PARSER_DEPTH - _AROUND
    cut = False
    for index, tool in enumerate(tools):
        if _deeper(tool, limit):
            name = tool.get("name") if isinstance(tool, dict) else None
            why = f"its definition nests more than {limit} levels deep, more than the host reads"
            tools[index] = {"name": name if isinstance(name, str) else f"#{index}", CUT: why}
            cut = True
    return json.dumps(message).encode("utf-8") if cut else None


async def cut_events(
    chunks: AsyncIterable[bytes], limit: int, gate: NotificationGate | None = None, answering: Any = None
) -> AsyncIterator[bytes]:
    """An event stream (an answer's, or the session's own), passed on event by event, an event
    whose data is a listing with a tool nested too deep rewritten (``cut_deep_tools``), one of
    more objects and arrays than the SDK is given replaced (``_cut_event``); what grows past
    ``limit`` without ending an event is passed on as it is (the SDK caps an event itself), or, on
    the stream ``answering`` a POSTed request, ends it with an error for that request naming the
    limit (the SDK's own cap ended the stream as one that "ended without a response", the call
    failing as an answer that never came, whether it took effect unknown); a
    notification ``gate`` drops is not passed on at all (``_flood``). What
    waits grows in place: joined by copying it whole at each chunk, an event of megabytes in small
    chunks took the event loop seconds."""
    pending, searched = bytearray(), 0
    async for chunk in chunks:
        pending += chunk
        start = 0  # where the next event begins (the events before it are dropped once, below)
        while (end := _BLANK.search(pending, max(start, searched - 3))) is not None:
            event = bytes(pending[start : end.end()])
            start = searched = end.end()
            told = _data(event) if b'"notifications/' in event else event  # (else only searched)
            if gate is None or gate.admit_json(told):
                yield _cut_event(event)
        del pending[:start]
        searched = len(pending)
        if len(pending) > limit and answering is not None:
            error = {
                "jsonrpc": "2.0",
                "id": answering,
                "error": {"code": -32603, "message": too_large(limit)},
            }
            yield b"data: " + json.dumps(error).encode("utf-8") + b"\n\n"
            return
        if len(pending) > limit:
            yield bytes(pending)
            pending, searched = bytearray(), 0
    if pending:
        yield _cut_event(bytes(pending))


def _cut_event(raw: bytes) -> bytes:
    """One event as the SDK is given it: a message of more objects and arrays than it reads
    becomes an error for the request it answers, or a comment (``_bulk``); a listing has a tool
    nested too deep cut; a ``retry`` out of bounds is held to them (``_retry``)."""
    if b"retry:" in raw:
        raw = _retry(raw)
    if FLOAT_ID.search(raw) is not None:
        raw = _whole_event(raw)
    if not raw.isascii() or b"\\u" in raw:  # text not well-formed Unicode read as U+FFFD
        data = _data(raw)
        if (formed := well_formed(data)) is not data:
            raw = _with_data(raw, formed)
    if b'"tools"' not in raw and raw.count(b"{") + raw.count(b"[") <= MAX_CONTAINERS:
        return raw
    data = _data(raw)
    if (over := counted(data)) is not None:
        if (error := refusal(over[1], over[0])) is None:
            return b": " + over[0].encode("utf-8") + b"\n\n"  # no data: the SDK passes nothing on
        return _with_data(raw, json.dumps(error).encode("utf-8"))
    if b'"tools"' not in data or (cut := cut_deep_tools(data)) is None:
        return raw
    return _with_data(raw, cut)


def _whole_event(raw: bytes) -> bytes:
    """An event whose message's id is a whole float, that id the integer (``whole_id``)."""
    try:
        message = json.loads(_data(raw))
    except (ValueError, RecursionError):
        return raw
    if (mended := whole_id(message)) is message:
        return raw
    return _with_data(raw, json.dumps(mended).encode("utf-8"))


def foreign_answer(raw: bytes, asked: Any) -> bytes:
    """One event of the stream answering request ``asked`` (a POST's), as the SDK is given it: an
    answer (a result or an error) naming another request becomes an error for ``asked``
    (``FOREIGN``). The SDK gives any answer on a POST's stream the id of the request POSTed, so
    a server answering a call with the result meant for another (a forged answer, or two calls'
    answers crossed) had the call take it as its own, where a JSON body so answered fails; an
    error naming no request (``"id": null``) stays the error of the request POSTed."""
    if b'"result"' not in raw and b'"error"' not in raw:
        return raw
    try:
        message = json.loads(_data(raw))
    except (ValueError, RecursionError):
        return raw
    if not isinstance(message, dict) or "method" in message or not {"result", "error"} & message.keys():
        return raw
    ident = message.get("id")
    if (ident is None and "error" in message) or id_key(ident) == id_key(asked):
        return raw
    error = {"jsonrpc": "2.0", "id": asked, "error": {"code": -32603, "message": FOREIGN}}
    return _with_data(raw, json.dumps(error).encode("utf-8"))


def _data(raw: bytes) -> bytes:
    """An event's data (its ``data`` lines joined), as the SDK reads it."""
    lines = _LINE.split(raw)
    return b"\n".join(line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:"))


def _with_data(raw: bytes, data: bytes) -> bytes:
    """The event ``raw`` with ``data`` as its data (a ``data`` line for each of its lines), its
    other fields (``id``, ``event``) kept."""
    other = [line for line in _LINE.split(raw) if line and not line.startswith(b"data:")]
    return b"\n".join([*other, *(b"data: " + line for line in data.split(b"\n"))]) + b"\n\n"


def _retry(raw: bytes) -> bytes:
    """``raw`` with each ``retry`` field the SDK would read as a number outside ``0`` to
    ``MAX_RETRY_MS`` (it reads what ``int`` reads: any count of digits, a sign, underscores) given
    as the nearest bound; ``raw`` itself when there is none."""
    lines = _LINE.split(raw)
    held = False
    for index, line in enumerate(lines):
        if not line.startswith(b"retry:"):
            continue
        try:
            wait = int(line[6:].decode("utf-8").removeprefix(" "))
        except ValueError:  # no number (or past Python's digits): the SDK ignores it too
            continue
        if not 0 <= wait <= MAX_RETRY_MS:
            lines[index] = b"retry: %d" % min(max(wait, 0), MAX_RETRY_MS)
            held = True
    return b"\n".join(lines) if held else raw


def _deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` levels of objects and arrays (iteratively)."""
    if not isinstance(value, dict | list):
        return False
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return False
