"""``Worker``: one process serving the deployment's run queue (``tether worker``).

A worker takes only runs bound to its version (``_versions``). It launches DBOS (which first
recovers what this executor id left unfinished), registers the queue with its limits and keeps a
heartbeat. Its background thread beats; claims, atomically, executors whose heartbeat stopped
and hands their unfinished workflows back to the queue (each dead executor claimed by one
survivor, which holds the claim until all are back; DBOS's dequeue admits one runner per
workflow); and resumes paused runs whose decisions and answers came, with a workflow id derived
from the paused state, so several workers seeing one approval start one resume.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection

from tether.durable import _local as local
from tether.durable._client import DurableClient, hold_run
from tether.durable._config import APP_NAME
from tether.durable._events import log_event, quiet_cancellations
from tether.durable._intake import MOVE_BATCH
from tether.durable._intake import ensure as ensure_intake
from tether.durable._runtime import _APPS, APP_VERSION, QUEUE, Runtime, dbos_config, set_runtime
from tether.durable._steps import DRAIN
from tether.durable._versions import DRAINING_APPS, app_digest, deployment_version_at, draining, version_of
from tether.errors import ApprovalError, ConfigError
from tether.policy._ledger import _owner
from tether.runs._checkpoint import checkpoint_tenant
from tether.sql._database import Database, blocking
from tether.sql._journal import later_breaking
from tether.stores._url import Stores, open_stores

_ONE_PER_PROCESS = threading.Lock()  # held by the worker that runs DBOS in this process


def _beat(
    conn: Connection,
    executor_id: str,
    host: str,
    pid: int,
    started: bool,
    version: str | None = None,
    apps: str | None = None,
    owner: str | None = None,
) -> None:
    # A beat clears a recovery (a stalled worker declared dead is recoverable again); a start
    # also records the worker's version, apps and owner token (``owner_since``: this start's).
    restart = (
        ", started_at = now(), app_version = excluded.app_version, apps = excluded.apps,"
        " owner = excluded.owner, owner_since = now()"
        if started
        else ""
    )
    conn.exec_driver_sql(
        "INSERT INTO tether_workers"
        " (executor_id, host, pid, heartbeat_at, app_version, apps, owner, owner_since)"
        " VALUES (%s, %s, %s, now(), %s, %s, %s, now())"
        " ON CONFLICT (executor_id) DO UPDATE SET host = excluded.host, pid = excluded.pid,"
        f" heartbeat_at = now(), recovered_at = NULL, recovered_by = NULL{restart}",
        (executor_id, host, pid, version, apps, owner),
    )


class JournalMissing(ConfigError):
    """The deployment's journal of applied migrations (``_migrations``) is gone (a partial
    restore, a table dropped by hand): what a later release applied cannot be read. The worker
    beats on (it is alive) and says so once (``worker_error``), again if it goes after coming back."""

    reason = "journal_missing"


def _later_applied(conn: Connection) -> list[str]:
    """The migrations a later release applied that this one cannot work beside
    (``later_breaking``: a worker of this release must stop serving the deployment). Read in a
    transaction of its own, after the beat: a journal that cannot be read never stops a beat
    (a live worker declared dead, its runs recovered under it)."""
    found = conn.exec_driver_sql(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_migrations'"
        if conn.dialect.name == "sqlite"
        else "SELECT to_regclass('_migrations') IS NOT NULL"
    ).scalar()
    if not found:
        raise JournalMissing(
            "the deployment's journal of migrations (_migrations) is missing (a partial restore?):"
            " this worker still beats, but cannot tell whether a later release migrated the"
            " schema; restore the table from the backup the rest of the schema came from"
        )
    return later_breaking(conn.exec_driver_sql("SELECT name FROM _migrations").scalars())


def _leave_orphans(conn: Connection, executor_id: str, version: str) -> str | None:
    """Leave what this executor ran on another version to that version's survivors; returns
    that version (``None``: the same, or a first start)."""
    row = conn.exec_driver_sql(
        "SELECT app_version FROM tether_workers WHERE executor_id = %s", (executor_id,)
    ).first()
    if row is not None and row[0] is not None and row[0] != version:
        conn.exec_driver_sql(
            "INSERT INTO tether_orphans (executor_id, app_version) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (executor_id, row[0]),
        )
        return str(row[0])
    return None


def _claim_orphans(conn: Connection, version: str) -> list[str]:
    rows = conn.exec_driver_sql(
        "DELETE FROM tether_orphans WHERE app_version = %s RETURNING executor_id", (version,)
    )
    return [r[0] for r in rows]


def _stopped(conn: Connection, executor_id: str) -> None:
    # A clean stop: survivors recover what this executor leaves unfinished at once.
    conn.exec_driver_sql(
        "UPDATE tether_workers SET heartbeat_at = '-infinity' WHERE executor_id = %s", (executor_id,)
    )


def _claim_dead(conn: Connection, me: str, dead_after_s: float, version: str | None = None) -> list[str]:
    # Only executors of this worker's version: DBOS recovers a workflow only on its own version,
    # so a survivor of another version would claim the dead one's runs and run none of them.
    rows = conn.exec_driver_sql(
        "UPDATE tether_workers SET recovered_at = now(), recovered_by = %s"
        " WHERE executor_id <> %s AND recovered_at IS NULL AND app_version IS NOT DISTINCT FROM %s"
        " AND heartbeat_at < now() - make_interval(secs => %s) RETURNING executor_id",
        (me, me, version, dead_after_s),
    )
    return [r[0] for r in rows]


def _hand_back(conn: Connection, dbos: Any, executor: str, version: str) -> list[str]:
    """Put the workflows ``executor`` left ``PENDING`` (of ``version``) back in their queue, each
    under its run's lock (``hold_run``) and only if still ``PENDING`` then (a run cancelled or
    taken meanwhile is left alone). ``conn``'s transaction holds the executor's claim."""
    handed = []
    for w in local.left_pending(dbos, executor, version):
        hold_run(conn, str((w.attributes or {}).get("run_id") or w.workflow_id))
        still = dbos.list_workflows(
            workflow_ids=[w.workflow_id],
            status="PENDING",
            executor_id=executor,
            load_input=False,
            load_output=False,
        )
        if still:
            dbos.resume_workflow(w.workflow_id, queue_name=w.queue_name)
            handed.append(w.workflow_id)
    return handed


def _take_over(
    conn: Connection, dbos: Any, me: str, dead_after_s: float, version: str
) -> dict[str, list[str]]:
    """Claim the executors of ``version`` that died (or left runs of it behind on an upgrade)
    and hand their workflows back, in one transaction."""
    dead = _claim_dead(conn, me, dead_after_s, version) + _claim_orphans(conn, version)
    return {executor: _hand_back(conn, dbos, executor, version) for executor in dead}


def _workers(conn: Connection, dead_after_s: float = 15.0) -> list[dict[str, Any]]:
    """Every registered worker with its ``state`` (``alive``, ``draining``: beating, taking no new
    run, ``stopped``: a clean stop, ``dead``:
    no heartbeat for ``dead_after_s``) and ``silent_s`` (seconds since its last heartbeat)."""
    rows = conn.exec_driver_sql(
        "SELECT executor_id, host, pid, started_at,"
        " CASE WHEN heartbeat_at = '-infinity' THEN NULL ELSE heartbeat_at END,"  # a clean stop
        " recovered_at, recovered_by, app_version,"
        " CASE WHEN heartbeat_at = '-infinity' THEN 'stopped'"
        " WHEN heartbeat_at < now() - make_interval(secs => %s) THEN 'dead'"
        f" WHEN apps = '{DRAINING_APPS}' THEN 'draining' ELSE 'alive' END,"
        " CASE WHEN heartbeat_at = '-infinity' THEN NULL"
        " ELSE round(extract(epoch FROM now() - heartbeat_at)::numeric, 1)::float END"
        " FROM tether_workers ORDER BY executor_id",
        (dead_after_s,),
    )
    keys = (
        "executor_id",
        "host",
        "pid",
        "started_at",
        "heartbeat_at",
        "recovered_at",
        "recovered_by",
        "app_version",
        "state",
        "silent_s",
    )
    return [dict(zip(keys, r, strict=True)) for r in rows]


ERRORS_KEPT = 256  # a worker's latest background failures kept in ``Worker.errors`` (all are logged)


@dataclass
class WorkerConfig:
    """``concurrency``: runs at once on this worker; ``global_concurrency``: on all workers;
    ``tenant_concurrency``: per tenant, on all workers. The last two are the queue's and are
    shared: the last worker to start sets them."""

    url: str
    apps: tuple[str, ...] = ()
    executor_id: str | None = None
    concurrency: int = 4
    global_concurrency: int | None = None
    tenant_concurrency: int | None = None
    poll_s: float = 0.5
    heartbeat_s: float = 1.0
    dead_after_s: float = 15.0
    auto_resume: bool = True
    grace_s: float = 30.0  # on stop: how long the steps in flight may take to finish
    init: bool = False  # create the database if missing (tether worker --init); else it must exist
    log_level: str = "WARNING"


class Worker:
    """``start()`` (or a context manager); ``stop()`` drains and leaves unfinished runs to a
    survivor of its version or to this executor id's next start."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.executor_id = config.executor_id or f"{socket.gethostname()}-{os.getpid()}"
        self.stores: Stores | None = None
        self.client: DurableClient | None = None
        self._stop = threading.Event()
        self.stopping = threading.Event()  # set by whoever runs it once a stop is asked (a signal)
        self._thread: threading.Thread | None = None
        self._mover: threading.Thread | None = None
        self._pg: Database | None = None
        self._alive: int | None = None  # SQLite: this worker's lock file (_local), held while it runs
        self._left: str | None = None  # the version this executor ran before, if another
        self.errors: list[str] = []
        self._journal_gone = False  # said once while the migrations journal cannot be read
        self._seen: set[tuple[str, str]] = set()  # (run, paused at) already resumed or not durable
        self._launched = threading.Event()  # recovery and resumes wait for DBOS
        self._draining = False
        self.version = APP_VERSION  # with PostgreSQL: tether's and the served apps' (versions.py)
        self.digests: dict[str, str | None] = {}
        self.drained: dict[str, int] = {}
        self._holds_process = False
        # Set once a later release applied a migration this one cannot work beside (PostgreSQL: at a
        # heartbeat; SQLite: at the same duty, from each store file's journal).
        self.outdated = threading.Event()

    def start(self) -> Worker:
        """Raises ``RuntimeError`` if a worker already runs in this process (DBOS is one instance
        per process)."""
        if not _ONE_PER_PROCESS.acquire(blocking=False):
            raise RuntimeError("a worker already runs in this process; stop it first")
        self._holds_process = True
        try:
            return self._start()
        except BaseException:
            self._stop.set()  # the heartbeat thread, if it started
            self._release_process()
            raise

    def _release_process(self) -> None:
        if self._holds_process:
            self._holds_process = False
            _ONE_PER_PROCESS.release()

    def _start(self) -> Worker:
        from dbos import DBOS

        from tether.durable._deploy import check_deployment, init_deployment

        c = self.config
        check_apps(c.apps)
        quiet_cancellations()  # a run cancelled in flight: one event line, not DBOS's traceback
        DRAIN.reset()
        # Only --init creates the deployment (a mistyped schema= would otherwise come into being).
        init_deployment(c.url, stopping=self.stopping) if c.init else check_deployment(c.url)
        self.stores = open_stores(
            c.url, application_name=f"tether:{self.executor_id}", pool_size=max(2, c.concurrency + 1)
        )
        self.digests = {app: app_digest(app, _APPS.get(app)) for app in c.apps}
        ensure_intake(c.url, self.stores.db)  # a deployment made before the intake gets one
        if self.stores.db is not None:
            self.version = version_of(self.digests)
            self._pg = self.stores.db
            self._pg.migrate("workers")
            # A ledger entry owned by a worker whose heartbeat stopped is reconciled at once.
            self.stores.approvals.worker_dead_after_s = c.dead_after_s
            # Alive before DBOS recovers this executor's runs: no survivor may take them too.
            apps = json.dumps(self.digests, sort_keys=True)
            self._left = self._pg.run(_leave_orphans, self.executor_id, self.version)
            me = (socket.gethostname(), os.getpid(), True, self.version, apps, _owner())
            self._pg.run(_beat, self.executor_id, *me)
        # Beat from now on (DBOS's launch takes seconds): a slow start is not a death.
        self._thread = threading.Thread(target=self._background, name="tether-worker", daemon=True)
        self._thread.start()
        set_runtime(Runtime(c.url, frozenset(c.apps), self.executor_id, self.stores))
        pool = max(8, 2 * c.concurrency + 4)
        if self._pg is None:  # SQLite: the deployment's one version, kept across tether's releases
            self.version = deployment_version_at(c.url)
            # Before DBOS recovers; a stop asked meanwhile ends the wait (``StartAbandoned``).
            self._alive = local.hold(self.stores.location.path, self.executor_id, self.stopping)
        cfg = dbos_config(c.url, executor_id=self.executor_id, log_level=c.log_level, pool_size=pool)
        cfg["application_version"] = self.version
        for attempt in range(3):
            DBOS(config=cfg)  # type: ignore[arg-type]
            try:
                DBOS.launch()
                break
            except Exception as err:  # a connection cut while launching: start again, cleanly
                DBOS.destroy(workflow_completion_timeout_sec=0)
                if attempt == 2 or "OperationalError" not in type(err).__name__ + repr(err):
                    raise
                self.errors.append(f"launch: {type(err).__name__}: {err}")
        partition = c.tenant_concurrency or c.global_concurrency or 100_000
        DBOS.register_queue(
            QUEUE,
            worker_concurrency=c.concurrency,
            global_concurrency=c.global_concurrency,
            partition_concurrency=partition,
            polling_interval_sec=c.poll_s,
            on_conflict="always_update",
        )
        self.client = DurableClient(c.url, stores=self.stores)
        self._launched.set()
        self._mover = threading.Thread(target=self._move_intake, name="tether-intake", daemon=True)
        self._mover.start()
        log_event(
            "worker_started",
            executor=self.executor_id,
            apps=list(c.apps),
            version=self.version,
            concurrency=c.concurrency,
        )
        self._tell_left()
        return self

    def _tell_left(self) -> None:
        """Name the runs this executor left in flight under the version it ran before (DBOS
        recovers a run only on its own version): they wait for a worker of that version."""
        if self._left is None or self.client is None:
            return
        found = self.client.dbos.list_workflows(
            status="PENDING",
            executor_id=self.executor_id,
            app_version=self._left,
            application_name=APP_NAME,
            load_input=False,
            load_output=False,
        )
        if found:
            log_event(
                "runs_left",
                executor=self.executor_id,
                version=self._left,
                runs=[w.workflow_id for w in found],
                hint=f"they continue only on a worker of {self._left}: a live one takes them; if none is"
                f" left, start one (its release and agent file); tether runs list --version {self._left}",
            )

    def stop(self, grace_s: float | None = None) -> None:
        """Drain, then stop: no new step starts, the steps in flight get ``grace_s`` (default
        ``config.grace_s``) to finish, then the runs are let go to be continued from their last
        recorded step elsewhere. A step still running then is cut (its effect is reconciled)."""
        from dbos import DBOS

        grace = self.config.grace_s if grace_s is None else grace_s
        started = time.monotonic()
        if self._launched.is_set():
            self._drain(grace)
        self._stop.set()
        took = {"drain_s": time.monotonic() - started}
        for thread in (self._thread, self._mover):
            if thread is not None:
                thread.join(10)
        took["duties_s"] = time.monotonic() - started - sum(took.values())
        DBOS.destroy(workflow_completion_timeout_sec=0)
        took["dbos_s"] = time.monotonic() - started - sum(took.values())
        set_runtime(None)
        self._release_process()
        local.release(self._alive)  # a clean stop: a survivor takes what is left at once
        self._alive = None
        if self._pg is not None:
            try:
                self._pg.run(_stopped, self.executor_id)
            except Exception as err:  # the database is gone: survivors will see the heartbeat age
                self.errors.append(f"stop: {err}")
        if self.client is not None:
            self.client.close()
        if self.stores is not None:
            try:
                self.stores.close()
            except Exception as err:  # e.g. a SQLite store opened by another thread: the OS reclaims it
                self.errors.append(f"close: {type(err).__name__}: {err}")
        took["close_s"] = time.monotonic() - started - sum(took.values())
        # How long each part of the stop took: a slow exit says where it waited.
        log_event("worker_exited", executor=self.executor_id, **{k: round(v, 2) for k, v in took.items()})

    def _drain(self, grace_s: float) -> None:
        self._draining = True  # the background thread only beats from now on
        DRAIN.begin()
        if self._pg is not None:  # no new run is bound to this version for it (a rollback's newest)
            try:
                self._pg.run(draining, self.executor_id)
            except Exception as err:  # the database is gone: submissions cannot come either
                self.errors.append(f"drain: {err}")
        log_event("worker_draining", executor=self.executor_id, in_flight=DRAIN.in_flight, grace_s=grace_s)
        deadline = time.monotonic() + grace_s
        while DRAIN.in_flight > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.drained = {"cut_steps": DRAIN.in_flight, "parked_runs": DRAIN.parked}
        log_event("worker_stopped", executor=self.executor_id, **self.drained)

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def queue_depth(self) -> int:
        """Runs waiting in the queue and the intake (every version): the queue depth gauge."""
        if self.client is None:
            return 0
        found = self.client.dbos.list_workflows(
            status="ENQUEUED", queue_name=QUEUE, load_input=False, load_output=False
        )
        return len(found) + self.client.waiting()

    # -- the background duties --------------------------------------------------------------

    def _background(self) -> None:
        c = self.config
        while not self._stop.wait(c.heartbeat_s):
            duties = [self._heartbeat]
            if self._launched.is_set() and not self._draining:
                duties += [self._recover_dead, self._resume_decided]
            for duty in duties:
                try:
                    duty()
                except Exception as err:  # a lost connection: the next round tries again
                    self._error(duty.__name__.strip("_"), err)

    def _move_intake(self) -> None:
        """Move submitted runs from the intake onto DBOS's queue, every ``poll_s`` (and at once
        again while a full batch came): any worker does it for every version, as DBOS's queue
        gives each run only to a worker of its version."""
        while not self._stop.wait(self.config.poll_s):
            if self._draining or self.client is None:
                continue
            try:
                while len(self.client.move_intake()) >= MOVE_BATCH and not self._stop.is_set():
                    pass
            except Exception as err:  # a lost connection: the next round tries again
                self._error("move_intake", err)

    def _error(self, duty: str, err: BaseException, **fields: Any) -> None:
        """A background duty failed: kept in ``errors`` and logged with its cause."""
        cause = f"{type(err).__name__}: {err}"
        self.errors.append(f"{duty}{' ' + str(fields['run_id']) if 'run_id' in fields else ''}: {cause}")
        del self.errors[:-ERRORS_KEPT]  # a duty failing each round for days: the latest kept, bounded
        log_event("worker_error", executor=self.executor_id, duty=duty, cause=cause, **fields)

    def _journals(self) -> list[Database]:
        """The databases whose journals tell this worker to stop: PostgreSQL's; on SQLite each
        store file it works on (a later release's ``db init`` contracts them under it too)."""
        if self._pg is not None:
            return [self._pg]
        s = self.stores
        dbs = [] if s is None else [getattr(x, "db", None) for x in (s.approvals, s.pins, s.pauses, s.memory)]
        dbs.append(self.client.intake_db() if self.client is not None else None)
        return [db for db in dbs if isinstance(db, Database)]

    def _heartbeat(self) -> None:
        if self._pg is not None:
            self._pg.run(_beat, self.executor_id, socket.gethostname(), os.getpid(), False)
        try:
            later = sorted({name for db in self._journals() for name in db.snapshot(_later_applied)})
        except JournalMissing:
            if self._journal_gone:
                return  # said when it went (worker_error), not on every beat
            self._journal_gone = True
            raise
        self._journal_gone = False
        if later and not self.outdated.is_set():
            # A later release contracted the schema under this running worker: it stops taking
            # runs (what serves it, ``tether worker``, drains it and exits 1), as its start would.
            self.outdated.set()
            log_event(
                "schema_too_new",
                executor=self.executor_id,
                migrations=later,
                hint="a later release migrated the deployment past this one: run workers of that release",
            )

    def _recover_dead(self) -> None:
        if self.client is None or self.stores is None:
            return
        c = self.config
        if self._pg is None:  # SQLite: a worker is alive while it holds its lock file (_local)
            folder = self.stores.location.path
            taken = local.take_over(folder, self.executor_id, self.client.dbos, self.version)
        else:
            taken = self._pg.run(_take_over, self.client.dbos, self.executor_id, c.dead_after_s, self.version)
        if taken:
            requeued = [wid for wids in taken.values() for wid in wids]
            log_event("executors_recovered", executor=self.executor_id, dead=list(taken), requeued=requeued)

    def _resume_decided(self) -> None:
        """Resume each durable run paused for approvals that have all been decided since."""
        if not self.config.auto_resume or self.client is None or self.stores is None:
            return
        store = self.stores.approvals
        listed = blocking(store.list_checkpoints, status="paused")  # filtered in SQL
        for cp in listed:
            seen = (cp.run_id, cp.updated_at.isoformat())
            if cp.status != "paused" or seen in self._seen:
                continue
            pauses = blocking(self.stores.pauses.for_run, cp.run_id) if self.stores.pauses is not None else []
            if not due_for_resume(cp, blocking(store.list_proposals, run_id=cp.run_id), pauses):
                continue
            try:
                workflow_id = self.client.resume(cp.run_id)
                log_event(
                    "resume_enqueued",
                    executor=self.executor_id,
                    run_id=cp.run_id,
                    workflow_id=workflow_id,
                    tenant=checkpoint_tenant(cp.state),
                )
            except ApprovalError as err:  # not a durable run (an embedded one on the same store), or ended
                if err.reason == "run_cancelled":
                    # Cancelled while a step was writing its pause: what it waited for is void.
                    self.client.cancel(cp.run_id, by=f"worker:{self.executor_id}")
                elif err.reason not in ("not_durable", "run_finished"):
                    self._error("resume", err, run_id=cp.run_id)
            except Exception as err:  # a lost connection: the next round tries again
                self._error("resume", err, run_id=cp.run_id)
                continue
            self._seen.add(seen)  # enqueued (once per paused state, whoever asks) or never resumable


