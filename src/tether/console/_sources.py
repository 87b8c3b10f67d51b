"""What the console reads and writes: the same store objects the host and the CLI use (never a
database of its own), so other backends change only how ``ConsoleSources`` is built."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio

from tether.console._runs import (
    SCANNED_EVENTS,
    RunFilter,
    RunIndex,
    RunSummary,
    RunView,
    StoredTraceIndex,
    TraceIndex,
    Where,
)
from tether.console._users import Hidden, Principal, UserStore
from tether.errors import ApprovalError, ConfigError
from tether.policy._approvals import Approvals
from tether.runs._checkpoint import checkpoint_tenant

if TYPE_CHECKING:
    from tether.mcp._config import McpConfig
    from tether.mcp._pauses import PauseStore
    from tether.mcp._pinning import PinStore
    from tether.policy._store import Checkpoint

__all__ = ["ConsoleSources", "deployment_sources", "sqlite_sources"]

# Continues a run by its id; returns its summary (on a deployment: the enqueued continuation's).
Resumer = Callable[[str], Awaitable[dict[str, Any]]]


@dataclass
class ConsoleSources:
    """The stores behind the console. ``open_pauses`` / ``open_pins`` open a store for one
    request (SQLite connections stay on their thread); without ``resume`` the console only
    records decisions (``tether resume RUN`` continues the run)."""

    users: UserStore
    approvals: Approvals | None = None
    traces: RunIndex | None = None
    mcp_config: McpConfig | None = None
    open_pauses: Callable[[], PauseStore] | None = None
    open_pins: Callable[[], PinStore] | None = None
    resume: Resumer | None = None
    on_close: Callable[[], None] | None = None  # closes what the sources opened (a deployment's stores)

    # Traces are read in a worker thread: a run's trace may be long (its run wrote it), and a
    # request that parsed it on the event loop held every other request, sign-ins too, meanwhile.

    async def runs(self, flt: RunFilter | None = None, *, limit: int = 500) -> list[RunSummary]:
        """The runs ``flt`` selects, newest first (none without a trace index)."""
        if self.traces is None:
            return []
        return await anyio.to_thread.run_sync(partial(self.traces.runs, flt, limit=limit))

    async def summary(self, run_id: str) -> RunSummary | None:
        """One run's summary, whoever may see it (the caller checks)."""
        return await anyio.to_thread.run_sync(self.traces.get, run_id) if self.traces is not None else None

    async def checkpoint(self, run_id: str) -> tuple[Checkpoint | None, str | None]:
        """``run_id``'s checkpoint and the tenant its state names: every view reads a checkpoint's
        tenant here, its state (as long as what the run read) parsed in a worker thread (parsed
        on the event loop, a viewer's page of a long run held every other request meanwhile)."""
        saved = await self.approvals.store.load_checkpoint(run_id) if self.approvals is not None else None
        if saved is None:
            return None, None
        return saved, await anyio.to_thread.run_sync(checkpoint_tenant, saved.state)

    async def run_owner(self, run_id: str) -> tuple[bool, str | None]:
        """Whether the console knows run ``run_id`` (a checkpoint, a trace), and whose it is: its
        checkpoint's tenant where it has one (the host wrote it from the run's context), else its
        trace's. A trace file under the id (a run started under a chosen id, a file written into
        the folder) never outweighs the checkpoint: what the paused run asks (its questions) goes
        to the checkpoint's tenant only. ``None``: the run names no tenant (or an empty one), and
        is no tenant's: only a grant of every tenant sees it."""
        saved, tenant = await self.checkpoint(run_id)
        if saved is not None:
            return True, tenant or None
        run = await self.summary(run_id)
        return run is not None, (run.tenant or None) if run is not None else None

    async def trace_of(self, run_id: str, tenant: str) -> bool:
        """Whether ``run_id``'s trace is ``tenant``'s (its start names it): a view of one of
        ``tenant``'s records (a proposal of the run) reads nothing from another tenant's trace."""
        run = await self.summary(run_id)
        return run is not None and run.tenant == tenant

    async def events(self, run_id: str) -> list[dict[str, Any]]:
        """One run's trace events, whoever may see them (the caller checks)."""
        return await anyio.to_thread.run_sync(self.traces.events, run_id) if self.traces is not None else []

    async def scan(
        self, run_id: str, kinds: Collection[str], where: Where = None, limit: int = SCANNED_EVENTS
    ) -> list[dict[str, Any]]:
        """The events of ``kinds`` in one run's trace (``RunIndex.scan``: a stream, not the whole
        trace held), whoever may see them (the caller checks)."""
        if self.traces is None:
            return []
        return await anyio.to_thread.run_sync(partial(self.traces.scan, run_id, kinds, where, limit))

    async def run(self, principal: Principal, run_id: str) -> tuple[RunSummary, RunView]:
        """A run ``principal`` may see, and what a view reads of its trace (``RunIndex.view``:
        bounded). Seen only by a principal who sees every tenant it names: its trace's
        (``summarise``: one only) and its checkpoint's, which the host wrote from the run's context
        (a trace under its id naming another tenant, another run's or a file put there, shows the
        paused run's events to no other tenant). Raises ``Hidden`` (unknown, another tenant's)."""
        run = await self.summary(run_id)
        if run is None or not principal.sees(run.tenant) or not await self.seen_runs(principal, [run]):
            raise Hidden("run")
        if self.traces is None:
            return run, RunView()
        return run, await anyio.to_thread.run_sync(self.traces.view, run_id)

    async def seen_runs(
        self, principal: Principal, runs: list[RunSummary], limit: int | None = None
    ) -> list[RunSummary]:
        """Of ``runs`` (selected by the tenant each trace names), those ``principal`` may see: each
        whose checkpoint, where it has one, names a tenant it sees too. The one rule for a run's
        page and API (``run``) and for every list of runs (the runs page and API, the URL requests
        read from traces): a trace claiming the principal's tenant over another tenant's paused
        run (a file put in the folder, its own start line gone) showed that run in the lists, its
        stop, its proposal's id and the URLs its servers sent, where its page said 404. ``limit``:
        the first so many kept (a list cut before the hidden ones were dropped showed fewer, or
        none, of the reader's own runs: hidden runs newer than them filled it)."""
        if principal.tenants("viewer") is None:  # every tenant's: nothing to hide
            return runs[:limit]
        kept: list[RunSummary] = []
        for run in runs:
            if limit is not None and len(kept) >= limit:
                break
            saved, tenant = await self.checkpoint(run.run_id)
            if saved is None or principal.sees(tenant):
                kept.append(run)
        return kept

    async def seen_values(
        self, principal: Principal, runs: list[RunSummary], key: Callable[[RunSummary], str]
    ) -> list[str]:
        """The values ``key`` gives ``runs`` (a filter's choices: their agents, stop reasons …), of
        the runs ``principal`` sees only (``seen_runs``): a run hidden from every list offered its
        agent and stop reason among the runs page's choices. Sorted, each once; a value's runs are
        checked until one is seen (a checkpoint read for each value, not for each run)."""
        holders: dict[str, list[RunSummary]] = {}
        for run in runs:
            if value := key(run):
                holders.setdefault(value, []).append(run)
        if principal.tenants("viewer") is None:  # every tenant's: nothing to hide
            return sorted(holders)
        seen: list[str] = []
        for value, those in holders.items():
            for run in those:
                if await self.seen_runs(principal, [run]):
                    seen.append(value)
                    break
        return sorted(seen)

    async def pins(self, server: str) -> dict[str, Any]:
        """The pins of ``server`` (none without a pin store)."""
        if self.open_pins is None:
            return {}
        store = self.open_pins()
        try:
            return await store.pins(server)
        finally:
            store.close()

    def close(self) -> None:
        self.users.close()
        if self.on_close is not None:
            self.on_close()
        elif self.approvals is not None:
            close = getattr(self.approvals.store, "close", None)
            if close is not None:
                close()


