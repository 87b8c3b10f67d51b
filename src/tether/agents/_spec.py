"""The schema of an agent file (``tether.agents._file``): one pydantic model per section.

Every model forbids unknown keys; a field's ``description`` is its description in the JSON
Schema ``tether agent schema`` prints. Values are checked here (names of environment variables,
providers, limits); files are read and objects built elsewhere (``tether.agents._build``)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tether.core._imports import module_spelling
from tether.core.types import Effect, Target
from tether.errors import ConfigError

__all__ = [
    "AgentSpec",
    "BackendSpec",
    "CompressionSpec",
    "ContextSpec",
    "HooksSpec",
    "LimitsSpec",
    "McpSpec",
    "MemorySpec",
    "ModelSpec",
    "PermissionsSpec",
    "PolicySpec",
    "PriceSpec",
    "ProvenanceSpec",
    "SkillsSpec",
    "StatusSpec",
    "SubagentSpec",
    "ToolRef",
    "ToolSearchSpec",
    "TraceSpec",
]

SCRIPTED = "scripted:"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class _Strict(BaseModel):
    # Descriptions are given with Field(description=...), not attribute docstrings: reading the
    # source for those costs every process that loads an agent file (tether submit) ~0.1 s.
    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitsSpec(_Strict):
    """``tether.Limits``, field for field; unset fields keep the library's defaults."""

    max_steps: int | None = Field(default=None, ge=1, description="most tool turns a run takes (default 12)")
    llm_calls: int | None = Field(
        default=None, ge=1, description="model calls per run before the budget trips (default 16)"
    )
    llm_calls_hard: int | None = Field(
        default=None, ge=1, description="the ceiling above llm_calls that only the final turn may use"
    )
    max_tokens: int | None = Field(default=None, ge=1, description="prompt + completion tokens over the run")
    max_cost_usd: float | None = Field(
        default=None, gt=0, description="USD over the run (the model must be priced)"
    )
    deadline_s: float | None = Field(
        default=None, gt=0, description="seconds for the whole run (default 120)"
    )
    repeat_limit: int | None = Field(
        default=None, ge=1, description="how often the same cycle of calls may repeat"
    )
    max_identical_calls: int | None = Field(
        default=None, ge=1, description="how often one identical call may be made"
    )
    max_malformed_turns: int | None = Field(
        default=None, ge=1, description="malformed tool-call turns in a row before model_error"
    )
    max_calls_per_turn: int | None = Field(
        default=None,
        ge=1,
        description="tool calls one model turn may ask for; a turn over it ends the run model_error, "
        "none of its calls run (default 32)",
    )
    max_unavailable: int | None = Field(
        default=None, ge=1, description="failures of one source before dependency_unavailable"
    )
    final_turn_on_budget: bool | None = Field(
        default=None, description="one last model turn without tools when a budget trips"
    )
    final_turn_max_tokens: int | None = Field(
        default=None, ge=1, description="the output cap of that last turn"
    )
    max_tokens_hard: int | None = Field(
        default=None, ge=1, description="tokens only the final turn may reach"
    )
    max_cost_usd_hard: float | None = Field(
        default=None, gt=0, description="USD only the final turn may reach"
    )

    @model_validator(mode="after")
    def _consistent(self) -> LimitsSpec:
        self._limits()  # a ceiling below its budget is refused when the file is read (agent check)
        return self

    def build(self) -> Any:
        try:
            return self._limits()
        except ValueError as err:
            raise ConfigError(f"model.limits: {err}") from None

    def _limits(self) -> Any:
        from tether.core.stop import Limits

        base = Limits()
        changes = {k: v for k, v in self.model_dump().items() if v is not None}
        if "llm_calls" in changes and "llm_calls_hard" not in changes:
            changes["llm_calls_hard"] = max(base.llm_calls_hard, changes["llm_calls"] + 2)
        return replace(base, **changes)


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
    transport: Literal["sdk", "http"] | None = Field(
        default=None,
        description="how requests reach the API: sdk (through the provider's official SDK client, "
        "installed as an extra: pip install 'tether[anthropic]' or 'tether[openai]') or http (plain "
        "httpx2, no SDK, less client work per step); the same body and answer either way. Default: sdk "
        "for openai-responses and anthropic, http for openai-chat",
    )
    streaming: bool | None = Field(
        default=None,
        description="ask for a stream (default: no: whole responses, which every OpenAI-compatible server "
        "gives; some, like llama.cpp's Python server, cannot stream tool calls)",
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
        if self.transport is not None and self.name.startswith(SCRIPTED):
            raise ValueError("transport applies to a provider's API, not to a scripted stand-in")
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


class TargetSpec(_Strict):
    """The argument naming the object a tool acts on, and its kind in ``policy.catalog``."""

    argument: str = Field(min_length=1, description="the tool's argument holding the object's id")
    kind: str = Field(min_length=1, description="the object's kind, a key of policy.catalog (e.g. order)")

    def target(self) -> Target:
        return Target(self.argument, self.kind)


class ToolRef(_Strict):
    """A local tool by import path: a ``@tool``, a plain function, or a list/tuple of them."""

    function: str = Field(
        pattern=_IMPORT_PATH.pattern,
        description="the tool by import path, module:name (a @tool, a function, or a list of them)",
    )
    name: str | None = Field(default=None, description="the name the model sees (default: the function's)")
    effect: Effect | None = Field(
        default=None, description="read, write, send, purchase or delete (an undeclared function is a write)"
    )
    egress_argument: str | tuple[str, ...] | None = Field(
        default=None,
        description="the argument(s) holding a destination (one name or a list, e.g. [to, cc]), each "
        "checked against policy.egress",
    )
    target: TargetSpec | None = Field(
        default=None,
        description="{argument, kind}: the argument naming the object the tool acts on, whose owner "
        "policy.catalog gives (a call on another tenant's or an unknown object is denied)",
    )
    description: str | None = Field(
        default=None, min_length=1, description="for the model (default: docstring)"
    )
    timeout_s: float | None = Field(default=None, gt=0, description="seconds a call may take")
    max_result_chars: int | None = Field(default=None, ge=1, description="result characters kept (20000)")
    blocking: bool | None = Field(default=None, description="false: a quick sync function runs inline")
    secret_arguments: tuple[str, ...] | None = Field(
        default=None, description="arguments masked on the console, API, traces, OTel (added to the code's)"
    )
    needs_approval: bool | None = Field(default=None, description="always ask a person before a call")
    reconciler: str | None = Field(
        default=None,
        pattern=_IMPORT_PATH.pattern,
        description="module:function asked with an effect's idempotency key after the call was cut or "
        "raised:\nthe tool's own record of it (a dict), or None if it never happened",
    )

    @field_validator("function", "reconciler", mode="before")
    @classmethod
    def _import_path(cls, v: Any) -> Any:
        # The pattern stays in the schema; a person reads this sentence, not the regex.
        if isinstance(v, str) and not _IMPORT_PATH.match(v):
            raise ValueError(
                f"{v!r} is not an import path: write module:name, e.g. mytools:read_order "
                f"(a colon between the module and the function){module_spelling(v)}"
            )
        return v


def _tool_or_path(schema: dict[str, Any]) -> None:
    """A ``tools`` item in the JSON Schema: ``module:name`` (read as ``{function: ...}``) or a ``ToolRef``."""
    path = {"type": "string", "pattern": _IMPORT_PATH.pattern, "description": "module:name"}
    schema["items"] = {"anyOf": [path, schema["items"]]}


class McpSpec(_Strict):
    """MCP servers in the MCP host's own config format: a file (``config``) or inline."""

    config: str | None = Field(
        default=None, description="an MCP host config file (servers, effects, host settings)"
    )
    host: dict[str, Any] | None = Field(default=None, description="host settings inline (with servers)")
    servers: list[dict[str, Any]] | dict[str, dict[str, Any]] | None = Field(
        default=None, description="MCP servers inline, in the config file's format (a list, or id: settings)"
    )
    sampling: Literal["none", "model"] = Field(
        default="none", description="model: servers' sampling requests go to the agent's model"
    )
    consent: Literal["no", "yes", "console"] = Field(
        default="no", description="who consents to each sampling prompt: no, yes or console"
    )
    ask: Literal["auto", "never", "console"] = Field(
        default="auto", description="who answers a server's elicitation: auto, never or console"
    )

    @model_validator(mode="after")
    def _one(self) -> McpSpec:
        if (self.config is None) == (self.servers is None):
            raise ValueError("give either config (a file) or servers (inline), not both or neither")
        if self.config is not None and self.host is not None:
            raise ValueError("host settings belong in the MCP config file when config is given")
        return self


class PermissionsSpec(_Strict):
    read: list[str] = Field(default_factory=list, description="what the run may read (handoff permissions)")
    write: list[str] = Field(default_factory=list, description="what the run may write (handoff permissions)")


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
    allow: list[str] | None = Field(
        default=None, description="tools the model may see and call (default: every tool offered)"
    )
    deny: list[str] = Field(default_factory=list, description="tools never offered")
    tenant: str = Field(
        default="default",
        min_length=1,
        description="the tenant every run acts for (from the host, never from the model)",
    )
    user: str | None = Field(default=None, description="the user runs act for")
    roles: list[str] = Field(
        default_factory=list, description="the roles of the run (memory ACLs, role rules)"
    )
    permissions: PermissionsSpec = Field(
        default_factory=PermissionsSpec, description="read and write permissions a handoff may carry"
    )
    effects: dict[str, Effect] = Field(
        default_factory=dict, description="effects of plain-function tools by name"
    )
    automatic: list[Effect] = Field(
        default_factory=lambda: [Effect.READ], description="effects that run without approval (default: read)"
    )
    egress: list[str] = Field(default_factory=list, description="hosts or e-mail domains a tool may send to")
    approvals_db: str | None = Field(
        default=None, description="SQLite approval store: side effects pause for a person"
    )
    on_denied: Literal["stop", "continue"] = Field(
        default="stop", description="stop the run at a denied call, or continue (the model sees the denial)"
    )
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
        description="subjects (KIND:ID, e.g. order:742) recalled at the start of each run (expired "
        "and foreign records never enter the context)",
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
        default=True,
        description='reject a final answer that claims an action ("I e-mailed the buyer") when no '
        "side-effecting call succeeded in the run (default: on; false turns it off)",
    )
    handoff: str | None = Field(
        default=None, description="(state, answer) -> the handoff to validate, or None"
    )
    resolve_evidence: str | None = Field(
        default=None, description='(ref, state) -> bool; "trace": backed by the run\'s own successful calls'
    )
    remember: str | None = Field(default=None, description="(state) -> memory records to propose")


