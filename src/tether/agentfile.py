"""Agents from a file: ``tether run --agent agent.yaml "objective"`` (YAML or TOML).

The file names everything a run needs; relative paths are relative to the file's folder::

    name: order-agent
    instructions: Answer from tool results only.        # or instructions_file: prompt.md
    model:
      name: qwen3:8b                                     # or "scripted:steps.yaml" (a stand-in, said so)
      base_url: http://127.0.0.1:11434/v1
      api_key_env: OLLAMA_KEY                            # the variable's name; the key is never stored
      streaming: false                                   # default: stream when shown live
      limits: {max_steps: 8, llm_calls: 10, deadline_s: 120}
      prices: {"qwen3:8b": {input: 0, output: 0}}
    tools:                                               # local tools, by import path
      - myapp.tools:read_order                           # a @tool, a plain function, or a list of them
      - {function: myapp.tools:send_note, effect: send, egress_argument: to,
         reconciler: myapp.tools:find_note}            # asked by key after a cut or a raise
    python_path: ["."]                                   # folders put on sys.path for the imports
    mcp: {config: mcp.yaml}                              # or inline: {servers: [...], host: {...}}
    policy:
      allow: [read_order, erp__read_order]               # default: every tool offered
      deny: []
      tenant: shopping-a
      roles: [maintenance-read]
      effects: {read_order: read}                        # effects of plain-function tools
      approvals_db: approvals.db                         # side effects pause for a person
    context: {status: true, compression: {strategy: adaptive, window_tokens: 8192},
              skills: {dir: skills, trusted: true}, tool_search: {threshold: 20}}
    trace: {dir: traces, results: false}                 # results: store tool output, redacted

``load_agent_file`` validates it (``ConfigError`` naming the file and the field);
``build_agent`` builds the ``Host`` and ``Agent`` through the public API. A run that may pause
(``policy.approvals_db``) records the file beside the approval store (``tether.agentrecord``),
so ``tether resume RUN`` rebuilds the same agent from another process.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tether.errors import ConfigError
from tether.tools.contract import Effect

if TYPE_CHECKING:
    from tether.host import Host
    from tether.policy.trusted import TrustedContext
    from tether.run import Agent

__all__ = [
    "APP",
    "AgentFile",
    "AgentSpec",
    "Built",
    "build_agent",
    "load_agent_file",
    "mcp_agent",
    "mcp_config",
    "parse_agent",
    "with_overrides",
]

APP = "tether.agentrecord:rebuild"  # the factory `tether resume` calls for runs started from a file
SCRIPTED = "scripted:"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitsSpec(_Strict):
    """``tether.Limits``, field for field; unset fields keep the library's defaults."""

    max_steps: int | None = Field(default=None, ge=1)
    llm_calls: int | None = Field(default=None, ge=1)
    llm_calls_hard: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    deadline_s: float | None = Field(default=None, gt=0)
    repeat_limit: int | None = Field(default=None, ge=1)
    max_identical_calls: int | None = Field(default=None, ge=1)
    max_malformed_turns: int | None = Field(default=None, ge=1)
    max_unavailable: int | None = Field(default=None, ge=1)
    final_turn_on_budget: bool | None = None
    final_turn_max_tokens: int | None = Field(default=None, ge=1)

    def build(self) -> Any:
        from tether.stop import Limits

        base = Limits()
        changes = {k: v for k, v in self.model_dump().items() if v is not None}
        if "llm_calls" in changes and "llm_calls_hard" not in changes:
            changes["llm_calls_hard"] = max(base.llm_calls_hard, changes["llm_calls"] + 2)
        try:
            return replace(base, **changes)
        except ValueError as err:
            raise ConfigError(f"model.limits: {err}") from None


class PriceSpec(_Strict):
    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)


