"""Agents from a file: ``tether run --agent agent.yaml "objective"`` (YAML or TOML).

The file names everything a run needs; relative paths are relative to the file's folder::

    name: order-agent
    instructions: Answer from tool results only.        # or instructions_file: prompt.md
    model:
      provider: openai-chat                              # or openai-responses, anthropic
      name: qwen3:8b                                     # or "scripted:steps.yaml" (a stand-in, said so)
      base_url: http://127.0.0.1:11434/v1
      api_key_env: OLLAMA_KEY                            # the variable's name; the key is never stored
      streaming: false                                   # default: stream when shown live
      limits: {max_steps: 8, llm_calls: 10, deadline_s: 120}
      prices: {"qwen3:8b": {input: 0, output: 0}}
      fallback: [{provider: anthropic, name: claude-sonnet-4-5}]   # when the model in use fails
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

``load_agent_file`` validates it (``ConfigError`` naming the file and the field); ``tether agent
schema`` prints its JSON Schema, generated from the models below;
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
from dataclasses import dataclass, field, replace
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
    # A field's docstring is its description in the generated JSON Schema (tether agent schema).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class LimitsSpec(_Strict):
    """``tether.Limits``, field for field; unset fields keep the library's defaults."""

    max_steps: int | None = Field(default=None, ge=1)
    """most tool turns a run takes (default 12)"""
    llm_calls: int | None = Field(default=None, ge=1)
    """model calls per run before the budget trips (default 16)"""
    llm_calls_hard: int | None = Field(default=None, ge=1)
    """the ceiling above llm_calls that only the final turn may use"""
    max_tokens: int | None = Field(default=None, ge=1)
    """prompt + completion tokens over the run"""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """USD over the run (the model must be priced)"""
    deadline_s: float | None = Field(default=None, gt=0)
    """seconds for the whole run (default 120)"""
    repeat_limit: int | None = Field(default=None, ge=1)
    """how often the same cycle of calls may repeat"""
    max_identical_calls: int | None = Field(default=None, ge=1)
    """how often one identical call may be made"""
    max_malformed_turns: int | None = Field(default=None, ge=1)
    """malformed tool-call turns in a row before model_error"""
    max_unavailable: int | None = Field(default=None, ge=1)
    """failures of one source before dependency_unavailable"""
    final_turn_on_budget: bool | None = None
    """one last model turn without tools when a budget trips"""
    final_turn_max_tokens: int | None = Field(default=None, ge=1)
    """the output cap of that last turn"""

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
    """USD per million tokens."""

    input: float = Field(ge=0, description="uncached prompt tokens")
    output: float = Field(ge=0, description="completion tokens (reasoning included)")
    cached_input: float | None = Field(default=None, ge=0, description="prompt tokens read from the cache")
    cache_write: float | None = Field(default=None, ge=0, description="prompt tokens written to the cache")


Provider = Literal["openai-chat", "openai-responses", "anthropic"]

# The key's variable when the file names none, by provider.
KEY_ENV: dict[str, str] = {
    "openai-chat": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}


