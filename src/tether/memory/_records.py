"""The durable memory record contract (SPEC M3): a strict, frozen pydantic model (the model
proposes it, often as JSON); what a store hands back are plain frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

MemoryKind = Literal["working", "episodic", "semantic", "procedural"]
Confidence = Literal["authoritative", "inferred", "user_stated"]
Sensitivity = Literal["public", "internal", "confidential", "secret"]
WriteStatus = Literal["stored", "superseded", "conflicted"]
# ``unreadable``: a record this release cannot read (a later release wrote it, after a rollback).
RejectReason = Literal["expired", "scope", "acl", "deleted", "superseded", "unreadable"]


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")


class Source(_Contract):
    """Where a claim came from: the system of record, the record in it, and when it was seen."""

    system: str = Field(min_length=1)
    record: str = Field(min_length=1)
    observed_at: AwareDatetime


class MemoryRecord(_Contract):
    """One durable memory (SPEC M3), timezone-aware. The store fills ``id`` and ``supersedes``;
    ``source`` is optional only so that a proposal without one is refused (``provenance``)
    instead of failing to parse."""

    id: str | None = None
    kind: MemoryKind
    subject: str
    claim: str
    source: Source | None
    scope: str
    confidence: Confidence
    valid_until: AwareDatetime
    acl: frozenset[str]
    retention: str
    supersedes: str | None = None
    purpose: str
    sensitivity: Sensitivity


@dataclass(frozen=True, slots=True)
class WriteResult:
    """An accepted write. ``record`` is the row as stored (id and supersedes filled)."""

    record: MemoryRecord
    status: WriteStatus
    conflicts_with: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Recalled:
    """A record returned by a read. ``conflict``: another live authoritative record of the same
    subject and scope disagrees (ask the system of record or a person). What the host's model
    reads of it, origin and conflict marker included, is written in one place:
    ``chokepoint._labels.memory_line``; ``origin`` is a one-line summary for a caller's own use."""

    record: MemoryRecord
    conflicts_with: tuple[str, ...] = ()

    @property
    def conflict(self) -> bool:
        return bool(self.conflicts_with)

    @property
    def origin(self) -> str:
        """One line naming the source, e.g. ``erp-assets/asset-991 observed 2026-08-09T17:10:00+00:00``."""
        src = self.record.source
        assert src is not None  # the store never persists a record without a source
        return f"{src.system}/{src.record} observed {src.observed_at.isoformat()} ({self.record.confidence})"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record a read did not return. ``subject`` is ``None`` for foreign-scope records."""

    record_id: str
    subject: str | None
    reason: RejectReason


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What a read found: usable ``records`` and the ``rejected`` ones with a reason each."""

    records: tuple[Recalled, ...]
    rejected: tuple[Rejection, ...]


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One row of the append-only operation history of a record."""

    id: int
    record_id: str
    op: Literal["write", "superseded", "corrected", "conflict", "delete"]
    actor: str
    reason: str
    at: datetime