class ModelSpec(_Strict):
    """The model: a chat-completions server, or a scripted stand-in named as one."""

    name: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    streaming: bool | None = None  # None: stream when the answer is shown as it arrives
    reasoning: Literal["drop", "keep", "since_last_user"] | None = None
    timeout_s: float = Field(default=120.0, gt=0, le=3600)
    max_retries: int = Field(default=4, ge=0, le=20)
    rate: float | None = Field(default=None, gt=0)  # requests per second (a shared token bucket)
    max_output_tokens: int | None = Field(default=None, ge=1)  # a cap on each response
    temperature: float | None = Field(default=None, ge=0, le=2)
    extra_body: dict[str, Any] = Field(default_factory=dict)  # more fixed request fields
    prices: dict[str, PriceSpec] = Field(default_factory=dict)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    # Scripted stand-ins only: obey "CALL x" found in tool results, to test the host's containment.
    obey_injected: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "api_key" in data:
            raise ValueError(
                "api_key is not read from files: put the key in an environment variable and name "
                "that variable with api_key_env"
            )
        return data

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if not _ENV_NAME.match(v):
            raise ValueError(f"{v[:4]}… is not an environment variable name (api_key_env names the variable)")
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return v

    @model_validator(mode="after")
    def _stand_in_only(self) -> ModelSpec:
        if self.obey_injected and not self.name.startswith(SCRIPTED):
            raise ValueError("obey_injected applies to a scripted stand-in (name: scripted:FILE) only")
        return self

    @property
    def scripted(self) -> str | None:
        """The script path of a scripted stand-in, or None for a real model."""
        return self.name[len(SCRIPTED) :] if self.name.startswith(SCRIPTED) else None


class ToolRef(_Strict):
    """A local tool by import path: a ``@tool``, a plain function, or a list/tuple of them."""

    function: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    name: str | None = None
    effect: Effect | None = None
    egress_argument: str | None = None
    timeout_s: float | None = Field(default=None, gt=0)
    needs_approval: bool | None = None
    # ``module:function`` called with an effect's idempotency key after the call was cut or
    # raised: the tool's own record of it (a dict), or None if it never happened.
    reconciler: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class McpSpec(_Strict):
    """MCP servers in the MCP host's own config format: a file (``config``) or inline."""

    config: str | None = None
    host: dict[str, Any] | None = None
    servers: list[dict[str, Any]] | None = None
    sampling: Literal["none", "model"] = "none"  # model: servers' sampling requests go to the agent's model
    consent: Literal["no", "yes", "console"] = "no"
    ask: Literal["auto", "never", "console"] = "auto"

    @model_validator(mode="after")
    def _one(self) -> McpSpec:
        if (self.config is None) == (self.servers is None):
            raise ValueError("give either config (a file) or servers (inline), not both or neither")
        if self.config is not None and self.host is not None:
            raise ValueError("host settings belong in the MCP config file when config is given")
        return self


class PermissionsSpec(_Strict):
    read: list[str] = Field(default_factory=list)
    write: list[str] = Field(default_factory=list)


class PolicySpec(_Strict):
    allow: list[str] | None = None
    deny: list[str] = Field(default_factory=list)
    tenant: str = Field(default="default", min_length=1)
    user: str | None = None
    roles: list[str] = Field(default_factory=list)
    permissions: PermissionsSpec = Field(default_factory=PermissionsSpec)
    effects: dict[str, Effect] = Field(default_factory=dict)
    automatic: list[Effect] = Field(default_factory=lambda: [Effect.READ])
    egress: list[str] = Field(default_factory=list)
    approvals_db: str | None = None
    on_denied: Literal["stop", "continue"] = "stop"


class StatusSpec(_Strict):
    strategy: Literal["auto", "append", "replace"] = "auto"
    todo: bool = True
    show_time: bool = True


class CompressionSpec(_Strict):
    strategy: Literal["none", "per_result", "task_aware", "adaptive"] = "adaptive"
    window_tokens: int | None = Field(default=None, ge=256)
    trigger: float = Field(default=0.8, ge=0.1, le=1.0)
    result_budget_chars: int | None = Field(default=None, ge=100)


class SkillsSpec(_Strict):
    dir: str
    trusted: bool = True
    approved: list[str] = Field(default_factory=list)


class ToolSearchSpec(_Strict):
    threshold: int = Field(default=20, ge=1)
    max_results: int = Field(default=5, ge=1)


class ContextSpec(_Strict):
    status: bool | StatusSpec = False
    compression: CompressionSpec | None = None
    skills: SkillsSpec | None = None
    tool_search: ToolSearchSpec | None = None


class TraceSpec(_Strict):
    dir: str = "tether-output/traces"
    results: bool = False  # store every tool result's content (redacted) beside the trace