class BackendSpec(_Strict):
    """One model and how to reach it: a provider's API, or a scripted stand-in named as one."""

    provider: Provider = Field(
        default="openai-chat",
        description="the protocol: openai-chat (chat completions: OpenAI, vLLM, Ollama, llama.cpp …), "
        "openai-responses (the OpenAI Responses API) or anthropic (the Anthropic Messages API)",
    )
    name: str = Field(min_length=1, description="the provider's model name, or scripted:STEPS.yaml")
    base_url: str | None = Field(
        default=None,
        description="the API's base URL (default: $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL or the provider's)",
    )
    api_key_env: str | None = Field(
        default=None,
        description="the environment variable holding the key (default OPENAI_API_KEY, or ANTHROPIC_API_KEY "
        "for anthropic); the key itself is never read from a file",
    )
    streaming: bool | None = Field(
        default=None, description="ask for a stream (default: when the answer is shown as it arrives)"
    )
    reasoning: Literal["drop", "keep", "since_last_user"] | None = Field(
        default=None, description="openai-chat: resend reasoning_content (default: by model name)"
    )
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = Field(
        default=None, description="openai-responses: the reasoning effort of a reasoning model"
    )
    thinking_budget: int | None = Field(
        default=None, ge=1024, description="anthropic: extended thinking with this many tokens"
    )
    timeout_s: float = Field(
        default=120.0, gt=0, le=3600, description="bound on each call attempt as a whole, every byte included"
    )
    max_retries: int = Field(
        default=4, ge=0, le=20, description="retries of 429, 5xx, timeouts, broken answers"
    )
    rate: float | None = Field(default=None, gt=0, description="requests per second (a shared token bucket)")
    max_output_tokens: int | None = Field(default=None, ge=1, description="a cap on each response")
    temperature: float | None = Field(default=None, ge=0, le=2, description="sampling temperature")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="more fixed request fields (never those the backend writes)"
    )

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
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not _ENV_NAME.match(v):
            raise ValueError(f"{v[:4]}… is not an environment variable name (api_key_env names the variable)")
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return v

    @model_validator(mode="after")
    def _provider_fields(self) -> BackendSpec:
        for name, provider in (
            ("reasoning", "openai-chat"),
            ("reasoning_effort", "openai-responses"),
            ("thinking_budget", "anthropic"),
        ):
            if getattr(self, name) is not None and self.provider != provider:
                raise ValueError(f"{name} applies to provider {provider} only (this model: {self.provider})")
        return self

    @property
    def key_env(self) -> str:
        """The variable the key is read from: the file's, or the provider's default."""
        return self.api_key_env or KEY_ENV[self.provider]

    @property
    def scripted(self) -> str | None:
        """The script path of a scripted stand-in, or None for a real model."""
        return self.name[len(SCRIPTED) :] if self.name.startswith(SCRIPTED) else None


class ModelSpec(BackendSpec):
    """The model, its budgets and prices, and the models to fall back on."""

    prices: dict[str, PriceSpec] = Field(
        default_factory=dict, description="USD per million tokens by model name (over the built-in table)"
    )
    limits: LimitsSpec = Field(
        default_factory=LimitsSpec, description="the run's budgets and stop conditions"
    )
    fallback: list[BackendSpec] = Field(
        default_factory=list,
        description="models to move to, in order, when the one in use fails (retries spent, unavailable); "
        "the run's budgets count across all of them",
    )
    # Scripted stand-ins only: obey "CALL x" found in tool results, to test the host's containment.
    obey_injected: bool = Field(
        default=False, description="scripted stand-ins only: obey CALL lines found in tool results"
    )

    @model_validator(mode="after")
    def _stand_in_only(self) -> ModelSpec:
        if self.obey_injected and not self.name.startswith(SCRIPTED):
            raise ValueError("obey_injected applies to a scripted stand-in (name: scripted:FILE) only")
        return self

    def backends(self) -> list[BackendSpec]:
        """This model, then its fallbacks."""
        return [self, *self.fallback]


class ToolRef(_Strict):
    """A local tool by import path: a ``@tool``, a plain function, or a list/tuple of them."""

    function: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """the tool by import path, module:name (a @tool, a function, or a list of them)"""
    name: str | None = None
    """the name the model sees (default: the function's)"""
    effect: Effect | None = None
    """read, write, send, purchase or delete (an undeclared function is a write)"""
    egress_argument: str | None = None
    """the argument holding a destination, checked against policy.egress"""
    timeout_s: float | None = Field(default=None, gt=0)
    """seconds a call may take"""
    needs_approval: bool | None = None
    """always ask a person before a call"""
    reconciler: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """module:function asked with an effect's idempotency key after the call was cut or raised:
    the tool's own record of it (a dict), or None if it never happened"""


