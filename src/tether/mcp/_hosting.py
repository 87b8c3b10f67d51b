"""One MCP server source from its config, every gate wired (``tether.mcphost.build_host`` builds
the whole host), and the policy rule that denies calls to tools no longer approved.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.mcp._calling import cancel_parked
from tether.mcp._config import McpConfig, ServerConfig
from tether.mcp._credentials import resolve_credentials
from tether.mcp._elicitation import ElicitationGate, Responder
from tether.mcp._failures import Unavailable
from tether.mcp._pauses import PauseStore
from tether.mcp._pinning import PinStore
from tether.mcp._roots import RootsGate
from tether.mcp._sampling import Consent, SamplingGate
from tether.mcp._serverlog import ServerStderr
from tether.mcp._shown import launch_secrets
from tether.mcp._source import McpServerSource, ProgressSink
from tether.trace._events import EventKind

if TYPE_CHECKING:  # (a review starts its server without loading the host)
    from tether.chokepoint._authority import HostCore as Host
    from tether.models._base import Model
    from tether.policy._rules import Decision, ProposedCall
    from tether.policy._trusted import TrustedContext

__all__ = [
    "PinnedCapabilities",
    "build_source",
    "cancel_parked_tasks",
    "mcp_sources",
    "protected_paths",
]


@dataclass(frozen=True)
class PinnedCapabilities:
    """Denies calls to MCP tools that are blocked (changed or unapproved since the run began)."""

    sources: Mapping[str, McpServerSource]
    name: str = "capability_pin"

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None:
        source = self.sources.get(call.spec.source)
        if source is None:
            return None
        remote = call.spec.remote_name
        if remote in source.blocked:
            from tether.policy._rules import Decision

            return Decision(
                "deny",
                self.name,
                "tool_definition_not_approved",
                {"tool": call.spec.name, "why": source.blocked[remote]},
            )
        return None


# The server's settings that its source takes as they are, under the same names.
_AS_CONFIGURED = (
    "effects",
    "egress",
    "targets",
    "mode",
    "timeout_s",
    "max_result_chars",
    "recheck",
    "restart",
    "max_restarts",
    "connect_timeout_s",
    "progress_resets_timeout",
    "max_call_s",
)


def build_source(
    server: ServerConfig,
    config: McpConfig,
    *,
    pins: PinStore | None,
    pauses: PauseStore | None = None,
    responder: Responder | None = None,
    sampling_model: Model | None = None,
    sampling_consent: Consent | None = None,
    environ: Mapping[str, str] | None = None,
    fail_soft: bool = False,
    on_progress: ProgressSink | None = None,
) -> tuple[McpServerSource, set[str]]:
    """One server's connection with its gates; also returns its secrets (for the redactor)."""
    creds = resolve_credentials(
        server.name, server.credentials, server.headers, environ=environ, base=config.base_dir
    )
    cwd = None
    if server.transport == "stdio":
        cwd = str(config.path(server.cwd) if server.cwd else config.base_dir)
    if on_progress is None and config.host.server_stderr == "terminal":
        on_progress = _show_progress
    source = McpServerSource(
        server.name,
        command=server.argv() if server.transport == "stdio" else None,
        url=server.url if server.transport == "http" else None,
        env={**server.env, **creds.env} if server.transport == "stdio" else None,
        headers=creds.headers,
        allow_tools=server.tools,
        pins=pins,
        cwd=cwd,
        fail_soft=fail_soft,
        on_progress=on_progress,
        **{name: getattr(server, name) for name in _AS_CONFIGURED},
    )
    source.pauses, source.long_tasks, source.task_ttl_s = pauses, server.long_tasks, server.task_ttl_s
    if server.transport == "stdio":
        source.sandbox = _sandbox(server, config, cwd)
        log = config.path(config.host.logs) / f"{server.name}.stderr.log"
        show = sys.stderr if config.host.server_stderr == "terminal" else None
        source.stderr_factory = lambda: ServerStderr(server.name, log_path=log, terminal=show)
    source.elicitation = ElicitationGate(
        server.name,
        server.elicitation,
        responder=responder,
        pauses=pauses,
        **source.gate_hooks(EventKind.MCP_ELICITATION),
    )
    source.sampling = SamplingGate(
        server.name,
        server.sampling,
        model=sampling_model,
        consent=sampling_consent,
        **source.gate_hooks(EventKind.MCP_SAMPLING),
    )
    if server.roots:
        source.roots = RootsGate(server.name, server.roots, on_event=source.event_sink(EventKind.MCP_ROOTS))
    launch = [
        *(server.argv() if server.transport == "stdio" else []),
        str(server.url or ""),
        *server.env.values(),
    ]
    return source, {*creds.secrets, *launch_secrets(*launch)}


def _show_progress(server: str, tool: str, done: float, total: float | None, message: str | None) -> None:
    """A progress notification on the terminal: attributed, escaped, one line."""
    from tether.mcp._clean import escape_for_review

    of = f"/{total:g}" if total is not None else ""
    note = f" {escape_for_review(message, limit=200)}" if message else ""
    print(f"[{server}] {tool}: progress {done:g}{of}{note}", file=sys.stderr, flush=True)


def _sandbox(server: ServerConfig, config: McpConfig, cwd: str | None) -> Any:
    """The sandbox planner of one stdio server (run at each launch: bwrap is probed once)."""
    from tether.mcp._sandbox import plan_confinement

    read = [str(config.path(p)) for p in server.sandbox_read]
    write = [str(config.path(p)) for p in server.sandbox_write]

    def plan(argv: list[str], env: dict[str, str]) -> Any:
        return plan_confinement(
            server.sandbox,
            argv,
            roots=server.roots,
            cwd=cwd,
            network=server.network_access,
            roots_writable=server.roots_writable,
            read=read,
            write=write,
            env=env,
            protected=protected_paths(config),
            bwrap=config.host.bwrap,
        )

    return plan


def protected_paths(config: McpConfig) -> list[str]:
    """What no server ever sees: the config's folder, pins, state, logs, traces and credential files."""
    host = config.host
    out = [str(config.base_dir)]
    out += [str(config.path(p)) for p in (host.pins, host.state, host.logs, host.trace_dir)]
    for server in config.servers:
        for ref in server.credentials.values():
            if ref.startswith("file:"):
                out.append(str(config.path(ref[len("file:") :])))
    return out


def mcp_sources(host: Host) -> list[McpServerSource]:
    return [s for s in host.sources if isinstance(s, McpServerSource)]


async def cancel_parked_tasks(host: Host, run_id: str) -> list[str]:
    """Cancel the tasks a cancelled run left parked; the task ids cancelled (a server that cannot
    be reached is skipped, its pauses left open)."""
    cancelled: list[str] = []
    for source in mcp_sources(host):
        try:
            cancelled += await cancel_parked(source, run_id)
        except Unavailable:
            continue
    return cancelled
