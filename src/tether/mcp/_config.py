"""The MCP host's configuration file (TOML or YAML): which servers, and what each may do.

Server ids are the owner's ``name`` keys, never a server's own name. Everything is opt-in: tools,
effects (undeclared = side-effecting), elicitation, sampling, roots and credentials. Other MCP
clients' forms are read too (``mcpServers``, ``type``, ``args``, ``${VAR}``).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tether.core._config_file import read_config_file
from tether.core._names import MAX_TOOL_NAME, SEPARATOR, offered_name, repeated
from tether.core._problems import validation_problems
from tether.core.types import Target
from tether.errors import ConfigError
from tether.tools._contract import Effect

__all__ = [
    "MAX_TOOL_NAME",
    "SEPARATOR",
    "ElicitationConfig",
    "HostSection",
    "McpConfig",
    "SamplingConfig",
    "ServerConfig",
    "load_config",
    "offered_name",
]

# Transport spellings of other MCP clients' configs (``type``) and of this one (``transport``).
_TRANSPORTS = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamableHttp": "http",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ElicitationConfig(_Strict):
    """Elicitation opt-in. Off: every request is declined without asking anyone."""

    enabled: bool = False
    url_mode: bool = False  # URL mode still needs an interactive person who consents
    max_answer_attempts: int = Field(default=3, ge=1, le=10)
    max_questions_per_call: int = Field(default=3, ge=1, le=20)


class SamplingConfig(_Strict):
    """Sampling opt-in and its separate budget (per server and session, and per tool call)."""

    enabled: bool = False
    max_tokens: int = Field(default=512, ge=1, le=32_000)  # cap per request
    max_calls: int = Field(default=3, ge=0, le=1000)  # per server, per session
    max_calls_per_call: int = Field(default=1, ge=1, le=100)  # per tool call of that server
    max_seconds: float = Field(default=60.0, gt=0)
    max_total_tokens: int = Field(default=4_000, ge=1)


class ServerConfig(_Strict):
    name: str
    transport: Literal["stdio", "http"]
    command: list[str] | None = None
    url: str | None = None
    cwd: str | None = None  # stdio working folder; default: the config file's folder
    mode: Literal["auto", "legacy"] = "auto"
    tools: list[str] | None = None  # allowed tools (remote names); None: every approved tool
    effects: dict[str, Effect] = Field(default_factory=dict)
    # tool -> the argument(s) holding where it sends (checked against the policy's egress list)
    egress: dict[str, str | tuple[str, ...]] = Field(default_factory=dict)
    # tool -> the argument naming the object it acts on and its kind in the policy's catalog
    targets: dict[str, Target] = Field(default_factory=dict)
    timeout_s: float = Field(default=30.0, gt=0, le=3600)
    max_result_chars: int = Field(default=20_000, ge=100, le=10_000_000)
    roots: list[str] = Field(default_factory=list)
    elicitation: ElicitationConfig = Field(default_factory=ElicitationConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    env: dict[str, str] = Field(default_factory=dict)  # plain, non-secret settings for a stdio child
    credentials: dict[str, str] = Field(default_factory=dict)  # NAME -> "env:VAR" | "file:PATH"
    headers: dict[str, str] = Field(default_factory=dict)  # http only; "{NAME}" expands a credential
    recheck: Literal["each_call", "on_change"] = "each_call"
    restart: Literal["never", "on_failure"] = "never"
    max_restarts: int = Field(default=2, ge=0, le=20)
    connect_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    progress_resets_timeout: bool = False  # each progress notification restarts timeout_s …
    max_call_s: float | None = Field(default=None, gt=0, le=86_400)  # … up to this ceiling
    # A task still running at its call's limit: pause the run (resuming waits on it) or cancel it.
    long_tasks: Literal["pause", "cancel"] = "pause"
    task_ttl_s: float = Field(default=86_400.0, gt=0, le=30 * 86_400)
    sandbox: Literal["auto", "required", "none"] = "auto"
    sandbox_read: list[str] = Field(default_factory=list)  # extra read-only paths
    sandbox_write: list[str] = Field(default_factory=list)  # extra read-write paths (not roots)
    roots_writable: bool = False  # a confined server may write into its roots only when set
    # none: its own loopback only; "host:port" entries: only those, through the host's proxy;
    # any: the host's network, loopback services included.
    network: Literal["none", "any"] | tuple[str, ...] = "none"
    allow_network: bool = False  # older spelling of network: any

    @model_validator(mode="before")
    @classmethod
    def _ordinary(cls, data: Any) -> Any:
        """Other MCP clients' form: ``command`` with ``args``, the transport as ``type`` or implied."""
        if not isinstance(data, dict):
            return data
        data = _renamed(data, "type", "transport")
        kind = data.get("transport")
        if kind in ("sse", "SSE"):
            raise ValueError(
                "the SSE transport (2024-11-05) is not supported: use Streamable HTTP (transport: "
                "http, `url` at the server's Streamable HTTP endpoint, often `/mcp`; some servers "
                "serve it only in another mode or with a flag), or the server's stdio form (`command`)"
            )
        if kind is None and ("command" in data) != ("url" in data):
            data["transport"] = "stdio" if "command" in data else "http"
        elif isinstance(kind, str) and kind in _TRANSPORTS:
            data["transport"] = _TRANSPORTS[kind]
        if "args" in data:
            args, command = data.pop("args"), data.get("command")
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ValueError("args must be a list of strings")
            if isinstance(command, str):  # an executable (a path may have spaces), not a command line
                data["command"] = [command, *args]
            elif isinstance(command, list):
                data["command"] = [*command, *args]
            else:
                raise ValueError("args given without command")
        return _variables(data)

    @field_validator("network", mode="before")
    @classmethod
    def _network(cls, v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            from tether.mcp._netallow import allowlist

            entries = tuple(e.text for e in allowlist(v))  # ValueError naming a bad entry
            return entries or "none"  # an empty allowlist lets nothing through
        if isinstance(v, str) and v not in ("none", "any"):
            raise ValueError(f"network {v!r}: none, any, or a list of host:port entries ([{v!r}])")
        return v

    @property
    def network_access(self) -> Literal["none", "any"] | tuple[str, ...]:
        return "any" if self.allow_network else self.network

    @field_validator("name")
    @classmethod
    def _id(cls, v: str) -> str:
        if not v or SEPARATOR in v or not v.replace("-", "").replace("_", "").isalnum() or not v.isascii():
            raise ValueError(
                f"server id {v!r} must be ASCII letters/digits (with - or _), without {SEPARATOR!r}"
            )
        if v in ("local", "harness"):  # the host's own tools' sources: a server so named would pass for them
            raise ValueError(f"server id {v!r} is reserved for the host's own tools: choose another")
        return v

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        return shlex.split(v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _transport(self) -> ServerConfig:
        if self.transport == "stdio":
            if not self.command or self.url is not None:
                raise ValueError(f"server {self.name}: stdio needs command (and no url)")
        else:
            if not self.url or self.command is not None:
                raise ValueError(f"server {self.name}: http needs url (and no command)")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"server {self.name}: url must be http(s)")
        if self.command and self.command[0].lower() in ("cmd", "cmd.exe") and os.name != "nt":
            raise ValueError(
                f"server {self.name}: {shlex.join(self.command[:2])} is a Windows command line; "
                f"here write the command it runs ({shlex.join(self.command[2:]) or 'the command'})"
            )
        if self.headers and self.transport != "http":
            raise ValueError(f"server {self.name}: headers apply to http servers only")
        if self.env and self.transport != "stdio":
            raise ValueError(f"server {self.name}: env applies to stdio servers only")
        confined = (self.sandbox == "required", self.sandbox_read, self.sandbox_write, self.allow_network)
        if self.transport != "stdio" and (any(confined) or self.network != "none" or self.roots_writable):
            raise ValueError(f"server {self.name}: sandbox settings apply to stdio servers only")
        if self.allow_network and isinstance(self.network, tuple):
            raise ValueError(f"server {self.name}: allow_network (network: any) contradicts an allowlist")
        if self.max_call_s is not None and self.max_call_s < self.timeout_s:
            raise ValueError(f"server {self.name}: max_call_s must be at least timeout_s")
        if overlap := set(self.env) & set(self.credentials):
            raise ValueError(f"server {self.name}: {sorted(overlap)} both in env and credentials")
        for what, tools in (("effect", self.effects), ("egress", self.egress), ("target", self.targets)):
            for tool in tools:
                if self.tools is not None and tool not in self.tools:
                    raise ValueError(
                        f"server {self.name}: {what} declared for {tool!r}, which is not in tools"
                    )
        return self

    def argv(self) -> list[str]:
        """The exact command launched: ``{python}`` stands for this interpreter, and a part that
        starts with ``~`` alone or ``~/`` for the home folder, as a shell reads it (a server
        configured as ``~/bin/srv`` or ``python ~/srv.py`` was looked for in a folder named ``~``:
        not found, or started only to fail)."""
        assert self.command is not None
        return [sys.executable if part == "{python}" else _home(part) for part in self.command]


def _home(part: str) -> str:
    return os.path.expanduser(part) if part == "~" or part.startswith("~/") else part


class HostSection(_Strict):
    pins: str = "mcp-pins.db"
    state: str = "mcp-state.db"
    trace_dir: str = "tether-output/traces"
    tenant: str = "default"
    user: str | None = None
    logs: str = "tether-output/mcp-logs"  # per-server stderr log files
    # terminal: server stderr (escaped, rate-limited) and progress also shown on stderr; log: file only
    server_stderr: Literal["terminal", "log"] = "terminal"
    bwrap: str | None = None  # the bubblewrap executable (default: bwrap on PATH)


class McpConfig(_Strict):
    host: HostSection = Field(default_factory=HostSection)
    servers: list[ServerConfig]
    base_dir: Path = Path(".")

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        """Servers as a mapping of id to settings (``servers`` or other clients' ``mcpServers``)."""
        if not isinstance(data, dict) or (
            "mcpServers" not in data and not isinstance(data.get("servers"), dict)
        ):
            return data
        data = _renamed(data, "mcpServers", "servers")
        servers = data["servers"]
        if isinstance(servers, dict):
            listed = []
            for name, settings in servers.items():
                if not isinstance(settings, dict) or settings.get("name", name) != name:
                    raise ValueError(
                        f"server {name!r}: its settings must be a mapping (without another name)"
                    )
                listed.append({**settings, "name": name})
            data["servers"] = listed
        return data

    @model_validator(mode="after")
    def _unique(self) -> McpConfig:
        if dup := repeated(s.name for s in self.servers):
            raise ValueError(f"duplicate server id {', '.join(map(repr, dup))}")
        return self

    def server(self, name: str) -> ServerConfig:
        for s in self.servers:
            if s.name == name:
                return s
        known = ", ".join(s.name for s in self.servers) or "none"
        raise ConfigError(f"no server named {name!r} in the config (known: {known})")

    def path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return Path(os.path.normpath(p if p.is_absolute() else self.base_dir / p))


def load_config(path: str | Path, *, raw: bytes | None = None) -> McpConfig:
    """Read a TOML or YAML config (``raw``: its bytes, read before). Raises ``ConfigError``."""
    path = Path(path)
    _, _, data = read_config_file(path, "MCP config", raw=raw)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a table/mapping")
    try:
        return McpConfig.model_validate({**data, "base_dir": path.resolve().parent})
    except ValidationError as err:
        raise ConfigError(f"{path}: {validation_problems(err, model=McpConfig)}") from None


# ``${VAR}``, ``${env:VAR}`` and ``${VAR:-default}`` (taken when unset or empty); any other ``${`` is refused.
_VAR = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^${}]*))?\}")


