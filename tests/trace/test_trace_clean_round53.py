"""Round 53: the tracer cleans an event's payload in place (the emit's own keyword mapping),
storing a value again only where it changes. What every value went through before still holds:
credential-named keys, known secrets, credential keys inside JSON text, control characters and
non-finite floats; the caller's own mapping is never changed."""

from __future__ import annotations

import math
from typing import Any

from tether.trace import EventKind, MemorySink, Tracer
from tether.trace._sanitize import REDACTED, Redactor


def _tracer(*secrets: str) -> Tracer:
    return Tracer("run-53", [MemorySink()], redactor=Redactor(set(secrets)), strict=False)


def test_the_callers_mapping_is_not_changed_by_cleaning() -> None:
    payload: dict[str, Any] = {
        "call_id": "c1\n",
        "tool": "t",
        "arguments": '{"password": "hunter2"}',
    }
    kept = dict(payload)
    event = _tracer().emit(EventKind.TOOL_PROPOSED, **payload)
    assert payload == kept
    assert event.data["call_id"] == "c1\\x0a"
    assert event.data["arguments"] == f'{{"password": "{REDACTED}"}}'


def test_plain_values_pass_as_they_are_and_unsafe_ones_are_cleaned() -> None:
    event = _tracer("s3cr3t-value-53").emit(
        EventKind.CONTEXT_COMPOSED,
        messages=3,
        tools=0,
        tools_enabled=True,
        prefix_reuse=math.nan,
        cached_share=0.5,
        status_strategy=None,
    )
    assert event.data == {
        "messages": 3,
        "tools": 0,
        "tools_enabled": True,
        "prefix_reuse": "NaN",
        "cached_share": 0.5,
        "status_strategy": None,
    }
    response = _tracer("s3cr3t-value-53").emit(
        EventKind.MODEL_RESPONSE,
        model="m\u2028",
        text="the key is s3cr3t-value-53",
        tool_calls=[{"id": "c\x00", "name": "s3cr3t-value-53"}],
        cost_usd=math.inf,
    )
    assert response.data["model"] == "m\\u2028"
    assert response.data["text"] == f"the key is {REDACTED}"
    assert response.data["tool_calls"] == [{"id": "c\\x00", "name": REDACTED}]
    assert response.data["cost_usd"] == "Infinity"


def test_an_undeclared_credential_named_field_is_redacted_and_a_plain_one_kept() -> None:
    tracer = _tracer()
    event = tracer.emit(EventKind.MODEL_ERROR, error="boom", api_token="tok-53", note="ok\r")
    assert event.data == {"error": "boom", "api_token": REDACTED, "note": "ok\\x0d"}
    assert tracer.problems  # listed as undeclared, kept (lax)


def test_a_string_subclass_and_bytes_are_cleaned_as_text() -> None:
    class Name(str):
        pass

    event = _tracer().emit(EventKind.MODEL_ERROR, error=Name("a\nb"))
    assert event.data["error"] == "a\\x0ab" and type(event.data["error"]) is str
