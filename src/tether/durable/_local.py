"""A SQLite deployment's workers (one machine, no heartbeat table): each holds the lock of a file
of its own (``workers/<executor>.lock``, ``flock``) while it runs, which its process's end lets go,
a kill (-9) included. DBOS recovers a workflow only on the executor that ran it, so the runs a
killed worker left in flight waited for a worker under its executor id: one started under
another (``tether worker`` names itself ``host-pid`` by default, or a new release's worker named
anew during an upgrade) left them ``running`` for good. A live worker now takes each lock it can
have (its worker is gone) and hands that executor's pending runs back to the queue, under the
lock, so the dead one restarting under its id waits for the hand-back and recovers what is left.

A worker of a release before this one holds no such file: it is never taken for dead (its runs
wait for its executor id, as before).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from tether.durable._config import APP_NAME

FOLDER = "workers"

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: no liveness, no takeover
    fcntl = None  # type: ignore[assignment]


def _path(deployment: Path, executor_id: str) -> Path:
    return deployment / FOLDER / f"{executor_id}.lock"


def hold(deployment: Path | None, executor_id: str) -> int | None:
    """Take this worker's lock (waiting while a survivor hands its runs back); its fd, held until
    the process ends (``None`` where files cannot be locked or the id cannot name a file)."""
    if deployment is None or fcntl is None or "/" in executor_id or executor_id.startswith("."):
        return None
    path = _path(deployment, executor_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: this worker is never taken for dead
            os.close(fd)
            return None
        with contextlib.suppress(FileNotFoundError):
            named, held = os.stat(path), os.fstat(fd)
            if (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
                return fd  # the file survivors see (not one a survivor removed while this waited)
        os.close(fd)


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def hand_back(dbos: Any, executor_id: str, version: str) -> list[str]:
    """Put the workflows ``executor_id`` left pending (of ``version``) back in their queue."""
    found = dbos.list_workflows(
        status="PENDING",
        executor_id=executor_id,
        app_version=version,
        application_name=APP_NAME,
        load_input=False,
        load_output=False,
    )
    for w in found:
        dbos.resume_workflow(w.workflow_id, queue_name=w.queue_name)
    return [w.workflow_id for w in found]


def take_over(deployment: Path | None, me: str, dbos: Any, version: str) -> dict[str, list[str]]:
    """Hand back the pending runs of every executor of the deployment whose worker is gone (its
    lock free): ``{executor: workflow ids}``. Its file goes once its runs are back in the queue."""
    taken: dict[str, list[str]] = {}
    if deployment is None or fcntl is None or not (deployment / FOLDER).is_dir():
        return taken
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
