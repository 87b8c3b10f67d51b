"""The effect ledger's primitives: the key of a side-effecting call, who owns a ledger entry,
and what a call's recorded outcome is.

``idempotency_key`` derives a call's key from (run, step, call, tool, arguments); an entry's
owner is this host, process and incarnation (``owner_dead`` tells when it is gone); a
``Reconciler`` asks a tool whether an effect happened. The ledger's rules (intent before the
call, outcome after, reconcile or escalate) are ``Approvals.perform`` in ``_approvals``.
"""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from tether.policy._intake import canonical_json

if TYPE_CHECKING:
    from tether.policy._store import LedgerEntry

__all__ = [
    "EffectOutcome",
    "Held",
    "Reconciler",
    "busy",
    "idempotency_key",
    "on_this_host",
    "owner_dead",
    "released",
    "untokened",
]


_PROCESS_TOKEN = uuid.uuid4().hex[:12]
_HOST = socket.gethostname()


class Held(Protocol):
    """What a process holds in a store (a ledger entry, a run's resume claim): its owner
    (``host:pid:token``), when it last changed and until when its lease runs."""

    @property
    def owner(self) -> str: ...

    @property
    def updated_at(self) -> datetime: ...

    @property
    def lease_until(self) -> datetime: ...


class Reconciler(Protocol):
    """Asks a tool whether the effect with ``key`` happened: its recorded result (a JSON-ready
    dict) if so, ``None`` if it never happened. Raising means "cannot tell": a person decides."""

    def __call__(self, key: str) -> Awaitable[dict[str, Any] | None] | dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class EffectOutcome:
    """The recorded outcome of one side-effecting call."""

    key: str
    result: dict[str, Any]
    replayed: bool = False  # the outcome was recorded earlier; the tool was not called now
    reconciled: bool = False  # the outcome was learnt from the tool after a crash
    attempts: int = 1


def idempotency_key(run_id: str, step: int, call_id: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """Deterministic key of one side-effecting call: same run, step, call and arguments, same key.
    No tenant in it: keys are what earlier releases wrote (and what tools hand their providers as
    idempotency keys), so a rolling upgrade finds every recorded effect. A run id of another
    tenant is refused before any call (``RunScope.continue_earlier``: ``run_id_taken``)."""
    text = canonical_json([run_id, step, call_id, tool, dict(arguments)])
    return "idem_" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def _started(pid: int) -> str:
    """When process ``pid`` started, in clock ticks since the machine booted (Linux's ``/proc``;
    ``""`` where it cannot be read): another process under a reused pid started at another tick,
    and no step of the wall clock moves it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return ""


_STARTED: dict[int, str] = {}  # this process's start tick, by pid (a forked child has its own)


def _owner() -> str:
    """This host, process and incarnation: ``host:pid:token``, the token followed by the
    process's start tick where it can be read (``owner_dead`` tells a reused pid by it)."""
    pid = os.getpid()
    if pid not in _STARTED:
        _STARTED[pid] = _started(pid)
    tick = _STARTED[pid]
    return f"{_HOST}:{pid}:{_PROCESS_TOKEN}" + (f".{tick}" if tick else "")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def on_this_host(owner: str) -> bool:
    """Whether a ledger owner ("host:pid:token") is a process of this machine."""
    host, _, rest = owner.partition(":")
    return host == _HOST and rest.partition(":")[0].isdigit()


def untokened(owner: str) -> bool:
    """Whether an owner was written by a release before incarnation tokens (``host:pid``): on
    its host a live process under that pid may be it or another one (a reused pid), which
    nothing tells apart without a wall clock a step fools, so it is held as alive; once its
    lease ran out a person may say what became of its call (``tether runs resolve``)."""
    host, _, rest = owner.partition(":")
    return bool(host) and rest.isdigit()


def busy(tool: str, key: str, entry: LedgerEntry, now: datetime) -> str:
    """What a call waiting on ``entry``'s owner is told when it gives up (``in_progress``)."""
    said = f"{tool} {key} is being executed by {entry.owner}"
    if untokened(entry.owner) and entry.lease_until <= now:  # its pid may be another process now
        said += f" (an earlier release's, past its lease: if its pid is another process now, resolve {key})"
    return said


def released(entry: Held) -> bool:
    """Whether the entry's owner let go of it (a call that failed mid-way, an escalation): its
    lease set to no later than its last update, as every release writes it."""
    return entry.lease_until <= entry.updated_at


def owner_dead(entry: Held, now: datetime) -> bool:
    """Whether the process that owns a ledger entry (or a resume claim) is gone (or let go of it).

    On another machine only its lease tells: run out by ``now``. On this machine its process
    tells, whatever the wall clock says: gone, or another process under its pid (its start tick
    differs), is dead; running is alive however long ago its lease ran out by the clock (a clock
    stepped forward under a live call let a second process run its effect again). An entry of
    this very process (a previous incarnation of its pid counts as gone) keeps its lease."""
    if released(entry):
        return True
    if not on_this_host(entry.owner):
        return entry.lease_until <= now
    pid_text, _, token = entry.owner.partition(":")[2].partition(":")
    pid = int(pid_text)
    if pid == os.getpid():
        return entry.owner != _owner() or entry.lease_until <= now
    tick = token.partition(".")[2]
    return not _pid_alive(pid) or (bool(tick) and _started(pid) not in ("", tick))