class AgentSpec(_Strict):
    """The whole agent file."""

    name: str = Field(default="agent", min_length=1)
    instructions: str | None = None
    instructions_file: str | None = None
    model: ModelSpec
    tools: list[ToolRef] = Field(default_factory=list)
    python_path: list[str] = Field(default_factory=lambda: ["."])
    mcp: McpSpec | None = None
    policy: PolicySpec = Field(default_factory=PolicySpec)
    context: ContextSpec = Field(default_factory=ContextSpec)
    trace: TraceSpec = Field(default_factory=TraceSpec)

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_strings(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"function": t} if isinstance(t, str) else t for t in v]
        return v

    @model_validator(mode="after")
    def _instructions(self) -> AgentSpec:
        if (self.instructions is None) == (self.instructions_file is None):
            raise ValueError("give either instructions or instructions_file")
        return self


@dataclass(frozen=True)
class AgentFile:
    """A validated agent file: its spec, where it lives, and exactly what it said."""

    spec: AgentSpec
    path: Path | None  # None: built from command-line options (tether mcp run)
    base_dir: Path
    text: str
    sha256: str

    def resolve(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)

    def label(self) -> str:
        return str(self.path) if self.path is not None else "(command line)"


def _problems(err: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(x) for x in e['loc']) or '(top)'}: {e['msg'].removeprefix('Value error, ')}"
        for e in err.errors(include_url=False)
    )


def parse_agent(
    data: Mapping[str, Any], *, base_dir: Path, path: Path | None = None, text: str | None = None
) -> AgentFile:
    """Validate an agent spec given as a mapping. Raises ``ConfigError`` naming the field."""
    where = str(path) if path is not None else "agent"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: the top level must be a table/mapping")
    try:
        spec = AgentSpec.model_validate(dict(data))
    except ValidationError as err:
        raise ConfigError(f"{where}: {_problems(err)}") from None
    body = text if text is not None else json.dumps(spec.model_dump(mode="json"), sort_keys=True)
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    return AgentFile(spec, path, base_dir.resolve(), body, digest)


def is_agent_file(name: str) -> bool:
    """Whether ``name`` (an app on the command line) names an agent file, not ``module:factory``."""
    return name.lower().endswith((".yaml", ".yml", ".toml"))


def load_agent_file(path: str | Path) -> AgentFile:
    """Read a YAML (``.yaml``/``.yml``) or TOML (``.toml``) agent file. Raises ``ConfigError``."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read agent file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    af = _parse_text(text, path)
    return replace(af, sha256=hashlib.sha256(raw).hexdigest())  # of the bytes on disk


def _parse_text(text: str, path: Path) -> AgentFile:
    toml = path.suffix.lower() == ".toml"
    try:
        data = tomllib.loads(text) if toml else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: not valid {'TOML' if toml else 'YAML'}: {err}") from None
    return parse_agent(data, base_dir=path.resolve().parent, path=path.resolve(), text=text)


def with_overrides(agent_file: AgentFile, **model: Any) -> AgentFile:
    """The same file with model settings replaced (command-line options; ``None`` keeps the file's)."""
    spec = agent_file.spec
    changes = {k: v for k, v in model.items() if v is not None and k != "limits"}
    limits = {k: v for k, v in (model.get("limits") or {}).items() if v is not None}
    data = spec.model_dump(mode="json")
    data["model"].update(changes)
    if str(data["model"]["name"]).startswith(SCRIPTED):
        data["model"].pop("base_url", None)
    data["model"]["limits"] = {**data["model"]["limits"], **limits}
    if not changes and not limits:
        return agent_file
    try:
        new = AgentSpec.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{agent_file.label()} with the command line's options: {_problems(err)}") from None
    return replace(agent_file, spec=new)


# -- building -------------------------------------------------------------------------------


@dataclass
class Built:
    """What a run needs: the host, the agent, the trusted context, and what to close after."""

    host: Host
    agent: Agent
    context: TrustedContext
    agent_file: AgentFile
    model: Any
    approvals_db: Path | None = None

    async def aclose(self) -> None:
        close = getattr(self.model, "aclose", None)
        if close is not None:
            await close()


def _import(ref: str, where: str) -> Any:
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"{where}: cannot import {module_name!r}: {err}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{where}: module {module_name!r} has no {attr!r}") from None


