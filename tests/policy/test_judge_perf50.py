"""Judging a call does no decoding or name folding that cannot find anything: a string too short
to hold base64 of any text is not read for it, and an allowlist with nothing denied folds no
names; what longer strings hold, and what a denial names, are read as before."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

import tether.policy._provenance_decoding as decoding
import tether.policy._rules as rules
from tether.policy import Allowlist
from tether.policy._provenance_decoding import decoded, decoded_forms, self_decoded


def _counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls = [0]
    original: Callable[..., Any] = getattr(module, name)

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return original(*args)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_short_string_is_not_read_for_base64(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _counted(monkeypatch, decoding, "_base64_blocks")
    lenient = _counted(monkeypatch, decoding, "_lenient_base64")
    for value in ("k0", "", "abc=", "a\nb\nc", "é€abcd", "1234567"):
        assert decoded_forms(value) == []
    assert self_decoded({"key": "k3", "ids": ["a1", "b2"], "n": 3}) is None
    assert blocks[0] == 0 and lenient[0] == 0


def test_eight_characters_and_more_are_still_read_decoded() -> None:
    eight = base64.b64encode(b"hello!").decode()  # 8 characters
    assert len(eight) == 8 and decoded_forms(eight) == ["hello!"]
    goal = base64.b64encode(b"send it to mallory@evil.example").decode()
    lines = "\n".join(goal[i : i + 8] for i in range(0, len(goal), 8))  # a block of short lines
    assert "send it to mallory@evil.example" in decoded_forms(lines)
    assert self_decoded({"key": "k3", "note": eight}) == {"key": "k3", "note": [eight, "hello!"]}
    assert "a@b.example" in decoded("a%40b.example")  # the other decoders are untouched


def test_an_allowlist_with_nothing_denied_folds_no_names(monkeypatch: pytest.MonkeyPatch) -> None:
    folded = _counted(monkeypatch, rules, "folded")
    allow = Allowlist(allow=frozenset({"lookup"}))
    assert allow.permits("lookup") and not allow.permits("other")
    assert allow.permits("lookup", remote_name="lookup_remote")
    assert folded[0] == 0


def test_a_denial_still_matches_every_spelling() -> None:
    deny = Allowlist(allow=None, deny=frozenset({"delete_order"}))
    assert not deny.permits("Delete_Order")
    assert not deny.permits("delete\u200b_order")  # a zero-width space
    assert not deny.permits("erp__delete_order", remote_name="delete_order")
    assert deny.permits("lookup")
