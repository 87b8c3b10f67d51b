"""What a Responses stream said, item by item (``_Said``), and how it is checked against what the
stream is done with: a done item against its ``output_item.added`` (``_same_item``), argument and
text deltas against the arguments and text a call or message is done with, and the terminal
event's output against the stream (``_with_arguments``, ``_with_left_out``). Read by
``tether.models._responses``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from tether.models._base import paired
from tether.models._json import written
from tether.models._retrying import Retryable, streamed

__all__ = ["DONE_EVENTS", "_Said", "_same_json", "_with_arguments", "_with_left_out", "client_call"]


class _Said:
    """What a Responses stream said item by item, by output index (or item id): each item as
    ``output_item.done`` gave it, else as its ``output_item.added`` and deltas build it (a
    server whose terminal event lists no output and which sends no ``output_item.done``: its
    text deltas are the answer, its refusal deltas a refusal, a reasoning item is kept with
    its summary deltas, to be sent back with the call). Argument deltas that disagree with the
    arguments the call is done with (other than as the same JSON written otherwise) are a
    garbled stream (which would run?), not an answer."""

    def __init__(self) -> None:
        self.order: dict[object, None] = {}  # each item's key, in the order first heard of
        self.added: dict[object, dict[str, Any]] = {}
        self.done: dict[object, dict[str, Any]] = {}
        self.text: dict[object, list[str]] = {}
        self.arguments: dict[object, list[str]] = {}
        self.refusal: dict[object, list[str]] = {}
        self.thought: dict[object, list[str]] = {}
        self.numbered: dict[int, Mapping[str, Any]] = {}  # the first event of each sequence_number
        # The deltas of each part (text, refusal, summary) by (its kind, item key, part index).
        self.parts: dict[tuple[str, object, int], list[str]] = {}
        self.now: dict[object, object] = {}  # an output index a later item reused: that item's key

    def again(self, event: Mapping[str, Any]) -> bool:
        """Whether the same event came before under its ``sequence_number`` (read once: a text
        or argument delta a resuming proxy sends again is not said twice). Another event under
        a number seen (a proxy's own event numbered as the one before it) is read as it is."""
        number = event.get("sequence_number")
        if not isinstance(number, int):
            return False
        was = self.numbered.setdefault(number, event)
        return was is not event and was == event

    def key(
        self, event: Mapping[str, Any], item: Mapping[str, Any] | None = None, begins: bool = False
    ) -> object:
        """The item an event is about: its output index, else its item id; an event that names
        neither (a proxy that drops them) is about the item under way, or ``begins`` one."""
        index = event.get("output_index")  # the item that index names now (``_reused``)
        key = (
            self.now.get(index, index)
            if index is not None
            else event.get("item_id") or (item or {}).get("id")
        )
        if key is None:
            last = next(reversed(self.order), None)
            key = last if last is not None and not begins else f"#{len(self.order)}"
        if key not in self.order:
            self.order[key] = None
        return key

    def piece(self, into: dict[object, list[str]], event: Mapping[str, Any], delta: object) -> None:
        """A delta of an item's text, arguments, refusal or summary. One for an item its
        ``output_item.done`` already gave whole (a proxy that replays or reorders events) is a
        garbled stream, as an Anthropic delta after its block's stop is: the item as done is not
        what the stream said (before: argument pieces after it were passed over, the call run
        with the done arguments; text ones made it garbled only where the done item listed text).
        So is one numbered for an item of another type (text for a ``function_call``, arguments
        for a ``message``), as an Anthropic delta for a block of another type is: which item's
        are the pieces (before: passed over, or the call's arguments dropped)?"""
        if isinstance(delta, str) and delta:
            key, kind = self.key(event), self._kind(into)
            if key in self.done:
                why = f"a delta of {kind} for output item {key!r} after its output_item.done"
                raise Retryable("stream_unreadable", why[:300])
            self._fits(key, kind, self.added.get(key))
            into.setdefault(key, []).append(delta)
            self.parts.setdefault((kind, key, _part(event)), []).append(delta)
            streamed(delta)

    def _fits(self, key: object, kind: str, item: object) -> None:
        """Pieces of ``kind`` said for the item at ``key`` must be of its type (none stated: any)."""
        itype = item.get("type") if isinstance(item, dict) else None
        if isinstance(itype, str) and itype and itype != _DELTA_ITEMS[kind]:
            why = f"a delta of {kind} for output item {key!r}, a {itype} item"
            raise Retryable("stream_unreadable", why[:300])

    def _kind(self, into: dict[object, list[str]]) -> str:
        if into is self.arguments:
            return "arguments"
        return "text" if into is self.text else "refusal" if into is self.refusal else "thought"

    def part_done(self, kind: str, event: Mapping[str, Any]) -> tuple[str, str] | None:
        """A message part's text as the stream is done with it (``output_text.done``,
        ``refusal.done``, ``content_part.done``; ``kind`` the event's type): where deltas said the
        part, they must be the same text (as a call's arguments must be: which is the answer?);
        where none did (a server that sends only the done events), it is the part's text, as if
        one delta had said it. Returns ("text", the text) when it said the part, for the caller
        to show. (A reasoning summary's done events are not read: its deltas or its done item
        say it, and it is no answer.)"""
        field, into = _DONE_FIELDS[kind]
        said = event.get(field)
        if kind.endswith("part.done"):  # the part itself: its text under its own type's field
            part = said if isinstance(said, dict) else {}
            ptype = part.get("type")
            field, into = ("refusal", "refusal") if ptype == "refusal" else ("text", into)
            said = part.get(field) if ptype in ("output_text", "text", "refusal") else None
        if not isinstance(said, str):
            return None
        pieces: dict[object, list[str]] = getattr(self, into)
        key = self.key(event)
        part_key = (self._kind(pieces), key, _part(event))
        deltas = self.parts.get(part_key)
        if deltas is None:  # nothing said of the part before: the done event says it
            self.parts[part_key] = [said]
            if said:
                pieces.setdefault(key, []).append(said)
                streamed(said)
                return "text", said
            return None
        if paired(streamed_as := "".join(deltas)) != paired(said):
            why = f"a {part_key[0]} part streamed as {streamed_as[:80]!r} is done as {said[:80]!r}"
            raise Retryable("stream_unreadable", why)
        return None

    def item(self, into: dict[object, dict[str, Any]], event: Mapping[str, Any]) -> dict[str, Any]:
        item = event.get("item") or {}
        begins = into is self.added or next(reversed(self.order), None) in self.done
        key = self.key(event, item, begins)
        if (
            into is self.added
            and isinstance(item, dict)
            and _another(self.added.get(key, self.done.get(key)), item)
        ):
            key = self._reused(event.get("output_index"), key)
        if into is self.done and isinstance(item, dict):
            _same_item(self.added.get(key), item)
        for kind in _DELTA_ITEMS:  # pieces said at that index before the item was added, or done
            if getattr(self, kind).get(key):
                self._fits(key, kind, item)
        into[key] = item
        return item

    def _reused(self, index: object, key: object) -> object:
        """The key of an item added at an output index another item has (a translating proxy
        that numbers every item 0): a new item, as an Anthropic block begun at a used index is,
        the events at that index its own from now on (before: the two calls' arguments ran
        together as one, or the first call vanished). Begun over a call whose arguments are
        not yet whole JSON, the stream is unreadable (whose are the pieces after it?)."""
        earlier = self.added.get(key) or {}
        if (
            earlier.get("type") == "function_call"
            and key not in self.done
            and not _whole("".join(self.arguments.get(key, ())))
        ):
            why = f"an item was added at output index {index} over a call whose arguments are not whole"
            raise Retryable("stream_unreadable", why)
        fresh = (index, len(self.order))
        self.now[index] = fresh
        self.order[fresh] = None
        return fresh

    def check(self, event: Mapping[str, Any], arguments: object) -> None:
        """A call's arguments as it is done with them: kept where no deltas came; where deltas
        came, they must be the same text (arguments sent as a JSON object too, as its text)."""
        if (arguments := _as_text(arguments)) is None:
            return
        pieces = self.arguments.setdefault(self.key(event, event.get("item")), [])
        if not pieces:
            pieces.append(arguments)
        elif not _agree(arguments, streamed := "".join(pieces)):
            why = f"a call's arguments streamed as {streamed[:80]!r} are done as {arguments[:80]!r}"
            raise Retryable("stream_unreadable", why)

    def lacks(self, earlier: _Said) -> list[object]:
        """The items ``earlier`` (what the same response said before it began again) began or
        said that this run never began (``output_item.added``), by item id, else output index."""
        begun = {_named(key, item) for key, item in self.added.items()}
        said = [_named(key, earlier.added.get(key, earlier.done.get(key))) for key in earlier.order]
        return [name for name in said if name not in begun][:5]

    def items(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for key in self.order:
            if key in self.done:
                done = self.done[key]
                if _lacks_arguments(done) and key in self.arguments:  # said by its deltas
                    done = {**done, "arguments": "".join(self.arguments[key])}
                if key in self.text and done.get("type") == "message":
                    done = _with_text("".join(self.text[key]), done, "its done item")
                out.append(done)
            elif (added := self.added.get(key, {})).get("type") == "function_call":
                out.append(
                    {**added, "arguments": "".join(self.arguments.get(key, ())) or added.get("arguments")}
                )
            elif client_call(added):  # a call of a kind the run never offers: ``_parse`` refuses it
                out.append(added)
            elif added.get("type") == "reasoning":  # kept to send back with the call, as a done one is
                summary = [{"type": "summary_text", "text": t} for t in self.joined(self.thought, key)]
                out.append({**added, "summary": added.get("summary") or summary})
            elif key in self.text or key in self.refusal:  # a refusal said only as deltas is one
                text = [{"type": "output_text", "text": t} for t in self.joined(self.text, key)]
                said = [{"type": "refusal", "refusal": t} for t in self.joined(self.refusal, key)]
                out.append({"type": "message", "content": text + said})
        return out

    @staticmethod
    def joined(pieces: dict[object, list[str]], key: object) -> list[str]:
        return ["".join(pieces[key])] if key in pieces else []


# The item type each kind of delta belongs to (``_Said.piece``).
_DELTA_ITEMS = {"text": "message", "refusal": "message", "arguments": "function_call", "thought": "reasoning"}
# The events that say a part is done: the field that holds its text, and what it is said into.
_DONE_FIELDS = {
    "response.output_text.done": ("text", "text"),
    "response.refusal.done": ("refusal", "refusal"),
    "response.content_part.done": ("part", "text"),
}
DONE_EVENTS = frozenset(_DONE_FIELDS)


def _part(event: Mapping[str, Any]) -> int:
    """Which part of its item an event is about (``content_index``, a summary's
    ``summary_index``; digits written as text are that number; 0 when none: a proxy's)."""
    value = event.get("content_index", event.get("summary_index"))
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _named(key: object, item: object) -> object:
    """An item by its id, else by its key (output index)."""
    return (item.get("id") if isinstance(item, dict) else None) or key


def _another(earlier: object, item: Mapping[str, Any]) -> bool:
    """Whether ``item``, added where ``earlier`` was, is another item: another item id or
    ``call_id`` where both give one (the same item added again, a replay, is not)."""
    if not isinstance(earlier, dict):
        return False
    return any(earlier.get(f) and item.get(f) and earlier[f] != item[f] for f in ("id", "call_id"))


def _whole(arguments: str) -> bool:
    """Whether a call's arguments so far are whole JSON (none said yet: nothing is cut)."""
    if not arguments.strip():
        return True
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True


_IDENTITY = ("type", "id", "call_id", "name")  # what an item is: said when added, kept when done


def _same_item(added: object, done: Mapping[str, Any], where: str = "") -> None:
    """An item's ``output_item.done`` (or its listing in the terminal output, ``where``) must be
    the item its ``added`` began: another type, id, ``call_id`` or tool name where both state one
    is a garbled stream (which call would run, and which id would its result answer?), not the
    done item silently taking its place."""
    if not isinstance(added, dict):
        return
    for field in _IDENTITY:
        was, now = added.get(field), done.get(field)
        if was and now and was != now:
            said = (
                f"is listed with {field} {str(now)[:80]!r} {where}"
                if where
                else f"is done with {field} {str(now)[:80]!r}"
            )
            why = f"an item added with {field} {str(was)[:80]!r} {said}"
            raise Retryable("stream_unreadable", why[:300])


def _with_arguments(output: Any, streamed: list[dict[str, Any]]) -> Any:
    """A terminal event's output, each call in it that leaves its ``arguments`` out given those
    the stream said for the same call (by its ``call_id`` or item ``id``): a proxy that trims the
    final output does not make the call run with none. A call it lists with other arguments
    than the stream said for it (other than as the same JSON written otherwise) is a garbled
    stream, as arguments done otherwise than their deltas are (which would run?); so is text it
    lists otherwise than the stream said it, and text it leaves out is the stream's. The output
    as it is when nothing was streamed, or every call and text in it agrees (the usual case)."""
    if not output or not streamed or not isinstance(output, list):
        return output
    _same_calls(output, streamed)
    if text := _text_of(streamed):
        if _text_of(output):
            _same_text(text, output, "the terminal output")
        else:  # the output leaves the text out (a proxy that trims it): the stream's messages say it
            output = [*(i for i in streamed if i.get("type") == "message"), *output]
    said: dict[object, str | None] = {}
    for item in streamed:
        arguments = _as_text(item.get("arguments")) if item.get("type") == "function_call" else None
        if isinstance(arguments, str) and arguments:  # none said ("" as added): nothing to compare
            for key in _keys(item):  # a key two calls share (one call_id twice) names neither
                said[key] = arguments if said.get(key, arguments) == arguments else None
    for item in output:
        listed = _as_text(item.get("arguments")) if isinstance(item, dict) else None
        streamed_as = _said_for(item, said)
        if isinstance(listed, str) and streamed_as is not None and not _agree(listed, streamed_as):
            why = f"a call's arguments streamed as {streamed_as[:80]!r} are listed as {listed[:80]!r}"
            raise Retryable("stream_unreadable", why + " in the terminal output")
    if not any(_lacks_arguments(item) for item in output):
        return output
    return [
        {**item, "arguments": _said_for(item, said)} if _lacks_arguments(item) else item for item in output
    ]


def _same_calls(output: list[Any], streamed: list[dict[str, Any]]) -> None:
    """The calls a terminal output lists must be the calls the stream said: each listed under a
    key (item ``id``, ``call_id``) of a streamed call is that call, of its type, ids and tool
    name where both state them (``_same_item``), and where the output lists calls, every streamed
    call is among them. Before: a terminal output that named another tool than the stream's
    ``output_item.added`` and ``done`` had (``read_order`` for ``read_orders``), or listed
    another call in its place, had its call run, the stream's vanishing, as a done item that
    names another tool than its added one already was refused (which call did the model ask
    for?). An output that lists no call leaves the stream's (``_with_left_out``)."""
    listed = [i for i in output if isinstance(i, dict) and i.get("type") == "function_call"]
    if not listed:
        return
    keyed: dict[str, dict[str, Any]] = {}
    for item in listed:
        for key in _keys(item):
            keyed.setdefault(key, item)
    for call in (i for i in streamed if i.get("type") == "function_call"):
        match = next((keyed[k] for k in _keys(call) if k in keyed), None)
        if match is None and _keys(call):
            why = f"a call streamed as {_named(None, call)!r} ({str(call.get('name'))[:80]!r}) is not listed"
            raise Retryable("stream_unreadable", why + " in the terminal output")
        _same_item(call, match or {}, "in the terminal output")


def _with_left_out(output: Any, streamed: list[dict[str, Any]]) -> Any:
    """A terminal output with the calls (one of a kind the run never offers too: ``client_call``)
    and reasoning items the stream gave where it lists none of their kind: a proxy that rebuilds
    the final response from its message alone does not make the call the model asked for
    vanish, its preamble text accepted as the final answer (nor lose the reasoning sent back
    with it), as text it leaves out is the stream's. An output that lists calls of its own is as
    it is (``_with_arguments`` checks them); an empty one is the stream's whole (``_parse``)."""
    if not output or not streamed or not isinstance(output, list):
        return output
    kinds = {item.get("type") for item in output if isinstance(item, dict)}
    left = [
        i
        for i in streamed
        if (i.get("type") in ("function_call", "reasoning") or client_call(i)) and i.get("type") not in kinds
    ]
    return [*output, *left] if left else output


def client_call(item: Mapping[str, Any]) -> bool:
    """Whether an output item other than a ``function_call`` is a call the client must answer:
    one with a ``call_id`` (``custom_tool_call``, ``local_shell_call``, ``computer_call``, and
    whatever kind of client tool the API adds next: each is answered by an output that names its
    ``call_id``), not the output of one (``…_output``, an input item a proxy echoed). A tool the
    server runs itself (``web_search_call``, ``file_search_call`` …) has no ``call_id``, and an
    item of a type the API added later without one is passed over. An item that asks the client
    something (a ``…_request``: ``mcp_approval_request``, answered by the client's
    ``…_response`` naming its ``id``) is one too: the server waits on the client, so text beside
    it is no final answer."""
    kind = str(item.get("type") or "")
    if kind.endswith("_request"):
        return True
    return bool(item.get("call_id")) and kind != "function_call" and not kind.endswith("_output")


def _text_of(items: list[Any]) -> str:
    """The text of the message items among ``items`` (their ``output_text`` parts), joined."""
    return "".join(
        str(part.get("text") or "")
        for item in items
        if isinstance(item, dict) and item.get("type") == "message"
        for part in item.get("content") or ()
        if isinstance(part, dict) and part.get("type") in ("output_text", "text")
    )


def _with_text(streamed: str, done: dict[str, Any], where: str) -> dict[str, Any]:
    """A message's done item given the text its deltas said: the same where it lists none (a
    proxy that trims it: ``content`` left out or empty), else checked (``_same_text``)."""
    if not _text_of([done]) and not done.get("content"):
        return {**done, "content": [{"type": "output_text", "text": streamed}]}
    _same_text(streamed, [done], where)
    return done


def _same_text(streamed: str, listed: list[Any], where: str) -> None:
    """Text a stream said (its deltas) must be the text ``listed`` holds (a done item, the
    terminal output): where they disagree the stream is garbled (which is the answer?), retried
    as calls whose arguments disagree are. Nothing said, nothing to compare."""
    if streamed and paired(other := _text_of(listed)) != paired(streamed):
        why = f"the answer's text streamed as {streamed[:80]!r} is listed as {other[:80]!r} in {where}"
        raise Retryable("stream_unreadable", why)


def _said_for(item: Any, said: dict[object, str | None]) -> str | None:
    """A call's arguments as the stream said them (by its item ``id``, else its ``call_id``)."""
    if not (isinstance(item, dict) and item.get("type") == "function_call"):
        return None
    for key in _keys(item):
        if said.get(key) is not None:
            return said[key]
    return None


def _keys(item: Mapping[str, Any]) -> list[str]:
    """What names a call across the stream and the terminal output: its item ``id`` and its
    ``call_id``, each where it is text (an id sent as a number or an object names nothing here:
    the call is matched by the other; ``_backend._ids_as_text`` writes it as text for the run)."""
    return [key for key in (item.get("id"), item.get("call_id")) if isinstance(key, str) and key]


def _as_text(arguments: object) -> str | None:
    """A call's arguments as the text compared with what the stream said: a string as sent; a
    JSON value a server sent unencoded (an object), as its JSON text, as the call would run it
    (``_backend.arguments_text``; before, such arguments were never compared: a terminal
    output's object ran over the streamed arguments, a done item's was passed over); none, None."""
    if arguments is None or isinstance(arguments, str):
        return arguments
    return written(arguments)


def _lacks_arguments(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "function_call" and item.get("arguments") is None


def _agree(a: str, b: str) -> bool:
    """Whether two texts of a call's arguments say the same (the same text, or JSON; a
    character its deltas split at its UTF-16 surrogates is the character whole)."""
    return a == b or (a := paired(a)) == (b := paired(b)) or _same_json(a, b)


def _same_json(a: str, b: str) -> bool:
    """Whether two texts are the same JSON value written differently (a proxy that re-encodes
    the arguments it is done with: spacing, escapes)."""
    try:
        return bool(_typed(_numbers(a)) == _typed(_numbers(b)))
    except (ValueError, RecursionError):
        return False


def _numbers(text: str) -> Any:
    # Numbers as decimals (1 and 1.0 the same number, as a JavaScript re-encoder writes it).
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


def _typed(value: Any) -> Any:
    """A JSON value whose true, false and null compare equal to nothing else (Python's ``True
    == 1``: arguments streamed with ``true`` are not the same as ones done with ``1``)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value) if isinstance(value, bool) or value is None else value
