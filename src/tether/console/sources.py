"""What the console reads and writes: the same store objects the host and the CLI use.

Every page goes through these objects, never through a database of its own, so swapping the
embedded SQLite stores for other backends (an ``ApprovalStore`` on PostgreSQL, say) changes
only how ``ConsoleSources`` is built.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tether.console.runs import TraceIndex
from tether.console.users import UserStore
from tether.errors import ApprovalError
from tether.policy.approvals import Approvals

if TYPE_CHECKING:
    from tether.mcp.config import McpConfig
    from tether.mcp.pauses import PauseStore
    from tether.mcp.pinning import PinStore
    from tether.run import RunResult

__all__ = ["ConsoleSources", "deployment_sources", "sqlite_sources"]

Resumer = Callable[[str], Awaitable["RunResult"]]


@dataclass
class ConsoleSources:
    """The stores behind the console.

    ``open_pauses`` / ``open_pins`` open a store for one request (SQLite connections stay on
    the thread that opened them); ``resume`` continues a paused run, or is ``None`` when the
    console may only record decisions (then ``tether resume RUN`` continues it).
    """

    users: UserStore
    approvals: Approvals | None = None
    traces: TraceIndex | None = None
    mcp_config: McpConfig | None = None
    open_pauses: Callable[[], PauseStore] | None = None
    open_pins: Callable[[], PinStore] | None = None
    resume: Resumer | None = None
    on_close: Callable[[], None] | None = None  # closes what the sources opened (a deployment's stores)

    def close(self) -> None:
        self.users.close()
        if self.on_close is not None:
            self.on_close()
        elif self.approvals is not None:
            close = getattr(self.approvals.store, "close", None)
            if close is not None:
                close()


def factory_resumer(db: Path, approvals: Approvals) -> Resumer:
    """Resume a run the way ``tether resume`` does: the checkpoint names the application factory
    (``module:function``, host code chosen by the application that started the run), which is
    called with the store's path to rebuild the host and the agent."""

    async def resume(run_id: str) -> RunResult:
        checkpoint = await approvals.store.load_checkpoint(run_id)
        if checkpoint is None:
            raise ApprovalError("unknown_run", f"no checkpoint for run {run_id!r}")
        if not checkpoint.app:
            raise ApprovalError("not_resumable", "the run recorded no application factory; use tether resume")
        module_name, _, function = checkpoint.app.partition(":")
        try:
            build: Any = getattr(importlib.import_module(module_name), function)
        except (ImportError, AttributeError) as err:
            why = f"cannot load the run's factory {checkpoint.app}: {err}"
            raise ApprovalError("not_resumable", why) from None
        # As tether resume calls it: a factory that rebuilds one run's agent (an agent file's
        # tether.agentrecord:rebuild, tether mcp run's) is told which run.
        if "run_id" in inspect.signature(build).parameters:
            host, agent = build(db, run_id=run_id)
        else:
            host, agent = build(db)
        try:
            result: RunResult = await host.resume(agent, run_id)
        finally:
            await host.aclose()
        return result

    return resume


def sqlite_sources(
    *,
    users_db: Path,
    approvals_db: Path | None,
    trace_dir: Path | None,
    mcp_config: Path | None = None,
    allow_resume: bool = True,
    users: UserStore | None = None,
) -> ConsoleSources:
    """The embedded default: SQLite files and a folder of JSONL traces (an approval store that does
    not exist yet is created empty, for the hosts that will write to it)."""
    from tether.policy.sqlite_store import SqliteApprovalStore

    approvals = None
    if approvals_db is not None:
        approvals = Approvals(SqliteApprovalStore(approvals_db))
    config = None
    open_pauses = open_pins = None
    if mcp_config is not None:
        from tether.mcp.config import load_config
        from tether.mcp.pauses import PauseStore
        from tether.mcp.pinning import PinStore

        config = load_config(mcp_config)
        state, pins = config.path(config.host.state), config.path(config.host.pins)

        def open_pauses() -> PauseStore:
            return PauseStore(state)

        def open_pins() -> PinStore:
            return PinStore(pins)

        if trace_dir is None:
            trace_dir = config.path(config.host.trace_dir)
    resume = None
    if allow_resume and approvals is not None and approvals_db is not None:
        resume = factory_resumer(approvals_db, approvals)
    return ConsoleSources(
        users=users or UserStore(users_db),
        approvals=approvals,
        traces=TraceIndex(trace_dir) if trace_dir is not None else None,
        mcp_config=config,
        open_pauses=open_pauses,
        open_pins=open_pins,
        resume=resume,
    )


class _Kept:
    """A deployment's shared store lent to one request: the request's ``close`` leaves it open
    (its connection pool serves every request and thread)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def close(self) -> None:
        pass


def deployment_sources(
    *,
    url: str,
    users_db: Path,
    trace_dir: Path | None = None,
    mcp_config: Path | None = None,
    users: UserStore | None = None,
) -> ConsoleSources:
    """A deployment's shared stores (``postgresql://…`` or ``sqlite:///dir``): the proposals,
    questions and pins every durable worker uses. Decisions and answers are recorded there, and a
    worker resumes the run by itself, so the console resumes nothing (``resume`` is None)."""
    from tether.storage_url import open_stores

    config = None
    if mcp_config is not None:
        from tether.mcp.config import load_config

        config = load_config(mcp_config)
        if trace_dir is None:
            trace_dir = config.path(config.host.trace_dir)
    stores = open_stores(url)
    pauses, pins = stores.pauses, stores.pins

    def open_pauses() -> PauseStore:
        return cast("PauseStore", _Kept(pauses))  # the same methods (the pause store protocol)

    def open_pins() -> PinStore:
        return cast("PinStore", _Kept(pins))

    return ConsoleSources(
        users=users or UserStore(users_db),
        approvals=Approvals(stores.approvals),
        traces=TraceIndex(trace_dir) if trace_dir is not None else None,
        mcp_config=config,
        open_pauses=open_pauses,
        open_pins=open_pins if config is not None else None,
        resume=None,
        on_close=stores.close,
    )