def factory_resumer(db: Path, approvals: Approvals, apps: Collection[str] = ()) -> Resumer:
    """Resume a run by the code ``tether resume`` uses: ``resume_point`` (what may be resumed),
    ``rebuild`` (the factory the checkpoint names) and ``resume_rebuilt``; the run's summary.

    Only a factory among ``apps`` (``module:function``, as ``tether serve --resume-app``) is
    imported: a checkpoint names its factory, and whoever can write a checkpoint row would
    otherwise choose the code the console imports and runs (``app_not_allowed``; ``tether resume``
    on the host still resumes it). Like a durable worker's ``--app``."""
    from tether.runners._scope import current_app

    allowed = frozenset(current_app(app) for app in apps)

    async def resume(run_id: str) -> dict[str, Any]:
        from tether.runners._scope import rebuild, resume_point, resume_rebuilt

        point = resume_point(await approvals.store.load_checkpoint(run_id), run_id)
        if not point.app:
            raise ApprovalError(
                "not_resumable", f"run {run_id} recorded no application factory: tether resume {run_id} --app"
            )
        if current_app(point.app) not in allowed:
            raise ApprovalError(
                "app_not_allowed",
                f"this console resumes only the apps it was started with (tether serve --resume-app):"
                f" run {run_id} names another; tether resume {run_id} continues it",
            )
        try:
            host, agent = rebuild(point.app, db, run_id)
        except ConfigError as err:
            raise ApprovalError("not_resumable", str(err)) from None
        return dict((await resume_rebuilt(host, agent, run_id)).summary())

    return resume


