"""Traces: typed events, sanitising, redaction and sinks."""

from tether.trace._events import EventKind, TraceEvent
from tether.trace._sanitize import Redactor, sanitize, sanitize_value
from tether.trace._tracer import JsonlSink, MemorySink, Tracer, TraceSink, read_trace

__all__ = [
    "EventKind",
    "JsonlSink",
    "MemorySink",
    "Redactor",
    "TraceEvent",
    "TraceSink",
    "Tracer",
    "read_trace",
    "sanitize",
    "sanitize_value",
]