def agent_digest(af: AgentFile) -> str:
    """sha256 of the agent file and every file it depends on that can be found: its
    instructions file, its scripted model's script, its MCP config file, and the source of each
    module its tools and reconcilers are imported from. A durable run is bound to this digest:
    editing any of them makes a new version (``tether.durable.versions``)."""
    import importlib.util

    spec = af.spec
    files: list[Path] = []
    for value in (spec.instructions_file, spec.model.scripted, spec.mcp.config if spec.mcp else None):
        if value:
            files.append(af.resolve(value))
    _python_path(af)
    for ref in spec.tools:
        for target in (ref.function, ref.reconciler):
            if not target:
                continue
            try:
                found = importlib.util.find_spec(target.partition(":")[0])
            except (ImportError, ValueError):
                continue
            if found is not None and found.origin and Path(found.origin).is_file():
                files.append(Path(found.origin))
    h = hashlib.sha256(af.sha256.encode())
    for path in sorted(set(files)):
        h.update(str(path).encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"<missing>")
    return h.hexdigest()


def _python_path(af: AgentFile) -> None:
    for entry in reversed(af.spec.python_path):
        folder = str(af.resolve(entry).resolve())
        if folder not in sys.path:
            sys.path.insert(0, folder)


def _local_tools(af: AgentFile, reconcilers: dict[str, Any] | None = None) -> list[Any]:
    """The file's local tools; each declared reconciler goes into ``reconcilers`` by tool name."""
    from tether.tools.contract import Tool

    spec = af.spec
    tools: list[Any] = []
    reconcilers = {} if reconcilers is None else reconcilers
    for i, ref in enumerate(spec.tools):
        where = f"{af.label()}: tools[{i}] ({ref.function})"
        found = _import(ref.function, where)
        items = list(found) if isinstance(found, (list, tuple)) else [found]
        for item in items:
            options = {
                k: v
                for k, v in (
                    ("name", ref.name),
                    ("egress_argument", ref.egress_argument),
                    ("timeout_s", ref.timeout_s),
                    ("needs_approval", ref.needs_approval),
                )
                if v is not None
            }
            try:
                if isinstance(item, Tool):
                    declared = ref.effect or spec.policy.effects.get(ref.name or item.name)
                    if declared is not None and declared != item.spec.effect:
                        raise ConfigError(
                            f"{where}: {item.name} declares effect {item.spec.effect} in code; the "
                            f"file says {declared}. Change one of them."
                        )
                    tool = item.with_options(**options) if options else item
                elif callable(item):
                    name = str(ref.name or getattr(item, "__name__", ""))
                    # An undeclared effect is a side effect: it needs approval (fail closed).
                    effect = ref.effect or spec.policy.effects.get(name) or Effect.WRITE
                    tool = Tool(item, effect=effect, **options)  # type: ignore[arg-type]
                else:
                    raise ConfigError(f"{where}: not a tool or a function ({type(item).__name__})")
            except TypeError as err:
                raise ConfigError(f"{where}: {err}") from None
            tools.append(tool)
            if ref.reconciler is not None:
                fn = _import(ref.reconciler, f"{af.label()}: tools[{i}].reconciler ({ref.reconciler})")
                if not callable(fn):
                    raise ConfigError(f"{where}: reconciler {ref.reconciler} is not callable")
                reconcilers[tool.name] = fn
    names = [t.name for t in tools]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"{af.label()}: tools: the same tool name twice: {', '.join(dup)}")
    return tools


def mcp_config(af: AgentFile) -> Any:
    from tether.mcp.config import McpConfig, load_config

    mcp = af.spec.mcp
    assert mcp is not None
    if mcp.config is not None:
        return load_config(af.resolve(mcp.config))
    data = {"servers": mcp.servers, "host": mcp.host or {}, "base_dir": af.base_dir}
    try:
        return McpConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{af.label()}: mcp: {_problems(err)}") from None


