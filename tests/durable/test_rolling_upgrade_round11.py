"""An operator's rolling upgrade, eleventh round.

What did not hold, each fixed here and pinned below:

- a run's JSON-lines trace whose last line a writer cut short (a worker killed, -9, inside its
  write of a batch; a full disk): the worker that continued the run appended its next event to
  the cut line, so that event was lost (the console skipped the line, and a ``stop`` glued there
  left the run listed as running), ``tether trace stats`` failed on the file for good ("line N
  is not a trace event"), and a resume of the run (approved after the upgrade) failed at once
  with a ``ValueError``: the approved run never finished. A trace sink now removes a cut last
  line before it appends (a whole event left without its newline is ended), readers skip a cut
  last line, and read the whole event an earlier release glued after one (the kill itself is
  played in round 12, where the cut event is also written back from the index).
- a durable resume refused for a reason other than the two ``runs show`` listed (``run_busy``:
  another live process held the run's resume claim, a console or ``tether resume`` of this
  release, a worker stalled in it; or a reason of another release, beside this one or before a
  rollback) ran nothing, yet the run was listed ``finished`` (its approved effect never run),
  and ``runs move`` refused it as finished: the approval was lost for good, the refused resume's
  id being fixed by the paused state. Any resume ending with an ``error`` and no stop reason now
  leaves the run where it stood, every such refusal but ``not_paused`` is sent again by ``runs
  move``, and the worker's ``run_not_resumed`` names that command (``hint``).
"""

from __future__ import annotations

import json
from pathlib import Path

from test_rolling_upgrade import Operator, operator  # noqa: F401 - the fixture, shared

from tether.console._runs import TraceIndex
from tether.trace._events import EventKind, TraceEvent
from tether.trace._tracer import JsonlSink, read_trace

# -- a trace cut short by a killed writer --------------------------------------------------------


def _line(seq: int, kind: str, **data: object) -> bytes:
    return json.dumps({"run_id": "r1", "seq": seq, "ts": "t", "kind": kind, **data}).encode() + b"\n"


def test_a_trace_an_earlier_release_glued_after_a_cut_line_reads_every_whole_event(
    operator: Operator,  # noqa: F811
    tmp_path: Path,
) -> None:
    """What an earlier release left: its next event appended to a cut line (``stop`` glued to
    half a ``tool_observation``). ``trace stats`` and the console read the glued event; a
    line broken otherwise is still named. A sink opened on a file whose last event lacks only
    its newline ends it and keeps it; one opened on a cut line removes it."""
    folder = tmp_path / "traces"
    folder.mkdir()
    trace = folder / "r1.jsonl"
    cut = _line(3, "tool_observation", tool="look", text="x" * 40)[:30]
    trace.write_bytes(
        _line(1, "run_started") + _line(2, "model_response") + cut + _line(4, "stop", reason="accepted")
    )
    assert [e["seq"] for e in read_trace(trace)] == [1, 2, 4]
    assert operator.cli("trace", "stats", str(trace))["stop_reason"] == "accepted"
    summary = TraceIndex(folder).get("r1")
    assert summary is not None and summary.stop_reason == "accepted", summary
    # A sink on a file whose last line is whole but unended keeps that event.
    whole = folder / "r2.jsonl"
    whole.write_bytes(_line(1, "run_started").rstrip(b"\n"))
    sink = JsonlSink(whole, flush="each_event")
    sink.write(TraceEvent("r2", 2, "t", EventKind.STOP, {"reason": "accepted"}))
    sink.close()
    assert [e["seq"] for e in read_trace(whole)] == [1, 2]


# -- a resume refused for a reason a release does not list ---------------------------------------


# ``run_busy`` (another live process held the run's resume claim) is no longer refused: the
# resume waits for the holder and runs once (test_rolling_upgrade_round12.py).


def test_a_resume_refused_for_a_reason_of_another_release_is_read_as_refused() -> None:
    """The rule both tests above lean on, for every refusal this release writes and those a
    later release may write (beside this one, or before a rollback): a resume that ended with an
    ``error`` and no stop reason ran nothing, so the run stands where the workflow before it left
    it, and every refusal but ``not_paused`` is sent again by ``runs move``."""
    from tether.durable._views import RunView, WorkflowView, refused_resume

    def flow(op: str, **output: str) -> WorkflowView:
        return WorkflowView(f"r.{op}", op, "SUCCESS", "w1", None, None, dict(output))

    start = flow("start", stop_reason="approval_required")
    for error in ("unreadable_checkpoint", "run_busy", "a_reason_of_a_later_release"):
        resume = flow("resume", stop_reason="", error=error)
        run = RunView("r", "acme", [start, resume])
        assert (run.status, run.stop_reason, refused_resume(resume)) == ("paused", "approval_required", True)
    idle = flow("resume", stop_reason="", error="not_paused")
    assert RunView("r", "acme", [start, idle]).status == "paused" and not refused_resume(idle)
    done = flow("resume", stop_reason="accepted")
    assert RunView("r", "acme", [start, done]).status == "finished" and not refused_resume(done)