def _variables(data: dict[str, Any]) -> dict[str, Any]:
    """Environment variables in a server's settings. A whole ``env`` value, or one in a header,
    becomes a credential read at start; anywhere else it is expanded now (``_expanded``)."""
    name = data.get("name")
    creds, out = dict(data.get("credentials") or {}), dict(data)

    def declared(found: re.Match[str], key: str | None = None) -> str:
        var, default = found.group(1), found.group(2)
        creds.setdefault(key or var, f"env:{var}" + (f":-{default}" if default is not None else ""))
        return "{" + (key or var) + "}"

    if isinstance(env := data.get("env"), dict):
        variables = {k: m for k, v in env.items() if isinstance(v, str) and (m := _VAR.fullmatch(v))}
        out["env"] = {k: _expanded(name, f"env {k}", v) for k, v in env.items() if k not in variables}
        for key, found in variables.items():
            declared(found, key)
    if isinstance(headers := data.get("headers"), dict):
        out["headers"] = {
            k: _VAR.sub(declared, _understood(name, f"header {k}", v)) for k, v in headers.items()
        }
    for key in ("url", "cwd"):
        out[key] = _expanded(name, key, data.get(key))
    command = data.get("command")
    if isinstance(command, list):
        out["command"] = [_expanded(name, "command", part) for part in command]
    elif isinstance(command, str):
        out["command"] = _expanded(name, "command", command)
    out = {k: v for k, v in out.items() if k in data or v is not None}
    return {**out, "credentials": creds} if creds else out