class DurableResumer:
    """Resume a deployment's run as ``tether resume RUN --db URL`` does: enqueued for a worker."""

    def __init__(self, url: str, stores: Any) -> None:
        self.url = url
        self.stores = stores
        self._client: Any = None
        self._lock = threading.Lock()

    def _open(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    from tether.durable import DurableClient
                except ImportError as err:
                    raise ConfigError(f"resuming a deployment's run needs the durable extra: {err}") from None
                self._client = DurableClient(self.url, stores=self.stores, retry=False)
            return self._client

    def _resume(self, run_id: str) -> dict[str, Any]:
        client = self._open()
        workflow_id = client.resume(run_id)
        view = client.run(run_id)
        status = view.status if view is not None else "queued"
        return {"run_id": run_id, "workflow_id": workflow_id, "status": status, "enqueued": True}

    async def __call__(self, run_id: str) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(self._resume, run_id)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def _mcp(mcp_config: Path | None, trace_dir: Path | None) -> tuple[McpConfig | None, Path | None]:
    """The MCP host config, and the trace folder: ``trace_dir``, else the config's."""
    if mcp_config is None:
        return None, trace_dir
    from tether.mcp._config import load_config

    config = load_config(mcp_config)
    return config, trace_dir if trace_dir is not None else config.path(config.host.trace_dir)


def sqlite_sources(
    *,
    users_db: Path,
    approvals_db: Path | None,
    trace_dir: Path | None,
    mcp_config: Path | None = None,
    allow_resume: bool = True,
    users: UserStore | None = None,
    resume_apps: Collection[str] = (),
) -> ConsoleSources:
    """The embedded default: SQLite files (a missing approval store is created) and a trace folder.
    The console resumes runs of the ``resume_apps`` factories only (``factory_resumer``)."""
    from tether.policy._sqlite_store import SqliteApprovalStore

    approvals = Approvals(SqliteApprovalStore(approvals_db)) if approvals_db is not None else None
    config, trace_dir = _mcp(mcp_config, trace_dir)
    open_pauses = open_pins = None
    if config is not None:
        from tether.mcp._pauses import PauseStore
        from tether.mcp._pinning import PinStore

        open_pauses = partial(PauseStore, config.path(config.host.state))
        open_pins = partial(PinStore, config.path(config.host.pins))
    resume = None
    if allow_resume and approvals is not None and approvals_db is not None:
        resume = factory_resumer(approvals_db, approvals, resume_apps)
    return ConsoleSources(
        users=users or UserStore(users_db),
        approvals=approvals,
        mcp_config=config,
        resume=resume,
        traces=TraceIndex(trace_dir) if trace_dir is not None else None,
        open_pauses=open_pauses,
        open_pins=open_pins,
    )


class _Kept:
    """A deployment's shared store lent to one request: its ``close`` leaves the pool open."""

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
    allow_resume: bool = True,
) -> ConsoleSources:
    """A deployment's shared stores (``postgresql://…`` or ``sqlite:///dir``): the proposals,
    questions and pins every durable worker uses; its runs from its trace store (PostgreSQL) or
    ``trace_dir``; resume (``allow_resume``) enqueues a run's continuation for a worker (as
    ``tether resume RUN --db URL``). Raises ``DeploymentUnavailable`` unless the stores are there:
    nothing is created."""
    from tether.durable._deploy import check_stores
    from tether.stores._url import open_stores

    config, trace_dir = _mcp(mcp_config, trace_dir)
    check_stores(url)
    stores = open_stores(url)
    pauses, pins = stores.pauses, stores.pins

    def open_pauses() -> PauseStore:
        return cast("PauseStore", _Kept(pauses))  # the same methods (the pause store protocol)

    def open_pins() -> PinStore:
        return cast("PinStore", _Kept(pins))

    traces: RunIndex | None = None
    if stores.traces is not None:
        traces = StoredTraceIndex(stores.traces)
    elif trace_dir is not None:
        traces = TraceIndex(trace_dir)
    resumer = DurableResumer(url, stores) if allow_resume else None

    def close() -> None:
        if resumer is not None:
            resumer.close()
        stores.close()

    return ConsoleSources(
        users=users or UserStore(users_db),
        approvals=Approvals(stores.approvals),
        traces=traces,
        mcp_config=config,
        open_pauses=open_pauses,
        open_pins=open_pins if config is not None else None,
        resume=resumer,
        on_close=close,
    )
