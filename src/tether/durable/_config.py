"""What every process of a deployment agrees on — workflow and queue names, the base application
version, DBOS's configuration, a trusted context as JSON — without importing the agent loop, so
a client (``tether submit``, ``tether runs``) starts fast."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.policy._trusted import Permissions, TrustedContext

WORKFLOW = "tether.runs._values"
# Every name a release gave the run workflow, today's first. Releases before 2026-12-01 named it
# "tether.run": their runs are listed, moved and resumed, and a worker registers the body under
# each name, so a queued or recovered workflow of an earlier release finds its function.
WORKFLOW_NAMES = (WORKFLOW, "tether.run")
QUEUE = "tether-runs"
APP_NAME = "tether"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tether")
    except Exception:  # pragma: no cover - not installed (a source checkout on PYTHONPATH)
        return "0"


# Workers and clients must agree: DBOS dequeues and recovers a workflow only on its version.
APP_VERSION = f"tether-{_version()}"


def dbos_config(
    url: str, *, executor_id: str, log_level: str = "WARNING", pool_size: int = 10
) -> dict[str, Any]:
    """The DBOS configuration of the deployment at ``url``: its system database is the same
    PostgreSQL database (schema ``<schema>_dbos``, or ``dbos``), or ``dbos.sqlite`` in a SQLite
    deployment's directory."""
    from tether.durable._deploy import target

    t = target(url)
    system = t.pg.sqlalchemy() if t.pg is not None else ""
    if t.path is not None:
        t.path.mkdir(parents=True, exist_ok=True)
        system = f"sqlite:///{t.path.resolve() / 'dbos.sqlite'}"
    config: dict[str, Any] = {
        "name": APP_NAME,
        "system_database_url": system,
        "dbos_system_schema": t.dbos_schema,
        "executor_id": executor_id,
        "application_version": APP_VERSION,
        "log_level": log_level,
        "notification_listener_polling_interval_sec": 0.1,
        "sys_db_pool_size": pool_size,
    }
    if t.backend == "postgresql":
        config["db_engine_kwargs"] = {
            # Labelled per executor in pg_stat_activity (an operator can see, or cut, one worker).
            "connect_args": {"application_name": f"dbos:{executor_id}"},
            "pool_timeout": 30,
            "max_overflow": 0,
            "pool_pre_ping": True,
        }
    return config


def context_to_json(c: TrustedContext) -> dict[str, Any]:
    return {
        "tenant": c.tenant,
        "roles": sorted(c.roles),
        "user": c.user,
        "read": sorted(c.permissions.read),
        "write": sorted(c.permissions.write),
    }


def context_from_json(d: Mapping[str, Any]) -> TrustedContext:
    return TrustedContext(
        tenant=str(d["tenant"]),
        roles=frozenset(d.get("roles") or ()),
        user=d.get("user"),
        permissions=Permissions(frozenset(d.get("read") or ()), frozenset(d.get("write") or ())),
    )