class McpSpec(_Strict):
    """MCP servers in the MCP host's own config format: a file (``config``) or inline."""

    config: str | None = None
    """an MCP host config file (servers, effects, host settings)"""
    host: dict[str, Any] | None = None
    """host settings inline (with servers)"""
    servers: list[dict[str, Any]] | None = None
    """MCP servers inline, in the config file's format"""
    sampling: Literal["none", "model"] = "none"  # model: servers' sampling requests go to the agent's model
    """model: servers' sampling requests go to the agent's model"""
    consent: Literal["no", "yes", "console"] = "no"
    """who consents to each sampling prompt: no, yes or console"""
    ask: Literal["auto", "never", "console"] = "auto"
    """who answers a server's elicitation: auto, never or console"""

    @model_validator(mode="after")
    def _one(self) -> McpSpec:
        if (self.config is None) == (self.servers is None):
            raise ValueError("give either config (a file) or servers (inline), not both or neither")
        if self.config is not None and self.host is not None:
            raise ValueError("host settings belong in the MCP config file when config is given")
        return self


class PermissionsSpec(_Strict):
    read: list[str] = Field(default_factory=list)
    """what the run may read (handoff permissions)"""
    write: list[str] = Field(default_factory=list)
    """what the run may write (handoff permissions)"""


class ProvenanceSpec(_Strict):
    """Provenance-aware rules: where each argument of each side-effecting tool may come from.
    With them, the rules decide which effects need a person (instead of every effect)."""

    file: str | None = Field(
        default=None,
        description="a YAML file holding trust, tools, directory and own (relative to this file)",
    )
    trust: dict[str, Any] = Field(
        default_factory=dict,
        description="trust classes per source and field: {default: {...}, sources: {tool: {default, "
        "fields, record_id, author, naming, self_naming}}}",
    )
    tools: dict[str, Any] = Field(
        default_factory=dict,
        description="per tool: effect, requested_by, no_flow, no_relay and arguments "
        "{name: {role, from, …}}; every argument of every side-effecting tool must be declared",
    )
    directory: dict[str, list[str]] = Field(
        default_factory=dict,
        description="curated destinations by kind ({mailbox: [...], account: [...], member: [...]}): "
        "each entry vouches for its own kind only",
    )
    own: list[str] = Field(default_factory=list, description="the user's own identities (address, account)")
    mode: Literal["matching", "reference"] = Field(
        default="matching",
        description="matching: values traced by whole-value matching; reference: the model passes values "
        'from tool results by handle ({"$ref": ...}), resolved by the host',
    )

    @model_validator(mode="after")
    def _file_or_inline(self) -> ProvenanceSpec:
        if self.file is not None and (self.trust or self.tools or self.directory or self.own):
            raise ValueError("give provenance.file or inline trust/tools/directory/own, not both")
        return self


class PolicySpec(_Strict):
    allow: list[str] | None = None
    """tools the model may see and call (default: every tool offered)"""
    deny: list[str] = Field(default_factory=list)
    """tools never offered"""
    tenant: str = Field(default="default", min_length=1)
    """the tenant every run acts for (from the host, never from the model)"""
    user: str | None = None
    """the user runs act for"""
    roles: list[str] = Field(default_factory=list)
    """the roles of the run (memory ACLs, role rules)"""
    permissions: PermissionsSpec = Field(default_factory=PermissionsSpec)
    """read and write permissions a handoff may carry"""
    effects: dict[str, Effect] = Field(default_factory=dict)
    """effects of plain-function tools by name"""
    automatic: list[Effect] = Field(default_factory=lambda: [Effect.READ])
    """effects that run without approval (default: read)"""
    egress: list[str] = Field(default_factory=list)
    """hosts or e-mail domains a tool may send to"""
    approvals_db: str | None = None
    """SQLite approval store: side effects pause for a person"""
    on_denied: Literal["stop", "continue"] = "stop"
    """stop the run at a denied call, or continue (the model sees the denial)"""
    catalog: dict[str, dict[str, str]] | None = Field(
        default=None,
        description="the trusted owner of each target, {kind: {id: tenant}}: a call whose target is "
        "unknown or another tenant's is denied (tools declare their target argument)",
    )
    catalog_file: str | None = Field(default=None, description="the same catalog in a YAML or JSON file")
    provenance: ProvenanceSpec | None = Field(
        default=None, description="provenance rules per tool argument (see ProvenanceSpec)"
    )

    @model_validator(mode="after")
    def _one_catalog(self) -> PolicySpec:
        if self.catalog is not None and self.catalog_file is not None:
            raise ValueError("give catalog or catalog_file, not both")
        return self


