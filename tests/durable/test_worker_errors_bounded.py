"""A worker keeps its latest background failures, bounded: a duty that fails every round (a lost
database, a dropped table) for days does not grow the process without end; every one is logged."""

from __future__ import annotations

from tether.durable._worker import ERRORS_KEPT, Worker, WorkerConfig


def test_a_duty_failing_every_round_keeps_the_latest_failures_bounded() -> None:
    worker = Worker(WorkerConfig("sqlite:///unused", executor_id="w1"))
    for n in range(ERRORS_KEPT * 4):
        worker._error("heartbeat", ConnectionError(f"lost {n}"), run_id=f"r{n}")
    assert len(worker.errors) == ERRORS_KEPT
    assert (
        worker.errors[-1] == f"heartbeat r{ERRORS_KEPT * 4 - 1}: ConnectionError: lost {ERRORS_KEPT * 4 - 1}"
    )
    assert worker.errors[0] == f"heartbeat r{ERRORS_KEPT * 3}: ConnectionError: lost {ERRORS_KEPT * 3}"
    fresh = Worker(WorkerConfig("sqlite:///unused", executor_id="w2"))
    fresh._error("move_intake", OSError("disk"))
    assert fresh.errors == ["move_intake: OSError: disk"]  # a few failures: every one kept
