"""The per-run tracer: checks, sanitises and redacts events and hands them to sinks.

``JsonlSink(flush="batched")`` (the default) keeps encoded lines in a bounded buffer and writes
them in one go, on the emitting thread: when the buffer is full, when the oldest line has waited
``max_delay_s``, on ``Tracer.flush()`` (before every side-effecting tool), right after a kind in
``DURABLE_KINDS`` or ``WAIT_KINDS``, at close and at a normal exit. A killed process may lose a
read-only turn, never a decision that came before a side effect nor the stop event.
``flush="each_event"`` writes every line before ``emit`` returns. Neither calls ``fsync``.
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, cast, get_args

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from pydantic_core import PydanticSerializationError, to_json

from tether.errors import ConfigError
from tether.trace._events import RESERVED, EventKind, TraceEvent, TraceSchemaError
from tether.trace._payloads import FIELDS, check_payload
from tether.trace._sanitize import (
    JSON_OPENERS,
    REDACTED,
    Redactor,
    finite,
    redact_keyed_text,
    sanitize,
    sanitize_value,
)

__all__ = [
    "DURABLE_KINDS",
    "FlushMode",
    "JsonlSink",
    "MemorySink",
    "TraceSink",
    "Tracer",
    "flush_mode",
    "line_event",
    "read_trace",
]

FlushMode = Literal["each_event", "batched"]

# The run is about to wait on its model: what it wrote is readable while it waits.
WAIT_KINDS = frozenset({EventKind.CONTEXT_COMPOSED})

# Something irreversible may follow, or the run is over for this process: flushed at once.
DURABLE_KINDS = frozenset(
    {EventKind.APPROVAL_GRANTED, EventKind.EFFECT_INTENT, EventKind.RUN_PAUSED, EventKind.STOP}
)

_FLUSH_AFTER = DURABLE_KINDS | WAIT_KINDS
_FLUSH_MODES: tuple[str, ...] = get_args(FlushMode)


def flush_mode(value: str) -> FlushMode:
    """``value`` as a ``FlushMode``. Raises ``ConfigError`` for anything else."""
    if value in _FLUSH_MODES:
        return cast(FlushMode, value)
    raise ConfigError(f"trace flush must be one of {_FLUSH_MODES}, not {value!r}")


class TraceSink(Protocol):
    """Where events go. A sink may also have ``flush()``; the tracer calls it when present."""

    def write(self, event: TraceEvent) -> None: ...

    def close(self) -> None: ...


_OPEN: weakref.WeakSet[JsonlSink] = weakref.WeakSet()


@atexit.register
def _flush_open_sinks() -> None:
    # A script that never closes its tracer still gets its trace at a normal exit.
    for sink in list(_OPEN):
        sink.flush()


def _encode(event: TraceEvent) -> bytes:
    """One JSON line, non-ASCII escaped so no byte of a line can end it for any reader."""
    return _encode_line(event.to_json())


def _encode_line(data: Mapping[str, Any]) -> bytes:
    try:
        # Most lines are ASCII already: encoded without escaping (about half the encoder's
        # time), the same bytes; any other line is encoded again, escaped.
        line = to_json(data)
        if line.isascii():
            return line + b"\n"
    except PydanticSerializationError:
        pass
    try:
        return to_json(data, ensure_ascii=True) + b"\n"
    except PydanticSerializationError:  # a value the sanitiser let through as is (not JSON)
        return json.dumps(data, ensure_ascii=True, default=str).encode("ascii") + b"\n"


# ``,"kind":"…"`` of each kind, encoded once: a kind's value is a plain ASCII name.
_KIND_BYTES = {kind: b',"kind":' + to_json(kind.value) for kind in EventKind}


def _encode_fast(event: TraceEvent, run_id: bytes) -> bytes:
    """``_encode(event)``, the same bytes, without the line's mapping built and walked again:
    the event's own fields put in front of its payload's JSON (``run_id`` encoded once per run
    by the caller). A line that is not ASCII or not JSON as it is goes the way ``_encode`` takes."""
    try:
        body = to_json(event.data)
        line = b'{"run_id":%b,"seq":%d,"ts":%b%b%b%b\n' % (
            run_id,
            event.seq,
            to_json(event.ts),
            _KIND_BYTES[event.kind],
            b"," if len(body) > 2 else b"",
            body[1:],
        )
    except (PydanticSerializationError, KeyError, TypeError):
        return _encode(event)
    return line if line.isascii() else _encode(event)


def _write_all(file: Any, data: bytes) -> None:
    """All of ``data`` to an unbuffered file (a raw write may take only part of it), under the
    file's lock (as ``_locked``, inline: one lock and one unlock per batch): another writer's sink
    never takes a line still being written for one a killed writer cut short."""
    view = memoryview(data)
    fd = _lock(file)
    try:
        while view:
            view = view[file.write(view) :]
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)


# What ``flock`` raises where the file system takes no locks (NFS mounted without its lock
# service: ENOLCK; some FUSE and network mounts: EOPNOTSUPP, ENOSYS, EINVAL). Such a trace is
# written unlocked, as every release before the lock wrote it, never not at all.
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL})
_told_unlocked = threading.Event()  # the operator is told once per process


@contextmanager
def _locked(file: Any) -> Iterator[None]:
    """An exclusive advisory lock on a trace file, across processes (two writers of one run's
    trace: a stalled worker declared dead and the survivor recovering its run). A killed
    writer's lock goes with it. Where the platform has no ``flock``, the stream written has no
    file descriptor (a sink given a wrapping stream), or the file system takes no locks
    (``_NO_LOCKS``), nothing is locked."""
    fd = _lock(file)
    try:
        yield
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)


def _lock(file: Any) -> int | None:
    """Lock ``file`` (waiting for another writer's lock): its descriptor, or None where it
    cannot be locked (``_locked``)."""
    fileno = getattr(file, "fileno", None)
    if fcntl is None or fileno is None:
        return None
    try:
        fd: int = fileno()
    except OSError:  # io.UnsupportedOperation: a stream with no descriptor
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as err:
        if err.errno not in _NO_LOCKS:
            raise
        if not _told_unlocked.is_set():
            _told_unlocked.set()
            logging.getLogger(__name__).warning(
                "trace files are written unlocked: their file system takes no locks (%s)", err
            )
        return None
    return fd


def _end_cut_line(path: Path, file: Any) -> None:
    """Before appending to a trace file a writer left (a worker killed, -9, inside a write; the
    disk full): a last line it cut short is no event and is removed, or the next event would be
    glued to it and lost (and the file unreadable); a whole event left without its newline is
    ended. A file that ends with a newline is not touched. Under the file's lock: a line another
    live writer is writing now is whole once the lock is had. An empty file (a new run's) has no
    line to end: it is not locked."""
    if not os.fstat(file.fileno()).st_size:
        return
    with _locked(file):
        _end_cut_line_locked(path, file)


def _end_cut_line_locked(path: Path, file: Any) -> None:
    size = os.fstat(file.fileno()).st_size
    if not size:
        return
    fd = os.open(path, os.O_RDONLY)  # ``file`` appends only
    try:
        if os.pread(fd, 1, size - 1) == b"\n":
            return
        start = size
        while start > 0:  # back to the last line's start, a block at a time
            start = max(0, start - _TAIL_BLOCK)
            newline = os.pread(fd, min(_TAIL_BLOCK, size - start), start).rfind(b"\n")
            if newline >= 0:
                start += newline + 1
                break
        tail = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    if line_event(tail) is not None:
        _write_all(file, b"\n")
    else:
        os.ftruncate(file.fileno(), start)


def line_event(line: bytes | str) -> dict[str, Any] | None:
    """The trace event of one line, or None where it holds none. A line an earlier writer cut
    short (killed mid-write) and the next event was appended to, unended, holds that whole event
    at its end: it is read (a release before this one did not end a cut line)."""
    raw = line.encode("utf-8", "surrogateescape") if isinstance(line, str) else line
    at, tries = 0, 0
    while at >= 0 and tries < _GLUE_TRIES:
        try:
            value = json.loads(raw[at:])
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict) and (at == 0 or {"seq", "kind"} <= value.keys()):
            return value
        at, tries = raw.find(_EVENT_START, at + 1), tries + 1
    return None


_TAIL_BLOCK = 1 << 16
_EVENT_START = b'{"run_id":'  # how every line this package writes begins
_GLUE_TRIES = 16


class JsonlSink:
    """Append-only JSON lines, one file per run; see the module docstring for ``flush``."""

    def __init__(
        self,
        path: Path,
        *,
        flush: FlushMode = "batched",
        max_events: int = 256,
        max_bytes: int = 1 << 20,
        max_delay_s: float = 0.2,
    ) -> None:
        flush = flush_mode(flush)
        if max_events < 1 or max_bytes < 1 or max_delay_s <= 0:
            raise ConfigError("max_events, max_bytes and max_delay_s must be positive")
        self.path = path
        self.mode: FlushMode = flush
        self.max_events, self.max_bytes, self.max_delay_s = max_events, max_bytes, max_delay_s
        # Fails here, before any line. Unbuffered: lines are batched here already.
        if not os.path.isdir(path.parent):  # one stat when it exists
            path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("ab", buffering=0)
        _end_cut_line(path, self._file)
        self._lock = threading.Lock()
        self._lines: list[bytes] = []
        self._size = 0
        self._since = 0.0  # when the oldest waiting line was written
        self._run_id: str | None = None  # the run of the last event written, and its JSON
        self._run_id_json = b""
        if flush == "batched":
            _OPEN.add(self)

    def write(self, event: TraceEvent) -> None:
        run_id = event.run_id
        if run_id is not self._run_id:  # once per run: a sink's events are one run's
            self._run_id, self._run_id_json = run_id, to_json(run_id)
        line = _encode_fast(event, self._run_id_json)
        with self._lock:
            if self._file.closed:
                raise ValueError(f"trace {self.path} is closed")
            if self.mode == "each_event":
                _write_all(self._file, line)
                return
            now = time.monotonic()
            if not self._lines:
                self._since = now
            self._lines.append(line)
            self._size += len(line)
            if (
                len(self._lines) >= self.max_events
                or self._size >= self.max_bytes
                or now - self._since >= self.max_delay_s
            ):
                self._drain()

    def restore_lines(self, lines: Iterable[Mapping[str, Any]]) -> None:
        """Write events another writer wrote and this file lost (a line a killed writer cut short
        and ``_end_cut_line`` removed, a batch it never wrote), as stored elsewhere (the trace
        index), in their order and with their own numbers, before any event emitted after them."""
        reserved = ("run_id", "seq", "ts", "kind")
        encoded = [_encode_line({**{k: line[k] for k in reserved if k in line}, **line}) for line in lines]
        with self._lock:
            self._lines[:0] = encoded  # before what waits: those come after them
            self._size += sum(map(len, encoded))
            self._drain()

    @property
    def pending(self) -> int:
        """Lines not yet handed to the OS."""
        return len(self._lines)

    def flush(self) -> None:
        """Hand every waiting line to the OS now."""
        with self._lock:
            if not self._file.closed:
                self._drain()

    def _drain(self) -> None:  # with the lock held
        if self._lines:
            _write_all(self._file, b"".join(self._lines))
            self._lines.clear()
            self._size = 0

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                try:
                    self._drain()
                finally:
                    self._file.close()
        _OPEN.discard(self)


class MemorySink:
    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    def write(self, event: TraceEvent) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass


# Declared field names, split once by whether a string under them is redacted by name.
_DECLARED = frozenset().union(*FIELDS.values())
_SECRETISH = frozenset(k for k in _DECLARED if Redactor().is_secret_key(k))
_PLAIN = _DECLARED - _SECRETISH


_SECOND: tuple[int, str] = (0, "")  # the last second formatted, one tuple: threads swap it whole


def _now() -> str:
    """UTC to the microsecond, as ``datetime.isoformat``; the second formatted once a second."""
    global _SECOND
    ns = time.time_ns()
    second, micro = ns // 1_000_000_000, ns // 1000 % 1_000_000
    known = _SECOND
    if known[0] != second:
        known = _SECOND = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{known[1]}.{micro:06d}+00:00"


def _clean_text(value: str, redactor: Redactor) -> str:
    """A traced string field's value: credential-named keys of JSON text redacted, secrets
    redacted, then escaped (``sanitize``)."""
    if value[:1] in JSON_OPENERS:  # a call's arguments as JSON text
        value = redact_keyed_text(value, redactor)
    if redactor.has_secrets():
        value = redactor.text(value)
    return sanitize(value)


# A traced value of these types is kept as it is.
_AS_IS = frozenset({int, bool, type(None)})


def _strict_from_env() -> bool:
    return os.environ.get("TETHER_TRACE_STRICT", "").lower() in ("1", "true", "yes")


class Tracer:
    """Emits the events of one run. Every value passes the sanitiser and the redactor.

    Field names are checked against the kind's declared payload. A lax tracer keeps an
    undeclared field (a reserved name such as ``run_id`` becomes ``payload_run_id``) and lists it
    in ``problems``; a strict one (``strict=True`` or ``TETHER_TRACE_STRICT=1``) raises
    ``TraceSchemaError`` and also checks required fields and types.
    """

    def __init__(
        self,
        run_id: str,
        sinks: list[TraceSink],
        *,
        redactor: Redactor | None = None,
        clock: Callable[[], str] = _now,
        strict: bool | None = None,
    ) -> None:
        self.run_id = run_id
        self.sinks = sinks
        self.redactor = redactor or Redactor()
        self.events: list[TraceEvent] = []
        self.strict = _strict_from_env() if strict is None else strict
        self.problems: list[str] = []
        self._clock = clock
        self._after = 0  # the highest seq restored (``restore``), held or not

    @property
    def last_seq(self) -> int:
        """The number of the run's last event: emitted, or restored from what was written."""
        return max(self.events[-1].seq if self.events else 0, self._after)

    def restore(self, lines: Iterable[Mapping[str, Any]]) -> None:
        """Continue a resumed run's trace after the events already written (trace lines, as read
        back): they are held in ``events``, and numbering goes on after the highest ``seq``. A
        line of a kind this release does not know (a later release wrote it: old and new workers
        side by side, a rollback) is not held, but its number is never given again."""
        for line in lines:
            try:
                self._after = max(self._after, int(line.get("seq", 0)))
                event = TraceEvent.from_json({**line, "run_id": line.get("run_id") or self.run_id})
            except (ValueError, TypeError):
                continue
            self.events.append(event)

    def emit(self, kind: EventKind | str, /, **data: Any) -> TraceEvent:
        if type(kind) is not EventKind:
            kind = EventKind(kind)
        declared = FIELDS[kind]
        secretish = _SECRETISH  # a declared field's name: known once
        if not declared.issuperset(data):
            data = self._undeclared(kind, data, declared)
            secretish = frozenset(
                k for k in data if k in _SECRETISH or (k not in _PLAIN and self.redactor.is_secret_key(k))
            )
        if "arguments" in data and self.redactor.declared(data.get("tool")):
            self.redactor.learn(data["tool"], data["arguments"])
        clean = self._clean(data, secretish)
        if self.strict:
            check_payload(kind, clean)
        events = self.events  # ``last_seq``, inline: once per event
        seq = max(events[-1].seq if events else 0, self._after) + 1
        event = TraceEvent(self.run_id, seq, self._clock(), kind, clean)
        events.append(event)
        for sink in self.sinks:
            sink.write(event)
        if kind in _FLUSH_AFTER:
            self.flush()
        return event

    def flush(self) -> None:
        """Hand every buffered event to the OS now (call before a side effect)."""
        for sink in self.sinks:
            flush = getattr(sink, "flush", None)
            if flush is not None:
                flush()

    def _clean(self, data: dict[str, Any], secretish: frozenset[str]) -> dict[str, Any]:
        """``data`` (the emit's own keyword mapping, never the caller's) sanitised and redacted in
        place: a value is stored again only where it changes (most never do). The common cases
        inline: an integer, a bool and None as they are; with no secret known and no field
        redacted by name (most events), a printable string without a backslash or JSON opener is
        kept as it is."""
        redactor = self.redactor
        if redactor.has_secrets() or not secretish.isdisjoint(data):
            return self._clean_secretish(data, secretish)
        for key, value in data.items():
            kind = type(value)
            if kind in _AS_IS:
                continue
            if kind is str:
                if not (value.isprintable() and "\\" not in value and value[:1] not in JSON_OPENERS):
                    data[key] = _clean_text(value, redactor)
            elif kind is float:
                if value - value != 0:  # NaN or an infinity (``finite``)
                    data[key] = finite(value)
            else:
                data[key] = sanitize_value(value, redactor, key)
        return data

    def _clean_secretish(self, data: dict[str, Any], secretish: frozenset[str]) -> dict[str, Any]:
        """``_clean`` where a secret is known or a field is redacted by its name."""
        redactor = self.redactor
        for key, value in data.items():
            kind = type(value)
            if kind is str:
                data[key] = REDACTED if key in secretish else _clean_text(value, redactor)
            elif kind is float:
                if value - value != 0:
                    data[key] = finite(value)
            elif kind not in _AS_IS:
                data[key] = sanitize_value(value, redactor, key)
        return data

    def _undeclared(self, kind: EventKind, data: dict[str, Any], declared: frozenset[str]) -> dict[str, Any]:
        extra = sorted(set(data) - declared)
        problem = f"{kind} event: undeclared fields {extra}"
        if self.strict:
            raise TraceSchemaError(problem)
        self.problems.append(problem)
        return {
            (k if k in declared else sanitize(f"payload_{k}" if k in RESERVED else str(k))): v
            for k, v in data.items()
        }

    def kinds(self) -> list[str]:
        return [str(e.kind) for e in self.events]

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def read_trace(path: Path) -> list[dict[str, Any]]:
    """Load a JSONL trace file. A last line cut short (its writer killed mid-write) is skipped,
    an event glued after a cut line is read (``line_event``). Raises ``ValueError`` naming any
    other line that is not a JSON object."""
    events: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as err:
                event = line_event(line)  # an event glued after a cut line
                if event is None and not line.endswith("\n"):
                    continue  # the last line, cut short by a writer killed mid-write (or still writing)
                if event is None:
                    raise ValueError(f"{path}: line {number} is not a trace event: {err.msg}") from None
            except RecursionError:  # what a run wrote nested past reading: the same typed error
                raise ValueError(f"{path}: line {number} is not a trace event: nested too deep") from None
            if not isinstance(event, dict):
                raise ValueError(f"{path}: line {number} is not a trace event: not a JSON object")
            events.append(event)
    return events