class MemorySpec(_Strict):
    """Governed durable memory: what the run recalls before any tool runs, and what it may write."""

    db: str = Field(description="the SQLite file of the store (created when missing)")
    subjects: list[str] = Field(
        default_factory=list,
        description="subjects recalled at the start of each run (expired and foreign "
        "records never enter the context)",
    )
    approved_sources: list[str] = Field(
        default_factory=list, description="source systems whose records the store accepts on write"
    )
    disabled: list[str] = Field(default_factory=list, description="subjects never read (a rollback)")


class HooksSpec(_Strict):
    """Host code the run calls, by import path (``module:function``)."""

    verify: str | None = Field(
        default=None, description="(state, answer) -> problem or None: accept or reject a final answer"
    )
    check_claims: bool = Field(
        default=False,
        description='reject a final answer that claims an action ("I e-mailed the buyer") when no '
        "side-effecting call succeeded in the run",
    )
    handoff: str | None = Field(
        default=None, description="(state, answer) -> the handoff to validate, or None"
    )
    resolve_evidence: str | None = Field(
        default=None, description='(ref, state) -> bool; "trace": backed by the run\'s own successful calls'
    )
    remember: str | None = Field(default=None, description="(state) -> memory records to propose")


class StatusSpec(_Strict):
    strategy: Literal["auto", "append", "replace"] = "auto"
    """how the status bar enters the context: auto, append or replace"""
    todo: bool = True
    """offer the TODO-list tools"""
    show_time: bool = True
    """show the time in the status bar"""


class CompressionSpec(_Strict):
    strategy: Literal["none", "per_result", "task_aware", "adaptive"] = "adaptive"
    """none, per_result, task_aware or adaptive"""
    window_tokens: int | None = Field(default=None, ge=256)
    """the model's context window"""
    trigger: float = Field(default=0.8, ge=0.1, le=1.0)
    """fraction of the window at which compression starts"""
    result_budget_chars: int | None = Field(default=None, ge=100)
    """characters of a tool result kept in context (the rest stored)"""


class SkillsSpec(_Strict):
    dir: str
    """a folder of skills (one SKILL.md each)"""
    trusted: bool = True
    """whether the folder's skills are trusted instructions"""
    approved: list[str] = Field(default_factory=list)
    """skills approved by digest when the folder is untrusted"""


class ToolSearchSpec(_Strict):
    threshold: int = Field(default=20, ge=1)
    """offer tool search above this many tools"""
    max_results: int = Field(default=5, ge=1)
    """tools one search returns"""


class SubagentSpec(_Strict):
    """A subagent the model calls as a tool ``name(task)``: a fresh run in its own context, on
    the same host (the same gate, policy and tenant), its answer returned as the tool result."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
    """the tool name the model calls"""
    description: str = Field(min_length=1)
    """what the subagent does, as the model reads it"""
    instructions: str = Field(min_length=1)
    """the subagent's system prompt"""
    tools: list[str] | None = None
    """the host's tools it may use (default: every tool the policy offers)"""
    model: BackendSpec | None = None
    """its model (default: the agent's own)"""
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    """its run's budgets"""
    max_chars: int = Field(default=2000, ge=100)
    """characters of its answer handed back"""


class ContextSpec(_Strict):
    status: bool | StatusSpec = False
    """the <agent_status> bar: true, or its settings"""
    compression: CompressionSpec | None = None
    """how long histories are compressed"""
    skills: SkillsSpec | None = None
    """a skills folder"""
    tool_search: ToolSearchSpec | None = None
    """tool search for large tool sets"""
    subagents: list[SubagentSpec] = Field(default_factory=list)
    """subagents the model may delegate a task to"""


class TraceSpec(_Strict):
    dir: str = Field(default="tether-output/traces", description="the folder of the JSONL traces")
    results: bool = Field(
        default=False, description="store every tool result's content (redacted) beside the trace"
    )
    otel: bool = Field(
        default=False,
        description="also export OpenTelemetry spans over OTLP/HTTP as the OTEL_* variables say "
        "(pip install 'tether[otel]')",
    )


