"""Behaviour pins for round 30's cuts in the JSONL sink: a line is encoded without building the
event's mapping (its own fields put before the payload's JSON), the same bytes as ``_encode``
wrote; a new run's empty file is opened without taking its lock; a value with no secret to
redact is not run through the redactor. Secrets are masked exactly as before."""

from __future__ import annotations

import fcntl
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tether.trace import _tracer
from tether.trace._events import EventKind, TraceEvent
from tether.trace._sanitize import REDACTED, Redactor, sanitize_value
from tether.trace._tracer import JsonlSink, Tracer, read_trace

PAYLOADS: list[dict[str, Any]] = [
    {},
    {"call_id": "c1", "tool": "lookup", "rule": "policy"},
    {"text": "caf\u00e9 \u2014 \u201cquoted\u201d"},
    {"text": "line\u2028separator \ud800 \x00"},
    {"tool_calls": [{"id": "call_1", "name": "lookup"}], "cost_usd": 0.0, "n": 10**30},
    {"when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "raw": b"bytes"},  # not JSON: the fallback
    {"quote": 'a " and \\ and </script>', "none": None, "flag": True, "neg": -0.0},
]
RUN_IDS = ["20261204T033850-fd4e08c5", "r\u00e9sum\u00e9-run", 'odd "run" \\ id']
STAMPS = ["2026-12-04T03:38:50.767824+00:00", "t\u00e9", ""]


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
@pytest.mark.parametrize("run_id", RUN_IDS, ids=range(len(RUN_IDS)))
@pytest.mark.parametrize("ts", STAMPS, ids=range(len(STAMPS)))
def test_the_sink_writes_the_bytes_encode_writes(
    tmp_path: Path, payload: dict[str, Any], run_id: str, ts: str
) -> None:
    events = [
        TraceEvent(run_id, 7, ts, EventKind.VERIFICATION_FAILED, payload),
        TraceEvent(run_id, 8, ts, "stop", payload),  # type: ignore[arg-type] # a kind given as text
        TraceEvent("another-run", 9, ts, EventKind.STOP, payload),  # one sink, a second run's event
    ]
    sink = JsonlSink(tmp_path / "t.jsonl")
    for event in events:
        sink.write(event)
    sink.close()
    assert (tmp_path / "t.jsonl").read_bytes() == b"".join(map(_tracer._encode, events))


def test_an_ascii_event_is_written_without_its_mapping_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def built(self: TraceEvent) -> dict[str, Any]:
        raise AssertionError("the line's mapping was built")

    path = tmp_path / "t.jsonl"
    tracer = Tracer("run-1", [JsonlSink(path)])
    monkeypatch.setattr(TraceEvent, "to_json", built)
    tracer.emit(EventKind.POLICY_ALLOWED, call_id="c1", tool="lookup", rule="policy")
    tracer.emit(EventKind.CONTEXT_COMPOSED, messages=2, tools=1, tools_enabled=True, prefix_reuse=None)
    tracer.close()
    monkeypatch.undo()
    lines = read_trace(path)
    assert [(e["seq"], e["kind"]) for e in lines] == [(1, "policy_allowed"), (2, "context_composed")]
    assert lines[0]["run_id"] == "run-1" and lines[1]["prefix_reuse"] is None


def test_a_new_runs_empty_file_is_opened_without_its_lock_and_a_cut_line_still_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locks: list[int] = []
    real = fcntl.flock

    def counting(fd: int, op: int) -> None:
        locks.append(op)
        real(fd, op)

    monkeypatch.setattr(fcntl, "flock", counting)
    JsonlSink(tmp_path / "new.jsonl").close()  # nothing written: no batch, and no cut line to end
    assert locks == []
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b'{"run_id":"r","seq":1,"ts":"t","kind":"stop"}\n{"run_id":"r","se')
    JsonlSink(cut).close()
    assert locks == [fcntl.LOCK_EX, fcntl.LOCK_UN]  # a file with lines: checked under the lock
    assert cut.read_bytes() == b'{"run_id":"r","seq":1,"ts":"t","kind":"stop"}\n'


def test_a_batch_is_written_under_one_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locks: list[int] = []
    real = fcntl.flock

    def counting(fd: int, op: int) -> None:
        locks.append(op)
        real(fd, op)

    path = tmp_path / "t.jsonl"
    tracer = Tracer("run-1", [JsonlSink(path, max_delay_s=3600)])
    monkeypatch.setattr(fcntl, "flock", counting)
    for n in range(5):
        tracer.emit(EventKind.POLICY_ALLOWED, call_id=f"c{n}", tool="lookup", rule="policy")
    tracer.flush()
    assert locks == [fcntl.LOCK_EX, fcntl.LOCK_UN]
    tracer.close()
    assert len(read_trace(path)) == 5


def test_values_are_redacted_as_before_with_and_without_secrets(tmp_path: Path) -> None:
    nested = {"tool_calls": [{"id": "call_1", "name": "lookup", "note": "key sk-live-abcdef123456"}]}
    plain = sanitize_value(nested, Redactor())
    assert plain == {"tool_calls": [{"id": "call_1", "name": "lookup", "note": "key sk-live-abcdef123456"}]}
    assert sanitize_value({"v": "line\nbreak"}, Redactor()) == {"v": "line\\x0abreak"}
    masked = sanitize_value(nested, Redactor({"sk-live-abcdef123456"}))
    assert masked == {"tool_calls": [{"id": "call_1", "name": "lookup", "note": f"key {REDACTED}"}]}
    path = tmp_path / "t.jsonl"
    tracer = Tracer("run-1", [JsonlSink(path)], redactor=Redactor({"sk-live-abcdef123456"}))
    tracer.emit(
        EventKind.MODEL_RESPONSE, model="m", text="sk-live-abcdef123456", tool_calls=nested["tool_calls"]
    )
    tracer.close()
    written = path.read_text()
    assert "sk-live-abcdef123456" not in written and "abcdef12" not in written
    assert read_trace(path)[0]["tool_calls"] == masked["tool_calls"]
