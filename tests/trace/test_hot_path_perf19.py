"""Behaviour pins for the per-step hot path rewritten in perf round 19: the credential-word check
of a call's traced arguments (one regex search) and ``Unsettled.collecting`` (a plain context
manager). Both must do exactly what the code they replaced did."""

from __future__ import annotations

import json

import pytest

from tether.core.messages import Usage
from tether.models._retrying import _UNSETTLED, Unsettled, unsettled
from tether.trace._sanitize import _SECRET_WORDS, REDACTED, Redactor, _names_a_secret, redact_keyed_text


@pytest.mark.parametrize("word", sorted(_SECRET_WORDS))
def test_every_credential_word_is_seen_however_the_key_is_written(word: str) -> None:
    camel = word[:3] + word[3:].capitalize()
    for key in (word, f"my_{word}", f"X-{word.upper()}", f"user{camel}2"):
        text = json.dumps({key: "hunter2-value", "other": 1})
        assert _names_a_secret(text)
        assert "hunter2-value" not in redact_keyed_text(text, Redactor()) or not Redactor().is_secret_key(key)
    assert REDACTED in redact_keyed_text(json.dumps({word: "hunter2-value"}), Redactor())


def test_arguments_without_a_credential_word_are_kept_as_they_are() -> None:
    for text in ('{"key": "k3"}', '{"query": "secretary emails", "max_tokenz": 5}', "[1, 2, 3]"):
        squashed_hit = any(w in "".join(c for c in text.lower() if c.isalnum()) for w in _SECRET_WORDS)
        assert _names_a_secret(text) is squashed_hit
        if not squashed_hit:
            assert redact_keyed_text(text, Redactor()) is text
    # "secretary" holds "secret": the text is parsed, and the key, not a credential name, is kept.
    text = '{"secretary": "Ann"}'
    assert _names_a_secret(text) and redact_keyed_text(text, Redactor()) == text


def test_collecting_gathers_what_is_left_unsettled_and_restores_the_outer_collector() -> None:
    outer, inner = Unsettled(), Unsettled()
    with outer.collecting() as got:
        assert got is outer and _UNSETTLED.get() is outer
        with pytest.raises(RuntimeError), inner.collecting():
            unsettled(Usage(3, 4), 0.5)
            raise RuntimeError("cut")  # an exception passes through, never swallowed
        assert _UNSETTLED.get() is outer
        unsettled(Usage(1, 0), 0.0)
    assert _UNSETTLED.get() is None
    assert (inner.usage.total_tokens, inner.cost_usd) == (7, 0.5)
    assert outer.usage.total_tokens == 1
