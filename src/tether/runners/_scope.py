"""The run scope: the one owner of a run's lifecycle, whichever runner drives it.

Every runner opens a ``RunScope``, which owns the run id, tracer and ``RunState``, the secret
arguments the tracer redacts (``declare_secrets``), the ``run_started``/``run_resumed`` and
``stop`` events, the checkpoint a run leaves when it stops (``stopped`` after a transient
failure, ``finished`` when a resumed run ends) and the ``RunResult``. A pause is checkpointed
by the chokepoint where it happens. ``resume_point`` is the one rule of what may be resumed;
``rebuild`` and ``resume_rebuilt`` the one path an embedded run is continued by."""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio

from tether.chokepoint._calls import CallScope, Harness, Turn
from tether.core.messages import ToolCall
from tether.core.stop import StopReason
from tether.core.types import CallRecord
from tether.errors import ApprovalError, ConfigError
from tether.policy._intake import canonical_json
from tether.policy._ledger import _owner, owner_dead
from tether.policy._trusted import TrustedContext
from tether.runs._checkpoint import (
    CheckpointError,
    checkpoint_parent,
    checkpoint_tenant,
    restore_trace,
    state_from_json,
    state_to_json,
)
from tether.runs._values import RunResult, RunState
from tether.trace._events import EventKind

if TYPE_CHECKING:
    from tether.chokepoint._authority import HostCore as Host
    from tether.core.handoff import Handoff
    from tether.tools._contract import ToolSpec
    from tether.trace._tracer import Tracer

__all__ = [
    "TRANSIENT",
    "ResumePoint",
    "RunScope",
    "close_built",
    "declare_secrets",
    "one_resume_at_a_time",
    "rebuild",
    "resume_claim",
    "resume_point",
    "resume_rebuilt",
]

_log = logging.getLogger(__name__)

# Stops a run may be continued from: nothing the host decided ended it.
TRANSIENT: Final = frozenset(
    {StopReason.MODEL_ERROR, StopReason.DEPENDENCY_UNAVAILABLE, StopReason.INTERRUPTED}
)


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """A checkpoint that may be continued: the run state (JSON), its status and its app."""

    state: str
    status: str  # "paused" (for a person) or "stopped" (a transient failure)
    app: str | None = None
    stop_reason: str | None = None


RESUMABLE: Final = ("paused", "stopped")  # the statuses of a checkpoint resume continues


def resume_point(checkpoint: Any, run_id: str, *, parent: str | None = None) -> ResumePoint:
    """What ``resume`` continues from. A child run (a subagent's, a workflow node's) is continued
    only by the run that started it (``parent``, its run id): resumed on its own, it would read
    its bounds from the snapshot of the request's history it was handed, blind to what its
    parent did since. Raises ``ApprovalError`` (``unknown_run``, ``run_finished``, ``child_run``;
    ``CheckpointError``, ``bad_checkpoint``: a status this release does not write, a later one's)."""
    if checkpoint is None:
        raise ApprovalError("unknown_run", f"no checkpoint for run {run_id!r}")
    if checkpoint.status == "finished":
        raise ApprovalError("run_finished", f"run {run_id} already ended ({checkpoint.stop_reason})")
    if checkpoint.status not in RESUMABLE:
        # A later release's state of the run, whatever it means there: never read as paused.
        raise CheckpointError(
            "bad_checkpoint",
            f"run {run_id}'s checkpoint is {checkpoint.status!r}, a status this release does not know"
            " (written by a later release?): resume it with a worker of that release",
        )
    started_by = checkpoint_parent(checkpoint.state)
    if started_by is not None and started_by != parent:
        why = f"run {run_id} is a step of run {started_by}: resume {started_by}, which continues it"
        raise ApprovalError("child_run", why)
    return ResumePoint(checkpoint.state, checkpoint.status, checkpoint.app, checkpoint.stop_reason)


_RESUMING: set[str] = set()  # the runs being resumed in this process (any event loop, any thread)
_RESUMING_LOCK = threading.Lock()


@asynccontextmanager
async def one_resume_at_a_time(run_id: str) -> AsyncIterator[None]:
    """Hold ``run_id`` while it is resumed in this process: a second resume waits for the first,
    then reads the checkpoint the first left (``resume_point`` refuses a finished run). Two
    resumes at once (a double click, requests sent together) each continued the same paused
    state: every model turn after it made again, every call after it proposed again."""
    delay = 0.005
    while True:
        with _RESUMING_LOCK:
            if run_id not in _RESUMING:
                _RESUMING.add(run_id)
                break
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.1)
    try:
        yield
    finally:
        with _RESUMING_LOCK:
            _RESUMING.discard(run_id)


