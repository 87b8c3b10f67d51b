"""JSON as the backends read an answer: an object that names a key twice keeps what it said.

A reader that keeps the last value of a key written twice (Python's, and most) would hand
the host a call's arguments other than the model wrote: ``{"order_id": "742", "order_id":
"999"}`` read as ``{"order_id": "999"}``. Arguments sent as JSON text reach the host's gate as
written, and the gate refuses the duplicate (``duplicate_key``); arguments sent as an object
(an Anthropic ``tool_use`` input, a server that does not encode them) are read here, so such an
object is kept with its pairs as written (``Pairs``) and ``written`` writes it back so, for the
gate to judge the same way. Only a body that holds arguments as an object (``"input": {`` or
``"arguments": {``), or one not in UTF-8, pays for keeping pairs; every other is read by the
plain reader."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["Pairs", "loads", "written"]

_OBJECT_ARGUMENTS = re.compile(rb'"(?:input|arguments)"\s*:\s*\{')
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff")  # how UTF-16 and UTF-32 (LE) byte-order marks begin


class Pairs(dict[str, Any]):
    """A JSON object that names a key more than once: a dict as any reader has it (the last
    value of each key), its ``pairs`` in the order written."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    return d if len(d) == len(pairs) else Pairs(pairs)


_PAIRS = json.JSONDecoder(object_pairs_hook=_object)  # one for the process (see ``loads``)
# ``json.dumps(value, ensure_ascii=False)``'s encoder, built once: ``dumps`` given an option
# builds an encoder on every call (an Anthropic answer writes each call's input with it).
_WRITER = json.JSONEncoder(ensure_ascii=False)


def loads(raw: bytes | str) -> Any:
    """``json.loads``, keeping an object's repeated keys (``Pairs``) where the body holds a
    call's arguments as an object: the same text read, and the same errors, as ``json.loads``
    with that hook, through one decoder kept for the process (``json.loads`` given a hook builds
    a decoder and its scanner on every call, twice the cost of reading an answer)."""
    if isinstance(raw, bytes):
        # The pattern reads UTF-8: a body that may be UTF-16 or 32 (a NUL or a wide byte-order
        # mark in its first two bytes: how ``json.loads`` tells them) is read keeping pairs.
        head = raw[:2]
        if b"\x00" not in head and head not in _WIDE_BOMS and not _OBJECT_ARGUMENTS.search(raw):
            return json.loads(raw)
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    elif raw.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
    else:
        text = raw
    return _PAIRS.decode(text)


def _repeats(value: object) -> bool:
    if isinstance(value, Pairs):
        return True
    if isinstance(value, dict):
        return any(map(_repeats, value.values()))
    if isinstance(value, list):
        return any(map(_repeats, value))
    return False


def written(value: object) -> str:
    """A JSON value as text (``json.dumps``, non-ASCII as it is); an object that named a key
    twice written with each pair it named."""
    if not _repeats(value):
        return _WRITER.encode(value)
    if isinstance(value, dict):
        pairs = value.pairs if isinstance(value, Pairs) else list(value.items())
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {written(v)}" for k, v in pairs) + "}"
    assert isinstance(value, list)  # only containers hold Pairs
    return "[" + ", ".join(map(written, value)) + "]"
