"""Which code a run is bound to: DBOS application versions for rolling upgrades.

A worker's version is tether's version plus a digest of the apps it serves, each by its own
digest (an agent file's covers the file and every file it depends on; a ``module:function``
app's, its module's source). DBOS dequeues a workflow only on an executor of the version it was
enqueued with and recovers a dead executor's runs only on one of the same version, so a run
submitted to one version never runs on another's code.

``tether submit`` binds a new run to the newest live worker version that serves its app (with
the same digest, for an agent file); with none live, to the version a worker serving that app
alone will have. A resume keeps the run's version, so a paused run resumes on the code it
paused on, unless an operator moves it (``tether runs move RUN --to latest|VERSION``; paused
runs only, recorded in ``tether_run_versions``). Workers register their version and apps in
``tether_workers`` (``tether runs workers`` shows them). SQLite deployments (one process) use
one version for everything.
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

__all__ = ["app_digest", "version_of"]


def version_of(apps: Mapping[str, str | None]) -> str:
    """The DBOS application version of a worker serving ``apps`` (name -> digest)."""
    from tether.durable._config import APP_VERSION

    body = json.dumps(sorted((name, digest or "") for name, digest in apps.items()))
    return f"{APP_VERSION}+{hashlib.sha256(body.encode()).hexdigest()[:12]}"


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


# (version, apps) of the live workers, newest first; one %s: LIVE_S. A worker a survivor declared
# dead (recovered) is not live until it beats again. Plain SQL: a client runs it on the connection
# it checked the deployment with, a worker through its Database.
LIVE_WORKERS = (
    "SELECT app_version, apps FROM tether_workers WHERE app_version IS NOT NULL AND recovered_at IS NULL"
    " AND heartbeat_at >= now() - make_interval(secs => %s) ORDER BY started_at DESC"
)


def live_workers(conn: Connection) -> list[tuple[Any, Any]]:
    return [(r[0], r[1]) for r in conn.exec_driver_sql(LIVE_WORKERS, (LIVE_S,))]


def serving(workers: Iterable[tuple[Any, Any]], app: str, digest: str | None) -> list[tuple[str, str | None]]:
    """(version, the app's digest there) of the ``workers`` (``LIVE_WORKERS`` rows) serving
    ``app`` (with ``digest`` when given), in their order."""
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
