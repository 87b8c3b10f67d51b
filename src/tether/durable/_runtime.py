"""A run as a DBOS workflow, and the process-wide settings a worker runs it with.

A request names the *app* (a factory ``module:function`` called with the storage URL that
returns ``(host, agent)``), the objective and the trusted context. A worker runs only the apps
it was started with: a queue row is data, and data never chooses which code a worker imports.
A paused run's workflow ends ``approval_required``; its resume is another workflow
(``op: resume``) whose first step loads the checkpoint.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from tether.clisupport.output import call_problems
from tether.core.stop import StopReason
from tether.durable._config import (  # the names a client needs, without the agent loop
    APP_VERSION,
    QUEUE,
    WORKFLOW,
    WORKFLOW_NAMES,
    context_from_json,
    context_to_json,
    dbos_config,
)
from tether.durable._steps import DurableSteps, UnreadableStep, _decoded, step_options
from tether.durable._views import UNREADABLE
from tether.errors import ApprovalError
from tether.runners._loop import AgentLoop
from tether.runners._scope import close_built, current_app, resume_claim, resume_point
from tether.runs._checkpoint import CheckpointError
from tether.stores._url import parse_url
from tether.trace._tracer import JsonlSink

__all__ = [
    "APP_VERSION",
    "QUEUE",
    "WORKFLOW",
    "Runtime",
    "context_from_json",
    "context_to_json",
    "dbos_config",
    "register_app",
    "runtime",
    "set_runtime",
    "stores_for",
]

_APPS: dict[str, Callable[..., Any]] = {}


def register_app(name: str, factory: Callable[..., Any]) -> None:
    """Serve ``factory`` to this process's runs under ``name``; one with a ``digest`` attribute
    serves only runs submitted with that digest (or none)."""
    _APPS[name] = factory


@dataclass
class Runtime:
    """What this process's workflows run with: the storage URL and the apps it serves."""

    url: str
    apps: frozenset[str] = frozenset()
    executor_id: str = "local"
    stores: Any = None  # tether.stores._url.Stores, opened by the worker

    def factory(self, app: str) -> Callable[..., Any]:
        """Raises ``PermissionError`` for an app this worker was not started with (an earlier
        release's import path is read as today's: ``current_app``)."""
        if app not in self.apps:
            app = current_app(app)
        if app in _APPS:
            return _APPS[app]
        if app not in self.apps:
            raise PermissionError(f"app {app!r} is not served by this worker (tether worker --app)")
        module_name, _, function = app.partition(":")
        return getattr(importlib.import_module(module_name), function)  # type: ignore[no-any-return]


_runtime: Runtime | None = None
_opened: dict[str, Any] = {}


def stores_for(url: str) -> Any:
    """The stores at ``url`` for an app factory: the worker's own, else opened once per process."""
    from tether.stores._url import open_stores

    if _runtime is not None and _runtime.url == url and _runtime.stores is not None:
        return _runtime.stores
    if url not in _opened:
        _opened[url] = open_stores(url)
    return _opened[url]


def set_runtime(rt: Runtime | None) -> None:
    global _runtime
    _runtime = rt


def runtime() -> Runtime:
    if _runtime is None:
        raise RuntimeError("no durable runtime in this process: start it with tether.durable.Worker")
    return _runtime


async def _build(
    app: str, rt: Runtime, run_id: str, digest: str | None = None, op: str = "start"
) -> tuple[Any, Any]:
    factory = rt.factory(app)
    served = getattr(factory, "digest", None)
    if digest and served and digest != served:
        if op != "resume" or parse_url(rt.url).backend != "sqlite":
            raise PermissionError(
                f"app {app!r} on this worker (sha256 {served[:12]}) is not the one the run was submitted"
                f" with (sha256 {digest[:12]}): restart the worker with that version"
            )
        # A SQLite deployment has one worker and one version: a run paused before its file was
        # upgraded resumes on the version served now (PostgreSQL's `tether runs move`, implied).
        from tether.durable._events import log_event

        log_event("run_version_changed", run_id=run_id, app=app, bound=digest[:12], served=served[:12])
    params = inspect.signature(factory).parameters
    built = factory(rt.url, run_id=run_id) if "run_id" in params else factory(rt.url)
    if inspect.isawaitable(built):
        built = await built
    host, agent = built
    traces = getattr(rt.stores, "traces", None)
    if traces is not None and traces not in host.extra_sinks:
        host.extra_sinks.append(traces)  # the trace index every machine reads
    return host, agent


