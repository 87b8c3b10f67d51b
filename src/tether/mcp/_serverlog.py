"""A stdio server's stderr, attributed and escaped (the server writes; the host decides what shows).

Each line is prefixed with the server id, escaped, cut, and appended to a per-server log (up to
``MAX_LOG_BYTES`` a launch, then only counted); the terminal gets lines at a bounded rate. A
flooding server is drained as fast as it writes and never blocks.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any, TextIO

from tether.core.ratelimit import TokenBucket
from tether.mcp._clean import escape_for_review
from tether.trace._events import EventKind

__all__ = ["ServerStderr", "log_notifications"]

MAX_LINE = 2000
MAX_LOG_BYTES = 16 * 1024 * 1024


class ServerStderr:
    """One server's stderr pipe, drained by a daemon thread (so a chatty server never blocks)."""

    def __init__(self, server: str, *, log_path: Path | None, terminal: TextIO | None) -> None:
        self.server = server
        self.log_path = log_path
        self.terminal = terminal
        self._rate = TokenBucket(5.0, 20)
        self.lines = 0
        self._tail: deque[str] = deque(maxlen=8)  # its last lines (raw, cut), for a failure's cause
        self.suppressed = 0
        self.logged = 0  # bytes written to the log by this launch
        self.unlogged = 0  # lines past MAX_LOG_BYTES
        self._writer: IO[str] | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def tail(self) -> list[str]:
        """Its last lines, escaped."""
        return [escape_for_review(line, limit=300) for line in self._tail]

    def open(self) -> IO[str]:
        """A file the child writes its stderr to (the write end of a fresh pipe)."""
        read_fd, write_fd = os.pipe()
        self._writer = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        reader = os.fdopen(read_fd, "rb")
        self._thread = threading.Thread(
            target=self._drain, args=(reader,), name=f"mcp-stderr-{self.server}", daemon=True
        )
        self._thread.start()
        return self._writer

    def spawned(self) -> None:
        """The child has its copy of the pipe: close ours, so the reader sees EOF when it exits."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def _drain(self, reader: IO[bytes]) -> None:
        log: Any = None
        if self.log_path is not None:
            try:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                if self.log_path.exists() and self.log_path.stat().st_size > MAX_LOG_BYTES:
                    self.log_path.replace(self.log_path.with_name(self.log_path.name + ".1"))
                log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed below
            except OSError:
                log = None
        try:
            with reader:
                while True:
                    if not (raw := reader.readline(MAX_LINE * 4)):
                        break
                    self._line(raw, log)
        finally:
            if self.suppressed and self.terminal is not None:
                self._say(f"[{self.server}] … {self.suppressed} more stderr lines held back")
            if log is not None:
                if self.unlogged:
                    log.write(f"… {self.unlogged} more lines not kept (over {MAX_LOG_BYTES} bytes)\n")
                log.close()

    def _line(self, raw: bytes, log: Any) -> None:
        text = raw[: MAX_LINE * 4].decode("utf-8", errors="replace").rstrip("\r\n")
        self.lines += 1
        self._tail.append(text[:300])
        line = ""
        if log is not None and self.logged < MAX_LOG_BYTES:
            line = escape_for_review(text, limit=MAX_LINE)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            log.write(f"{stamp} {line}\n")
            log.flush()
            self.logged += len(line) + 21
        elif log is not None:
            self.unlogged += 1
        if self.terminal is None:
            return
        if not self._rate.take():
            self.suppressed += 1
            return
        line = line or escape_for_review(text, limit=MAX_LINE)
        if self.suppressed:
            where = f" (logged in {self.log_path})" if self.log_path else ""
            self._say(f"[{self.server}] … {self.suppressed} stderr lines held back{where}")
            self.suppressed = 0
        self._say(f"[{self.server}] {line}")

    def _say(self, text: str) -> None:
        assert self.terminal is not None
        with self._lock:
            try:
                self.terminal.write(text + "\n")
                self.terminal.flush()
            except (OSError, ValueError):
                self.terminal = None  # the terminal went away: the log file still has everything

    def wait(self, timeout: float = 2.0) -> None:
        """Wait (bounded) until the reader has seen the end of the stream."""
        self.spawned()
        if self._thread is not None:
            self._thread.join(timeout)


def log_notifications(server: str, emit: Callable[..., None]) -> Callable[[Any], Awaitable[None]]:
    """The SDK's ``logging_callback``: a server's log notification goes to the trace (never the
    model's context), escaped and cut like a stderr line, at the same bounded rate."""
    rate, held = TokenBucket(5.0, 20), [0]

    async def on_log(params: Any) -> None:
        if not rate.take():
            held[0] += 1
            return
        data = getattr(params, "data", None)
        text = data if isinstance(data, str) else json.dumps(data, default=str)
        logger = getattr(params, "logger", None)
        emit(
            EventKind.MCP_LOG,
            server=server,
            level=str(getattr(params, "level", "")),
            logger=escape_for_review(logger, limit=100) if logger else None,
            message=escape_for_review(text[: MAX_LINE * 4], limit=MAX_LINE),
            held_back=held[0],
        )
        held[0] = 0

    return on_log