def check_apps(apps: Sequence[str]) -> None:
    """Raises ``ConfigError`` naming the first app that is neither registered in this process
    nor an importable ``module:function``: a typo stops the worker before it serves."""
    from tether.core._imports import import_ref  # the one reader of import paths, with its hints

    for app in apps:
        if app in _APPS:
            continue
        module_name, _, function = app.partition(":")
        if not (function.isidentifier() and all(part.isidentifier() for part in module_name.split("."))):
            raise ConfigError(
                f"app {app!r} is neither module:function nor registered; serve an agent file with"
                " register_app(path, tether.agents._record.AgentFileApp(path))"
                " (`tether worker --app FILE` does it)"
            )
        if not callable(import_ref(app, f"app {app}")):
            raise ConfigError(f"app {app}: not a function")


def due_for_resume(
    cp: Any, proposals: Sequence[Any], pauses: Sequence[Any] = (), *, now: datetime | None = None
) -> bool:
    """Whether a paused run has what it waited for, so a resume can go on.

    Never while a question (MCP elicitation) is unanswered, nor before a parked task's next
    check (``check_after``). A pause naming its proposals (the checkpoint's ``pending``) is due
    once none is pending, however early a decision came; an answered question or a parked task
    makes it due too. A pause that waits for neither (an effect a person must resolve) is due when
    every proposal of the run is decided and one was decided after the pause: on PostgreSQL both
    instants are the database's clock (``_db_now``), never two machines' that may disagree."""
    if any(str(p.status) == "pending" for p in pauses):
        return False
    tasks = [p for p in pauses if str(p.status) == "task"]
    moment = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    if any(str((p.answer or {}).get("check_after") or "") > moment for p in tasks):
        return False
    by_id = {p.id: p for p in proposals}
    try:
        awaited = json.loads(cp.state).get("pending") or []
    except (ValueError, AttributeError):
        awaited = []
    if awaited:
        return all(pid in by_id and str(by_id[pid].status) != "pending" for pid in awaited)
    if tasks or any(str(p.status) == "answered" for p in pauses):
        return True
    if not proposals or any(str(p.status) == "pending" for p in proposals):
        return False
    return any(p.decided_at is not None and p.decided_at >= cp.updated_at for p in proposals)
