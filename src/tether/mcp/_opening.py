"""Opening one connection to an MCP server (in the connection's own task): spawn the stdio
server (confined as its sandbox plan says) or contact the HTTP one, relay its messages through
a ``TaskRelay`` and enter the SDK's ``Client`` with the host's callbacks."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from tether.errors import ConfigError
from tether.mcp._connection import describe_error
from tether.mcp._failures import enabled, is_modern
from tether.mcp._listing import MAX_DEFINITION_CHARS
from tether.mcp._mend import unsupported
from tether.mcp._tasks import TaskRelay
from tether.trace._events import EventKind

if TYPE_CHECKING:
    from tether.mcp._source import McpServerSource

__all__ = ["SAFE_ENV", "open_client", "prepare", "serve", "shielded"]

# Environment a stdio server inherits: nothing that could carry the user's or provider's credentials.
# The SDK callback answering each capability's requests (given only when the capability is on).
CALLBACKS = {
    "elicitation": "elicitation_callback",
    "sampling": "sampling_callback",
    "roots": "list_roots_callback",
}
SAFE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "SYSTEMROOT", "VIRTUAL_ENV")


async def open_client(source: McpServerSource, stack: AsyncExitStack) -> Any:
    """Spawn or contact the server, then enter the SDK client on the connection's stack."""
    transport: Any
    if source.command:
        transport = await _stdio(source, stack)
    else:
        transport = await _http(source, stack)
    from mcp import Client

    from tether.mcp._serverlog import log_notifications

    # Log notifications go to the trace (2026-07-28 servers send them only when asked: log_level).
    callbacks: dict[str, Any] = {
        "logging_callback": log_notifications(source.name, source.emit),
        "log_level": "info",
    }
    # A capability is advertised only when it is enabled: the SDK announces each callback given.
    if enabled(source.elicitation):
        callbacks["elicitation_callback"] = shielded(source.name, "elicitation/create", source.elicitation)
    if enabled(source.sampling):
        callbacks["sampling_callback"] = shielded(source.name, "sampling/createMessage", source.sampling)
    if source.roots is not None:
        callbacks["list_roots_callback"] = shielded(source.name, "roots/list", source.roots)
    # Every message passes the relay, which also sends the host's own task requests and answers
    # the requests of capabilities not declared (``_mend``).
    declared = [n for n, key in CALLBACKS.items() if key in callbacks]
    relay = TaskRelay(
        lambda: source.protocol_version, on_unsent=_unsent_dropped(source), unsupported=unsupported(declared)
    )
    transport = relay.wrap(transport)
    client = await stack.enter_async_context(
        Client(
            transport,
            mode=source.mode,
            read_timeout_seconds=max(source.timeout_s, source.max_call_s or 0),
            message_handler=source._on_message,
            **callbacks,
        )
    )
    source._relays[id(client)] = relay
    stack.callback(source._relays.pop, id(client), None)
    return client


def _unsent_dropped(source: McpServerSource) -> Callable[[int], None]:
    """Told when the host's messages to the server begin to be dropped, the server reading none
    (``TaskRelay``): traced and shown once as each such overflow begins."""
    from tether.mcp._tasks import MAX_UNSENT

    def told(dropped: int) -> None:
        why = f"the server is not reading what the host sends ({MAX_UNSENT} messages wait for it)"
        shown = f"{why}: the host's answers to it are dropped"
        source.warn(
            EventKind.MCP_CONNECTION,
            shown,
            action="unsent_dropped",
            cause=why,
            waiting=MAX_UNSENT,
            dropped=dropped,
        )

    return told