class AgentSpec(_Strict):
    """The whole agent file."""

    name: str = Field(default="agent", min_length=1)
    """the agent's name in traces"""
    instructions: str | None = None
    """the system prompt"""
    instructions_file: str | None = None
    """the system prompt from a file"""
    model: ModelSpec
    """the model, its budgets, prices and fallbacks"""
    tools: list[ToolRef] = Field(default_factory=list)
    """local tools by import path"""
    python_path: list[str] = Field(default_factory=lambda: ["."])
    """folders put on sys.path for the imports"""
    mcp: McpSpec | None = None
    """MCP servers"""
    policy: PolicySpec = Field(default_factory=PolicySpec)
    """what runs may do: tools, tenant, roles, effects, egress, approvals, catalog"""
    context: ContextSpec = Field(default_factory=ContextSpec)
    """status bar, compression, skills, tool search"""
    trace: TraceSpec = Field(default_factory=TraceSpec)
    """where traces go"""
    memory: MemorySpec | None = None
    """governed durable memory"""
    hooks: HooksSpec = Field(default_factory=HooksSpec)
    """host code the run calls"""

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
    extra_models: list[Any] = field(default_factory=list)  # subagents' own models

    async def aclose(self) -> None:
        for model in (self.model, *self.extra_models):
            close = getattr(model, "aclose", None)
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
    from tether.tools.contract import Tool, ToolOptions

    spec = af.spec
    tools: list[Any] = []
    reconcilers = {} if reconcilers is None else reconcilers
    for i, ref in enumerate(spec.tools):
        where = f"{af.label()}: tools[{i}] ({ref.function})"
        found = _import(ref.function, where)
        items = list(found) if isinstance(found, (list, tuple)) else [found]
        for item in items:
            options: ToolOptions = {}
            if ref.name is not None:
                options["name"] = ref.name
            if ref.egress_argument is not None:
                options["egress_argument"] = ref.egress_argument
            if ref.timeout_s is not None:
                options["timeout_s"] = ref.timeout_s
            if ref.needs_approval is not None:
                options["needs_approval"] = ref.needs_approval
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
                    with_effect: ToolOptions = {**options, "effect": effect}
                    tool = Tool(item, **with_effect)
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
    """The agent's model: a backend for its provider (``OpenAICompatible``, ``OpenAIResponses``,
    ``AnthropicMessages``) or a scripted stand-in named as one; with ``model.fallback``, a
    ``FallbackModel`` over it and its fallbacks. Raises ``ConfigError``."""
    m = af.spec.model
    prices = _prices(m)
    models = [_backend(af, spec, prices, on_delta) for spec in m.backends()]
    if m.limits.max_cost_usd is not None:
        for spec, model in zip(m.backends(), models, strict=True):
            if spec.scripted is None and getattr(model, "price", None) is None:
                raise ConfigError(
                    f"{af.label()}: model.limits.max_cost_usd needs a price for {spec.name}: add model.prices"
                )
    if len(models) == 1:
        return models[0]
    from tether.models.fallback import FallbackModel

    return FallbackModel(models)


def _prices(m: ModelSpec) -> dict[str, Any]:
    from tether.models.pricing import DEFAULT_PRICES, Price

    own = {k: Price(p.input, p.output, p.cached_input, p.cache_write) for k, p in m.prices.items()}
    return {**DEFAULT_PRICES, **own}


def _backend(
    af: AgentFile, spec: BackendSpec, prices: Mapping[str, Any], on_delta: Callable[[str, str], None] | None
) -> Any:
    if (script := spec.scripted) is not None:
        obey = isinstance(spec, ModelSpec) and spec.obey_injected
        return scripted_model(af.resolve(script), label=spec.name, obey=obey)
    from tether.models.retrying import RetryPolicy

    bucket = None
    if spec.rate is not None:
        from tether.ratelimit import shared_bucket

        bucket = shared_bucket(f"model:{spec.base_url or spec.provider}", spec.rate, max(1.0, spec.rate))
    extra = {**spec.extra_body, **({"temperature": spec.temperature} if spec.temperature is not None else {})}
    common: dict[str, Any] = {
        "base_url": spec.base_url,
        "api_key_env": spec.key_env,
        "stream": spec.streaming,
        "timeout_s": spec.timeout_s,
        "retry": RetryPolicy(max_retries=spec.max_retries),
        "prices": prices,
        "rate_limit": bucket,
        "on_delta": on_delta,
        "max_tokens": spec.max_output_tokens,
        "extra_body": extra,
    }
    if spec.provider == "anthropic":
        from tether.models.anthropic import AnthropicMessages

        return AnthropicMessages(spec.name, thinking_budget=spec.thinking_budget, **common)
    if spec.provider == "openai-responses":
        from tether.models.responses import OpenAIResponses

        effort = {"effort": spec.reasoning_effort} if spec.reasoning_effort else None
        return OpenAIResponses(spec.name, reasoning=effort, **common)
    from tether.models.openai import OpenAICompatible

    return OpenAICompatible(spec.name, reasoning=spec.reasoning, **common)


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


