"""Submitting, listing, resuming and cancelling durable runs from any machine (no worker code).

A run is the workflows sharing its run id: the start (workflow id = run id) and one per resume
(``<run>.resume.<digest>``, the digest naming the paused state, so two machines resuming the same
pause start one workflow). A new run waits in the intake (``_intake``) until a worker moves it
onto DBOS's queue; meanwhile it is listed, waited for and cancelled as a queued run.
"""

from __future__ import annotations

import functools
import hashlib
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tether.durable._cancel import CANCEL_REASON
from tether.durable._config import APP_VERSION, QUEUE, WORKFLOW, WORKFLOW_NAMES, context_to_json, dbos_config
from tether.durable._intake import (
    FILE,
    IntakeRow,
    bound_version,
    move_batch,
    new_run_id,
    pending,
    put,
    start_row,
    waiting_count,
)
from tether.durable._views import RunView, WorkflowView, dt_ms, queued_view, refused_resume
from tether.errors import ApprovalError
from tether.policy._trusted import TrustedContext
from tether.stores._url import parse_url

if TYPE_CHECKING:
    from tether.policy._decisions import DecisionAudit
    from tether.stores._url import Stores

__all__ = ["DurableClient", "RunView", "WorkflowView", "hold_run"]

_LIVE = ("ENQUEUED", "PENDING", "DELAYED")
VERSION_TTL_S = 1.0  # how long a client reuses the version it found for an app (new workers may come)
# Cancellation markers of paused runs go to a queue no worker serves: they never run.
CANCEL_QUEUE = "tether-cancelled"


async def _cancel_parked(app: str, url: str, run_id: str) -> list[str]:
    """Build the run's host with its app (as a worker does) and cancel its parked MCP tasks."""
    from tether.durable._runtime import Runtime, _build
    from tether.mcp._hosting import cancel_parked_tasks
    from tether.runners._scope import close_built

    host, agent = await _build(app, Runtime(url, apps=frozenset({app})), run_id)
    try:
        await host.start()
        return await cancel_parked_tasks(host, run_id)
    finally:
        await close_built(host, agent)


def hold_run(conn: Any, run_id: str) -> None:
    """Take the run's lock until ``conn``'s transaction ends (PostgreSQL): a cancel and a
    survivor handing a dead worker's workflow back to the queue exclude each other, so the
    hand-back never revives a workflow cancelled after it was listed."""
    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"tether-run:{run_id}",))