def shielded(
    server: str, method: str, answer: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    """A server request's handler that never fails into the SDK: the host's failure is logged
    here, the server told only that the host could not answer."""

    async def handler(*args: Any) -> Any:
        try:
            return await answer(*args)
        except Exception as err:
            import logging

            import mcp_types as types

            logging.getLogger("tether.mcp").warning(
                "[%s] the host could not answer %s: %s", server, method, describe_error(err)
            )
            return types.ErrorData(code=-32603, message=f"the host could not answer {method}")

    return handler


async def _stdio(source: McpServerSource, stack: AsyncExitStack) -> Any:
    from tether.mcp._stdio import opened

    assert source.command is not None
    env = {k: os.environ[k] for k in SAFE_ENV if k in os.environ}
    env.update(source.env)
    argv = list(source.command)
    if source.sandbox is not None:
        plan = source.sandbox(argv, env)
        source.sandbox_plan = plan
        if plan.refused:
            source.warnings.append(plan.refused)
            source.emit(EventKind.MCP_SANDBOX, server=source.name, action="refused", why=plan.refused)
            raise ConfigError(plan.refused)
        if plan.warning:
            source.warnings.append(plan.warning)
            source.emit(EventKind.MCP_SANDBOX, server=source.name, action="unconfined", why=plan.warning)
        else:
            source.emit(EventKind.MCP_SANDBOX, server=source.name, action="confined", **plan.describe())
            for path in plan.confinement.withheld if plan.confinement is not None else ():
                source.warnings.append(f"not shown to the confined server: {path}")
            for path in plan.unshown:
                shown = (
                    f"its command names {path}, which the sandbox does not show the server: it "
                    "cannot read it, and what it writes there is lost when it exits (list the folder in "
                    "sandbox_write, or sandbox_read)"
                )
                if shown not in source.warnings:  # (once: traced as the launch's ``not_shown``)
                    source.warnings.append(shown)
        argv = plan.argv
        if plan.problem:
            source.emit(EventKind.MCP_SANDBOX, server=source.name, action="cannot_confine", why=plan.problem)
            raise ConfigError(plan.problem)
        env = plan.env if plan.env is not None else env
    if source.sandbox_plan is None or source.sandbox_plan.confinement is None:  # run as it is
        from tether.mcp._runnable import found, not_found, unrunnable

        here = Path(source.cwd or ".").resolve()
        if not found(argv[0], env, here):
            raise ConfigError(not_found(argv[0]))
        if (why := unrunnable(argv[0], env, here)) is not None:
            raise ConfigError(why)
    errlog = None
    if source.stderr_factory is not None:
        source.stderr = source.stderr_factory()
        errlog = source.stderr.open()
        stack.callback(source.stderr.spawned)
    chosen = source.sandbox_plan
    options, data = (chosen.options, chosen.data) if chosen is not None else ((), ())
    if chosen is not None and chosen.proxy:
        process = await _spawn_with_proxy(source, stack, chosen.proxy, argv, env, errlog)
    else:
        process = await _spawned(argv, env, source.cwd, errlog, options, data)
    if source.stderr is not None:
        source.stderr.spawned()
    source._process = process
    return await stack.enter_async_context(opened(process, max_message(source), flooding(source)))


async def _spawned(
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    errlog: Any,
    options: Sequence[str],
    data: Sequence[bytes],
) -> Any:
    """The server's process; a launch the system refused (its file, its ``cwd``) is a
    ``ConfigError`` saying what to change, not the system's bare words."""
    from tether.mcp._runnable import cannot_run
    from tether.mcp._stdio import spawn

    try:
        return await spawn(argv, env=env, cwd=cwd, stderr=errlog, options=options, data=data)
    except OSError as err:
        if (why := cannot_run(argv[0], err, env, cwd)) is None:
            raise
        raise ConfigError(why) from None


def flooding(source: McpServerSource) -> Callable[[str], None]:
    """What a connection's ``NotificationGate`` tells once its server's notifications are dropped."""

    def tell(shown: str) -> None:
        source.warn(EventKind.MCP_CONNECTION, shown, action="notifications_dropped", why=shown)

    return tell


def max_message(source: McpServerSource) -> int:
    """The largest answer the host reads from a server, on any transport: a few times the result
    cap in JSON (escapes, structured content too)."""
    return max(8 * 1024 * 1024, 16 * source.max_result_chars)


async def _spawn_with_proxy(
    source: McpServerSource,
    stack: AsyncExitStack,
    allow: tuple[str, ...],
    argv: list[str],
    env: dict[str, str],
    errlog: Any,
) -> Any:
    """Spawn a server whose network is an allowlist, and serve the proxy on the listening socket
    its launch sends back, until the server stops."""
    import socket

    from tether.mcp._netallow import allowlist
    from tether.mcp._netproxy import receive_listener, serving
    from tether.mcp._stdio import spawn, stop

    plan = source.sandbox_plan
    assert plan is not None
    ours, theirs = socket.socketpair()
    with ours:
        with theirs:
            process = await spawn(
                argv,
                env=env,
                cwd=source.cwd,
                stderr=errlog,
                options=plan.options,
                data=plan.data,
                net_fd=theirs.fileno(),
            )
        try:
            listener = await receive_listener(ours, source.connect_timeout_s)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stop(process)
            raise
    if listener is not None:  # None: the launch failed first, and the server's failure says why

        def refused(destination: str, why: str) -> None:
            shown = f"network refused: {why}"
            source.warn(
                EventKind.MCP_SANDBOX, shown, action="network_refused", destination=destination, why=why
            )

        await stack.enter_async_context(serving(listener, allowlist(allow), refused))
    return process


async def _http(source: McpServerSource, stack: AsyncExitStack) -> Any:
    assert source.url is not None

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from tether.mcp._httpcap import CappedTransport, cookie_jar

    async def answered(response: Any) -> None:
        """Name for the person an HTTP error the SDK reports only vaguely (not a probe's 4xx or a
        session's 404)."""
        code = response.status_code
        if code in (401, 403, 407, 429) or code >= 500:
            why = f"HTTP {code} {response.reason_phrase}".strip()
            # The URL as the console shows it: bare (a token in its query is no one's to read).
            url = source.describe()["url"]
            source.warn(EventKind.MCP_CONNECTION, f"{why} from {url}", action="http_error", cause=why)

    # trust_env=False: no ~/.netrc or proxy settings ride along; only the configured headers.
    http = httpx2.AsyncClient(
        headers=source.headers or None,
        timeout=httpx2.Timeout(
            source.connect_timeout_s, read=max(source.timeout_s, source.max_call_s or 0, 30.0)
        ),
        follow_redirects=False,
        trust_env=False,
        cookies=cookie_jar(),
        event_hooks={"response": [answered]},
        transport=CappedTransport(limit := max_message(source), source.name, flooding(source)),
    )
    # The transport does not close a client it was given: the stack does, after the session.
    await stack.enter_async_context(http)
    return streamable_http_client(source.url, http_client=http, max_sse_event_size=limit)


# What a server may declare that the host serves: tools (tasks among them) and log messages.
_SERVED = ("tools", "tasks", "logging")


def unused_features(capabilities: Any) -> tuple[str, ...]:
    """What the server declares (``prompts``, ``resources``, ``completions``, an experimental
    or extension capability by its name) that no run uses: named at review, never served."""
    declared = capabilities.model_dump(exclude_none=True) if capabilities is not None else {}
    names = [k for k in declared if k not in _SERVED and k not in ("experimental", "extensions")]
    for group in ("experimental", "extensions"):  # the server's own names: escaped, cut, at most 20
        keys = sorted(declared.get(group) or {})
        names += [f"{group} {str(key)[:64].encode('unicode_escape').decode('ascii')}" for key in keys[:20]]
    return tuple(names)


async def prepare(source: McpServerSource, client: Any) -> None:
    """Once connected: keep its instructions (for review only, cut as a definition is), list the
    tools and check them against the pins."""
    source.protocol_version = str(client.protocol_version)
    with contextlib.suppress(Exception):
        source.unused = unused_features(client.server_capabilities)
    with contextlib.suppress(Exception):
        text = client.instructions
        if isinstance(text, str) and len(text) > MAX_DEFINITION_CHARS:
            # Megabytes of them took minutes to review and filled the person's terminal.
            cut = (
                f"[cut by the host: {len(text)} characters in all, the rest never shown nor sent to a model]"
            )
            text = f"{text[:MAX_DEFINITION_CHARS]}\n{cut}"
        source.instructions = text
    await source._list(client)
    source._listed_at_connect = True


async def serve(source: McpServerSource, client: Any) -> None:
    """For the connection's life: the listen stream notices changed tools (2026-07-28, on_change)."""
    if source.pins is None or source.recheck != "on_change" or not is_modern(source.protocol_version):
        return
    try:
        async with client.listen(tools_list_changed=True) as subscription:
            source._listening = True
            source.emit(EventKind.MCP_CAPABILITY_CHECK, server=source.name, trigger="listen_opened")
            async for _event in subscription:
                source.changed()
    except Exception as err:
        source.emit(
            EventKind.MCP_CAPABILITY_CHECK,
            server=source.name,
            trigger="listen_closed",
            why=describe_error(err),
            fallback="re-list before each call",
        )
    finally:
        source._listening = False