def _context_config(af: AgentFile, model: Any, built: list[Any]) -> Any:
    c = af.spec.context
    if not (c.status or c.compression or c.skills or c.tool_search or c.subagents):
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
    subagents = [_subagent(af, sub, model, built) for sub in c.subagents]
    names = [sub.name for sub in c.subagents]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"{af.label()}: context.subagents: the same name twice: {', '.join(dup)}")
    return ContextConfig(
        status=status, compression=compression, skills=skills, tool_search=search, subagents=subagents
    )


def _subagent(af: AgentFile, sub: SubagentSpec, parent_model: Any, built: list[Any]) -> Any:
    from tether.context import Subagent
    from tether.run import Agent

    model = parent_model
    if sub.model is not None:
        model = _backend(af, sub.model, _prices(af.spec.model), None)
        built.append(model)  # closed with the agent's own (Built.aclose)
    limits = sub.limits.build()

    def agent() -> Agent:
        return Agent(
            instructions=sub.instructions, model=model, name=sub.name, limits=limits, tools=sub.tools
        )

    return Subagent(sub.name, sub.description, agent, sub.max_chars)


def _provenance(af: AgentFile, spec: ProvenanceSpec, host: Any, local: list[Any]) -> None:
    """Swap the host's effect-approval rule for the file's provenance rules (declarations checked
    against the offered tools now, not at the first call) and label what tools return."""
    from tether.policy.provenance import Directory, TrustConfig
    from tether.policy.provenance_rules import (
        ProvenancePolicy,
        ProvenanceRules,
        check_declarations,
        make_labeler,
        rules_from_dict,
    )
    from tether.policy.rules import EffectApproval

    data: dict[str, Any] = spec.model_dump(exclude={"file", "mode"})
    if spec.file is not None:
        path = af.resolve(spec.file)
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"{af.label()}: policy.provenance.file {spec.file}: {err}") from None
        if not isinstance(loaded, dict) or set(loaded) - {"trust", "tools", "directory", "own"}:
            raise ConfigError(
                f"{af.label()}: policy.provenance.file {spec.file}: a mapping of trust, tools, directory, own"
            )
        data = {"trust": {}, "tools": {}, "directory": {}, "own": [], **loaded}
    try:
        trust = TrustConfig.from_dict(data["trust"] or {})
        declared = rules_from_dict(data["tools"] or {})
        directory = Directory(data["directory"] or {})
        check_declarations(declared, local)  # local tools now; an MCP tool's at its first call
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{af.label()}: policy.provenance: {err}") from None
    rules = ProvenanceRules(declared, trust, directory=directory, own=list(data["own"] or []))
    base = host.policy
    extra = [r for r in base.rules if r is not base.allowlist and not isinstance(r, EffectApproval)]
    allow, deny = base.allowlist.allow, base.allowlist.deny
    label = make_labeler(trust, list(data["own"] or []))
    if spec.mode == "reference":
        from tether.policy.references import ReferencePolicy, References

        references = References(trust, list(data["own"] or []))
        host.policy = ReferencePolicy(rules, references, allow=allow, deny=deny, extra=extra)
        host.labeler = references.labeler(label)
    else:
        host.policy = ProvenancePolicy(rules, allow=allow, deny=deny, extra=extra)
        host.labeler = label