async def _indexed(traces: Any, run_id: str) -> list[dict[str, Any]]:
    """The run's events in the trace index (read in a worker thread: never on the loop)."""
    return await anyio.to_thread.run_sync(traces.events, run_id)


# The ops a workflow's request may name (every release wrote ``start`` or ``resume``; a request
# without one is a start of an earlier release's), and the keys any release's request held. A
# key beyond them is a later release's (a bound, a restriction on the run): run without it, the
# run would not be the one submitted. Such a request waits for a worker that reads it.
OPS = ("start", "resume")
REQUEST_KEYS = frozenset({"op", "run_id", "app", "app_digest", "objective", "context", "tenant"})


async def execute(request: Mapping[str, Any]) -> dict[str, Any]:
    """The body of the ``tether.runs._values`` workflow (see the module docstring)."""
    from dbos import DBOS

    rt = runtime()
    run_id = str(request["run_id"])
    op = request.get("op", "start")
    unknown = sorted(str(k) for k in request if k not in REQUEST_KEYS)
    if op not in OPS or unknown:
        # A later release's request (or a marker never meant to run): never run as a start.
        what = f"op {op!r} is not one this release runs" if op not in OPS else f"key {', '.join(unknown)}"
        raise UnreadableStep(
            f"run {run_id}: its request's {what} (another release wrote it; this one does not know"
            " it); nothing was run and the run is left pending: run it with a worker of that"
            " release (or roll forward to it)"
        )
    base = {
        "run_id": run_id,
        "op": op,
        "app": request["app"],
        "workflow_id": DBOS.workflow_id,
        "executor": rt.executor_id,
    }
    try:
        host, agent = await _build(str(request["app"]), rt, run_id, request.get("app_digest"), op)
    except PermissionError as err:
        return {**base, "stop_reason": str(StopReason.POLICY_DENIED), "detail": str(err)}
    except Exception as err:  # the app's factory failed: the run ends, it says why
        return {
            **base,
            "stop_reason": str(StopReason.INTERNAL_ERROR),
            "detail": f"{type(err).__name__}: {err}",
        }
    steps = DurableSteps()
    claim = AsyncExitStack()  # the resume claim, held until the run stops
    try:
        await host.start()
        if op == "resume":
            approvals = host.approvals
            if approvals is None:
                return {**base, "stop_reason": str(StopReason.INTERNAL_ERROR), "detail": "no approval store"}
            try:  # one resumer of a run at a time, whichever process (a console, tether resume)
                await _claim_when_free(claim, approvals.store, run_id, host.clock, base)
            except ApprovalError as err:
                return {
                    **base,
                    "stop_reason": "",
                    "detail": f"cannot resume {run_id}: {err}",
                    "error": err.reason,
                }

            resumed = await _resumed_loop(host, agent, rt, run_id, steps)
            if isinstance(resumed, dict):
                return {**base, "stop_reason": "", **resumed}
            loop = resumed
        else:
            context = context_from_json(request["context"])
            loop = AgentLoop(host, agent, str(request["objective"]), context, run_id=run_id, steps=steps)
        steps.attach(loop)
        result = await loop.run()
    finally:
        with anyio.CancelScope(shield=True):
            await claim.aclose()
        await close_built(host, agent)
    # The calls that did not run and succeed: an accepted run exits as `tether run` would.
    problems = call_problems(result)
    summary = {**base, **result.summary(), "tenant": loop.state.context.tenant, "problems": problems}
    return {**summary, "replayed_steps": steps.replayed, "live_steps": steps.ran}


# A resume refused because another live process holds the run (``run_busy``) tries again: after
# this long, doubling up to the most, until the holder lets go (its resume ended, or failed
# before it ran anything) or is gone (its process dead, its lease run out).
BUSY_RETRY_S = (0.2, 5.0)


async def _claim_when_free(
    claim: AsyncExitStack, store: Any, run_id: str, clock: Any, ids: Mapping[str, Any]
) -> None:
    """Enter ``run_id``'s resume claim into ``claim``, waiting while another live process holds
    it. Each try is one claim (one resumer at a time, across processes): the resume runs once,
    after the holder, from the checkpoint the holder left (``resume_point`` refuses a run it
    finished; a run it paused again waits on its own approval). The wait is not a recorded step:
    a recovered workflow claims again, the same way."""
    from tether.durable._events import log_event

    wait, most = BUSY_RETRY_S
    told = False
    while True:
        try:
            await claim.enter_async_context(resume_claim(store, run_id, clock))
            return
        except ApprovalError as err:
            if err.reason != "run_busy":
                raise
            if not told:  # once: the operator sees why the run has not moved yet
                log_event("resume_waiting", **{k: ids[k] for k in ("run_id", "workflow_id")}, detail=str(err))
                told = True
        await anyio.sleep(wait)
        wait = min(wait * 2, most)


