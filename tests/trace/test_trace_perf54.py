"""Round perf54: a run's events are held once (``Tracer.events``; no ``MemorySink`` beside it), and
the tracer's plain case (no secret known, no field redacted by name) is split from the rest. What
cleaning did before still holds: a plain string is redacted where a secret is known or its field
is named as a credential, and an unsafe string is cleaned every time."""

from __future__ import annotations

from pathlib import Path

from tether.chokepoint._authority import HostCore
from tether.trace import EventKind, JsonlSink, MemorySink, Tracer, read_trace
from tether.trace._sanitize import REDACTED, Redactor


def _tracer(*secrets: str) -> Tracer:
    return Tracer("run-54", [], redactor=Redactor(set(secrets)), strict=False)


def test_a_hosts_tracer_holds_each_event_once_and_its_file_has_them_all(tmp_path: Path) -> None:
    host = HostCore(trace_dir=tmp_path)
    tracer, path = host.new_tracer("run-54")
    assert not any(isinstance(s, MemorySink) for s in tracer.sinks)
    assert [type(s) for s in tracer.sinks] == [JsonlSink]
    tracer.emit(EventKind.VERIFICATION_FAILED, problem="p")
    tracer.emit(EventKind.STOP, reason="accepted")
    tracer.close()
    assert tracer.kinds() == ["verification_failed", "stop"]
    assert path is not None and [e["kind"] for e in read_trace(path)] == tracer.kinds()
    bare, none = HostCore().new_tracer("run-54b")  # no trace folder: the tracer alone holds them
    assert bare.sinks == [] and none is None
    assert bare.emit(EventKind.STOP, reason="accepted") is bare.events[-1]


def test_a_plain_string_is_kept_as_it_is() -> None:
    event = _tracer().emit(EventKind.TOOL_PROPOSED, call_id="c1", tool="lookup-54", arguments="{}")
    assert event.data == {"call_id": "c1", "tool": "lookup-54", "arguments": "{}"}


def test_a_plain_string_is_redacted_where_a_secret_is_known() -> None:
    plain = _tracer().emit(EventKind.VERIFICATION_FAILED, problem="hunter2-secret-54")
    assert plain.data["problem"] == "hunter2-secret-54"
    event = _tracer("hunter2-secret-54").emit(EventKind.VERIFICATION_FAILED, problem="hunter2-secret-54")
    assert event.data["problem"] == REDACTED


def test_a_plain_string_under_a_credential_named_field_is_redacted() -> None:
    event = _tracer().emit(EventKind.MODEL_ERROR, error="tok-54", api_token="tok-54")
    assert event.data == {"error": "tok-54", "api_token": REDACTED}


def test_unsafe_strings_are_cleaned_each_time() -> None:
    long = "x" * 129
    for _ in range(2):
        event = _tracer().emit(
            EventKind.TOOL_PROPOSED, call_id="a\nb", tool=long, arguments='{"password": "p-54"}'
        )
        redacted = f'{{"password": "{REDACTED}"}}'
        assert event.data == {"call_id": "a\\x0ab", "tool": long, "arguments": redacted}
