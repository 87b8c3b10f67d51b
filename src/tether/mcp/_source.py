"""An MCP server as a tool source, through the official ``mcp`` SDK (stdio or Streamable HTTP).

Connecting creates no trust (X2): tools are namespaced ``<server>__<tool>``; effects come from
the host's declaration (undeclared: side-effecting); with a pin store only approved definitions
are offered and every listing is compared with the pins; arguments are validated against the
pinned schema; results are untrusted (``tether.mcp._results``). Each connection is supervised
(``tether.mcp._connection``): a transport failure is ``dependency_unavailable`` for that server,
which is quarantined or restarted; the public methods raise only ``ToolError`` subclasses.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import anyio

from tether.core._names import folded
from tether.core._schema import SchemaViolation, UnusableSchema, check_arguments
from tether.errors import ConfigError, DependencyUnavailable, ToolInputError
from tether.mcp._calling import CapabilityBlocked, InputPending, call_tool, guarded
from tether.mcp._config import SEPARATOR, offered_name
from tether.mcp._connection import Connection, ConnectionLost, describe_error
from tether.mcp._elicitation import CallInfo, GateHooks
from tether.mcp._failures import (
    Unavailable,
    closed_underneath,
    ended,
    exit_status,
    failure_detail,
    is_modern,
    leaf,
    session_gone,
)
from tether.mcp._listing import MAX_LISTED_TOOLS, MAX_LISTING_CHARS, PinnedListing, all_pages, without_repeats
from tether.mcp._opening import open_client, prepare, serve
from tether.mcp._pinning import Pins, ToolCheck
from tether.mcp._shown import secret_values, shown_launch
from tether.mcp._startup import start_setting
from tether.mcp._tasks import TaskRelay
from tether.tools._contract import Effect, Target, ToolContext, ToolOutput, ToolSpec
from tether.trace._events import EventKind

if TYPE_CHECKING:
    from tether.mcp._pauses import Pauses
    from tether.mcp._sandbox import SandboxPlan
    from tether.mcp._serverlog import ServerStderr

__all__ = ["MAX_LISTED_TOOLS", "MAX_LISTING_CHARS", "CapabilityBlocked", "InputPending", "McpServerSource"]

Restart = Literal["never", "on_failure"]
ProgressSink = Callable[[str, str, float, float | None, str | None], None]


class McpServerSource:
    """One supervised client connection to one MCP server."""

    # The connection's state, before the first start (instances set their own as it changes).
    restarts = 0
    sandbox_plan: SandboxPlan | None = None
    stderr: ServerStderr | None = None
    unavailable: str | None = None  # why the server is gone (short: the model may see it)
    unavailable_detail: str | None = None  # the same for the person, with its stderr and hints
    instructions: str | None = None
    protocol_version: str | None = None
    unused: tuple[str, ...] = ()  # what the server declares that the host never uses (for review)
    # MCP tasks outliving their call: parked in ``pauses`` (asked to live ``task_ttl_s``) or cancelled.
    pauses: Pauses | None = None
    long_tasks: Literal["pause", "cancel"] = "pause"
    task_ttl_s: float = 86_400.0
    _start_detail: str | None = None
    _process: Any = None  # the stdio server's process (its exit code, for a failed start)
    _conn: Connection | None = None
    _restart_lock: anyio.Lock | None = None
    _announced: Connection | None = None  # the connection whose start was traced
    _listed_at_connect = False
    _listening = False
    _stale = False  # a list-changed was heard: re-list before the next call
    _change_traced = False  # ... and traced (once until that listing)
    _tracer: Any = None

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        url: str | None = None,
        effects: Mapping[str, Effect | str] | None = None,
        targets: Mapping[str, Target] | None = None,
        egress: Mapping[str, str | Sequence[str]] | None = None,
        env: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        mode: str = "auto",
        timeout_s: float = 30.0,
        connect_timeout_s: float = 30.0,
        progress_resets_timeout: bool = False,
        max_call_s: float | None = None,
        max_result_chars: int = 20_000,
        allow_tools: Iterable[str] | None = None,
        pins: Pins | None = None,
        recheck: str = "each_call",
        elicitation: Any = None,
        sampling: Any = None,
        roots: Any = None,
        cwd: str | None = None,
        fail_soft: bool = False,
        restart: Restart = "never",
        max_restarts: int = 2,
        sandbox: Callable[[list[str], dict[str, str]], SandboxPlan] | None = None,
        stderr: Callable[[], ServerStderr] | None = None,
        on_progress: ProgressSink | None = None,
    ) -> None:
        _check_identity(name, command, url, restart)
        self.name = name
        self.command = list(command) if command else None
        self.url = url
        self.effects = {k: Effect(v) for k, v in (effects or {}).items()}
        self.targets = dict(targets or {})
        self.egress = {k: v if isinstance(v, str) else tuple(v) for k, v in (egress or {}).items()}
        self.env = dict(env or {})
        self.headers = dict(headers or {})
        self.mode = mode
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.progress_resets_timeout = progress_resets_timeout
        self.max_call_s = max_call_s
        self.max_result_chars = max_result_chars
        self.allow_tools = frozenset(allow_tools) if allow_tools is not None else None
        self.recheck = recheck
        self.elicitation = elicitation
        self.sampling = sampling
        self.roots = roots
        self.cwd = cwd
        # fail_soft: a server that cannot start or list is unavailable, instead of failing the host.
        self.fail_soft = fail_soft
        self.restart = restart
        self.max_restarts = max_restarts
        self.sandbox = sandbox
        self.stderr_factory = stderr
        self.on_progress = on_progress
        self.peers: list[McpServerSource] = []  # started together (concurrently) with this one
        self._relays: dict[int, TaskRelay] = {}  # id of a connection's client -> its task relay
        self.warnings: list[str] = []
        self._retired: list[Connection] = []
        self.listing = PinnedListing(name, pins, self.endpoint, self.emit, self.allow_tools)
        self.refuse_offered_name = self.listing.refuse_offered_name  # (for the host's tool index)
        self.pins, self.blocked = pins, self.listing.blocked  # (read by the host's policy)
        self._inflight: list[CallInfo] = []
        self._pending_events: list[tuple[EventKind, dict[str, Any]]] = []

    def describe(self) -> dict[str, Any]:
        """What is launched or contacted, shown before the first launch (and traced)."""
        if self.command:
            out: dict[str, Any] = {
                "transport": "stdio",
                "command": shown_launch(self.command, secrets=secret_values(self.env)),
                "env_keys": sorted(self.env),
            }
            if self.sandbox_plan is not None:
                out.update(self.sandbox_plan.describe())
            if self.stderr is not None and self.stderr.log_path is not None:
                out["stderr_log"] = str(self.stderr.log_path)
            return out
        url = shown_launch(url=self.url, secrets=self.headers.values()) if self.url else self.url
        return {"transport": "streamable-http", "url": url, "header_keys": sorted(self.headers)}

    def endpoint(self) -> str:
        """A digest of what the pins were approved for: the exact command or URL."""
        ident = json.dumps(self.command) if self.command else str(self.url)
        return hashlib.sha256(ident.encode("utf-8")).hexdigest()

    def bind_tracer(self, tracer: Any) -> None:
        """Send this source's decisions to a run's tracer, those made before the run first."""
        self._tracer = tracer
        pending, self._pending_events = self._pending_events, []
        if not any(kind is EventKind.SERVER_LAUNCH for kind, _ in pending):
            # Started during an earlier run (or not yet): still say what this run talks to.
            alive = self._conn is not None and self._conn.alive
            state = "unavailable" if self.unavailable is not None else "running" if alive else "not_started"
            pending.insert(
                0, (EventKind.SERVER_LAUNCH, {"source": self.name, "state": state, **self.describe()})
            )
        for kind, data in pending:
            tracer.emit(kind, **data)

    def emit(self, kind: EventKind, **data: Any) -> None:
        if self._tracer is not None:
            try:
                self._tracer.emit(kind, **data)
                return
            except ValueError as err:
                if not str(err).endswith("is closed"):
                    raise
                # The run's trace is closed (a late server request): kept for the next run's trace.
                self._tracer = None
        self._pending_events.append((kind, data))

    def warn(self, kind: EventKind, shown: str, **data: Any) -> None:
        """A trouble of this server's that the host works around: logged for the person (``shown``,
        after the server's name) and traced as ``kind`` with ``data``."""
        import logging

        logging.getLogger("tether.mcp").warning("[%s] %s", self.name, shown)
        self.emit(kind, server=self.name, **data)

    def current_call(self) -> CallInfo | None:
        """The call a server request belongs to: known when exactly one is in flight."""
        return self._inflight[0] if len(self._inflight) == 1 else None

    def event_sink(self, kind: EventKind) -> Callable[[dict[str, Any]], None]:
        return lambda data: self.emit(kind, **data)

    def gate_hooks(self, kind: EventKind) -> GateHooks:
        """What a gate on this server's requests is given: its call, and its trace as ``kind``."""
        return {
            "current_call": self.current_call,
            "calls_in_flight": lambda: list(self._inflight),
            "on_event": self.event_sink(kind),
        }

    async def _on_message(self, message: Any) -> None:
        method = getattr(getattr(message, "root", message), "method", None) or getattr(
            message, "method", None
        )
        if method == "notifications/tools/list_changed":
            self.changed(traced=not self._listening)  # (the listen stream's own loop traces it)

    def changed(self, *, traced: bool = True) -> None:
        """The server said its tools changed: re-listed before the next call. Traced once until
        then (a server repeating it thousands of times adds one row, not thousands)."""
        if traced and not self._change_traced:
            self.emit(EventKind.MCP_CAPABILITY_CHECK, server=self.name, trigger="list_changed")
            self._change_traced = True
        self._stale = True
        self.listing.version += 1  # (the host lists them again before its next run)

    @property
    def listing_version(self) -> int:
        """Bumped when the server says its tools changed or a listing changes what is offered."""
        return self.listing.version

    def launch(self) -> None:
        """Begin connecting in the background (returns at once)."""
        if self._conn is not None or self.unavailable is not None:
            return
        launched_at = datetime.now(UTC).isoformat(timespec="microseconds")
        # Recorded before the launch: the exact command (or URL) is on record even if it hangs.
        self.emit(
            EventKind.SERVER_LAUNCH, source=self.name, state="launching", at=launched_at, **self.describe()
        )
        self._conn = Connection(
            lambda stack: open_client(self, stack),
            lambda client: prepare(self, client),
            lambda client: serve(self, client),
            name=self.name,
        )
        self._conn.launch()

    async def start(self) -> None:
        """Connect (with the peers) and list the tools. Raises ``DependencyUnavailable`` unless
        ``fail_soft`` (then the server is marked unavailable)."""
        if self.unavailable is not None or (self._conn is not None and self._conn is self._announced):
            return
        for peer in self.peers:
            peer.launch()  # the others connect while this one does
        try:
            await self._connect()
        except Unavailable as problem:
            detail, self._start_detail = self._start_detail, None
            if not self.fail_soft:
                raise DependencyUnavailable(
                    f"MCP server {self.name} could not be started: {detail}" if detail else problem.message
                ) from None
            self._quarantine(problem.message, state="failed", detail=detail)

    async def _connect(self) -> Connection:
        """Launch (unless under way) and wait until connected. Raises ``Unavailable``."""
        self.launch()
        conn = self._conn
        assert conn is not None
        return await self._ready(conn)

    async def _handshake(self, conn: Connection) -> Connection:
        """Wait for ``conn`` to connect. An HTTP session the server no longer knows before the
        start is done (a 404 to its session id: a server that restarted, a balancer's other
        replica, a short idle expiry) is begun anew once, as a call's would be."""
        try:
            await conn.ready()
            return conn
        except ConnectionLost as err:
            if self.url is None or not session_gone(err.cause):
                raise
        self._retire(conn)
        self.emit(EventKind.MCP_CONNECTION, server=self.name, action="session_renewed", phase="start")
        self.launch()
        assert self._conn is not None
        await self._conn.ready()
        return self._conn

    async def _ready(self, conn: Connection) -> Connection:
        try:
            with anyio.fail_after(self.connect_timeout_s):
                conn = await self._handshake(conn)
        except (ConnectionLost, TimeoutError) as err:
            conn = self._conn or conn  # (a renewed session's, if it failed too)
            self._retire(conn)
            refused = isinstance(err, ConnectionLost) and isinstance(leaf(err.cause), ConfigError)
            if isinstance(err, TimeoutError):
                why = f"no answer within the connect timeout ({self.connect_timeout_s:g}s)"
            else:
                why = str(leaf(err.cause)) if refused else describe_error(err)
            short = why  # (the model may read it: the host's own refusals go to the person only)
            if refused:
                short = "the host could not launch it as configured (the run's output says why)"
            timed_out, answered = isinstance(err, TimeoutError), conn.answered
            setting = await start_setting(self, timed_out=timed_out, answered=answered)
            detail = await self._failure_detail(why, started=answered, setting=setting)
            self._start_detail = detail or (why if short != why else None)
            raise Unavailable(f"MCP server {self.name} could not be started: {short}", cause=short) from None
        self._announced = conn
        self.emit(
            EventKind.SERVER_LAUNCH,
            source=self.name,
            state="connected",
            protocol=self.protocol_version,
            **({"restart": self.restarts} if self.restarts else {}),
        )
        return conn

    async def _failure_detail(
        self, why: str, *, started: bool = False, setting: str | None = None
    ) -> str | None:
        """For the person (never the model): the cause, the last stderr lines, the ``setting`` to
        change and, when the server never answered the handshake, which sandbox setting may be the
        cause."""
        from tether.mcp._sandbox import failure_hint

        if self.stderr is not None:
            stderr = self.stderr
            await anyio.to_thread.run_sync(lambda: stderr.wait(1.0))
        tail = list(self.stderr.tail) if self.stderr is not None else []
        hint = None if started else failure_hint(self.sandbox_plan, tail)
        hint = "; ".join(h for h in (setting, hint) if h) or None
        if detail := failure_detail(
            why, self._exited(getattr(self._process, "returncode", None)), tail, hint
        ):
            self.emit(
                EventKind.MCP_CONNECTION,
                server=self.name,
                action="start_failed",
                cause=why,
                stderr_tail=tail[-4:],
                sandbox_hint=hint,
            )
        return detail

    def _exited(self, returncode: int | None) -> str | None:
        return exit_status(returncode, confined=bool(self.sandbox_plan and self.sandbox_plan.confinement))

    def _retire(self, conn: Connection) -> None:
        if self._conn is conn:
            self._conn = None
        conn.abort()
        self._retired.append(conn)

    def _quarantine(self, why: str, *, state: str = "quarantined", detail: str | None = None) -> None:
        self.unavailable = why
        if detail is not None and state == "failed":
            detail = f"MCP server {self.name} could not be started: {detail}"
        self.unavailable_detail = detail
        extra = {"detail": self.unavailable_detail} if detail else {}
        self.emit(
            EventKind.SERVER_LAUNCH, source=self.name, state=state, error=why, **extra, **self.describe()
        )

    async def _lost(self, conn: Connection, cause: BaseException | None, phase: str) -> str:
        """The connection ended under a call: retire it, then quarantine or allow a restart. A
        stdio server is given a moment to exit first: its exit status and last stderr lines are
        for the person (the trace, the log), ``why`` (returned) for the model."""
        why = describe_error(cause) if cause is not None else "connection closed"
        if conn is not self._conn:
            return why  # another call already handled this loss
        returncode = await ended(self._process, self.stderr) if self.command else None
        if conn is not self._conn:
            return why
        self._retire(conn)
        tail = list(self.stderr.tail)[-4:] if self.stderr is not None else []
        exited = self._exited(returncode)
        detail = failure_detail(why, exited, tail)
        self.warn(
            EventKind.MCP_CONNECTION,
            f"connection lost {phase}: {detail or why}",
            action="lost",
            phase=phase,
            cause=why,
            **({"exit": exited} if exited else {}),
            **({"stderr_tail": tail} if tail else {}),
        )
        if self.restart == "never":
            why_quarantined = f"MCP server {self.name} quarantined: its connection was lost {phase}"
            self._quarantine(f"{why_quarantined}: {why}", detail=detail and f"{why_quarantined}: {detail}")
        elif self.restarts >= self.max_restarts:
            why_quarantined = f"MCP server {self.name} quarantined: connection lost {phase}"
            limit = f"after {self.restarts} restart(s), the configured maximum"
            self._quarantine(
                f"{why_quarantined} ({why}) {limit}",
                detail=detail and f"{why_quarantined} ({detail}) {limit}",
            )
        return why

    async def _usable(self) -> Connection:
        """A live connection for the next call: the current one, or a restart if allowed."""
        if self.unavailable is not None:
            raise Unavailable(self.unavailable, quarantined=True)
        conn = self._conn
        if conn is not None and conn.alive and not closed_underneath(self._relays.get(id(conn.client))):
            return conn
        if conn is not None:
            await self._lost(conn, conn.error, "between calls")
            if self.unavailable is not None:
                raise Unavailable(self.unavailable, quarantined=True)
        return await self._restart()

    async def _restart(self) -> Connection:
        if self._restart_lock is None:
            self._restart_lock = anyio.Lock()
        async with self._restart_lock:
            if self._conn is not None and self._conn.alive:
                return self._conn
            if self.unavailable is not None:
                raise Unavailable(self.unavailable, quarantined=True)
            if self.restart == "never" or self.restarts >= self.max_restarts:
                self._quarantine(f"MCP server {self.name} is not connected")
                raise Unavailable(self.unavailable or "", quarantined=True)
            self.restarts += 1
            self.emit(
                EventKind.MCP_CONNECTION,
                server=self.name,
                action="restarting",
                attempt=self.restarts,
                max_restarts=self.max_restarts,
            )
            try:
                conn = await self._connect()
            except Unavailable as problem:
                if self.restarts >= self.max_restarts:
                    self._quarantine(f"{problem.message} (restart {self.restarts}/{self.max_restarts})")
                raise
            return conn

    async def close(self) -> None:
        """Stop every connection (bounded), never raising for a transport's failure."""
        conns = [c for c in (self._conn, *self._retired) if c is not None]
        self._conn, self._retired = None, []
        with contextlib.suppress(Exception):
            async with anyio.create_task_group() as tg:
                for c in conns:
                    tg.start_soon(c.close)
        if self.stderr is not None:
            await anyio.to_thread.run_sync(self.stderr.wait)

    async def _list(self, client: Any) -> list[ToolCheck]:
        """List every page now (not the SDK's cache) and check it against the pins. The host lists
        only here: what the SDK lists on its own is never offered."""
        tools = without_repeats(await all_pages(client, self.name))
        if (relay := self._relays.get(id(client))) is not None:
            tools = relay.with_output_schemas(tools)
        await self.listing.absorb(tools, getattr(relay, "dropped", {}))
        self._stale = self._change_traced = False
        return self.listing.checks

    async def refresh(self) -> list[ToolCheck]:
        """List the tools now and check them against the pins. Raises ``DependencyUnavailable``."""
        conn = await self._usable()
        checks: list[ToolCheck] = await guarded(self, conn, self._list, self.timeout_s, "while listing tools")
        return checks

    async def list_tools(self) -> list[ToolSpec]:
        if self.unavailable is not None:
            return []
        if not self._listed_at_connect:
            try:
                await self.refresh()
            except DependencyUnavailable as problem:
                if not self.fail_soft:
                    raise
                if self.unavailable is None:
                    self._quarantine(f"MCP server {self.name} did not list its tools: {problem.message}")
                return []
        self._listed_at_connect = False
        specs = []
        for remote, d in sorted(self.listing.pinned.items()):
            allowed = self.allow_tools is None or remote in self.allow_tools
            if remote in self.blocked or not allowed or self._look_alike(remote):  # (read as declared)
                continue
            # The host's declaration wins over the server's annotations; undeclared = side-effecting.
            specs.append(
                ToolSpec(
                    name=offered_name(self.name, remote),
                    description=d.get("description") or "",
                    parameters=d.get("inputSchema") or {"type": "object"},
                    source=self.name,
                    effect=self.effects.get(remote, Effect.WRITE),
                    target=self.targets.get(remote),
                    egress_argument=self.egress.get(remote),
                    timeout_s=self.timeout_s,
                    max_result_chars=self.max_result_chars,
                    remote_name=remote,
                    meta={"server_annotations": d.get("annotations") or {}, "untrusted_hints": True},
                )
            )
        if (why := self.listing.too_much([s.remote_name or "" for s in specs])) is not None:
            refused = f"MCP server {self.name} offers more than a model takes: {why}"
            if not self.fail_soft:
                raise DependencyUnavailable(refused)
            self._quarantine(refused)
            return []
        return specs

    def _look_alike(self, remote: str) -> bool:
        """Whether ``remote`` is undeclared but reads as a declared tool (``Send_Mail``, ``send_mail``)."""
        declared = {*self.effects, *self.targets, *self.egress}  # (see core._names.folded)
        return remote not in declared and folded(remote) in {folded(n) for n in declared}

    def validate(self, remote_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check arguments against the pinned input schema. Raises ``ToolInputError``."""
        definition = self.listing.pinned.get(remote_name)
        if definition is None:
            raise ToolInputError(f"unknown tool {remote_name!r} on server {self.name}")
        try:
            return check_arguments(definition.get("inputSchema") or {"type": "object"}, arguments)
        except UnusableSchema as err:  # an invalid or unresolvable schema is the server's fault
            raise ToolInputError(
                f"the input schema of {remote_name} on server {self.name} is unusable: {err}"
            ) from None
        except SchemaViolation as err:
            raise ToolInputError(
                str(err), hint="match the tool's input schema exactly", details=dict(err.details)
            ) from None

    def _refuse_unapproved(self, spec: ToolSpec) -> None:
        remote = spec.remote_name
        if remote in self.blocked:
            raise CapabilityBlocked(
                f"{spec.name} is blocked: {self.blocked[remote]} since approval",
                hint=f"a person must review and approve it again (tether mcp approve {self.name})",
            )
        if remote not in self.listing.pinned or (
            self.allow_tools is not None and remote not in self.allow_tools
        ):
            raise CapabilityBlocked(f"{spec.name} is not an approved tool of server {self.name}")

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        """One call (``tether.mcp._calling``). Raises ``ToolError`` subclasses only."""
        return await call_tool(self, spec, arguments, context)

    def _root_paths(self) -> list[Any]:
        return list(self.roots.paths()) if self.roots is not None else []

    async def set_roots(self, roots: Iterable[str]) -> bool:
        """Change this server's roots; on a legacy connection, notify the server."""
        if self.roots is None:
            raise ConfigError(f"server {self.name} has no roots declared")
        changed: bool = self.roots.set_roots(roots)
        conn = self._conn
        if changed and conn is not None and conn.alive and not is_modern(self.protocol_version):

            async def notify(client: Any) -> None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    await client.send_roots_list_changed()

            with contextlib.suppress(DependencyUnavailable):
                await guarded(self, conn, notify, self.timeout_s, "sending roots/list_changed")
                self.emit(
                    EventKind.MCP_ROOTS,
                    server=self.name,
                    action="list_changed_sent",
                    roots=list(self.roots.roots),
                )
        return changed


def _check_identity(name: str, command: Sequence[str] | None, url: str | None, restart: str) -> None:
    if SEPARATOR in name or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(
            f"server id {name!r} must be alphanumeric (with - or _) and not contain {SEPARATOR!r}"
        )
    if (command is None) == (url is None):
        raise ConfigError("give exactly one of command (stdio) or url (Streamable HTTP)")
    if restart not in ("never", "on_failure"):
        raise ConfigError(f"restart must be 'never' or 'on_failure', not {restart!r}")