def _otel_wanted() -> bool:
    """Whether the ``OTEL_*`` variables ask for trace export (cheap: nothing imported otherwise).
    Raises ``ConfigError`` when they do and the ``otel`` extra is missing."""
    if not (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_TRACES_EXPORTER")
    ):
        return False
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError:
        raise ConfigError("OTEL_* variables ask for trace export: pip install 'tether[otel]'") from None
    return True


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
    extra_models: list[Any] = []
    context_config = _context_config(af, model, extra_models)

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
        "catalog": _catalog(af),
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
    if p.provenance is not None:
        _provenance(af, p.provenance, host, [t.spec for t in tools])
    host.extra_sinks.extend(trace_sinks)
    if spec.memory is not None:
        host.memory = _memory(af, spec.memory)
        host.disabled_memory.update(spec.memory.disabled)
    env = environ if environ is not None else os.environ
    keys = {env.get(b.key_env, "") for b in spec.model.backends() if b.scripted is None}
    if keys - {""}:
        host.secrets = frozenset(host.secrets | (keys - {""}))  # redacted should anything echo it
    # Trace export: the file's trace.otel, or the OTEL_* variables (tether run/worker --otel set them).
    if spec.trace.otel or _otel_wanted():
        try:
            from tether.trace.otel import otel_sink_from_env
        except ImportError:
            raise ConfigError(f"{af.label()}: trace export needs: pip install 'tether[otel]'") from None
        host.extra_sinks.append(otel_sink_from_env(secrets=host.secrets, model=model))
    agent = Agent(
        instructions=instructions,
        model=model,
        name=spec.name,
        limits=spec.model.limits.build(),
        context=context_config,
        memory_subjects=tuple(spec.memory.subjects) if spec.memory is not None else (),
        **_hooks(af, host),
    )
    return Built(host, agent, trusted_context(af), af, model, db, extra_models)


def _catalog(af: AgentFile) -> Any:
    p = af.spec.policy
    entries: Any = p.catalog
    if p.catalog_file is not None:
        path = af.resolve(p.catalog_file)
        try:
            entries = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"{af.label()}: policy.catalog_file: cannot read {path}: {err}") from None
        valid = isinstance(entries, dict) and all(
            isinstance(ids, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in ids.items())
            for ids in entries.values()
        )
        if not valid:
            raise ConfigError(
                f"{af.label()}: policy.catalog_file: expected {{kind: {{id: tenant}}}} in {path}"
            )
    if entries is None:
        return None
    from tether.policy.trusted import DictCatalog

    return DictCatalog(entries)


def _memory(af: AgentFile, m: MemorySpec) -> Any:
    from tether.memory import MemoryPolicy, SqliteMemory

    path = af.resolve(m.db)
    path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteMemory(path, policy=MemoryPolicy(approved_sources=frozenset(m.approved_sources)))


def _hooks(af: AgentFile, host: Any) -> dict[str, Any]:
    """The agent's hooks: imported by path, the claim check and the trace resolver built in."""
    h = af.spec.hooks
    out: dict[str, Any] = {}
    for name in ("verify", "handoff", "remember"):
        ref = getattr(h, name)
        if ref is not None:
            out[name] = _hook(af, f"hooks.{name}", ref)
    if h.resolve_evidence == "trace":
        from tether.handoff import resolve_from_trace

        out["resolve_evidence"] = resolve_from_trace
    elif h.resolve_evidence is not None:
        out["resolve_evidence"] = _hook(af, "hooks.resolve_evidence", h.resolve_evidence)
    if h.check_claims:
        from tether.handoff import claim_check

        claims = claim_check(lambda: {s.name: s.effect for s in host.offered()})
        own = out.get("verify")
        out["verify"] = claims if own is None else _both(claims, own)
    return out


def _hook(af: AgentFile, where: str, ref: str) -> Any:
    if not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", ref):
        raise ConfigError(f"{af.label()}: {where}: {ref!r} is not module:function")
    found = _import(ref, f"{af.label()}: {where}")
    if not callable(found):
        raise ConfigError(f"{af.label()}: {where}: {ref} is not callable")
    return found


def _both(first: Any, second: Any) -> Any:
    def verify(state: Any, answer: str) -> str | None:
        problem: str | None = first(state, answer) or second(state, answer)
        return problem

    return verify


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
