"""Build a governed ``Host`` from an MCP config file: one client per server (``build_source``),
every gate wired, and a policy rule denying tools no longer approved."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from tether.errors import ConfigError
from tether.host import Host
from tether.mcp._config import McpConfig
from tether.mcp._elicitation import Responder
from tether.mcp._hosting import PinnedCapabilities, build_source
from tether.mcp._pauses import PauseStore
from tether.mcp._pinning import PinStore
from tether.mcp._sampling import Consent
from tether.mcp._source import McpServerSource
from tether.models._base import Model
from tether.policy._rules import Policy

__all__ = ["build_host"]


def build_host(
    config: McpConfig,
    *,
    responder: Responder | None = None,
    sampling_model: Model | None = None,
    sampling_consent: Consent | None = None,
    environ: Mapping[str, str] | None = None,
    servers: Iterable[str] | None = None,
    on_denied: Literal["stop", "continue"] = "continue",
    use_pins: bool = True,
    approvals: Any = None,
    pins: Any = None,
    pauses: Any = None,
) -> Host:
    """A host with every configured server (or the named ones). Raises ``ConfigError``.
    ``pins`` and ``pauses`` replace the config's SQLite stores (e.g. a deployment's)."""
    environ = os.environ if environ is None else environ
    if pins is None and use_pins:
        pins = PinStore(config.path(config.host.pins))
    elif not use_pins:
        pins = None
    if pauses is None:
        pauses = PauseStore(config.path(config.host.state))
    wanted = set(servers) if servers is not None else None
    sources: dict[str, McpServerSource] = {}
    secrets: set[str] = set()
    for server in config.servers:
        if wanted is not None and server.name not in wanted:
            continue
        source, found = build_source(
            server,
            config,
            pins=pins,
            pauses=pauses,
            responder=responder,
            sampling_model=sampling_model,
            sampling_consent=sampling_consent,
            environ=environ,
            fail_soft=True,
        )
        sources[server.name] = source
        secrets |= found
    if wanted is not None and (missing := wanted - set(sources)):
        raise ConfigError(f"no server named {', '.join(sorted(missing))} in the config")
    host = Host(
        policy=Policy(rules=[PinnedCapabilities(sources)]),
        trace_dir=config.path(config.host.trace_dir),
        secrets=secrets,
        on_denied=on_denied,
        approvals=approvals,  # side-effecting MCP calls then pause for approval instead of failing closed
    )
    for source in sources.values():
        # Every server connects concurrently: the first one started launches the others too.
        source.peers = [s for s in sources.values() if s is not source]
        if approvals is None:  # nothing could resume a run paused on a long task
            source.long_tasks = "cancel"
        host.add_source(source)
    return host
