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
_UNFINISHED = {"ENQUEUED": "queued", "PENDING": "in_flight"}
_RUNS = (
    "SELECT application_version, status, count(*) FROM {table}"
    " WHERE status IN ('ENQUEUED', 'PENDING') GROUP BY application_version, status"
)


def status_deployment(url: str, *, timeout_s: float = 5.0) -> dict[str, Any]:
    """``check_migrations`` of ``url``, with ``release`` (this release's base version) and
    ``versions``: per application version present, ``workers`` alive (``None`` on SQLite, whose
    workers register nowhere), ``queued`` and ``in_flight`` runs, ``this_release`` (its base is
    this release's). Raises as ``check_migrations`` (``SchemaTooNew``: a later release's mark)."""
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
            rows = list(conn.execute(_RUNS.format(table=f'"{t.dbos_schema}".workflow_status')).fetchall())
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
        }
        for version, seen in sorted(counts.items())
    ]
    return {**out, "release": APP_VERSION, "versions": versions}


def _sqlite_runs(file: str) -> list[tuple[Any, Any, Any]]:
    from tether.sql._sqlite import connect

    with closing(connect(file, busy_timeout_s=5)) as db:  # read only: nothing created
        return [tuple(r) for r in db.execute(_RUNS.format(table="workflow_status")).fetchall()]


def _live_workers(conn: Any) -> list[tuple[str, int]]:
    """(version, workers alive under it) of the registered workers: those beating within
    ``LIVE_S``, not recovered. A table an earlier release wrote without versions: none."""
    from psycopg.errors import UndefinedColumn, UndefinedTable

    from tether.durable._versions import LIVE_S

    query = (
        "SELECT app_version, count(*) FROM tether_workers WHERE app_version IS NOT NULL"
        " AND recovered_at IS NULL AND heartbeat_at >= now() - make_interval(secs => %s)"
        " GROUP BY app_version"
    )
    try:
        return [(str(v), int(n)) for v, n in conn.execute(query, (LIVE_S,)).fetchall()]
    except (UndefinedTable, UndefinedColumn):
        return []


def describe(out: dict[str, Any]) -> str:
    """The one-line text of ``status_deployment``'s answer."""
    parts = []
    for v in out["versions"]:
        who = "" if v["workers"] is None else f"{v['workers']} worker(s) alive, "
        mine = ", this release" if v["this_release"] else ""
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
