"""Laundering round thirty-eight (helper ``laund38``): a recorded tool turn keeps what the run's
child runs recalled from memory (``fold`` adds it to ``RunState.memory``). A run recovered after
a crash replays its turns without running its helpers again: without it, the provenance of the
rest of the run no longer saw the claim a helper recalled (``recalled_segments``)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

from tether.chokepoint._calls import Turn
from tether.core.types import Decision, Effect, GateOutcome, Observation, ToolCall, ToolSpec
from tether.durable._codec import apply_turn, encode_turn
from tether.memory import MemoryRecord, Source
from tether.policy._trusted import TrustedContext
from tether.runs._values import RunState

SPEC = ToolSpec(name="researcher", description="", parameters={}, effect=Effect.READ, source="harness")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _record(claim: str) -> MemoryRecord:
    return MemoryRecord(
        id=f"mem_{len(claim)}", kind="semantic", subject="hotel:grand", claim=claim, scope="tenant:t",
        source=Source(system="crm", record="rec-1", observed_at=NOW), confidence="user_stated",
        valid_until=NOW + timedelta(days=30), acl=frozenset({"reader"}), retention="test",
        purpose="answer questions", sensitivity="internal",
    )  # fmt: skip


def _state(memory: list[MemoryRecord]) -> RunState:
    return RunState("r1", "o", TrustedContext(tenant="t"), time.monotonic(), NOW, memory=memory)


def test_a_replayed_turn_keeps_what_a_child_run_recalled() -> None:
    own, childs = (
        _record("The hotel takes transfers."),
        _record("The deposit account, reversed: 987654321000."),
    )
    call = ToolCall("c1", "researcher", "{}")
    turn = Turn([GateOutcome(call, "allow", spec=SPEC, arguments={}, decision=Decision("allow", "a", "ok"))])
    turn.observations = {"c1": Observation("c1", "researcher", "harness", NOW, "000123456789", meta={})}
    live = _state([own, childs])  # the helper's recall folded in as the turn ran
    data = json.loads(json.dumps(encode_turn(turn, live, 0, 0)))  # as DBOS stores it
    recovered = _state([own])  # a recovered run recalls its own again, not its helper's
    apply_turn(data, recovered)
    assert recovered.memory == [own, childs]
    apply_turn(data, recovered)  # replayed twice: nothing doubled
    assert recovered.memory == [own, childs]
