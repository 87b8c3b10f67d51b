"""What a worker tells its operator: one JSON object a line on the ``tether.worker`` logger.

Every line has ``ts``, ``event`` and ``executor``; run events name ``run_id``, ``workflow_id``,
``op`` and ``tenant``. Events: ``worker_started``, ``worker_draining``, ``worker_stopped``,
``run_claimed``, ``run_resumed``, ``run_paused``, ``run_finished`` (``stop_reason``, ``exit``),
``run_failed`` (``cause``), ``run_released`` (let go by a draining worker), ``run_not_replayed``
(``cause``: a recovered run whose recorded steps this code cannot replay, another release's or
another agent's; it stays pending for a worker that can), ``effect_escalated``
(with the command that resolves it), ``resume_enqueued``, ``executors_recovered``,
``worker_error`` (``cause``), ``runs_left`` (the runs a restarted worker left in flight under
the version it ran before: ``version``, ``runs``, ``hint``), ``run_cancelled`` (instead of
DBOS's ERROR traceback) and ``run_not_resumed`` (``error``: ``not_paused``,
``unreadable_checkpoint`` for a checkpoint another release wrote in a format this one cannot
read; ``detail``; ``hint``: the command that sends a refused resume again) and
``resume_waiting`` (a resume waiting while another live process resumes the run: it runs once
that process lets go or is gone).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from tether.durable import _metrics as metrics

LOGGER = logging.getLogger("tether.worker")


def log_event(event: str, **fields: Any) -> None:
    if not LOGGER.isEnabledFor(logging.INFO):
        return
    line = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), "event": event, **fields}
    LOGGER.info(json.dumps(line, default=str, ensure_ascii=False))


def resolve_command(key: str) -> str:
    return f"tether runs resolve {key} --happened yes|no"


async def observed(
    request: Mapping[str, Any], body: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """Run a workflow's ``body`` and log what became of it."""
    from dbos import DBOS

    from tether.clisupport.output import run_exit
    from tether.durable._runtime import runtime

    rt = runtime()
    op = str(request.get("op", "start"))
    ids = {
        "executor": rt.executor_id,
        "run_id": request.get("run_id"),
        "workflow_id": DBOS.workflow_id,
        "op": op,
        # A start carries its context, a resume its tenant (not one of an earlier release's).
        "tenant": request.get("tenant") or (request.get("context") or {}).get("tenant"),
    }
    log_event("run_claimed", **ids, app=request.get("app"))
    if op == "resume":
        log_event("run_resumed", **ids)
    started = time.monotonic()
    metrics.run_started()
    try:
        out = await body(request)
    except BaseException as err:
        metrics.run_ended(time.monotonic() - started, op, "exception")
        from tether.durable._steps import DRAIN, ReplayDiverged

        if DRAIN.stopping and not isinstance(err, Exception):
            # Parked by a drain, then dropped with the event loop: a survivor continues it.
            log_event("run_released", **ids)
        elif isinstance(err, ReplayDiverged):
            # Its record is not this code's: the workflow stays pending for a worker whose it is.
            log_event("run_not_replayed", **ids, cause=f"{type(err).__name__}: {err}")
        else:
            log_event("run_failed", **ids, cause=f"{type(err).__name__}: {err}")
        raise
    took = round(time.monotonic() - started, 3)
    stop = str(out.get("stop_reason") or "")
    metrics.run_ended(took, op, stop)
    ids["tenant"] = out.get("tenant") or ids["tenant"]
    if stop == "approval_required":
        log_event("run_paused", **ids, pending=out.get("pending_proposals", []), elapsed_s=took)
    elif stop:
        code = run_exit(stop, list(out.get("problems") or []))
        log_event(
            "run_finished", **ids, stop_reason=stop, exit=code, detail=out.get("detail"), elapsed_s=took
        )
    elif out.get("error"):  # a resume that did nothing: the run stands where it was
        again = (
            {} if out["error"] == "not_paused" else {"hint": f"tether runs move {ids['run_id']} --to latest"}
        )
        log_event("run_not_resumed", **ids, error=out["error"], detail=out.get("detail"), **again)
    if stop and (stop != "accepted" or out.get("problems")):
        await _escalations(rt, ids)
    return out


async def _escalations(rt: Any, ids: dict[str, Any]) -> None:
    approvals = getattr(rt.stores, "approvals", None)
    if approvals is None:
        return
    try:
        entries = await approvals.ledger_for_run(ids["run_id"])
    except Exception as err:  # the log must not fail the run
        log_event("worker_error", executor=rt.executor_id, duty="escalations", cause=repr(err))
        return
    for e in entries:
        if str(e.status) == "escalated":
            metrics.escalated(e.tool)
            log_event("effect_escalated", **ids, key=e.key, tool=e.tool, resolve=resolve_command(e.key))


def configure_stderr(level: int = logging.INFO) -> None:
    """``tether worker``: the events, one JSON object a line, on stderr."""
    import sys

    if any(getattr(h, "_tether_events", False) for h in LOGGER.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler._tether_events = True  # type: ignore[attr-defined]
    LOGGER.addHandler(handler)
    LOGGER.setLevel(level)
    LOGGER.propagate = False


def _run_of(workflow_id: str) -> str:
    """The run of workflow id ``<run>``, ``<run>.resume.<digest>`` or ``<run>.cancel``."""
    return workflow_id.rsplit(".resume.", 1)[0].removesuffix(".cancel")


class CancelledInFlight(logging.Filter):
    """On DBOS's logger: the ERROR record (with traceback) of a workflow cancelled in flight
    becomes one ``run_cancelled`` event line; every other record passes as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        from dbos import error  # DBOS's public exceptions

        err = record.exc_info[1] if record.exc_info else None
        if not isinstance(err, error.DBOSAwaitedWorkflowCancelledError):
            return True
        run_id = _run_of(err.workflow_id)
        log_event(
            "run_cancelled",
            run_id=run_id,
            workflow_id=err.workflow_id,
            message=f"run {run_id} cancelled while in flight",
        )
        return False


def quiet_cancellations() -> None:
    """Install ``CancelledInFlight`` on DBOS's logger, once per process (a worker's start)."""
    dbos_logger = logging.getLogger("dbos")
    if not any(isinstance(f, CancelledInFlight) for f in dbos_logger.filters):
        dbos_logger.addFilter(CancelledInFlight())
