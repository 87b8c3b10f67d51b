"""A SQLite deployment's workers (one machine, no heartbeat table): each holds the lock of a file
of its own (``workers/<executor>.lock``, ``flock``) while it runs, which its process's end lets go,
a kill (-9) included. DBOS recovers a workflow only on the executor that ran it, so the runs a
killed worker left in flight waited for a worker under its executor id: one started under
another (``tether worker`` names itself ``host-pid`` by default, or a new release's worker named
anew during an upgrade) left them ``running`` for good. A live worker now takes each lock it can
have (its worker is gone) and hands that executor's pending runs back to the queue, under the
lock, so the dead one restarting under its id waits for the hand-back and recovers what is left.

A worker of a release before this one holds no such file: its runs are handed back only once no
process of this user on this machine that may be it holds the deployment's ``dbos.sqlite`` open
(Linux's ``/proc``: a ``tether worker`` by its ``--executor-id`` or ``host-pid``, another tether
command is none, any other process may be; where ``/proc`` cannot be read, never).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path
from typing import Any

from tether.durable._config import APP_NAME
from tether.durable._events import log_event

FOLDER = "workers"

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: no liveness, no takeover
    fcntl = None  # type: ignore[assignment]


def _path(deployment: Path, executor_id: str) -> Path:
    return deployment / FOLDER / f"{executor_id}.lock"


class StartAbandoned(Exception):
    """A stop was asked (SIGTERM, SIGINT) while the worker waited in its start for another
    process (a live worker's executor lock, another init's DBOS migrations): it gives up the
    wait, having taken and run nothing."""


# How often a worker waiting for another's executor lock looks whether it was asked to stop.
WAIT_S = 0.2


def hold(deployment: Path | None, executor_id: str, stopping: threading.Event | None = None) -> int | None:
    """Take this worker's lock (waiting while a survivor hands its runs back, or while a live
    worker runs under this id); its fd, held until the process ends (``None`` where files cannot
    be locked or the id cannot name a file). Once ``stopping`` is set the wait ends in
    ``StartAbandoned``: a worker told to stop while it waits (a rollout replacing the worker
    under the same id, a start it changed its mind about) no longer waits for good."""
    if deployment is None or fcntl is None or "/" in executor_id or executor_id.startswith("."):
        return None
    path = _path(deployment, executor_id)
    while True:
        fd = _open(path)
        try:
            _lock(fd, executor_id, stopping)
        except OSError:  # a file system without locks: this worker is never taken for dead
            os.close(fd)
            return None
        except StartAbandoned:
            os.close(fd)
            raise
        with contextlib.suppress(FileNotFoundError):
            named, held = os.stat(path), os.fstat(fd)
            if (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())  # read by _others_open
                return fd  # the file survivors see (not one a survivor removed while this waited)
        os.close(fd)


def _lock(fd: int, executor_id: str, stopping: threading.Event | None) -> None:
    """``flock`` ``fd``, waiting while another process holds it, unless a stop is asked."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:  # a live worker under this id, or a survivor handing back
        log_event(
            "executor_busy",
            executor=executor_id,
            hint="a worker runs under this id, or a survivor hands its runs back: it starts after",
        )
    if stopping is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    # Tried again and again, never waited on in the call: a signal's handler only flags the stop,
    # and the interrupted ``flock`` would be restarted (PEP 475), waiting on for good.
    while not stopping.wait(WAIT_S):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue
    raise StartAbandoned(f"asked to stop while another worker held executor {executor_id!r}'s lock")


def _open(path: Path) -> int:
    """The lock file at ``path``, made if missing; ``StoreRefused`` (``store_read_only``) where
    the deployment's folder takes no writes (a read-only mount)."""
    from tether.sql._sqlite import read_only

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as err:
        raise (read_only(path, err) or err) from None


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def left_pending(dbos: Any, executor_id: str, version: str) -> list[Any]:
    """The workflows ``executor_id`` left pending (of ``version``), as DBOS lists them."""
    return list(
        dbos.list_workflows(
            status="PENDING",
            executor_id=executor_id,
            app_version=version,
            application_name=APP_NAME,
            load_input=False,
            load_output=False,
        )
    )