# How long a resume claim holds without renewal (a holder on another machine is gone once it runs
# out; on this one its process tells) and how often a live resumer renews it.
RESUME_LEASE_S = 60.0


@asynccontextmanager
async def resume_claim(store: Any, run_id: str, clock: Callable[[], datetime]) -> AsyncIterator[Any]:
    """Hold ``run_id`` while it is resumed, in this process (``one_resume_at_a_time``) and in the
    approval store every process shares (``claim_resume``: another console, ``tether resume``, a
    durable worker): yields the checkpoint read under the claim. The claim is renewed while the
    resume runs, let go of when it ends, and taken over once its holder died. Raises
    ``ApprovalError("run_busy")`` while another live process resumes the run."""
    async with one_resume_at_a_time(run_id):
        owner = _owner()

        def lease() -> tuple[datetime, datetime]:
            now = clock()
            return now, now + timedelta(seconds=RESUME_LEASE_S)

        now, until = lease()
        checkpoint = await store.claim_resume(
            run_id, owner=owner, lease_until=until, now=now, owner_dead=owner_dead
        )

        stop = threading.Event()

        def renew() -> None:  # on a thread of its own: no task or cancel scope of the resume's
            while not stop.wait(RESUME_LEASE_S / 3):
                now, until = lease()
                try:
                    anyio.run(
                        functools.partial(store.renew_resume, run_id, owner=owner, lease_until=until, now=now)
                    )
                except Exception as err:  # the store is away: the next renewal tries again
                    _log.warning("could not renew the resume claim on %s: %s", run_id, err)

        threading.Thread(target=renew, name=f"tether-resume-{run_id}", daemon=True).start()
        try:
            yield checkpoint
        finally:
            stop.set()
            with anyio.CancelScope(shield=True):
                await store.release_resume(run_id, owner=owner)


# Factories under the import paths earlier releases wrote in checkpoints (never rewritten).
RENAMED_APPS = {"tether.agentrecord:rebuild": "tether.agents._record:rebuild"}


def current_app(app: str) -> str:
    return RENAMED_APPS.get(app, app)


def rebuild(app: str, db: Path, run_id: str) -> tuple[Any, Any]:
    """The host and agent of ``run_id``, built by the factory (``module:function``, chosen by the
    application, never the model) its checkpoint names, called with the approval store's path
    and the run id when it takes one. Raises ``ConfigError`` naming the factory."""
    import importlib
    import inspect

    module_name, _, function = current_app(app).partition(":")
    if not module_name or not function:
        raise ConfigError(f"the run's factory {app!r} is not module:function")
    try:
        factory = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"cannot load the run's factory {app!r}: {err}") from None
    try:
        takes_run_id = "run_id" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        takes_run_id = False
    built = factory(db, run_id=run_id) if takes_run_id else factory(db)
    if not (isinstance(built, tuple) and len(built) == 2):
        raise ConfigError(f"the run's factory {app!r} must return (host, agent), not {type(built).__name__}")
    return built[0], built[1]


async def resume_rebuilt(host: Any, agent: Any, run_id: str) -> RunResult:
    """Continue ``run_id`` on a host and agent ``rebuild`` made, then close both."""
    try:
        result: RunResult = await host.resume(agent, run_id)
    finally:
        await close_built(host, agent)
    return result


async def close_built(host: Any, agent: Any) -> None:
    """Close the host's sources, then the agent model's client (if it has one to close)."""
    await host.aclose()
    close = getattr(agent.model, "aclose", None)
    if close is not None:
        await close()


def declare_secrets(tracer: Tracer, specs: Iterable[ToolSpec]) -> None:
    """Tell ``tracer`` which arguments each tool declares secret (``ToolSpec.secret_arguments``),
    local or MCP, under its name and, when no other tool claims it, its bare remote name."""
    specs = list(specs)
    names = {spec.name for spec in specs}
    remotes = Counter(spec.remote_name for spec in specs if spec.remote_name)
    for spec in specs:
        secret = spec.secret_arguments
        if not secret:
            continue
        tracer.redactor.declare(spec.name, secret)
        remote = spec.remote_name
        if remote and remote not in names and remotes.get(remote) == 1:
            tracer.redactor.declare(remote, secret)