class DurableClient:
    """Talks to the deployment at ``url`` (``postgresql://…`` or ``sqlite:///dir``)."""

    def __init__(self, url: str, *, stores: Stores | None = None, retry: bool | None = None) -> None:
        """Raises ``DeploymentUnavailable`` unless the deployment exists (a client creates
        nothing); a client on open ``stores`` (a worker's, the console's) skips the check.
        ``retry``: wait out a lost database (default: only with ``stores``)."""
        from dbos import DBOSClient

        from tether.durable._deploy import open_deployment

        self.url = url
        # The connection that checked the deployment stays open for light reads (live versions).
        self._probe: Any = open_deployment(url)[1] if stores is None else None
        self._intake_db: Any = None  # a SQLite deployment's intake.db (PostgreSQL: ``db``)
        self._no_intake = False  # a deployment created before the intake: DBOS's queue only
        if stores is None:
            self._refuse_later()
        cfg = dbos_config(url, executor_id="client")
        self.dbos = DBOSClient(
            system_database_url=cfg["system_database_url"],
            dbos_system_schema=cfg["dbos_system_schema"],
            application_name=cfg["name"],
            retry_connection_errors=stores is not None if retry is None else retry,
            lazy=stores is None,  # just checked: it connects on first use
        )
        self._stores = stores
        self._own_stores = stores is None
        self._pg: Any = None  # the deployment's database alone, before (or without) its stores
        self._versions: dict[tuple[str, str | None], tuple[float, tuple[str, str | None]]] = {}
        self._sqlite_version: tuple[float, str] | None = None  # (when read, the deployment's)

    def _refuse_later(self) -> None:
        """Raise ``SchemaTooNew`` (nothing read or written) for a deployment whose intake (or
        workers' tables) a later release contracted: read and written here unmigrated."""
        from tether.sql._journal import check_driver
        from tether.sql._postgres import PgUrl
        from tether.sql._sqlite import connect

        if self._probe is not None:
            try:
                check_driver(self._probe, PgUrl.parse(self.url).redacted(), ("intake", "workers"))
            except BaseException:
                self._probe.close()
                raise
            return
        path = parse_url(self.url).path
        if path is not None and (path / FILE).exists():
            conn = connect(path / FILE)
            try:
                check_driver(conn, str(path / FILE), ("intake",))
            finally:
                conn.close()

    @property
    def stores(self) -> Stores:
        if self._stores is None:
            from tether.stores._url import open_stores

            self._stores = open_stores(self.url)
        return self._stores

    @property
    def db(self) -> Any:
        """The deployment's PostgreSQL ``Database`` (None for SQLite), without opening every store."""
        if self._stores is not None:
            return self._stores.db
        if self._pg is None and parse_url(self.url).backend == "postgresql":
            from tether.sql._database import Database

            self._pg = Database.postgresql(self.url, max_size=2, application_name="tether:client")
            # Read and written unmigrated (the intake, the workers' tables): a deployment a later
            # release contracted is refused first, as every store this client migrates is.
            self._pg.check_journal("intake", "workers")
        return self._pg

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
        if self._pg is not None:
            self._pg.close()
        if self._intake_db is not None:
            self._intake_db.close()
        self.dbos.destroy()
        if self._own_stores and self._stores is not None:
            self._stores.close()

    # -- submitting ----------------------------------------------------------------------------

    def submit(
        self,
        app: str,
        objective: str,
        context: TrustedContext,
        *,
        run_id: str | None = None,
        app_digest: str | None = None,
    ) -> str:
        """Enqueue a new run (into the intake); returns its run id. ``app_digest`` (an agent
        file's sha256): only a worker serving that version runs it."""
        run_id = run_id or new_run_id()
        version, app_digest = self._version_for(app, app_digest)
        row = start_row(
            run_id, app, objective, context_to_json(context), version=version, app_digest=app_digest
        )
        if not self._intake_run(put, [row]):
            self.enqueue_row(row)  # a deployment without the intake: onto DBOS's queue at once
        return run_id

    def enqueue_row(self, row: IntakeRow, queue: str = QUEUE) -> None:
        """Put an intake row's run on DBOS's ``queue`` (a no-op if its workflow exists)."""
        self._enqueue(
            row.run_id, row.request, tenant=row.tenant, op="start", version=row.app_version, queue=queue
        )

    def move_intake(self, run_id: str | None = None, queue: str = QUEUE) -> list[str]:
        """Move a batch of runs (or ``run_id`` alone) from the intake onto DBOS's ``queue``;
        returns their ids (crash-safe: ``_intake.move_batch``)."""
        moved = self._intake_run(move_batch, functools.partial(self.enqueue_row, queue=queue), run_id=run_id)
        return list(moved or [])

    def waiting(self) -> int:
        """How many runs wait in the intake (not yet on DBOS's queue)."""
        return int(self._intake_run(waiting_count) or 0)

    def _intake(self) -> Any:
        """The intake's ``Database`` (None: the deployment has none)."""
        if self._no_intake:
            return None
        loc = parse_url(self.url)
        if loc.backend == "postgresql":
            return self.db
        if self._intake_db is None:
            from tether.sql._database import Database

            assert loc.path is not None
            if not (loc.path / FILE).exists():
                self._no_intake = True
                return None
            self._intake_db = Database.sqlite(loc.path / FILE)
            self._intake_db.check_journal("intake")  # unmigrated here: refused if a later release's
        return self._intake_db

    def intake_db(self) -> Any:
        """A SQLite deployment's ``intake.db`` as a ``Database`` (None on PostgreSQL, whose
        intake is in ``db``, or where there is none)."""
        return self._intake() if parse_url(self.url).backend == "sqlite" else None

    def _intake_run(self, fn: Any, *args: Any, **kw: Any) -> Any:
        """``fn(conn, *args)`` in a transaction of the intake's database; None without an intake."""
        db = self._intake()
        if db is None:
            return None
        try:
            return db.run(fn, *args, **kw)
        except Exception as err:
            if type(err).__name__ != "UndefinedTable":  # psycopg's: a deployment before the intake
                raise
            self._no_intake = True
            return None

    def _version_for(self, app: str, digest: str | None) -> tuple[str, str | None]:
        """``_intake.bound_version``, cached for ``VERSION_TTL_S``."""
        key = (app, digest)
        cached = self._versions.get(key)
        if cached is not None and time.monotonic() - cached[0] < VERSION_TTL_S:
            return cached[1]  # a batch: one look-up per app and second, not one per run
        postgres = parse_url(self.url).backend == "postgresql"
        bound = bound_version(app, digest, self._live_workers, postgres=postgres)
        self._versions[key] = (time.monotonic(), bound)
        return bound

    def _live_workers(self) -> list[tuple[Any, Any]]:
        """``LIVE_WORKERS`` rows: on the probe connection while it works, else through ``db``."""
        from tether.durable._versions import LIVE_S, LIVE_WORKERS, live_workers

        if self._probe is not None:
            import psycopg

            try:
                return [(r[0], r[1]) for r in self._probe.execute(LIVE_WORKERS, (LIVE_S,))]
            except psycopg.Error:  # dropped since (a long-lived client): the pooled way
                self._probe.close()
                self._probe = None
        return self.db.run(live_workers)  # type: ignore[no-any-return]

    def deployment_version(self) -> str | None:
        """A SQLite deployment's one version (``_versions.deployment_version``, cached for
        ``VERSION_TTL_S``); None on PostgreSQL, where each run keeps the version it is bound to."""
        from tether.durable._versions import deployment_version

        if parse_url(self.url).backend == "postgresql":
            return None
        if self._sqlite_version is None or time.monotonic() - self._sqlite_version[0] >= VERSION_TTL_S:
            self._sqlite_version = (time.monotonic(), deployment_version(self.dbos))
        return self._sqlite_version[1]

    def _enqueue(
        self,
        workflow_id: str,
        request: dict[str, Any],
        *,
        tenant: str,
        op: str,
        version: str = APP_VERSION,
        queue: str = QUEUE,
        name: str = WORKFLOW,
    ) -> None:
        # SQLite: whatever the run was bound to (an earlier tether release's version), its one
        # worker serves the deployment's version.
        version = self.deployment_version() or version
        self.dbos.enqueue(
            {
                "workflow_name": name,
                "queue_name": queue,
                "workflow_id": workflow_id,
                "app_version": version,
                # Per-tenant limits: the queue is partitioned by tenant.
                "queue_partition_key": tenant,
                "attributes": {"run_id": request["run_id"], "op": op, "tenant": tenant},
            },
            request,
        )

    def resume(self, run_id: str) -> str:
        """Enqueue the continuation of a paused run (once per paused state); returns its
        workflow id. Raises ``ApprovalError`` (``unknown_run``, ``run_finished``, ``not_durable``,
        ``run_cancelled``)."""
        from tether.runs._checkpoint import checkpoint_tenant  # not on the submit path
        from tether.sql._database import blocking

        cp = blocking(self.stores.approvals.load_checkpoint, run_id)
        if cp is None:
            raise ApprovalError("unknown_run", f"no checkpoint for run {run_id!r}")
        if cp.status == "finished":
            raise ApprovalError("run_finished", f"run {run_id} already ended ({cp.stop_reason})")
        first = self.workflows(run_id)
        if not first:
            raise ApprovalError("not_durable", f"run {run_id} was not started on this deployment's queue")
        if any(w.status == "CANCELLED" for w in first):
            raise ApprovalError("run_cancelled", f"run {run_id} was cancelled")
        started = self._input(run_id)
        app = str((first[0].output or {}).get("app") or started.get("app") or cp.app)
        tenant = checkpoint_tenant(cp.state) or "default"
        digest = hashlib.sha256(f"{run_id}|{cp.updated_at.isoformat()}".encode()).hexdigest()[:16]
        workflow_id = f"{run_id}.resume.{digest}"
        request = {"op": "resume", "run_id": run_id, "app": app, "tenant": tenant}  # tenant: for the logs
        # The resume runs on the version the run was bound to, unless an operator moved it.
        version: str = first[0].app_version or APP_VERSION
        bound: str | None = started.get("app_digest")
        moved = self._moved(run_id)
        if moved is not None:
            version, bound = moved
        if bound:
            request["app_digest"] = bound
        # Under the name its start had: a worker of an earlier release knows only its own name.
        name = first[0].name if first[0].name in WORKFLOW_NAMES else WORKFLOW
        self._enqueue(workflow_id, request, tenant=tenant, op="resume", version=version, name=name)
        return workflow_id

    def _moved(self, run_id: str) -> tuple[str, str | None] | None:
        from tether.durable._versions import moved_to

        db = self.db
        return db.run(moved_to, run_id) if db is not None else None

    def move(self, run_id: str, to: str = "latest", *, by: str = "operator") -> dict[str, Any]:
        """Bind a paused run to another version (``latest``: the newest live worker serving its
        app) so its resume runs there; a resume stranded on a version no live worker serves is
        enqueued again on the target, and one a worker refused (``unreadable_checkpoint``,
        ``run_busy``, another release's reason) again, on a SQLite deployment's one version too.
        Raises ``ApprovalError`` (``unknown_run``, ``not_paused``, ``no_such_version``)."""
        from tether.durable._versions import record_move, serving

        view = self.run(run_id)
        if view is None:
            raise ApprovalError("unknown_run", f"no durable run {run_id!r}")
        app = str(self._input(run_id).get("app") or (view.workflows[0].output or {}).get("app"))
        last = view.workflows[-1]
        # A resume a worker refused (unable to read the checkpoint, another process resuming the
        # run): it ran nothing, so it goes again.
        refused = refused_resume(last)
        db = self.db
        if db is None:
            if not refused:
                raise ApprovalError("no_such_version", "a SQLite deployment has one version")
            # Its one version: the refused resume goes again, for the worker that reads it now
            # (a release rolled forward); nothing else would ever enqueue it again.
            self.dbos.delete_workflow(last.workflow_id)
            self.resume(run_id)
            return {
                "run_id": run_id,
                "from": last.app_version,
                "to": last.app_version,
                "app": app,
                "resume_moved": True,
            }
        live = serving(self._live_workers(), app, None)
        stranded = view.status == "queued" and last.op == "resume" and last.status == "ENQUEUED"
        if stranded and any(v == last.app_version for v, _ in live):
            stranded = False  # a live worker of its version will take it
        stranded = stranded or refused
        if view.status != "paused" and not stranded:
            raise ApprovalError("not_paused", f"run {run_id} is {view.status}: only a paused run moves")
        target = live[0] if to == "latest" and live else next((v for v in live if v[0] == to), None)
        if target is None:
            known = ", ".join(sorted({v for v, _ in live})) or "none"
            raise ApprovalError("no_such_version", f"no live worker of {to!r} serves {app} (live: {known})")
        before = self._moved(run_id) or (view.workflows[0].app_version, None)
        db.run(record_move, run_id, target[0], target[1], by)
        if stranded:  # nothing started it: the same resume (same id), on the target's version
            self.dbos.delete_workflow(last.workflow_id)
            self.resume(run_id)
        return {"run_id": run_id, "from": before[0], "to": target[0], "app": app, "resume_moved": stranded}

    def _input(self, run_id: str) -> dict[str, Any]:
        found = self.dbos.list_workflows(workflow_ids=[run_id], load_input=True, load_output=False)
        if not found or found[0].input is None:
            return {}
        inputs: Any = found[0].input
        args = inputs.get("args") if isinstance(inputs, dict) else getattr(inputs, "args", ())
        return dict(args[0]) if args else {}

    def cancel(
        self,
        run_id: str,
        *,
        by: str = "operator",
        actor: str = "",
        audit: DecisionAudit | None = None,
        reason: str = CANCEL_REASON,
    ) -> dict[str, Any]:
        """Cancel a queued, running or paused run (idempotent): its live workflows are cancelled
        (a running one stops at its next step), a stopped one gets a cancelled marker workflow,
        its checkpoint ends ``cancelled``, its undecided or unexecuted proposals are invalidated
        and its questions closed, each a decision of ``by``'s audited in ``audit`` as ``actor``
        (default ``operator:<by>``), as is the cancel (``close_decisions``). Raises
        ``ApprovalError`` (``unknown_run``, ``run_finished``)."""
        from tether.durable._cancel import close_decisions
        from tether.sql._database import blocking

        # Still in the intake: onto the queue no worker serves, then cancelled as any queued run.
        self.move_intake(run_id, queue=CANCEL_QUEUE)
        flows = self.workflows(run_id)
        if not flows:
            raise ApprovalError("unknown_run", f"no durable run {run_id!r}")
        live = [w.workflow_id for w in flows if w.status in _LIVE]
        if live:
            if self.db is not None:
                self.db.run(self._cancel_held, run_id, live)
            else:
                self._cancel_held(None, run_id, live)
            # One may have ended (paused, or finished) in the instant before the cancel reached it.
            flows = self.workflows(run_id)
        view = RunView(run_id, None, flows)
        store = self.stores.approvals
        cp = blocking(store.load_checkpoint, run_id)
        resumable = cp is not None and cp.status != "finished"
        if view.status in ("finished", "failed") and not resumable:
            why = view.stop_reason or view.status
            raise ApprovalError("run_finished", f"run {run_id} already ended ({why}): nothing to cancel")
        marker = None
        if view.status != "cancelled":
            # A workflow that never runs records the cancellation where every machine reads it.
            marker = f"{run_id}.cancel"
            request = {"op": "cancel", "run_id": run_id, "app": ""}
            self._enqueue(
                marker, request, tenant=self._tenant(run_id) or "default", op="cancel", queue=CANCEL_QUEUE
            )
            self.dbos.cancel_workflow(marker)
        if cp is not None and resumable:
            now = datetime.now(UTC)
            blocking(
                store.save_checkpoint,
                run_id,
                app=cp.app,
                state=cp.state,
                status="finished",
                stop_reason="cancelled",
                now=now,
            )
        closed = blocking(
            close_decisions,
            self.stores,
            run_id,
            by=by,
            actor=actor or f"operator:{by}",
            audit=audit,
            tenant=self._tenant(run_id) or "",
            reason=reason,
        )
        app = str(self._input(run_id).get("app") or (cp.app if cp is not None else "") or "")
        return {"workflows": live + ([marker] if marker else []), **closed, **self._cancel_tasks(run_id, app)}

    def _cancel_held(self, conn: Any, run_id: str, workflow_ids: list[str]) -> None:
        if conn is not None:
            hold_run(conn, run_id)
        for wid in workflow_ids:
            self.dbos.cancel_workflow(wid)

    def _cancel_tasks(self, run_id: str, app: str) -> dict[str, list[str]]:
        """Cancel the MCP tasks the run left running (``long_tasks: pause``) through a host its
        app builds; one that could not be is listed under ``tasks_not_cancelled`` with why."""
        from tether.sql._database import blocking

        pauses = self.stores.pauses
        parked = [q for q in blocking(pauses.for_run, run_id) if str(q.status) == "task"] if pauses else []
        if not parked:
            return {"tasks_cancelled": [], "tasks_not_cancelled": []}
        try:
            cancelled = blocking(_cancel_parked, app, self.url, run_id)
        except Exception as err:  # the app cannot be built here: say so, the cancel itself stands
            why = f"{type(err).__name__}: {err}"
            return {"tasks_cancelled": [], "tasks_not_cancelled": [f"{q.task_id}: {why}" for q in parked]}
        left = [f"{q.task_id}: its server could not be reached" for q in parked if q.task_id not in cancelled]
        return {"tasks_cancelled": cancelled, "tasks_not_cancelled": left}

    # -- reading -------------------------------------------------------------------------------

    def workflows(self, run_id: str) -> list[WorkflowView]:
        found = self._list_runs({"run_id": run_id}, load_output=True)
        return sorted((self._view(w) for w in found), key=WorkflowView.order)

    def _list_runs(self, attributes: dict[str, str] | None, **kw: Any) -> list[Any]:
        """The run workflows with ``attributes`` (filtered here on SQLite, where DBOS cannot)."""
        if not attributes or parse_url(self.url).backend == "postgresql":
            return self.dbos.list_workflows(
                name=list(WORKFLOW_NAMES), attributes=attributes, load_input=False, **kw
            )
        found = self.dbos.list_workflows(name=list(WORKFLOW_NAMES), load_input=False, **kw)
        return [w for w in found if attributes.items() <= (w.attributes or {}).items()]

    @staticmethod
    def _view(w: Any) -> WorkflowView:
        attrs = w.attributes or {}
        output = w.output if isinstance(w.output, dict) else None
        return WorkflowView(
            workflow_id=w.workflow_id,
            op=str(attrs.get("op", "start")),
            status=str(w.status),
            executor=w.executor_id,
            created_at=dt_ms(w.created_at),
            updated_at=dt_ms(w.updated_at),
            output=output,
            error=str(w.error) if w.error is not None else None,
            app_version=getattr(w, "app_version", None),
            name=getattr(w, "name", None),
        )

    def run(self, run_id: str) -> RunView | None:
        # The intake first: a mover commits the enqueue before the delete, so a run gone from
        # the intake is on DBOS's queue by now (the other order could miss one moved between).
        waiting = self._intake_run(pending, run_id)
        flows = self.workflows(run_id)
        if not flows:
            return queued_view(waiting[0]) if waiting else None
        tenant = next((t for w in flows if (t := (w.output or {}).get("tenant"))), None)
        return RunView(run_id, tenant or self._tenant(run_id), flows)

    def _tenant(self, run_id: str) -> str | None:
        found = self.dbos.list_workflows(workflow_ids=[run_id], load_input=False, load_output=False)
        return (found[0].attributes or {}).get("tenant") if found else None

    def runs(
        self,
        *,
        limit: int = 100,
        status: str | None = None,
        tenant: str | None = None,
        older_than_s: float | None = None,
        version: str | None = None,
    ) -> list[RunView]:
        """The most recent runs (by their first workflow), newest first, filtered by ``status``,
        ``tenant``, ``version`` and age (``older_than_s``) when given."""
        waiting = self._intake_run(pending, None, tenant) or []  # first, as in ``run``
        found = self._list_runs({"tenant": tenant} if tenant else None, load_output=True, sort_desc=True)
        by_run: dict[str, list[WorkflowView]] = {}
        tenants: dict[str, str | None] = {}
        for w in found:
            rid = str((w.attributes or {}).get("run_id") or w.workflow_id)
            by_run.setdefault(rid, []).append(self._view(w))
            tenants.setdefault(rid, (w.attributes or {}).get("tenant"))
        views = [
            RunView(rid, tenants[rid], sorted(flows, key=WorkflowView.order)) for rid, flows in by_run.items()
        ]
        # Runs not on DBOS's queue yet (one a mover just enqueued is listed once, from there).
        views += [queued_view(r) for r in waiting if r.run_id not in by_run]
        views.sort(key=lambda v: v.workflows[0].order(), reverse=True)
        if status:
            views = [v for v in views if v.status == status]
        if version:
            views = [v for v in views if v.version == version]
        if older_than_s is not None:
            cut = datetime.now(UTC).timestamp() - older_than_s
            views = [v for v in views if v.workflows[0].order()[0].timestamp() <= cut]
        return views[:limit]

    def wait(self, run_id: str, *, timeout_s: float = 60.0, poll_s: float = 0.2) -> RunView:
        """Until the run's latest workflow has ended (or paused). Raises ``TimeoutError``."""
        deadline = time.monotonic() + timeout_s
        while True:
            view = self.run(run_id)
            if view is not None and view.status not in ("queued", "running"):
                return view
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"run {run_id} still {view.status if view else 'unknown'} after {timeout_s}s"
                )
            time.sleep(poll_s)
