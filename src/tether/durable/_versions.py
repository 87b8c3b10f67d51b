"""Which code a run is bound to: DBOS application versions for rolling upgrades.

A worker's version is tether's plus a digest of the apps it serves (an agent file's digest covers
the file and what it depends on; a ``module:function`` app's, its module's source). DBOS dequeues
and recovers a workflow only on an executor of its version, so a run never runs on another's code.
``tether submit`` binds a new run to the newest live worker version serving its app; a resume
keeps the run's version unless an operator moves it (``tether runs move``, recorded in
``tether_run_versions``). SQLite deployments (one process) use one version for everything: the
deployment's (``deployment_version``), kept when tether itself is upgraded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Connection


def version_of(apps: Mapping[str, str | None]) -> str:
    """The DBOS application version of a worker serving ``apps`` (name -> digest)."""
    from tether.durable._config import APP_VERSION

    body = json.dumps(sorted((name, digest or "") for name, digest in apps.items()))
    return f"{APP_VERSION}+{hashlib.sha256(body.encode()).hexdigest()[:12]}"


def deployment_version(dbos: Any) -> str:
    """The one DBOS application version of a SQLite deployment (``dbos``: a ``DBOSClient`` on
    its system database): the latest its workers launched with, as DBOS registers it, else this
    release's ``APP_VERSION``. Not tether's own version: a release installed over the last keeps
    the deployment's, so what was queued, in flight (a restarted worker recovers its own runs
    only on their version) or paused before the upgrade goes on under the new release; under
    ``tether-<new version>`` it waited for a worker of the old one for good."""
    from dbos import error

    from tether.durable._config import APP_VERSION

    try:
        return str(dbos.get_latest_application_version()["version_name"])
    except error.DBOSException:  # no worker launched on it yet
        return APP_VERSION


def deployment_version_at(url: str) -> str:
    """``deployment_version`` of the SQLite deployment at ``url`` (a worker, before it launches)."""
    from dbos import DBOSClient

    from tether.durable._config import dbos_config

    cfg = dbos_config(url, executor_id="client")
    client = DBOSClient(
        system_database_url=cfg["system_database_url"],
        dbos_system_schema=cfg["dbos_system_schema"],
        application_name=cfg["name"],
    )
    try:
        return deployment_version(client)
    finally:
        client.destroy()


def app_digest(app: str, factory: Any = None) -> str | None:
    """An app's digest: the factory's ``digest`` (an agent file's), else its module's source."""
    digest = getattr(factory, "digest", None)
    if digest:
        return str(digest)
    module_name, _, _ = app.partition(":")
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if not origin or not Path(origin).is_file():
        return None
    return hashlib.sha256(Path(origin).read_bytes()).hexdigest()


LIVE_S = 30.0  # a worker whose heartbeat is older does not count for new submissions


# (version, apps) of the live workers, newest first (one %s: LIVE_S); a recovered worker is not
# live until it beats again. Plain SQL: a client runs it on its probe connection.
LIVE_WORKERS = (
    "SELECT app_version, apps FROM tether_workers WHERE app_version IS NOT NULL AND recovered_at IS NULL"
    " AND heartbeat_at >= now() - make_interval(secs => %s) ORDER BY started_at DESC"
)


def live_workers(conn: Connection) -> list[tuple[Any, Any]]:
    return [(r[0], r[1]) for r in conn.exec_driver_sql(LIVE_WORKERS, (LIVE_S,))]


# A draining worker's ``apps``: it takes no new run, so no submission is bound to its version for
# it and no run is moved to it (``serving`` finds no app there; ``tether runs workers`` says
# ``draining``). It beats on, so its runs in flight are not recovered under it; a start (of any
# release, under that executor id) records its apps again.
DRAINING_APPS = "{}"


def draining(conn: Connection, executor_id: str) -> None:
    conn.exec_driver_sql(
        "UPDATE tether_workers SET apps = %s WHERE executor_id = %s", (DRAINING_APPS, executor_id)
    )


def serving(workers: Iterable[tuple[Any, Any]], app: str, digest: str | None) -> list[tuple[str, str | None]]:
    """(version, the app's digest there) of the ``LIVE_WORKERS`` rows serving ``app`` (with
    ``digest`` when given)."""
    found = []
    for version, apps in workers:
        served = json.loads(apps or "{}")
        if app in served and (digest is None or served[app] == digest):
            found.append((str(version), served[app]))
    return found


def moved_to(conn: Connection, run_id: str) -> tuple[str, str | None] | None:
    row = conn.exec_driver_sql(
        "SELECT app_version, app_digest FROM tether_run_versions WHERE run_id = %s", (run_id,)
    ).first()
    return (str(row[0]), row[1]) if row else None


def record_move(conn: Connection, run_id: str, version: str, digest: str | None, by: str) -> None:
    conn.exec_driver_sql(
        "INSERT INTO tether_run_versions (run_id, app_version, app_digest, moved_by) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (run_id) DO UPDATE SET app_version = excluded.app_version,"
        " app_digest = excluded.app_digest, moved_by = excluded.moved_by, moved_at = now()",
        (run_id, version, digest, by),
    )
