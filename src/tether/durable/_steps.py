"""The agent loop's steps as DBOS steps: each model call and each tool turn is recorded.

A recovered run runs its workflow again from the top: a recorded step returns its result without
running (no model asked again, no tool turn again) and the loop's deterministic code in between
rebuilds the same state; the effect ledger still guards an effect cut mid-step. Trace events
emitted while replaying are held back: dropped when the next step is recorded, written when live.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from tether.core.types import Effect, ToolSpec
from tether.durable import _metrics as metrics
from tether.durable._codec import apply_turn, decode_response, decode_turn, encode_response, encode_turn
from tether.errors import ApprovalError
from tether.models._base import ModelResponse
from tether.runners._loop import LoopSteps
from tether.trace._tracer import JsonlSink, MemorySink

if TYPE_CHECKING:
    from tether.chokepoint._calls import CallScope, Turn
    from tether.runners._loop import AgentLoop
    from tether.trace._events import TraceEvent

T = TypeVar("T")

MODEL_STEP = "tether.model"
TURN_STEP = "tether.turn"


def _transient(err: BaseException) -> bool:
    from tether.sql._postgres import StoreUnavailable

    return isinstance(err, StoreUnavailable)


def step_options(name: str, *, retry_store: bool = False) -> Any:
    """DBOS options of a step; with ``retry_store``, a step failed by an unreachable store is
    tried again for about 30 s (safe for a turn: its effects go through the ledger)."""
    from dbos import StepOptions

    if not retry_store:
        return StepOptions(name=name)
    return StepOptions(
        name=name,
        retries_allowed=True,
        max_attempts=5,
        interval_seconds=1.0,
        backoff_rate=2.0,
        should_retry=_transient,
    )


class Drain:
    """This process's steps, for a worker that stops: after ``begin`` no step starts (its
    workflow parks, to be recovered elsewhere); ``in_flight`` counts the steps still running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stopping = False
        self.in_flight = 0
        self.parked = 0

    def reset(self) -> None:
        with self._lock:
            self.stopping, self.in_flight, self.parked = False, 0, 0

    def begin(self) -> None:
        with self._lock:
            self.stopping = True

    async def enter(self) -> None:
        with self._lock:
            if not self.stopping:
                self.in_flight += 1
                return
            self.parked += 1
        await anyio.sleep_forever()  # the process exits around it; DBOS recovers the workflow

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


DRAIN = Drain()


class ReplayDiverged(BaseException):
    """A recovered run asked for another step than the one recorded there (the code or agent
    changed under a run in flight). A BaseException: never caught by the loop, and DBOS leaves
    the workflow pending (not ``ERROR``) for a worker whose code matches its record."""


class UnreadableStep(ReplayDiverged):
    """A recorded step this release cannot decode (another release's format: a SQLite
    deployment keeps one DBOS version across releases, so a rollback replays what a later
    release recorded). Nothing of the step is run again or written; the run waits for a worker
    that reads it."""


def _decoded(name: str, decode: Callable[[], T]) -> T:
    """``decode()`` of a recorded step, its failure as ``UnreadableStep``."""
    try:
        return decode()
    except (TypeError, KeyError, IndexError, ValueError, ApprovalError) as err:  # CheckpointError too
        raise UnreadableStep(
            f"step {name} was recorded by another release in a format this one cannot read"
            f" ({type(err).__name__}: {err}); the run is left pending: recover it with a worker of"
            " the release that recorded it (or roll forward to it)"
        ) from err


