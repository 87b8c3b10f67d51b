"""The per-run tracer: sanitises, redacts and hands events to sinks (JSON lines by default)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from tether.trace.events import EventKind, TraceEvent
from tether.trace.sanitize import Redactor, sanitize_value

__all__ = ["JsonlSink", "MemorySink", "TraceSink", "Tracer", "read_trace"]


class TraceSink(Protocol):
    def write(self, event: TraceEvent) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Append-only JSON lines, one file per run, flushed per event (a crash keeps what was decided)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def write(self, event: TraceEvent) -> None:
        # ensure_ascii keeps every non-ASCII code point escaped: a line is a line.
        self._file.write(json.dumps(event.to_json(), ensure_ascii=True, sort_keys=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class MemorySink:
    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    def write(self, event: TraceEvent) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class Tracer:
    """Emits the events of one run. Every value passes the sanitiser and the redactor."""

    def __init__(
        self,
        run_id: str,
        sinks: list[TraceSink],
        *,
        redactor: Redactor | None = None,
        clock: Callable[[], str] = _now,
    ) -> None:
        self.run_id = run_id
        self.sinks = sinks
        self.redactor = redactor or Redactor()
        self.events: list[TraceEvent] = []
        self._clock = clock

    def emit(self, kind: EventKind, **data: Any) -> TraceEvent:
        clean = sanitize_value(data, self.redactor)
        event = TraceEvent(self.run_id, len(self.events) + 1, self._clock(), EventKind(kind), clean)
        self.events.append(event)
        for sink in self.sinks:
            sink.write(event)
        return event

    def kinds(self) -> list[str]:
        return [str(e.kind) for e in self.events]

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def read_trace(path: Path) -> list[dict[str, Any]]:
    """Load a JSONL trace file."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