def make_model(af: AgentFile, *, on_delta: Callable[[str, str], None] | None = None) -> Any:
    """The agent's model: an ``OpenAICompatible`` backend, or a scripted stand-in named as one."""
    m = af.spec.model
    if (script := m.scripted) is not None:
        return scripted_model(af.resolve(script), label=m.name, obey=m.obey_injected)
    from tether.models.openai import OpenAICompatible, RetryPolicy
    from tether.models.pricing import DEFAULT_PRICES, Price

    prices = {**DEFAULT_PRICES, **{k: Price(p.input, p.output, p.cached_input) for k, p in m.prices.items()}}
    bucket = None
    if m.rate is not None:
        from tether.ratelimit import shared_bucket

        bucket = shared_bucket(f"model:{m.base_url or 'default'}", m.rate, max(1.0, m.rate))
    model = OpenAICompatible(
        m.name,
        base_url=m.base_url,
        api_key_env=m.api_key_env,
        stream=m.streaming,
        reasoning=m.reasoning,
        timeout_s=m.timeout_s,
        retry=RetryPolicy(max_retries=m.max_retries),
        prices=prices,
        rate_limit=bucket,
        on_delta=on_delta,
        max_tokens=m.max_output_tokens,
        extra_body={**m.extra_body, **({"temperature": m.temperature} if m.temperature is not None else {})},
    )
    if m.limits.max_cost_usd is not None and model.price is None:
        raise ConfigError(
            f"{af.label()}: model.limits.max_cost_usd needs a price for {m.name}: add model.prices"
        )
    return model


