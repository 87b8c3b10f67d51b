"""The record contract (SPEC M3) as a pure value, and the pinned public surface."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

import tether.memory
from tether.chokepoint._labels import memory_line
from tether.memory import MemoryRecord, Recalled, Source

T0 = datetime(2026, 8, 9, 17, 10, tzinfo=UTC)


def _fields() -> dict[str, object]:
    return {
        "kind": "semantic",
        "subject": "equipment:eq-19",
        "claim": "nominal voltage is 380 V",
        "source": Source(system="erp-assets", record="asset-991", observed_at=T0),
        "scope": "tenant:shopping-a",
        "confidence": "authoritative",
        "valid_until": T0 + timedelta(days=365),
        "acl": frozenset({"maintenance-read"}),
        "retention": "while-asset-active",
        "purpose": "answer maintenance questions",
        "sensitivity": "internal",
    }


@pytest.mark.spec("M3")
def test_record_carries_the_contract_fields_and_round_trips_through_json() -> None:
    record = MemoryRecord(**_fields())  # type: ignore[arg-type]
    again = MemoryRecord.model_validate_json(record.model_dump_json())
    assert again == record
    assert again.id is None and again.supersedes is None
    assert again.source is not None and again.source.observed_at == T0


@pytest.mark.spec("M3")
def test_record_is_frozen_and_refuses_unknown_fields() -> None:
    record = MemoryRecord(**_fields())  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        record.claim = "something else"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        MemoryRecord(**_fields(), transcript="the whole conversation")  # type: ignore[arg-type]


@pytest.mark.spec("M3")
def test_naive_datetimes_and_unknown_literals_are_refused_by_the_contract() -> None:
    with pytest.raises(ValidationError):
        MemoryRecord(**{**_fields(), "valid_until": datetime(2027, 8, 9)})  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Source(system="erp-assets", record="asset-991", observed_at=datetime(2026, 8, 9))
    with pytest.raises(ValidationError):
        MemoryRecord(**{**_fields(), "confidence": "certain"})  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        MemoryRecord(**{**_fields(), "kind": "transcript"})  # type: ignore[arg-type]
    assert MemoryRecord(**_fields()).kind == "semantic"  # type: ignore[arg-type]


@pytest.mark.spec("M5")
def test_recalled_record_presents_its_origin_and_conflict_to_the_model() -> None:
    record = MemoryRecord(**{**_fields(), "id": "mem_a"})  # type: ignore[arg-type]
    plain = Recalled(record)
    assert plain.origin.startswith("erp-assets/asset-991 observed 2026-08-09T17:10:00+00:00")
    shown = memory_line(plain.record, conflict=plain.conflict)
    assert 'source="memory:erp-assets/asset-991"' in shown and 'trust="untrusted"' in shown
    assert 'observed_at="2026-08-09T17:10:00+00:00"' in shown and "conflict=" not in shown
    disputed = Recalled(record, ("mem_b",))
    shown = memory_line(disputed.record, conflict=disputed.conflict)
    assert disputed.conflict and 'conflict="yes"' in shown and "nominal voltage is 380 V" in shown


def test_public_names_are_pinned() -> None:
    assert sorted(tether.memory.__all__) == sorted(
        [
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
    )
    for name in tether.memory.__all__:
        assert hasattr(tether.memory, name)
