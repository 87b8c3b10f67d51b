"""The ``MemoryStore`` seam and the write policy every backend applies (SPEC M1, M4): the model
only *proposes* a memory, the store decides. ``check_proposal`` holds the checks that need no
stored state; backends add the stateful ones (duplicate, conflict, supersede)."""

from __future__ import annotations

import re
from collections.abc import Set
from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from tether.errors import MemoryPolicyError
from tether.memory._records import MemoryEvent, MemoryRecord, ReadResult, Source, WriteResult

DEFAULT_MAX_CLAIM_CHARS = 2000

# "tenant:shopping-a", "order:742:equipment": a lowercase namespace, then ':'-separated parts.
_KEYED = r"^[a-z][a-z0-9_-]*(?::[A-Za-z0-9][A-Za-z0-9._-]*)+$"


class MemoryPolicy(BaseModel):
    """Write rules of a store. ``approved_sources`` lists the ``source.system`` values accepted.

    ``allow_working`` is off by default: working memory is the run checkpoint (SPEC M2), not
    durable memory, and a durable copy of it is how whole conversations leak in (SPEC M1).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    approved_sources: frozenset[str]
    max_claim_chars: int = Field(default=DEFAULT_MAX_CLAIM_CHARS, gt=0)
    allow_working: bool = False
    scope_pattern: str = _KEYED
    subject_pattern: str = _KEYED


def normalize_claim(claim: str) -> str:
    """The form claims are compared in: whitespace collapsed, case folded."""
    return " ".join(claim.split()).casefold()


def check_proposal(record: MemoryRecord, policy: MemoryPolicy, *, now: datetime) -> Source:
    """Apply the stateless write checks; return the (present) source.

    Raises ``MemoryPolicyError`` with reason ``kind``, ``provenance``, ``purpose``,
    ``sensitivity``, ``scope``, ``subject``, ``claim``, ``too_long``, ``validity``,
    ``expired`` or ``acl``.
    """
    if record.kind == "working" and not policy.allow_working:
        raise MemoryPolicyError("kind", "working memory belongs in the run checkpoint, not the durable store")
    src = record.source
    if src is None:
        raise MemoryPolicyError("provenance", "a durable memory needs a source")
    if src.system not in policy.approved_sources:
        raise MemoryPolicyError("provenance", f"source system {src.system!r} is not an approved provenance")
    if not record.purpose.strip():
        raise MemoryPolicyError("purpose", "a durable memory needs a stated purpose")
    if record.sensitivity == "secret":
        raise MemoryPolicyError("sensitivity", "secrets are never stored in memory")
    if not re.fullmatch(policy.scope_pattern, record.scope):
        raise MemoryPolicyError("scope", f"malformed scope {record.scope!r} (expected e.g. 'tenant:acme')")
    if not re.fullmatch(policy.subject_pattern, record.subject):
        raise MemoryPolicyError(
            "subject", f"malformed subject {record.subject!r} (expected e.g. 'order:742')"
        )
    if not record.claim.strip():
        raise MemoryPolicyError("claim", "empty claim")
    if len(record.claim) > policy.max_claim_chars:
        raise MemoryPolicyError(
            "too_long",
            f"claim has {len(record.claim)} chars (cap {policy.max_claim_chars}); "
            "store a fact, not a transcript",
        )
    if record.valid_until <= src.observed_at:
        raise MemoryPolicyError("validity", "valid_until must be after source.observed_at")
    if record.valid_until <= now:
        raise MemoryPolicyError("expired", "the record is already expired")
    if not record.acl:
        raise MemoryPolicyError("acl", "a record nobody may read is not stored")
    return src


@runtime_checkable
class MemoryStore(Protocol):
    """Governed durable memory. Writes are proposals the store may refuse; reads filter."""

    async def propose(self, record: MemoryRecord, *, actor: str = "model") -> WriteResult:
        """Validate and store ``record``, superseding or flagging conflicts as needed. Raises
        ``MemoryPolicyError`` (``check_proposal``'s reasons, ``duplicate``, ``stale``,
        ``supersedes``); a refused write changes nothing."""
        ...

    async def read(self, subject: str, *, scope: str, roles: Set[str], now: datetime) -> ReadResult:
        """Records whose subject is ``subject`` or below it (``order:742`` → ``order:742:*``),
        filtered by scope, status, expiry and ACL."""
        ...

    async def delete(self, record_id: str, *, actor: str, reason: str) -> None:
        """Erase a record's content (its id and history stay). Raises ``MemoryPolicyError``
        (``not_found``, ``deleted``)."""
        ...

    async def correct(self, old_id: str, new_record: MemoryRecord, *, actor: str, reason: str) -> WriteResult:
        """Replace the active record ``old_id`` (e.g. a poisoned one) by ``new_record``: same
        subject and scope, the checks of a proposal. Raises ``MemoryPolicyError``."""
        ...

    async def history(self, record_id: str) -> tuple[MemoryEvent, ...]:
        """The operations on ``record_id``, oldest first (empty for an unknown id)."""
        ...