def _understood(server: Any, where: str, value: Any) -> Any:
    if isinstance(value, str) and "${" in _VAR.sub("", value):
        raise ValueError(
            f"server {server}: {where}: only ${{VAR}}, ${{env:VAR}} and ${{VAR:-default}} are "
            f"expanded, not {value[value.index('${', 0) :][:40]!r}"
        )
    return value


def _expanded(server: Any, where: str, value: Any) -> Any:
    """``value`` expanded from this process's environment (a provider's own key refused)."""
    from tether.mcp._credentials import PROVIDER_ENV

    def one(found: re.Match[str]) -> str:
        var, default = found.group(1), found.group(2)
        if var in PROVIDER_ENV:
            raise ValueError(
                f"server {server}: {where} would pass on {var}, a user/model-provider credential"
            )
        got = os.environ.get(var)
        if default is not None and not got:
            return default
        if got is None:
            raise ValueError(
                f"server {server}: {where} needs environment variable {var}, which is not set "
                f"(or write ${{{var}:-default}})"
            )
        return got

    return _VAR.sub(one, _understood(server, where, value)) if isinstance(value, str) else value


def _renamed(data: dict[str, Any], other: str, ours: str) -> dict[str, Any]:
    """A copy of ``data`` with another client's key ``other`` under ours."""
    data = dict(data)
    if other in data:
        if ours in data:
            raise ValueError(f"give {ours} or {other}, not both")
        data[ours] = data.pop(other)
    return data