_REACHED = frozenset({"ok", "error", "crashed"})


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _canonical(value: Any) -> str | None:
    try:
        return canonical_json(value)
    except (TypeError, ValueError):
        return None


class RunScope:
    """One run, from its id to its result: ``start`` it, hand its ``calls`` scope to the
    chokepoint, and ``finish`` it exactly once.

    ``resume``: continue a checkpointed run; ``resumable``: a transient stop leaves a checkpoint;
    ``checkpoints``: pauses are checkpointed; ``trace_id``: the trace file's name if not the run id."""

    def __init__(
        self,
        host: Host,
        *,
        design: str,
        objective: str = "",
        context: TrustedContext | None = None,
        run_id: str | None = None,
        resume: ResumePoint | None = None,
        resumable: bool = False,
        checkpoints: bool = True,
        trace_id: str | None = None,
        step: int = 0,
    ) -> None:
        self.host = host
        self.design = design
        self.resumed = resume
        self.resumable = resumable
        self.checkpoints = checkpoints and host.approvals is not None
        if resume is not None:
            state = state_from_json(resume.state)
            if resume.status == "stopped":
                state.unavailable = {}  # a retry after an outage: the dependency gets its allowance again
        else:
            if context is None:
                raise TypeError("a new run needs its trusted context (or a resume point)")
            state = RunState(
                run_id or host.new_run_id(), objective, context, time.monotonic(), host.clock(), steps=step
            )
        self.state = state
        self.tracer, self.trace_path = host.new_tracer(trace_id or state.run_id)
        declare_secrets(self.tracer, host.known_tools())  # again at start: a host started late
        if resume is not None:
            restore_trace(self.tracer, self.trace_path)  # a resumed run's trace continues its numbering
        self._finished: RunResult | None = None
        self._earlier: list[CallRecord] = []  # the own calls of the attempt this run continues
        self._continued = False  # ``continue_earlier`` found an earlier attempt
        self.taken = ""  # why the run may not go on under its run id (``continue_earlier``)

    @property
    def run_id(self) -> str:
        return self.state.run_id

    async def continue_earlier(self) -> RunState | None:
        """Start from what an earlier attempt of this run id did (a workflow or a plan run again
        with ``run_id=`` after it paused), as its checkpoint holds it: its effects happened, so
        its calls and those of its child runs are this run's history (every bound counts them).
        Returns that state (``None`` for a new run). Call it before ``start``.

        A run id can be chosen: under one whose checkpoint is another tenant's, the run is
        refused (``taken`` says why: the runner stops ``approval_denied``), traced in a file of
        its own and saving nothing. Run as a new run, it overwrote that tenant's checkpoint (its
        paused run, what it had paid) with its own, and wrote its events into that run's trace."""
        approvals = self.host.approvals
        if self.resumed is not None or approvals is None:
            return None
        saved = await approvals.store.load_checkpoint(self.state.run_id)
        if saved is None:
            return None
        if checkpoint_tenant(saved.state) != self.state.context.tenant:
            self.taken = f"run_id_taken: run id {self.run_id} is another tenant's run: choose another"
            self.tracer.close()
            self.tracer, self.trace_path = self.host.new_tracer(
                f"{self.run_id}-refused-{uuid.uuid4().hex[:8]}"
            )
            return None
        earlier, s = state_from_json(saved.state), self.state
        s.inherited_observations = [*earlier.inherited_observations, *s.inherited_observations]
        s.inherited_calls = [*earlier.inherited_calls, *earlier.calls, *s.inherited_calls]
        self._earlier = list(earlier.calls)
        self._continued = True  # its end is recorded: a later continuation reads this one's
        return earlier

    async def checkpoint_paused(self, state: RunState) -> None:
        """Checkpoint ``state`` (this run's, as it should be continued) as paused for a person:
        a workflow whose agent node's child run paused (the chokepoint checkpointed the child)."""
        approvals = self.host.approvals
        if approvals is None or not self.checkpoints:
            return
        try:
            text = state_to_json(state)
        except CheckpointError:
            return  # not continuable from here: a continued run starts afresh, as before
        with anyio.CancelScope(shield=True):
            await approvals.store.save_checkpoint(
                self.run_id,
                app=approvals.app,
                state=text,
                status="paused",
                stop_reason=str(StopReason.APPROVAL_REQUIRED),
                now=self.host.clock(),
            )

    async def call(self, call: ToolCall, scope: CallScope) -> Turn:
        """``host.call`` for one call of a workflow or a plan. In a continued run the earlier
        attempt's call of the same id, tool and arguments (its call ids name its steps, so the
        ledger key is the same) is the one the ledger replays: while it is decided it is no
        other call's, and once it has reached its tool again it is recorded once more; a call
        that differs (an extracted value changed) is a new effect beside the earlier one."""
        same = [r for r in self._earlier if r.call_id == call.id and r.tool == call.name]
        same = [r for r in same if _canonical(r.arguments) == _canonical(_parsed(call.arguments))]
        s = self.state
        s.inherited_calls = [c for c in s.inherited_calls if all(c is not r for r in same)]
        try:
            turn = await self.host.call(call, scope)
        finally:
            if not any(r.call_id == call.id and r.status in _REACHED for r in s.calls):
                s.inherited_calls += same  # it did not run again: the earlier one still counts
        return turn

    async def start(self, tools: Sequence[ToolSpec], **about: str) -> None:
        """Emit the run's first event and the launches of the host's sources."""
        s = self.state
        declare_secrets(self.tracer, [*self.host.known_tools(), *tools])  # tools: harness ones too
        self.tracer.emit(
            EventKind.RUN_RESUMED if self.resumed is not None else EventKind.RUN_STARTED,
            design=self.design,
            **about,
            objective=s.objective,
            tenant=s.context.tenant,
            roles=sorted(s.context.roles),
            tools=[spec.name for spec in tools],
        )
        await self.host.trace_launches(self.tracer)

    def calls(
        self,
        offered: Sequence[ToolSpec],
        *,
        proposed_by: str,
        harness: Harness | None = None,
        stop_on_denial: bool | None = None,
        proposals: Mapping[str, str] | None = None,
    ) -> CallScope:
        """The scope the chokepoint runs this run's calls in."""
        return CallScope(
            self.state,
            self.tracer,
            offered,
            harness,
            proposed_by,
            self.checkpoints,
            stop_on_denial,
            proposals or {},
        )

    async def finish(
        self,
        reason: StopReason,
        *,
        answer: str | None = None,
        detail: str = "",
        handoff: Handoff | None = None,
        steps: int | None = None,
    ) -> RunResult:
        """End the run: checkpoint it, emit ``stop``, close the trace and build the result.
        Raises ``RuntimeError`` if called twice."""
        if self._finished is not None:
            raise RuntimeError(f"run {self.run_id} already finished ({self._finished.stop_reason})")
        s = self.state
        steps = s.steps if steps is None else steps
        detail = await self._checkpoint_stop(reason, detail)
        self.tracer.emit(
            EventKind.STOP,
            reason=str(reason),
            detail=detail,
            design=self.design,
            steps=steps,
            llm_calls=s.llm_calls,
        )
        self.tracer.close()
        self._finished = RunResult(
            run_id=s.run_id,
            stop_reason=reason,
            answer=answer,
            design=self.design,
            detail=detail,
            handoff=handoff,
            trace_path=self.trace_path,
            steps=steps,
            llm_calls=s.llm_calls,
            usage=s.usage,
            cost_usd=s.cost_usd,
            calls=s.calls,
            events=self.tracer.events,
            elapsed_s=time.monotonic() - s.started,
            outputs=s.outputs,
            observations=s.observations,
            pending_proposals=list(s.pending) if reason is StopReason.APPROVAL_REQUIRED else [],
            inherited_observations=list(s.inherited_observations),
            inherited_calls=list(s.inherited_calls),
        )
        return self._finished

    async def _checkpoint_stop(self, reason: StopReason, detail: str) -> str:
        """Leave the checkpoint this stop calls for; returns the stop's detail."""
        approvals = self.host.approvals
        if approvals is None or not self.checkpoints or reason is StopReason.APPROVAL_REQUIRED:
            return detail  # a pause was checkpointed by the chokepoint when it happened
        if self.resumable and reason in TRANSIENT:
            status = "stopped"
        elif self.resumed is not None or self._continued:
            status = "finished"
        else:
            return detail  # a run that never paused leaves nothing to resume
        try:
            text = state_to_json(self.state)
        except CheckpointError as err:
            return f"{detail} (not resumable: {err})".strip()
        app = self.resumed.app if self.resumed is not None and self.resumed.app else approvals.app
        with anyio.CancelScope(shield=True):
            await approvals.store.save_checkpoint(
                self.run_id,
                app=app,
                state=text,
                status=status,
                stop_reason=str(reason),
                now=self.host.clock(),
            )
        return detail
