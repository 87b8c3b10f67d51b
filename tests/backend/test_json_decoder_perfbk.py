"""``tether.models._json.loads`` reads a body that holds arguments as an object through one
decoder kept for the process (``json.loads`` given a hook built one per call): the same values,
repeated keys kept, and the same errors as ``json.loads`` with that hook."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.models import _json
from tether.models._json import Pairs, loads

ANSWER = (
    '{"type":"message","content":[{"type":"tool_use","id":"toolu_1","name":"refund",'
    '"input":{"order_id":"742","order_id":"999"}}],"usage":{"input_tokens":9,"output_tokens":2}}'
)


def hooked(raw: bytes | str) -> Any:
    return json.loads(raw, object_pairs_hook=_json._object)


@pytest.mark.parametrize(
    "raw",
    [
        ANSWER.encode(),
        ANSWER,
        b"\xef\xbb\xbf" + ANSWER.encode(),  # a UTF-8 byte-order mark: json.loads skips it in bytes
        ' \n{"arguments": {"k": "\\ud83d\\ude00 \\u00e9"}}\t',
    ],
)
def test_the_kept_decoder_reads_as_json_loads_with_the_hook(raw: bytes | str) -> None:
    got = loads(raw)
    assert got == hooked(raw)
    if "order_id" in str(got):
        call = got["content"][0]["input"]
        assert isinstance(call, Pairs) and call.pairs == [("order_id", "742"), ("order_id", "999")]


@pytest.mark.parametrize(
    "raw",
    [
        '\ufeff{"input": {}}',  # a byte-order mark in text
        b'{"input": {}} extra',
        b'{"input": {',
        b'{"input": {"k": "\xff"}}',  # not UTF-8
        "",
    ],
)
def test_the_kept_decoder_fails_as_json_loads_with_the_hook(raw: bytes | str) -> None:
    with pytest.raises(ValueError) as expected:
        hooked(raw)
    with pytest.raises(type(expected.value)) as got:
        loads(raw)
    assert str(got.value) == str(expected.value)


def test_no_decoder_is_built_per_body(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []
    init = json.JSONDecoder.__init__

    def counting(self: json.JSONDecoder, *args: Any, **kwargs: Any) -> None:
        built.append(kwargs)
        init(self, *args, **kwargs)

    monkeypatch.setattr(json.JSONDecoder, "__init__", counting)
    for _ in range(3):
        assert loads(ANSWER.encode())["usage"] == {"input_tokens": 9, "output_tokens": 2}
        assert loads(b'{"type":"content_block_start","content_block":{"input":{}}}')
    assert built == []


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
def test_a_body_in_utf16_or_32_keeps_a_key_named_twice(encoding: str) -> None:
    # Attack: the same repeated arguments key in a body a server wrote in UTF-16 or 32 (read,
    # as json.loads reads it, by its first bytes). Before: the UTF-8 pattern never matched,
    # the plain reader kept the last value ("999") and the gate never saw the duplicate.
    got = loads(ANSWER.encode(encoding))
    call = got["content"][0]["input"]
    assert isinstance(call, Pairs) and call.pairs == [("order_id", "742"), ("order_id", "999")]
    assert _json.written(call) == '{"order_id": "742", "order_id": "999"}'  # the gate refuses it
    # The legitimate body in that encoding reads as it always did.
    plain = loads('{"content": [{"input": {"order_id": "742"}}], "n": 1}'.encode(encoding))
    assert plain == {"content": [{"input": {"order_id": "742"}}], "n": 1}
    assert not isinstance(plain["content"][0]["input"], Pairs)