async def _resumed_loop(host: Any, agent: Any, rt: Any, run_id: str, steps: DurableSteps) -> Any:
    """The agent loop continuing ``run_id`` from its checkpoint (loaded as a recorded step), or
    why it cannot be continued (``detail`` and ``error``, a dict)."""
    from dbos import DBOS

    approvals = host.approvals
    traces = getattr(rt.stores, "traces", None)

    async def load() -> dict[str, Any] | None:
        cp = await approvals.store.load_checkpoint(run_id)
        if cp is None:
            return None
        # How many of the run's events the trace index holds now: the resumed run numbers
        # its events after them (recorded, so a recovery numbers them the same way).
        seen = len(await _indexed(traces, run_id)) if traces is not None else 0
        return {
            "state": cp.state,
            "status": cp.status,
            "app": cp.app,
            "stop_reason": cp.stop_reason,
            "trace_events": seen,
        }

    cp = await DBOS.run_step_async(step_options(CHECKPOINT_STEP, retry_store=True), load)
    # The step as another release recorded it (a key this one lacks): ``UnreadableStep``, the
    # run left pending for a worker that reads it, as any recorded step it cannot read.
    loaded = _decoded(CHECKPOINT_STEP, lambda: _Loaded(**cp)) if cp is not None else None
    # Another release's format or status (a later one's, beside this one or after a rollback):
    # nothing is run or written; the run stays paused for a worker that reads it.
    try:
        point = resume_point(loaded, run_id)
    except CheckpointError as err:
        return {"detail": f"cannot resume {run_id} on this release: {err}", "error": UNREADABLE}
    except ApprovalError as err:
        return {"detail": f"cannot resume {run_id}: {err}", "error": "not_paused"}
    assert cp is not None  # resume_point refuses a missing checkpoint
    try:
        loop = AgentLoop(host, agent, resume=point, steps=steps)
    except CheckpointError as err:
        return {"detail": f"cannot resume {run_id} on this release: {err}", "error": UNREADABLE}
    if traces is not None and loop.tracer.last_seq < cp["trace_events"]:
        await _continue_numbering(loop.tracer, traces, run_id, cp["trace_events"])
    return loop


CHECKPOINT_STEP = "tether.checkpoint"


@dataclass(frozen=True)
class _Loaded:
    """The checkpoint as the recorded ``tether.runs._checkpoint`` step returned it."""

    state: str
    status: str
    app: str | None
    stop_reason: str | None
    trace_events: int = 0


async def _continue_numbering(tracer: Any, traces: Any, run_id: str, count: int) -> None:
    """Start a resumed run's tracer after the ``count`` events the index holds (a run without
    trace files on this machine would otherwise number from 1 again)."""
    stored = (await _indexed(traces, run_id))[:count]
    written = tracer.last_seq  # what this machine's trace file holds (``restore_trace``)
    tracer.events.clear()  # events of kinds this release does not know are numbered, not held
    lines = [{**d, "run_id": run_id, "seq": int(d.get("seq", i + 1))} for i, d in enumerate(stored)]
    tracer.restore(lines)
    # The events this machine's file lacks (the line a killed writer cut short and the sink
    # removed, a batch it never wrote; all of them where the run began on another machine):
    # written back from the index, in order, before the resumed run's own.
    lost = [line for line in lines if line["seq"] > written]
    for sink in tracer.sinks:
        if isinstance(sink, JsonlSink) and lost:
            await anyio.to_thread.run_sync(sink.restore_lines, lost)


def _register(name: str) -> Any:
    from dbos import DBOS

    from tether.durable._events import observed

    @DBOS.workflow(name=name)
    async def tether_run(request: dict[str, Any]) -> dict[str, Any]:
        return await observed(request, execute)  # logs claimed/paused/finished for the operator

    return tether_run


tether_run = _register(WORKFLOW)
_earlier = [_register(name) for name in WORKFLOW_NAMES[1:]]  # an earlier release's queued runs
