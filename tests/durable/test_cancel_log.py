"""A run cancelled while in flight (``tether runs cancel``) is expected: DBOS's ERROR traceback
for it becomes one ``run_cancelled`` event line on the worker's log; every other error DBOS
logs passes as it was. Real parts: the ``dbos`` and ``tether.worker`` loggers, DBOS's own
exception type."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from dbos import error

from tether.durable._events import CancelledInFlight, quiet_cancellations


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logs() -> Iterator[tuple[_Keep, _Keep]]:
    """What reaches DBOS's logger's handlers, and the worker's event lines."""
    dbos_logger, events = logging.getLogger("dbos"), logging.getLogger("tether.worker")
    seen, lines = _Keep(), _Keep()
    levels = dbos_logger.level, events.level
    dbos_logger.addHandler(seen)
    events.addHandler(lines)
    dbos_logger.setLevel(logging.INFO)
    events.setLevel(logging.INFO)
    quiet_cancellations()
    quiet_cancellations()  # once per process, however often a worker starts
    try:
        yield seen, lines
    finally:
        dbos_logger.removeHandler(seen)
        events.removeHandler(lines)
        dbos_logger.setLevel(levels[0])
        events.setLevel(levels[1])


def test_a_workflow_cancelled_in_flight_is_one_event_line_not_a_traceback(logs: tuple[_Keep, _Keep]) -> None:
    seen, lines = logs
    assert sum(isinstance(f, CancelledInFlight) for f in logging.getLogger("dbos").filters) == 1
    for workflow_id in ("run-7", "run-7.resume.0123abcd"):
        err = error.DBOSAwaitedWorkflowCancelledError(workflow_id)
        logging.getLogger("dbos").error("Exception encountered in asynchronous workflow:", exc_info=err)
    assert seen.records == []  # nothing at ERROR, no traceback
    events = [json.loads(r.getMessage()) for r in lines.records]
    assert [(e["event"], e["run_id"]) for e in events] == [("run_cancelled", "run-7")] * 2
    assert events[1]["workflow_id"] == "run-7.resume.0123abcd"
    assert events[0]["message"] == "run run-7 cancelled while in flight"
    assert all(r.levelno == logging.INFO for r in lines.records)


def test_every_other_error_dbos_logs_passes_as_it_was(logs: tuple[_Keep, _Keep]) -> None:
    seen, lines = logs
    other = ValueError("the model step failed")
    try:  # a cancellation that caused another error is that other error: not hidden
        raise RuntimeError("a step broke") from error.DBOSAwaitedWorkflowCancelledError("run-8")
    except RuntimeError as err:
        wrapped = err
    logging.getLogger("dbos").error("Exception encountered in asynchronous workflow:", exc_info=other)
    logging.getLogger("dbos").error("Exception encountered in background workflow:", exc_info=wrapped)
    logging.getLogger("dbos").error(
        "Error executing workflow run-9: DBOS awaited workflow run-9 was cancelled"
    )
    assert [(r.levelno, r.exc_info[1] if r.exc_info else None) for r in seen.records] == [
        (logging.ERROR, other),
        (logging.ERROR, wrapped),
        (logging.ERROR, None),
    ]
    assert lines.records == []
