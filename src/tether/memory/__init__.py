"""Governed durable memory (SPEC section 3): the model proposes, the store decides."""

from tether.memory._records import (
    Confidence,
    MemoryEvent,
    MemoryKind,
    MemoryRecord,
    ReadResult,
    Recalled,
    Rejection,
    RejectReason,
    Sensitivity,
    Source,
    WriteResult,
    WriteStatus,
)
from tether.memory._sqlstore import SqliteMemory
from tether.memory._store import DEFAULT_MAX_CLAIM_CHARS, MemoryPolicy, MemoryStore, check_proposal

__all__ = [
    "DEFAULT_MAX_CLAIM_CHARS",
    "Confidence",
    "MemoryEvent",
    "MemoryKind",
    "MemoryPolicy",
    "MemoryRecord",
    "MemoryStore",
    "ReadResult",
    "Recalled",
    "RejectReason",
    "Rejection",
    "Sensitivity",
    "Source",
    "SqliteMemory",
    "WriteResult",
    "WriteStatus",
    "check_proposal",
]
