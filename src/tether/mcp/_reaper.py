"""What outlives the host: a watchdog that ends the stdio servers a killed host left running.

A host stops its servers when it exits (``_stdio.stop``), but a host killed outright (``kill -9``,
the out-of-memory killer) runs no code: an unconfined server that ignores the end of its stdin,
or a daemon it started, lived on. Each process that launches a stdio server first starts one
watchdog (``watching``): a small Python process in a session of its own that reads a pipe from
the host until it ends, which happens however the host ended, then ends (SIGTERM, then SIGKILL
after a grace period) every process whose environment carries this host's mark (``HOST_MARK``,
put in each server's environment at launch and inherited by what it starts). Linux ``/proc``
only; a process that cleared its environment is not found. Confined servers die with their
sandbox anyway (bubblewrap's ``--die-with-parent``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import subprocess
import sys
import threading

__all__ = ["HOST_MARK", "watching"]

HOST_MARK = "TETHER_MCP_HOST"

_WATCHDOG = r"""
import os, signal, sys, time
mark = sys.argv[1].encode()  # NAME=value, as /proc/PID/environ holds it

def marked():
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if mark in environ.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            pass
    return found

while sys.stdin.buffer.read(65536):
    pass
for sig in (signal.SIGTERM, signal.SIGKILL):
    left = marked()
    for pid in left:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    deadline = time.monotonic() + 2.0
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = marked()
    if not left:
        break
"""

_lock = threading.Lock()
_watch: tuple[int, str, subprocess.Popen[bytes]] | None = None  # (pid of the host, mark, watchdog)


def watching() -> str | None:
    """This host's mark for a server's environment, its watchdog started once per process (a
    forked host starts its own); ``None`` where there is no ``/proc`` (no watchdog)."""
    global _watch
    if not os.path.isdir("/proc"):
        return None
    with _lock:
        if _watch is None or _watch[0] != os.getpid():
            mark = secrets.token_hex(16)
            env = {k: v for k, v in os.environ.items() if k not in (HOST_MARK, "TETHER_MCP_LAUNCH")}
            watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG, f"{HOST_MARK}={mark}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # a Ctrl-C at the terminal reaches the host, not it
            )
            _watch = (os.getpid(), mark, watchdog)
            atexit.register(_release, watchdog)
        return _watch[1]


def _release(watchdog: subprocess.Popen[bytes]) -> None:
    """At the host's own exit: its pipe closed, the watchdog ends what is left and exits."""
    if watchdog.stdin is not None:
        watchdog.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(timeout=5)
