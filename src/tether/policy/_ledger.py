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
from typing import Any, Protocol

from tether.policy._intake import canonical_json
from tether.policy._store import LedgerEntry

__all__ = ["EffectOutcome", "Reconciler", "idempotency_key", "owner_dead"]


_PROCESS_TOKEN = uuid.uuid4().hex[:12]
_HOST = socket.gethostname()


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
    """Deterministic key of one side-effecting call: same run, step, call and arguments, same key."""
    text = canonical_json([run_id, step, call_id, tool, dict(arguments)])
    return "idem_" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def _owner() -> str:
    return f"{_HOST}:{os.getpid()}:{_PROCESS_TOKEN}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_dead(entry: LedgerEntry, now: datetime) -> bool:
    """Whether the process that owns a ledger entry is gone: its lease ran out, or it ran on this
    machine and its process no longer exists (a previous incarnation of this pid counts as gone)."""
    if entry.lease_until <= now:
        return True
    host, _, rest = entry.owner.partition(":")
    pid_text, _, token = rest.partition(":")
    if host != _HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return token != _PROCESS_TOKEN
    return not _pid_alive(pid)