class _Gate:
    """Holds trace events back while the run may be replaying recorded steps."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = sinks
        self.held: list[TraceEvent] = []
        self.live = False
        self._on_file: set[int] | None = None  # the seqs the run's file held when first read

    def write(self, event: TraceEvent) -> None:
        if self.live:
            for sink in self.sinks:
                sink.write(event)
        else:
            self.held.append(event)

    def release(self) -> None:
        """A step runs live: what was held had not been written; write it and go live."""
        self.live = True
        held, self.held = self.held, []
        for event in held:
            for sink in self.sinks:
                sink.write(event)

    def drop(self) -> None:
        """A recorded step was replayed: the events before it were written the first time, or
        should have been. Those the run's file holds are dropped; those it lacks are written
        now, in their place (a release before 5601c3d, killed, left a recorded step's events in
        its batch; a machine without the run's file gets the replayed part of the trace)."""
        if self.live:
            return
        held, self.held = self.held, []
        on_file = self._written()
        for event in held:
            if on_file is not None and event.seq not in on_file:
                for sink in self.sinks:
                    sink.write(event)

    def _written(self) -> set[int] | None:
        """The seqs of the run's JSON-lines file as the recovery found it (``None``: no file
        sink); read once, before this execution wrote a line of its own."""
        if self._on_file is None:
            files = [s.path for s in self.sinks if isinstance(s, JsonlSink)]
            if not files:
                return None
            self._on_file = _seqs(files[0])
        return self._on_file

    def written(self) -> None:
        """A live step is about to be recorded: the events before it go to the run's file now,
        since a recovery replaying the step drops them as written (a batched file may hold them
        still). The PostgreSQL index is not waited for: its own thread stores what it was given."""
        for sink in self.sinks:
            if isinstance(sink, JsonlSink):
                sink.flush()

    def close(self) -> None:
        self.release()  # events after the last recorded step: written (a duplicate at worst)
        for sink in self.sinks:
            sink.close()


def _seqs(path: Any) -> set[int]:
    """The seqs of a trace file's events; a line cut short by a kill, or not an event, is none."""
    seqs: set[int] = set()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    seqs.add(int(json.loads(line)["seq"]))
                except (ValueError, KeyError, TypeError):
                    continue
    except FileNotFoundError:
        pass
    return seqs


class DurableSteps(LoopSteps):
    """``LoopSteps`` on DBOS. Use one per workflow execution; ``attach`` it to the loop first."""

    def __init__(self) -> None:
        self.gate: _Gate | None = None
        self.replayed = 0
        self.ran = 0

    def attach(self, loop: AgentLoop) -> None:
        tracer = loop.tracer
        kept = [s for s in tracer.sinks if isinstance(s, MemorySink)]
        self.gate = _Gate([s for s in tracer.sinks if not isinstance(s, MemorySink)])
        tracer.sinks = [*kept, self.gate]

    def _live(self) -> None:
        self.ran += 1
        if self.gate is not None:
            self.gate.release()

    def _recording(self) -> None:
        if self.gate is not None:
            self.gate.written()

    def _recorded(self) -> None:
        self.replayed += 1
        if self.gate is not None:
            self.gate.drop()

    async def complete(self, loop: AgentLoop, request: Any) -> ModelResponse:
        ran = False

        async def ask() -> dict[str, Any]:
            nonlocal ran
            ran = True
            self._live()
            response = await loop.agent.model.complete(request)
            self._recording()
            return encode_response(response)

        data, took = await _step(step_options(MODEL_STEP), ask)
        if ran:
            metrics.step_done("model", took)
        if not ran:
            self._recorded()
        return _decoded(MODEL_STEP, lambda: decode_response(data))

    async def turn(self, loop: AgentLoop, calls: list[Any], scope: CallScope) -> Turn:
        s = loop.state
        observations_before, calls_before = len(s.observations), len(s.calls)
        executed: list[Turn] = []

        async def act() -> dict[str, Any]:
            self._live()
            turn = await loop.host.call_turn(calls, scope)
            executed.append(turn)
            self._recording()
            return encode_turn(turn, s, observations_before, calls_before)

        data, took = await _step(step_options(TURN_STEP, retry_store=True), act)
        if executed:
            metrics.step_done("turn", took)
            return executed[0]
        self._recorded()

        def replayed() -> Turn:
            apply_turn(data, s)
            return decode_turn(data, lambda name: _spec(loop, name), calls)

        return _decoded(TURN_STEP, replayed)


async def _step(options: Any, body: Callable[[], Awaitable[dict[str, Any]]]) -> tuple[Any, float]:
    """Run ``body`` as a DBOS step (or return its recorded result) inside the drain's count;
    returns the result and the seconds it took."""
    from dbos import DBOS
    from dbos import error as dbos_error

    await DRAIN.enter()
    started = time.monotonic()
    try:
        return await DBOS.run_step_async(options, body), time.monotonic() - started
    except dbos_error.DBOSUnexpectedStepError as err:
        raise ReplayDiverged(str(err)) from err
    finally:
        DRAIN.leave()


def _spec(loop: AgentLoop, name: str) -> ToolSpec:
    for spec in loop.offered:
        if spec.name == name:
            return spec
    found = loop.host._resolve(name)
    if found is not None:
        return found
    # A harness tool (TODO list, skills, tool search): only its name is read after a turn.
    return ToolSpec(name=name, description="", parameters={}, effect=Effect.READ, source="harness")