def scripted_model(path: Path, *, label: str | None = None, obey: bool = False) -> Any:
    """A scripted stand-in from a YAML/JSON list of ``{call, arguments}`` / ``[...]`` / ``{final}``.

    It is a test double: it makes exactly the listed calls and answers with what it observed."""
    from tether.mcpapp.runner import ScriptStep, StandIn
    from tether.testing import FunctionModel

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    except OSError as err:
        raise ConfigError(f"cannot read model script {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"model script {path}: not valid YAML/JSON: {err}") from None
    if not isinstance(data, list):
        raise ConfigError(f"model script {path}: expected a list of steps")
    try:
        steps = [ScriptStep.parse(item) for item in data]
    except ValueError as err:
        raise ConfigError(f"model script {path}: {err}") from None
    return FunctionModel(StandIn(steps, obey=obey), name=label or f"{SCRIPTED}{path}")


def _context_config(af: AgentFile) -> Any:
    c = af.spec.context
    if not (c.status or c.compression or c.skills or c.tool_search):
        return None
    from tether.context import (
        CompressionConfig,
        ContextConfig,
        SkillLibrary,
        StatusConfig,
        ToolSearchConfig,
    )

    status = None
    if c.status:
        s = c.status if isinstance(c.status, StatusSpec) else StatusSpec()
        status = StatusConfig(strategy=s.strategy, todo=s.todo, show_time=s.show_time)
    compression = CompressionConfig()
    if c.compression is not None:
        compression = CompressionConfig(
            strategy=c.compression.strategy,
            window_tokens=c.compression.window_tokens,
            trigger=c.compression.trigger,
            result_budget_chars=c.compression.result_budget_chars,
        )
    skills = None
    if c.skills is not None:
        folder = af.resolve(c.skills.dir)
        if not folder.is_dir():
            raise ConfigError(f"{af.label()}: context.skills.dir: {folder} is not a folder")
        skills = SkillLibrary()
        skills.add_folder(folder, trusted=c.skills.trusted, approved=c.skills.approved)
    search = None
    if c.tool_search is not None:
        search = ToolSearchConfig(threshold=c.tool_search.threshold, max_results=c.tool_search.max_results)
    return ContextConfig(status=status, compression=compression, skills=skills, tool_search=search)


def build_agent(
    af: AgentFile,
    *,
    approvals_db: Path | None = None,
    responder: Any = None,
    consent: Any = None,
    on_delta: Callable[[str, str], None] | None = None,
    trace_sinks: Sequence[Any] = (),
    environ: Mapping[str, str] | None = None,
    stores: Any = None,
    app: str = APP,
) -> Built:
    """The host and agent an agent file describes, built through the public API.

    ``approvals_db`` overrides ``policy.approvals_db``; ``responder`` answers MCP elicitations
    (None: nobody, questions pause); ``consent`` sees each sampling prompt. ``stores`` (a
    deployment's ``tether.storage_url.Stores``) replaces every SQLite file the agent would
    keep — approvals, ledger and checkpoints, MCP pins and pauses — and ``app`` names the
    factory its checkpoints record. Raises ``ConfigError``.
    """
    from tether.host import Host
    from tether.policy import Approvals, SqliteApprovalStore
    from tether.policy.rules import Allowlist, EffectApproval, Egress, Policy, TargetOwnership
    from tether.run import Agent

    spec = af.spec
    _python_path(af)
    reconcilers: dict[str, Any] = {}
    tools = _local_tools(af, reconcilers)
    instructions = spec.instructions
    if spec.instructions_file is not None:
        path = af.resolve(spec.instructions_file)
        try:
            instructions = path.read_text(encoding="utf-8")
        except OSError as err:
            why = f"{af.label()}: instructions_file: cannot read {path}: {err.strerror}"
            raise ConfigError(why) from None
    assert instructions is not None
    model = make_model(af, on_delta=on_delta)
    context_config = _context_config(af)

    db = approvals_db or (af.resolve(spec.policy.approvals_db) if spec.policy.approvals_db else None)
    approvals = None
    if stores is not None:
        db = None
        approvals = Approvals(stores.approvals, app=app, reconcilers=reconcilers)
    elif db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        approvals = Approvals(SqliteApprovalStore(db), app=app, reconcilers=reconcilers)

    p = spec.policy
    policy_args: dict[str, Any] = {
        "allow": p.allow,
        "deny": p.deny,
        "egress": p.egress,
        "automatic_effects": p.automatic,
    }
    trace_dir = af.resolve(spec.trace.dir)
    if spec.mcp is not None:
        from tether.mcpapp.hosting import build_host

        config = mcp_config(af)
        sampler = None
        if spec.mcp.sampling == "model":
            if spec.model.scripted is not None:
                raise ConfigError(
                    f"{af.label()}: mcp.sampling: model needs a real model; a scripted stand-in "
                    "cannot answer a server's sampling request"
                )
            sampler = model
        host = build_host(
            config,
            responder=responder,
            sampling_model=sampler,
            sampling_consent=consent,
            environ=environ,
            approvals=approvals,
            on_denied=p.on_denied,
            pins=stores.pins if stores is not None else None,
            pauses=stores.pauses if stores is not None else None,
        )
        # The pinned-capability rule (and any other MCP rule) stays after the file's own rules.
        standard = (Allowlist, Egress, EffectApproval, TargetOwnership)
        extra = [r for r in host.policy.rules if not isinstance(r, standard)]
        host.policy = Policy(**policy_args, rules=extra)
        host.trace_dir = trace_dir
    else:
        host = Host(
            policy=Policy(**policy_args), trace_dir=trace_dir, approvals=approvals, on_denied=p.on_denied
        )
    if tools:
        host.add_tools(*tools)
    host.extra_sinks.extend(trace_sinks)
    key = (environ if environ is not None else os.environ).get(spec.model.api_key_env, "")
    if key and spec.model.scripted is None:
        host.secrets = frozenset(host.secrets | {key})  # redacted should anything echo it
    agent = Agent(
        instructions=instructions,
        model=model,
        name=spec.name,
        limits=spec.model.limits.build(),
        context=context_config,
    )
    return Built(host, agent, trusted_context(af), af, model, db)


def trusted_context(af: AgentFile) -> TrustedContext:
    """The tenant, roles, user and permissions the file's policy gives its runs."""
    from tether.policy.trusted import Permissions, TrustedContext

    p = af.spec.policy
    perms = Permissions(read=frozenset(p.permissions.read), write=frozenset(p.permissions.write))
    return TrustedContext(tenant=p.tenant, roles=frozenset(p.roles), user=p.user, permissions=perms)


def mcp_agent(
    config_path: Path,
    *,
    model: Mapping[str, Any],
    instructions: str,
    tenant: str,
    user: str | None,
    sampling: str = "none",
    consent: str = "no",
    trace_dir: str,
    on_denied: str = "continue",
    name: str = "mcp-agent",
) -> AgentFile:
    """The agent ``tether mcp run`` builds from its options over one MCP config file."""
    data = {
        "name": name,
        "instructions": instructions,
        "model": dict(model),
        "mcp": {"config": str(Path(config_path).resolve()), "sampling": sampling, "consent": consent},
        "policy": {"tenant": tenant, "user": user, "on_denied": on_denied},
        "trace": {"dir": trace_dir},
    }
    return parse_agent(data, base_dir=Path.cwd())