class StatusSpec(_Strict):
    strategy: Literal["auto", "append", "replace"] = Field(
        default="auto", description="how the status bar enters the context: auto, append or replace"
    )
    todo: bool = Field(default=True, description="offer the TODO-list tools")
    show_time: bool = Field(default=True, description="show the time in the status bar")


class CompressionSpec(_Strict):
    strategy: Literal["none", "per_result", "task_aware", "adaptive"] = Field(
        default="adaptive", description="none, per_result, task_aware or adaptive"
    )
    window_tokens: int | None = Field(default=None, ge=256, description="the model's context window")
    trigger: float = Field(
        default=0.8, ge=0.1, le=1.0, description="fraction of the window at which compression starts"
    )
    result_budget_chars: int | None = Field(
        default=None, ge=100, description="characters of a tool result kept in context (the rest stored)"
    )


class SkillsSpec(_Strict):
    dir: str = Field(description="a folder of skills (one SKILL.md each)")
    trusted: bool = Field(default=True, description="whether the folder's skills are trusted instructions")
    approved: list[str] = Field(
        default_factory=list, description="skills approved by digest when the folder is untrusted"
    )


class ToolSearchSpec(_Strict):
    threshold: int = Field(default=20, ge=1, description="offer tool search above this many tools")
    max_results: int = Field(default=5, ge=1, description="tools one search returns")


