"""``tether worker --db URL --app agent.yaml|module:factory``: serve the durable run queue.

Runs until SIGINT/SIGTERM, then drains (the steps in flight get ``--grace`` seconds; a survivor
continues its runs from their last step). Events go to stderr, one JSON object a line
(``tether.durable._events``). Needs ``tether[durable]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

from tether.cli._commands._options import add_json
from tether.clisupport.output import NEEDS_DURABLE, emit_json, fail
from tether.clisupport.telemetry import add_otel_flags, apply_otel_flags
from tether.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.durable import Worker, WorkerConfig


def register(sub: Any) -> None:
    p = sub.add_parser("worker", help="serve the durable run queue (PostgreSQL + DBOS)")
    p.add_argument("--db", help="storage URL (postgresql://… or sqlite:///dir; default $TETHER_DB)")
    p.add_argument(
        "--app",
        action="append",
        help="an app it runs: an agent file, or module:factory returning (host, agent); repeatable"
        " (default $TETHER_APPS, comma-separated)",
    )
    p.add_argument("--concurrency", type=int, default=4, help="runs at once on this worker (default 4)")
    p.add_argument("--global-concurrency", type=int, help="runs at once on all workers")
    p.add_argument("--tenant-concurrency", type=int, help="runs at once per tenant, all workers")
    p.add_argument("--executor-id", help="stable id: a restart recovers its own runs")
    p.add_argument("--dead-after", type=float, default=15.0, help="seconds without heartbeat before recovery")
    p.add_argument("--poll", type=float, default=0.5, help="queue polling interval in seconds")
    p.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="on SIGTERM/SIGINT: seconds the steps in flight may take to finish (default 30)",
    )
    p.add_argument(
        "--init",
        action="store_true",
        help="create the database if it is missing, and its tables (as tether db init); else it must exist",
    )
    p.add_argument(
        "--no-auto-resume", action="store_true", help="do not resume runs whose approvals were decided"
    )
    p.add_argument(
        "--ready-file",
        help="a file that exists while the worker takes runs (an orchestrator's readiness probe):"
        " written once it serves, removed when it drains or stops; a stale one is removed at start",
    )
    add_json(p, "start-up failures as one JSON object on stdout (its last line); the ready line is JSON")
    add_otel_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    apply_otel_flags(args)
    url = args.db or os.environ.get("TETHER_DB")
    apps = tuple(args.app or filter(None, os.environ.get("TETHER_APPS", "").split(",")))
    if not url or not apps:
        need = "needs --db URL (or $TETHER_DB) and at least one --app agent.yaml|module:factory"
        return fail("tether worker", need, as_json=args.json, error="no_db" if not url else "no_app")
    try:
        from tether.durable import Worker, WorkerConfig, register_app
    except ImportError as err:
        return fail("tether worker", f"{NEEDS_DURABLE}: {err}", as_json=args.json)
    served = _serve_apps(apps, register_app, as_json=args.json)
    if isinstance(served, int):
        return served
    config = WorkerConfig(
        url,
        apps=served,
        executor_id=args.executor_id,
        concurrency=args.concurrency,
        global_concurrency=args.global_concurrency,
        tenant_concurrency=args.tenant_concurrency,
        poll_s=args.poll,
        dead_after_s=args.dead_after,
        auto_resume=not args.no_auto_resume,
        init=args.init,
        grace_s=args.grace,
    )
    return _work(Worker, config, as_json=args.json, ready_file=args.ready_file)


def _serve_apps(
    apps: tuple[str, ...], register_app: Callable[[str, Any], None], *, as_json: bool
) -> tuple[str, ...] | int:
    """The names the worker serves (agent files read and registered now), or the exit code."""
    from tether.agents._file import is_agent_file
    from tether.agents._record import AgentFileApp
    from tether.durable._worker import check_apps

    served = []
    try:
        for app in apps:
            if is_agent_file(app):
                file_app = AgentFileApp(app)  # read once, now: a broken file stops the worker here
                register_app(file_app.name, file_app)
                app = file_app.name
            served.append(app)
        check_apps(served)
    except ConfigError as err:
        return fail("tether worker", err, as_json=as_json, error="bad_app")
    return tuple(served)


def _work(
    worker_class: type[Worker], config: WorkerConfig, *, as_json: bool, ready_file: str | None = None
) -> int:
    """Start the worker, say it is ready, and serve until SIGINT/SIGTERM. ``ready_file`` exists
    only while the worker takes runs: never before its start (a stale one, left by a worker killed
    -9, goes first), nor once a stop was asked (during its start too) or its drain began."""
    import signal
    import threading

    from tether.durable._deploy import DeploymentUnavailable
    from tether.durable._events import configure_stderr
    from tether.durable._local import StartAbandoned

    stop = threading.Event()
    flags = [stop]  # and the worker's own, once built: a wait inside its start gives up on a stop

    def asked(*_: Any) -> None:
        for flag in flags:
            flag.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, asked)
    configure_stderr()  # one JSON object a line on stderr: run claimed, paused, finished, ...
    readiness = _Readiness(ready_file)
    try:
        readiness.prepare()
    except OSError as err:
        why = f"--ready-file {ready_file}: {err}"
        return fail("tether worker", why, as_json=as_json, error="bad_ready_file")

    built = worker_class(config)
    if isinstance(stopping := getattr(built, "stopping", None), threading.Event):
        flags.append(stopping)
        if stop.is_set():
            stopping.set()
    try:
        worker = built.start()
    except StartAbandoned as err:  # told to stop while it waited to start: nothing taken, nothing run
        from tether.durable._events import log_event

        log_event("worker_start_abandoned", executor=getattr(built, "executor_id", None), reason=str(err))
        return 0
    except DeploymentUnavailable as err:
        return fail("tether worker", err, as_json=as_json, code=err.exit)
    except ConfigError as err:  # a storage URL it cannot use
        return fail("tether worker", err, as_json=as_json)
    from tether.durable._metrics import configure_from_env

    try:
        meters = configure_from_env(worker.queue_depth)  # with OTEL_EXPORTER_OTLP_ENDPOINT set
    except ImportError as err:
        why = f"tether worker: metrics need the otel extra (pip install 'tether[otel]'): {err}"
        print(why, file=sys.stderr)
        meters = None
    # Set by the worker once a later release migrated the deployment past this one: it stops.
    outdated: threading.Event = getattr(worker, "outdated", None) or threading.Event()
    ready = {"worker": worker.executor_id, "apps": list(config.apps), "concurrency": config.concurrency}
    ready["ready"] = True
    try:
        if not stop.is_set():  # a stop asked while it started: it drains at once, never said ready
            readiness.mark(ready)
            emit_json(ready, exit=0)
        # Woken twice a second: a signal the kernel gives one of the worker's other threads only
        # flags it for the main thread, which an untimed wait would never notice (the worker
        # ignored SIGTERM for good).
        while not stop.wait(0.5) and not outdated.is_set():
            pass
    finally:
        readiness.clear_quietly()  # before the drain: an orchestrator sends no more work its way
        worker.stop()
        if meters is not None:
            meters.shutdown()
    _exit_past_stuck_threads(code=1 if outdated.is_set() else 0)  # the ordinary exit has a few seconds
    if outdated.is_set():
        why = "a later release migrated the deployment past this one (schema_too_new): run its workers"
        return fail("tether worker", why, as_json=as_json, error="schema_too_new")
    return 0


class _Readiness:
    """The ``--ready-file``: written whole (a temporary file renamed over it) or not at all."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def prepare(self) -> None:
        """Before the start: a stale file goes, and the folder is shown writable (``OSError``)."""
        if self.path is not None:
            self.clear()
            temporary = f"{self.path}.{os.getpid()}.tmp"  # never the file itself: a probe reads it
            open(temporary, "w").close()
            os.unlink(temporary)

    def mark(self, ready: dict[str, Any]) -> None:
        if self.path is None:
            return
        import json

        temporary = f"{self.path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(json.dumps({**ready, "pid": os.getpid()}, sort_keys=True) + "\n")
        os.replace(temporary, self.path)

    def clear(self) -> None:
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def clear_quietly(self) -> None:
        try:
            self.clear()
        except OSError as err:  # the stop goes on; the operator is told why the file stayed
            print(f"tether worker: --ready-file {self.path} not removed: {err}", file=sys.stderr)


def _exit_past_stuck_threads(wait_s: float = 5.0, *, code: int = 0) -> None:
    """After the drain, the process ends even where a thread it does not own will not: Python's
    exit waits on non-daemon threads and on executor pools (a DNS lookup or blocking call handed
    to the loop's executor, a step cut past its grace) for as long as they run. A watchdog gives
    the ordinary exit ``wait_s``, then names the threads left and ends the process."""
    import threading

    def force() -> None:
        import logging

        from tether.durable._events import log_event

        left = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
        log_event("worker_exit_forced", threads=[name for name in left if name != "MainThread"])
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)

    watchdog = threading.Timer(wait_s, force)
    watchdog.daemon = True  # never itself a reason to stay
    watchdog.start()
