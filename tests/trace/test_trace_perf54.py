"""Round perf54: a run's events are held once (``Tracer.events``; no ``MemorySink`` beside it), and
the tracer's plain case knows strings it kept before at a glance (a bounded set). What cleaning
did before still holds: a kept string is redacted where a secret is known or its field is named
as a credential, and an unsafe string is never kept."""

from __future__ import annotations

from pathlib import Path

from tether.chokepoint._authority import HostCore
from tether.trace import EventKind, JsonlSink, MemorySink, Tracer, read_trace
from tether.trace import _tracer as tracer_module
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


def test_a_plain_string_is_kept_once_and_known_again() -> None:
    tracer_module._KEPT.discard("lookup-54")
    first = _tracer().emit(EventKind.TOOL_PROPOSED, call_id="c1", tool="lookup-54", arguments="{}")
    assert "lookup-54" in tracer_module._KEPT
    again = _tracer().emit(EventKind.TOOL_PROPOSED, call_id="c2", tool="lookup-54", arguments="{}")
    assert first.data["tool"] == again.data["tool"] == "lookup-54"


def test_a_kept_string_is_redacted_where_a_secret_is_known() -> None:
    plain = _tracer().emit(EventKind.VERIFICATION_FAILED, problem="hunter2-secret-54")
    assert plain.data["problem"] == "hunter2-secret-54"
    assert "hunter2-secret-54" in tracer_module._KEPT
    event = _tracer("hunter2-secret-54").emit(EventKind.VERIFICATION_FAILED, problem="hunter2-secret-54")
    assert event.data["problem"] == REDACTED


def test_a_kept_string_under_a_credential_named_field_is_redacted() -> None:
    _tracer().emit(EventKind.VERIFICATION_FAILED, problem="tok-54")
    assert "tok-54" in tracer_module._KEPT
    event = _tracer().emit(EventKind.MODEL_ERROR, error="tok-54", api_token="tok-54")
    assert event.data == {"error": "tok-54", "api_token": REDACTED}


def test_unsafe_and_long_strings_are_never_kept_and_are_cleaned_each_time() -> None:
    long = "x" * (tracer_module._KEPT_CHARS + 1)
    for _ in range(2):
        event = _tracer().emit(
            EventKind.TOOL_PROPOSED, call_id="a\nb", tool=long, arguments='{"password": "p-54"}'
        )
        redacted = f'{{"password": "{REDACTED}"}}'
        assert event.data == {"call_id": "a\\x0ab", "tool": long, "arguments": redacted}
    assert not {"a\nb", long, '{"password": "p-54"}'} & tracer_module._KEPT


def test_the_kept_strings_are_bounded() -> None:
    tracer = _tracer()
    for n in range(tracer_module._KEPT_MAX + 10):
        tracer.emit(EventKind.VERIFICATION_FAILED, problem=f"p{n}")
        assert len(tracer_module._KEPT) <= tracer_module._KEPT_MAX
