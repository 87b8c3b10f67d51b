"""``tether db status``: what an operator in the middle of a rolling upgrade asks of a deployment —
its migrations (as ``tether db check``) and which application versions are present on it: the
workers alive under each (PostgreSQL's ``tether_workers``) and the runs each still holds, queued
or in flight (DBOS's ``workflow_status``). A version with no live worker while it holds runs is a
version whose work waits for a worker of it (``tether runs move``). Reads only, creates nothing.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import closing
from typing import Any

# DBOS's states of a workflow not finished: dequeued only by, or recovered only on, its version.
_UNFINISHED = {"ENQUEUED": "queued", "DELAYED": "queued", "PENDING": "in_flight"}
# Runs only: every name a release gave the run workflow, never a paused run's cancellation marker
# (on a queue no worker serves) nor DBOS's own workflows.
_RUNS = (
    "SELECT application_version, status, count(*) FROM {table}"
    " WHERE status IN ('ENQUEUED', 'DELAYED', 'PENDING') AND name IN ({names})"
    " AND COALESCE(queue_name, '') <> '{cancelled}' GROUP BY application_version, status"
)


def _runs_query(table: str) -> str:
    from tether.durable._client import CANCEL_QUEUE
    from tether.durable._config import WORKFLOW_NAMES

    names = ", ".join(f"'{n}'" for n in WORKFLOW_NAMES)  # constants of this release, no quote in them
    return _RUNS.format(table=table, names=names, cancelled=CANCEL_QUEUE)


def status_deployment(url: str, *, timeout_s: float = 5.0) -> dict[str, Any]:
    """``check_migrations`` of ``url``, with ``release`` (this release's base version) and
    ``versions``: per application version present, ``workers`` alive (``None`` on SQLite, whose
    workers register nowhere), ``queued`` and ``in_flight`` runs, ``this_release`` (its base is
    this release's) and ``waiting_for_worker`` (runs, no live worker; ``None`` on SQLite). Raises
    as ``check_migrations`` (``SchemaTooNew``: a later release's mark)."""
    from tether.durable._config import APP_VERSION
    from tether.durable._deploy import check_migrations, open_deployment

    out = check_migrations(url, timeout_s=timeout_s)
    t, conn = open_deployment(url, timeout_s=timeout_s)
    counts: dict[str, dict[str, Any]] = defaultdict(lambda: {"workers": 0, "queued": 0, "in_flight": 0})
    try:
        if conn is None:
            assert t.path is not None
            rows = _sqlite_runs(str(t.path / "dbos.sqlite"))
        else:
            rows = list(conn.execute(_runs_query(f'"{t.dbos_schema}".workflow_status')).fetchall())
            for version, alive in _live_workers(conn):
                counts[version]["workers"] = alive
    finally:
        if conn is not None:
            conn.close()
    for version, state, n in rows:
        counts[str(version or "")][_UNFINISHED[str(state)]] += int(n)
    versions = [
        {
            "version": version,
            "this_release": version == APP_VERSION or version.startswith(f"{APP_VERSION}+"),
            **seen,
            **({"workers": None} if conn is None else {}),
            # Runs of a version no live worker serves wait for one (``tether runs move`` moves them).
            "waiting_for_worker": None if conn is None else seen["workers"] == 0,
        }
        for version, seen in sorted(counts.items())
    ]
    return {**out, "release": APP_VERSION, "versions": versions}


def _sqlite_runs(file: str) -> list[tuple[Any, Any, Any]]:
    from tether.sql._sqlite import connect

    with closing(connect(file, busy_timeout_s=5)) as db:  # read only: nothing created
        return [tuple(r) for r in db.execute(_runs_query("workflow_status")).fetchall()]


def _live_workers(conn: Any) -> list[tuple[str, int]]:
    """(version, workers alive under it) of the registered workers: those beating within
    ``LIVE_S``, not recovered, not draining (a version only draining workers beat for is there,
    with none alive). A table an earlier release wrote without versions: none."""
    from psycopg.errors import UndefinedColumn, UndefinedTable

    from tether.durable._versions import DRAINING_APPS, LIVE_S

    query = (
        "SELECT app_version, count(*) FILTER (WHERE apps IS DISTINCT FROM %s) FROM tether_workers"
        " WHERE app_version IS NOT NULL AND recovered_at IS NULL"
        " AND heartbeat_at >= now() - make_interval(secs => %s) GROUP BY app_version"
    )
    try:
        return [(str(v), int(n)) for v, n in conn.execute(query, (DRAINING_APPS, LIVE_S)).fetchall()]
    except (UndefinedTable, UndefinedColumn):
        return []


def describe(out: dict[str, Any]) -> str:
    """The one-line text of ``status_deployment``'s answer."""
    parts = []
    for v in out["versions"]:
        who = "" if v["workers"] is None else f"{v['workers']} worker(s) alive, "
        mine = ", this release" if v["this_release"] else ""
        mine += (
            ", no live worker serves it: its runs wait (tether runs move)" if v["waiting_for_worker"] else ""
        )
        parts.append(
            f"{v['version'] or '(none)'} ({who}{v['queued']} queued, {v['in_flight']} in flight{mine})"
        )
    text = f"{out['target']}: ready; this release {out['release']}; versions present: "
    text += "; ".join(parts) if parts else "none (no worker alive, no run queued or in flight)"
    if out.get("pending"):
        text += f"; migrations to apply (tether db init): {', '.join(out['pending'])}"
    if out.get("later"):
        text += f"; a later release's migrations, worked beside: {', '.join(out['later'])}"
    return text
