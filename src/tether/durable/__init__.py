"""Durable runs across many workers: each run a DBOS workflow, each model call and tool turn a
step; a shared queue with global, per-worker and per-tenant limits (needs ``tether[durable]``)."""

from tether.durable.client import DurableClient, RunView
from tether.durable.runtime import APP_VERSION, QUEUE, WORKFLOW, register_app, stores_for
from tether.durable.steps import DurableSteps, ReplayDiverged
from tether.durable.worker import Worker, WorkerConfig

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