def hand_back(dbos: Any, executor_id: str, version: str) -> list[str]:
    """Put the workflows ``executor_id`` left pending (of ``version``) back in their queue."""
    found = left_pending(dbos, executor_id, version)
    for w in found:
        dbos.resume_workflow(w.workflow_id, queue_name=w.queue_name)
    return [w.workflow_id for w in found]


def take_over(deployment: Path | None, me: str, dbos: Any, version: str) -> dict[str, list[str]]:
    """Hand back the pending runs of every executor of the deployment whose worker is gone (its
    lock free; one of an earlier release: see above): ``{executor: workflow ids}``. A file goes
    once its runs are back in the queue. Survivors take over one at a time."""
    if deployment is None or fcntl is None:
        return {}
    (deployment / FOLDER).mkdir(parents=True, exist_ok=True)
    fd = os.open(deployment / FOLDER / "takeover", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: nothing is taken for gone
            return {}
        taken = _take_locked(deployment, me, dbos, version)
        for executor in _lockless(deployment, me, dbos, version):
            taken[executor] = hand_back(dbos, executor, version)
        return taken
    finally:
        os.close(fd)


def _lockless(deployment: Path, me: str, dbos: Any, version: str) -> list[str]:
    """Executors with pending runs and no lock file (an earlier release's workers), once no other
    process holds the deployment open: all of them gone."""
    found = dbos.list_workflows(
        status="PENDING", app_version=version, application_name=APP_NAME, load_input=False, load_output=False
    )
    ids = {str(w.executor_id) for w in found if w.executor_id and w.executor_id != me}
    lockless = {e for e in ids if not _path(deployment, e).exists()}
    if lockless:
        lockless -= _holders(deployment / "dbos.sqlite", _workers(deployment), lockless)
    return sorted(lockless)


def _workers(deployment: Path) -> set[int]:
    """The pids this release's live workers wrote in their lock files."""
    pids = set()
    for path in (deployment / FOLDER).glob("*.lock"):
        with contextlib.suppress(OSError, ValueError):
            pids.add(int(path.read_text() or 0))
    return pids


def _holders(file: Path, workers: set[int], executors: set[str]) -> set[str]:
    """Which of ``executors`` a process holding ``file`` open may be (besides this one and
    ``workers``): a ``tether worker`` names its own (``--executor-id``, else ``host-pid``), another
    tether command (a console, ``tether runs``) none, any other process (a worker embedded in an
    application) every one. Every one where no ``/proc`` tells."""
    target, skip = os.path.realpath(file), {os.getpid(), *workers}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in skip]
    except OSError:
        return executors
    held: set[str] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # ended meanwhile, or another user's (the deployment's files are its owner's)
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    held |= _executor_of(pid, executors)
                    break
    return held


def _executor_of(pid: int, executors: set[str]) -> set[str]:
    """The executors of ``executors`` process ``pid`` may run (see ``_holders``)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return set()  # ended meanwhile
    at = next((i for i, a in enumerate(args) if a == "tether.cli" or Path(a).name == "tether"), None)
    if at is None:
        return executors  # not tether's command line: it may run any
    words = [a for a in args[at + 1 :] if not a.startswith("-")]
    if not words or words[0] != "worker":
        return set()  # a console, tether runs, tether submit: no executor
    named = [a.partition("=")[2] for a in args if a.startswith("--executor-id=")]
    named += [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--executor-id"]
    return executors & ({named[-1]} if named else {f"{socket.gethostname()}-{pid}"})


def _take_locked(deployment: Path, me: str, dbos: Any, version: str) -> dict[str, list[str]]:
    taken: dict[str, list[str]] = {}
    for path in sorted((deployment / FOLDER).glob("*.lock")):
        executor = path.stem
        if path == _path(deployment, me):
            continue
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue  # another survivor took it meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # alive (or being taken over by another survivor)
            taken[executor] = hand_back(dbos, executor, version)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        finally:
            os.close(fd)
    return taken
