"""Durable runs across many workers: each run a DBOS workflow, each model call and tool turn a
step; a shared queue with global, per-worker and per-tenant limits (needs ``tether[durable]``).

Names are imported on first use: a client (``tether submit``) does not load the agent loop."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.durable._client import DurableClient, RunView
    from tether.durable._config import APP_VERSION, QUEUE, WORKFLOW
    from tether.durable._runtime import register_app, stores_for
    from tether.durable._steps import DurableSteps, ReplayDiverged
    from tether.durable._worker import Worker, WorkerConfig

__all__ = [
    "APP_VERSION",
    "QUEUE",
    "WORKFLOW",
    "DurableClient",
    "DurableSteps",
    "ReplayDiverged",
    "RunView",
    "Worker",
    "WorkerConfig",
    "register_app",
    "stores_for",
]

_WHERE = {
    **dict.fromkeys(("APP_VERSION", "QUEUE", "WORKFLOW"), "config"),
    **dict.fromkeys(("DurableClient", "RunView"), "client"),
    **dict.fromkeys(("register_app", "stores_for"), "runtime"),
    **dict.fromkeys(("DurableSteps", "ReplayDiverged"), "steps"),
    **dict.fromkeys(("Worker", "WorkerConfig"), "worker"),
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'tether.durable' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tether.durable._{_WHERE[name]}"), name)
