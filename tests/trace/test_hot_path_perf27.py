"""Behaviour pins for perf round 27's cuts in ``Tracer.emit``: a trace line is encoded once,
unescaped, when it is ASCII (most are), and escaped as before otherwise; the event's number is
worked out inline. The bytes written must be exactly what the code they replaced wrote."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_core import PydanticSerializationError, to_json

from tether.trace import _tracer
from tether.trace._events import EventKind, TraceEvent
from tether.trace._tracer import JsonlSink, MemorySink, Tracer, read_trace


def _before(event: TraceEvent) -> bytes:
    """``_encode`` as it was before this round: escaped always, ``json.dumps`` as the fallback."""
    data = event.to_json()
    try:
        return to_json(data, ensure_ascii=True) + b"\n"
    except PydanticSerializationError:
        return json.dumps(data, ensure_ascii=True, default=str).encode("ascii") + b"\n"


VALUES: list[Any] = [
    "plain",
    "caf\u00e9 \u2014 \u201cquoted\u201d",
    "emoji \U0001f600",
    "line\u2028separator",
    "lone \ud800 surrogate",
    "control \x00\x1f\x7f",
    'quote " and \\ backslash </script>',
    ["a", "\u00e9", {"k": "\u4e2d"}],
    {"nested": {"deep": "\u00fc", "n": 1.5e-7}},
    12345678901234567890123,
    -0.0,
    1e16,
    None,
    True,
    datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),  # not JSON: the fallback writes its str()
    b"bytes",
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_each_line_is_the_bytes_the_escaped_encoder_wrote(value: Any) -> None:
    event = TraceEvent(
        "20261203T215936-13ac6b6e",
        7,
        "2026-12-03T21:59:36.163080+00:00",
        EventKind.VERIFICATION_FAILED,
        {"v": value},
    )
    line = _tracer._encode(event)
    assert line == _before(event)
    assert line.isascii() and line.endswith(b"\n") and line.count(b"\n") == 1


def test_an_ascii_line_is_encoded_once_without_escaping(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def recording(value: Any, **options: Any) -> bytes:
        calls.append(options)
        return to_json(value, **options)

    monkeypatch.setattr(_tracer, "to_json", recording)
    event = TraceEvent(
        "r", 1, "ts", EventKind.POLICY_ALLOWED, {"call_id": "c1", "tool": "lookup", "rule": "policy"}
    )
    assert _tracer._encode(event) == _before(event)
    assert calls == [{}]  # one pass, no escaping asked for
    calls.clear()
    accented = TraceEvent("r", 2, "ts", EventKind.VERIFICATION_FAILED, {"text": "d\u00e9j\u00e0 vu"})
    assert _tracer._encode(accented) == _before(accented) and b"\\u00e9" in _tracer._encode(accented)
    assert calls[-1] == {"ensure_ascii": True}  # a line with non-ASCII text is escaped, as before


def test_events_are_numbered_after_the_last_one_emitted_or_restored(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    tracer = Tracer("run", [MemorySink(), JsonlSink(path)])
    assert tracer.emit(EventKind.VERIFICATION_FAILED, problem="first").seq == 1
    tracer.restore([{"seq": 9, "kind": "verification_failed", "problem": "written earlier"}])
    assert tracer.emit(EventKind.VERIFICATION_FAILED, problem="after the restored").seq == 10
    fresh = Tracer("run", [MemorySink()])
    fresh.restore([{"seq": 4, "kind": "a kind a later release wrote"}])  # not held, never reused
    assert fresh.events == [] and fresh.emit(EventKind.VERIFICATION_FAILED, problem="next").seq == 5
    tracer.close()
    assert [e["seq"] for e in read_trace(path)] == [1, 10]
