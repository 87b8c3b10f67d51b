"""A stdio server's stderr, attributed and escaped (the server writes; the host decides what shows).

Every line is prefixed with the server id, its control and invisible characters written as
visible escapes (no terminal escape sequence from a server ever reaches the terminal), cut
at a maximum length, and appended to a per-server log file. The terminal gets the lines at a
bounded rate (a burst, then a few a second); what is held back is counted and said once.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Any, TextIO

from tether.mcp._clean import escape_for_review

__all__ = ["ServerStderr"]

MAX_LINE = 2000


class ServerStderr:
    """One server's stderr pipe, drained by a daemon thread (so a chatty server never blocks)."""

    def __init__(
        self,
        server: str,
        *,
        log_path: Path | None,
        terminal: TextIO | None,
        burst: int = 20,
        per_second: float = 5.0,
    ) -> None:
        self.server = server
        self.log_path = log_path
        self.terminal = terminal
        self.burst = burst
        self.per_second = per_second
        self.lines = 0
        self.tail: deque[str] = deque(maxlen=8)  # its last lines (escaped), for a failure's cause
        self.suppressed = 0
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._writer: IO[str] | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

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
                log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed below
            except OSError:
                log = None
        try:
            with reader:
                while True:
                    raw = reader.readline(MAX_LINE * 4)
                    if not raw:
                        break
                    self._line(raw, log)
        finally:
            if self.suppressed and self.terminal is not None:
                self._say(f"[{self.server}] … {self.suppressed} more stderr lines held back")
            if log is not None:
                log.close()

    def _line(self, raw: bytes, log: Any) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        line = escape_for_review(text, limit=MAX_LINE)
        self.lines += 1
        self.tail.append(line[:300])
        if log is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            log.write(f"{stamp} {line}\n")
            log.flush()
        if self.terminal is None:
            return
        now = time.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.per_second)
        self._last = now
        if self._tokens < 1:
            self.suppressed += 1
            return
        self._tokens -= 1
        if self.suppressed:
            where = f" (all in {self.log_path})" if self.log_path else ""
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
