"""An operator's rolling upgrade, fourth round: from the landed release 483dcef to main@8a0321f.

Played for real first (483dcef's tree from ``git archive`` on PYTHONPATH beside today's: workers,
``tether submit``, ``tether runs`` and ``tether approvals`` of both on one PostgreSQL database;
13 runs submitted before, during and after the switch, 13 effects with 13 idempotency keys, each
once; approvals decided on the other version's CLI; three workers SIGKILLed mid-run, an old one
recovered by a new one and a new one by an old one after the rollback; a SQLite deployment and
a SQLite approval store paused by one version and resumed by the other, both ways; SQLite and
PostgreSQL memory stores written by 483dcef read, corrected and written by today's code). Runs,
effects, approvals, listings, checkpoints, memory and ``tether trace stats`` held both ways.
What broke, on both versions alike: the JSON-lines trace of every run recovered after its worker
was killed lacked its first events (``run_started``, ``context_composed``). A durable worker's
trace events pass a gate that holds them while a recovered run replays; the tracer's flushes
never reached the file behind it, so events the killed process still buffered were lost, and the
recovery dropped them as written because the step after them was recorded.
"""

from __future__ import annotations

import json
import signal

import pytest
from test_rolling_upgrade import Operator, operator  # noqa: F401 - the fixture, shared

pytestmark = pytest.mark.slow


def test_a_run_recovered_after_its_worker_was_killed_has_every_trace_event_once(
    operator: Operator,  # noqa: F811
) -> None:
    """Two runs in flight on a worker that is killed, one survivor recovering both: ``kept``'s
    trace as the killed worker wrote it, and ``lost``'s as a release up to 5601c3d left it
    (round six: such a release kept a live step's trace events in a batch until DBOS had recorded
    the step, so one killed left them unwritten; played with 483dcef's worker SIGKILLed mid-call,
    the recovery dropped every event before a recorded step as written and the file lacked
    ``run_started`` and ``context_composed`` for good; it now drops only the events the run's
    file holds, and writes the others). One cluster plays both: each run's trace holds every
    event once, in order, and each effect happened once."""
    op = operator
    folder = op.agent.parent
    (folder / "gate-A").write_text("")  # the runs hold inside their first tool call
    op.start("w1")
    kept, lost = op.submit(), op.submit()
    op.until("the runs to be in flight", lambda: {kept, lost} <= {r[0] for r in op.lines("reads.log")})
    trace = folder / "traces" / f"{lost}.jsonl"
    op.until("its first events to be written", lambda: trace.exists() and trace.stat().st_size > 0)
    trace.write_text("")  # what such a release had written of them when it was killed: nothing
    assert op.signal("w1", signal.SIGKILL) == -signal.SIGKILL
    (folder / "gate-A").unlink()
    op.start("w2")  # recovers the dead worker's runs: their model step replayed, their turn run again
    op.until("the recovered runs to pause", lambda: op.status(kept, lost) == ["paused", "paused"])
    op.approve(kept)
    op.approve(lost)
    op.until("the runs to finish", lambda: op.status(kept, lost) == ["finished", "finished"])
    assert sorted(r[0] for r in op.lines("effects.log")) == sorted([kept, lost])  # each effect once
    for run_id in (kept, lost):
        lines = (folder / "traces" / f"{run_id}.jsonl").read_text().splitlines()
        events = [json.loads(line) for line in lines]
        seqs = [e["seq"] for e in events]
        assert seqs == list(range(1, len(seqs) + 1)), (run_id, seqs)  # every event, once, in order
        kinds = [e["kind"] for e in events]
        assert kinds[:2] == ["run_started", "context_composed"] and kinds[-1] == "stop", (run_id, kinds)
        assert kinds.count("run_started") == 1 and kinds.count("effect_recorded") == 1, (run_id, kinds)