class SubagentSpec(_Strict):
    """A subagent the model calls as a tool ``name(task)``: a fresh run in its own context, on
    the same host (the same gate, policy and tenant), its answer returned as the tool result."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$", description="the tool name the model calls")
    description: str = Field(min_length=1, description="what the subagent does, as the model reads it")
    instructions: str = Field(min_length=1, description="the subagent's system prompt")
    tools: list[str] | None = Field(
        default=None, description="the host's tools it may use (default: every tool the policy offers)"
    )
    model: BackendSpec | None = Field(default=None, description="its model (default: the agent's own)")
    limits: LimitsSpec = Field(default_factory=LimitsSpec, description="its run's budgets")
    max_chars: int = Field(default=2000, ge=100, description="characters of its answer handed back")


class ContextSpec(_Strict):
    status: bool | StatusSpec = Field(
        default=False, description="the <agent_status> bar: true, or its settings"
    )
    compression: CompressionSpec | None = Field(default=None, description="how long histories are compressed")
    skills: SkillsSpec | None = Field(default=None, description="a skills folder")
    tool_search: ToolSearchSpec | None = Field(default=None, description="tool search for large tool sets")
    subagents: list[SubagentSpec] = Field(
        default_factory=list, description="subagents the model may delegate a task to"
    )


class TraceSpec(_Strict):
    dir: str = Field(default="tether-output/traces", description="the JSONL traces' folder (made if missing)")
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

    name: str = Field(default="agent", min_length=1, description="the agent's name in traces")
    instructions: str | None = Field(default=None, description="the system prompt")
    instructions_file: str | None = Field(default=None, description="the system prompt from a file")
    model: ModelSpec = Field(description="the model, its budgets, prices and fallbacks")
    tools: list[ToolRef] = Field(
        default_factory=list,
        description="local tools: module:name or {function, …}",
        json_schema_extra=_tool_or_path,
    )
    python_path: list[str] = Field(
        default_factory=lambda: ["."], description="folders put on sys.path for the imports"
    )
    mcp: McpSpec | None = Field(default=None, description="MCP servers")
    policy: PolicySpec = Field(
        default_factory=PolicySpec,
        description="what runs may do: tools, tenant, roles, effects, egress, approvals, catalog",
    )
    context: ContextSpec = Field(
        default_factory=ContextSpec, description="status bar, compression, skills, tool search"
    )
    trace: TraceSpec = Field(default_factory=TraceSpec, description="where traces go")
    memory: MemorySpec | None = Field(default=None, description="governed durable memory")
    hooks: HooksSpec = Field(default_factory=HooksSpec, description="host code the run calls")

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
