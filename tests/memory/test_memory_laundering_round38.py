"""Laundering round thirty-eight (helper ``laund38``), pinned: a memory record's keys are
compared as stored. A read under a case twin of a scope, subject or role, or under a subject
that only starts like another, returns nothing of it; an expired record, however far its
source's observation lies, is not returned; and a record's body (source, confidence, acl) comes
back from the store as it was written, so what ``memory_line`` labels is what was kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tether.memory import MemoryPolicy, MemoryRecord, Source, SqliteMemory

pytestmark = [pytest.mark.anyio, pytest.mark.spec("M3", "M5")]

SEEN = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
NOW = SEEN + timedelta(days=1)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _record(valid_days: int = 30) -> MemoryRecord:
    return MemoryRecord(
        kind="semantic", subject="vendor:acme", claim="Acme banks with 000123456789.",
        scope="tenant:acme", source=Source(system="erp", record="v-7", observed_at=SEEN),
        confidence="authoritative", valid_until=SEEN + timedelta(days=valid_days),
        acl=frozenset({"finance"}), retention="test", purpose="pay vendors", sensitivity="internal",
    )  # fmt: skip


async def _store(tmp_path: Path) -> SqliteMemory:
    store = SqliteMemory(
        tmp_path / "memory.db", policy=MemoryPolicy(approved_sources=frozenset({"erp"})), clock=lambda: SEEN
    )
    await store.propose(_record())
    return store


@pytest.mark.parametrize(
    ("subject", "scope", "roles"),
    [
        ("vendor:ACME", "tenant:acme", {"finance"}),
        ("vendor:acm", "tenant:acme", {"finance"}),
        ("vendor:acme", "tenant:Acme", {"finance"}),
        ("vendor:acme", "tenant:acme", {"Finance"}),
        ("vendor:acme", "tenant:acme", {"finance "}),
    ],
    ids=["subject-case", "subject-prefix", "scope-case", "role-case", "role-space"],
)
async def test_a_key_spelled_otherwise_reads_nothing(
    tmp_path: Path, subject: str, scope: str, roles: set[str]
) -> None:
    found = await (await _store(tmp_path)).read(subject, scope=scope, roles=roles, now=NOW)
    assert found.records == ()


async def test_the_record_as_written_is_read_back_whole(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    found = await store.read("vendor", scope="tenant:acme", roles={"finance"}, now=NOW)
    [recalled] = found.records
    assert recalled.record.model_copy(update={"id": None}) == _record()
    assert recalled.record.source == Source(system="erp", record="v-7", observed_at=SEEN)


async def test_an_expired_record_is_not_read_however_it_was_kept(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    later = SEEN + timedelta(days=31)
    found = await store.read("vendor:acme", scope="tenant:acme", roles={"finance"}, now=later)
    assert found.records == () and [r.reason for r in found.rejected] == ["expired"]
