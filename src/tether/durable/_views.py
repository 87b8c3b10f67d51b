"""What every machine reads of a durable run: its workflows (DBOS's rows, or the intake's row)
and where the run stands."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.durable._intake import IntakeRow

_STATUS = {
    "ENQUEUED": "queued",
    "DELAYED": "queued",
    "PENDING": "running",
    "ERROR": "failed",
    "CANCELLED": "cancelled",
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED": "failed",
}
_EARLIEST = datetime.fromtimestamp(0.001, UTC)  # a workflow without a creation time sorts first


@dataclass(frozen=True)
class WorkflowView:
    workflow_id: str
    op: str
    status: str  # DBOS's status
    executor: str | None
    created_at: datetime | None
    updated_at: datetime | None
    output: dict[str, Any] | None
    error: str | None = None
    app_version: str | None = None
    name: str | None = None  # the workflow's (tether.durable._config.WORKFLOW_NAMES)

    def order(self) -> tuple[datetime, str]:
        """Its place among a run's workflows: creation time, then id."""
        return self.created_at or _EARLIEST, self.workflow_id


# A resume refused because its checkpoint is in a format this release cannot read (a later
# release's): it ran and wrote nothing; ``tether runs move`` enqueues it again.
UNREADABLE = "unreadable_checkpoint"


def did_nothing(output: Any) -> bool:
    """Whether a workflow's output is a resume's that ran and wrote nothing: refused, with an
    ``error`` and no stop reason (``not_paused``, ``unreadable_checkpoint``, ``run_busy``: another
    process was resuming the run; or a reason of another release, beside this one or after a
    rollback, which this one cannot list)."""
    return isinstance(output, dict) and bool(output.get("error")) and not output.get("stop_reason")


def refused_resume(w: WorkflowView) -> bool:
    """A resume a worker refused, not for the run being past pausing (``not_paused``): the run
    stands paused, its approval unused, and nothing else enqueues that resume again."""
    return w.op == "resume" and did_nothing(w.output) and (w.output or {}).get("error") != "not_paused"


@dataclass
class RunView:
    """A run as every machine sees it: its workflows, and where it stands."""

    run_id: str
    tenant: str | None
    workflows: list[WorkflowView] = field(default_factory=list)

    @property
    def latest(self) -> WorkflowView:
        return self.workflows[-1]

    @property
    def version(self) -> str | None:
        """The application version its latest workflow was enqueued with (versions.py)."""
        return next((w.app_version for w in reversed(self.workflows) if w.op != "cancel"), None)

    @property
    def status(self) -> str:
        """queued | running | paused | finished | failed | cancelled. A cancelled run stays
        cancelled: a resume a worker enqueued while the cancel was under way finds the run ended
        and does nothing, so it does not make the run look alive again."""
        if self._cancelled:
            return "cancelled"
        w = self.latest
        if w.status != "SUCCESS":
            return _STATUS.get(w.status, w.status.lower())
        out = w.output or {}
        if did_nothing(out) and len(self.workflows) > 1:
            # A resume that found nothing to resume, or was refused (a checkpoint it cannot read,
            # another process resuming the run): the run stands where the one before left it.
            return RunView(self.run_id, self.tenant, self.workflows[:-1]).status
        return "paused" if out.get("stop_reason") == "approval_required" else "finished"

    @property
    def stop_reason(self) -> str | None:
        """The run's one stop reason once it ended (or paused); None while it is in flight."""
        if self._cancelled:
            return "cancelled"
        stop = self._ended_output().get("stop_reason")
        return str(stop) if stop else None

    @property
    def outcome(self) -> dict[str, Any]:
        """The CLI's envelope of the run by the rule of ``tether run`` (an accepted run with a
        refused or failed call exits 2 or 6); a run in flight exits 0 with no stop reason yet."""
        from tether.clisupport.output import run_envelope

        stop = self.stop_reason
        if stop is None:
            return {"ok": True, "exit": 0, "stop_reason": None, "problems": [], "error": None}
        out = {} if self._cancelled else self._ended_output()
        return run_envelope(stop, str(out.get("detail") or ""), list(out.get("problems") or []))

    @property
    def exit_code(self) -> int:
        return int(self.outcome["exit"])

    @property
    def _cancelled(self) -> bool:
        return any(w.status == "CANCELLED" for w in self.workflows)

    def _ended_output(self) -> dict[str, Any]:
        """The output of the workflow that gave the run its stop reason ({} while in flight)."""
        for w in reversed(self.workflows):
            if w.status == "SUCCESS" and (w.output or {}).get("stop_reason"):
                return w.output or {}
            if w.status in ("PENDING", "ENQUEUED", "DELAYED"):
                return {}
        return {}

    def summary(self) -> dict[str, Any]:
        out = self.latest.output or {}
        return {
            **self.outcome,
            "run_id": self.run_id,
            "tenant": self.tenant,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "answer": out.get("answer"),
            "detail": out.get("detail"),
            "pending_proposals": out.get("pending_proposals", []),
            "version": self.version,
            "workflows": [
                {
                    "workflow_id": w.workflow_id,
                    "op": w.op,
                    "status": w.status,
                    "executor": w.executor,
                    "version": w.app_version,
                    "stop_reason": (w.output or {}).get("stop_reason"),
                    "replayed_steps": (w.output or {}).get("replayed_steps"),
                }
                for w in self.workflows
            ],
        }


def dt_ms(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms else None


def queued_view(row: IntakeRow) -> RunView:
    """A run still in the intake: queued, its one workflow not on DBOS's queue yet."""
    flow = WorkflowView(
        workflow_id=row.run_id,
        op="start",
        status="ENQUEUED",
        executor=None,
        created_at=row.submitted_at,
        updated_at=row.submitted_at,
        output=None,
        app_version=row.app_version,
    )
    return RunView(row.run_id, row.tenant, [flow])
