"""Building what an agent file describes: the ``Host``, the ``Agent`` and its model, through the
public API (``build_agent``). The file itself is read and checked by ``tether.agents._file``."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml
from pydantic import TypeAdapter, ValidationError

from tether.agents._file import AgentFile, _python_path, mcp_config
from tether.agents._models import make_model, model_for, scripted_model
from tether.agents._policy_names import check_policy_names
from tether.agents._spec import (
    _IMPORT_PATH,
    MemorySpec,
    ProvenanceSpec,
    StatusSpec,
    SubagentSpec,
)
from tether.core._imports import import_ref
from tether.core._names import repeated
from tether.core.types import Effect
from tether.errors import ConfigError

if TYPE_CHECKING:
    from tether.host import Host
    from tether.policy._trusted import TrustedContext
    from tether.runs._values import Agent

__all__ = [
    "APP",
    "Built",
    "build_agent",
    "local_tool_names",
    "make_model",
    "scripted_model",
    "trusted_context",
]

APP = "tether.agents._record:rebuild"  # the factory `tether resume` calls for runs started from a file


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
    (None: questions pause); ``consent`` sees each sampling prompt; ``stores`` (a deployment's
    ``Stores``) replaces every SQLite file; ``app`` names the factory checkpoints record."""
    from tether.runs._values import Agent

    spec = af.spec
    _python_path(af)
    reconcilers: dict[str, Any] = {}
    tools = _local_tools(af, reconcilers)
    check_policy_names(af, [t.name for t in tools])
    instructions = _instructions(af)
    model = make_model(af, on_delta=on_delta)
    extra_models: list[Any] = []
    context_config = _context_config(af, model, extra_models)
    approvals, db = _approvals(af, approvals_db, stores, app, reconcilers)
    host = _host(af, model, approvals, responder=responder, consent=consent, environ=environ, stores=stores)
    if tools:
        host.add_tools(*tools)
    if spec.policy.provenance is not None:
        _provenance(af, spec.policy.provenance, host, [t.spec for t in tools])
    host.extra_sinks.extend(trace_sinks)
    if spec.memory is not None:
        host.memory = _memory(af, spec.memory)
        host.disabled_memory.update(spec.memory.disabled)
    _secrets_and_export(af, host, model, environ)
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


def _instructions(af: AgentFile) -> str:
    """The file's instructions, inline or read from ``instructions_file``."""
    spec = af.spec
    if spec.instructions_file is None:
        assert spec.instructions is not None  # the spec requires one of the two
        return spec.instructions
    path = af.resolve(spec.instructions_file)
    try:
        return af.read_bytes(path).decode("utf-8")
    except OSError as err:
        raise ConfigError(f"{af.label()}: instructions_file: cannot read {path}: {err.strerror}") from None


def _approvals(
    af: AgentFile, approvals_db: Path | None, stores: Any, app: str, reconcilers: dict[str, Any]
) -> tuple[Any, Path | None]:
    """The approval desk (None: effects do not pause) and its SQLite file (None with stores)."""
    from tether.policy import Approvals, SqliteApprovalStore

    spec = af.spec
    db = approvals_db or (af.resolve(spec.policy.approvals_db) if spec.policy.approvals_db else None)
    if stores is not None:
        return Approvals(stores.approvals, app=app, reconcilers=reconcilers), None
    if db is None:
        return None, None
    db.parent.mkdir(parents=True, exist_ok=True)
    return Approvals(SqliteApprovalStore(db), app=app, reconcilers=reconcilers), db


def _host(
    af: AgentFile, model: Any, approvals: Any, *, responder: Any, consent: Any, environ: Any, stores: Any
) -> Host:
    """The host with the file's policy: over the file's MCP servers, or over local tools only."""
    from tether.host import Host
    from tether.policy._rules import Allowlist, EffectApproval, Egress, Policy, TargetOwnership

    spec = af.spec
    p = spec.policy
    policy_args: dict[str, Any] = {
        "allow": p.allow,
        "deny": p.deny,
        "egress": p.egress,
        "automatic_effects": p.automatic,
        "catalog": _catalog(af),
    }
    trace_dir = _trace_dir(af)
    if spec.mcp is None:
        return Host(
            policy=Policy(**policy_args), trace_dir=trace_dir, approvals=approvals, on_denied=p.on_denied
        )
    from tether.mcphost._build import build_host

    sampler = None
    if spec.mcp.sampling == "model":
        if spec.model.scripted is not None:
            raise ConfigError(
                f"{af.label()}: mcp.sampling: model needs a real model; a scripted stand-in "
                "cannot answer a server's sampling request"
            )
        sampler = model
    host = build_host(
        mcp_config(af),
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
    return host


def _secrets_and_export(af: AgentFile, host: Any, model: Any, environ: Mapping[str, str] | None) -> None:
    """The model keys become trace secrets (redacted should anything echo one); traces are
    exported when the file's ``trace.otel`` or the ``OTEL_*`` variables ask for it."""
    spec = af.spec
    env = environ if environ is not None else os.environ
    keys = {env.get(b.key_env, "") for b in spec.model.backends() if b.scripted is None}
    if keys - {""}:
        host.secrets = frozenset(host.secrets | (keys - {""}))
    if spec.trace.otel or _otel_wanted():
        try:
            from tether.trace._otel import otel_sink_from_env
        except ImportError:
            raise ConfigError(f"{af.label()}: trace export needs: pip install 'tether[otel]'") from None
        host.extra_sinks.append(otel_sink_from_env(secrets=host.secrets, model=model))


def local_tool_names(af: AgentFile) -> list[str]:
    """Import the file's local tools as a run would (its ``python_path`` first) and return their
    names: ``tether agent check`` catches a mistyped import path, or a policy entry naming no tool,
    before any run. Raises ``ConfigError`` naming the entry that fails."""
    _python_path(af)
    tools = _local_tools(af)
    names = [t.name for t in tools]
    check_policy_names(af, names)
    # The files a run reads before it starts, read and checked here too: one missing or malformed
    # would pass the check and then refuse the run.
    _instructions(af)
    _catalog(af)
    _trace_dir(af)
    if af.spec.memory is not None:
        _memory_policy(af, af.spec.memory)
        _sqlite_file(af, "memory.db", af.spec.memory.db)
    if af.spec.policy.approvals_db is not None:
        _sqlite_file(af, "policy.approvals_db", af.spec.policy.approvals_db)
    if af.spec.policy.provenance is not None:
        _provenance_rules(af, af.spec.policy.provenance, [t.spec for t in tools])
    for name in ("verify", "handoff", "remember", "resolve_evidence"):
        if (ref := getattr(af.spec.hooks, name)) is not None and ref != "trace":
            _hook(af, f"hooks.{name}", ref)  # imported as a run imports it
    return names


# ``ToolRef`` fields handed to ``Tool`` as they are (``target`` is built, ``secret_arguments`` added to
# the code's): every contract option of ``@tool`` has its agent-file field but ``idempotent``, which
# only an MCP call's retry reads.
_TOOL_OPTIONS = (
    "name",
    "description",
    "egress_argument",
    "timeout_s",
    "max_result_chars",
    "blocking",
    "needs_approval",
)


def _local_tools(af: AgentFile, reconcilers: dict[str, Any] | None = None) -> list[Any]:
    """The file's local tools; each declared reconciler goes into ``reconcilers`` by tool name."""
    from tether.tools._contract import Tool, ToolOptions

    spec = af.spec
    tools: list[Any] = []
    reconcilers = {} if reconcilers is None else reconcilers
    for i, ref in enumerate(spec.tools):
        where = f"{af.label()}: tools[{i}] ({ref.function})"
        found = import_ref(ref.function, where)
        items = list(found) if isinstance(found, (list, tuple)) else [found]
        options = cast(ToolOptions, {k: v for k in _TOOL_OPTIONS if (v := getattr(ref, k)) is not None})
        if ref.target is not None:
            options["target"] = ref.target.target()
        for item in items:
            try:
                if isinstance(item, Tool):
                    declared = ref.effect or spec.policy.effects.get(ref.name or item.name)
                    if declared is not None and declared != item.spec.effect:
                        raise ConfigError(
                            f"{where}: {item.name} declares effect {item.spec.effect} in code; the "
                            f"file says {declared}. Change one of them."
                        )
                    own: ToolOptions = {**options}
                    if ref.secret_arguments is not None:  # a file adds secrets, never removes one
                        secret = (*sorted(item.spec.secret_arguments), *ref.secret_arguments)
                        own["secret_arguments"] = tuple(dict.fromkeys(secret))
                    tool = item.with_options(**own) if own else item
                elif callable(item):
                    name = str(ref.name or getattr(item, "__name__", ""))
                    # An undeclared effect is a side effect: it needs approval (fail closed).
                    effect = ref.effect or spec.policy.effects.get(name) or Effect.WRITE
                    with_effect: ToolOptions = {**options, "effect": effect}
                    if ref.secret_arguments is not None:
                        with_effect["secret_arguments"] = ref.secret_arguments
                    tool = Tool(item, **with_effect)
                else:
                    raise ConfigError(f"{where}: not a tool or a function ({type(item).__name__})")
            except TypeError as err:
                raise ConfigError(f"{where}: {err}") from None
            tools.append(tool)
            if ref.reconciler is not None:
                fn = import_ref(ref.reconciler, f"{af.label()}: tools[{i}].reconciler ({ref.reconciler})")
                if not callable(fn):
                    raise ConfigError(f"{where}: reconciler {ref.reconciler} is not callable")
                reconcilers[tool.name] = fn
    if dup := repeated(t.name for t in tools):
        raise ConfigError(f"{af.label()}: tools: the same tool name twice: {', '.join(dup)}")
    return tools


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

    # The specs of status, compression and tool search are their configs' fields, field for field.
    status = None
    if c.status:
        s = c.status if isinstance(c.status, StatusSpec) else StatusSpec()
        status = StatusConfig(**s.model_dump())
    compression = CompressionConfig(**(c.compression.model_dump() if c.compression is not None else {}))
    skills = None
    if c.skills is not None:
        folder = af.resolve(c.skills.dir)
        if not folder.is_dir():
            raise ConfigError(f"{af.label()}: context.skills.dir: {folder} is not a folder")
        skills = SkillLibrary()
        skills.add_folder(folder, trusted=c.skills.trusted, approved=c.skills.approved)
    search = ToolSearchConfig(**c.tool_search.model_dump()) if c.tool_search is not None else None
    subagents = [_subagent(af, i, sub, model, built) for i, sub in enumerate(c.subagents)]
    if dup := repeated(sub.name for sub in c.subagents):
        raise ConfigError(f"{af.label()}: context.subagents: the same name twice: {', '.join(dup)}")
    return ContextConfig(
        status=status, compression=compression, skills=skills, tool_search=search, subagents=subagents
    )


def _subagent(af: AgentFile, i: int, sub: SubagentSpec, parent_model: Any, built: list[Any]) -> Any:
    from tether.context import Subagent
    from tether.runs._values import Agent

    model = parent_model
    if sub.model is not None:
        model = model_for(af, sub.model, f"context.subagents[{i}].model")
        built.append(model)  # closed with the agent's own (Built.aclose)
    limits = sub.limits.build()
    agent = partial(
        Agent, instructions=sub.instructions, model=model, name=sub.name, limits=limits, tools=sub.tools
    )
    return Subagent(sub.name, sub.description, agent, sub.max_chars)


def _provenance(af: AgentFile, spec: ProvenanceSpec, host: Any, local: list[Any]) -> None:
    """Swap the host's effect-approval rule for the file's provenance rules (declarations checked
    against the offered tools now, not at the first call) and label what tools return."""
    from tether.policy._provenance_rules import ProvenancePolicy, make_labeler
    from tether.policy._rules import EffectApproval

    trust, rules, own = _provenance_rules(af, spec, local)
    base = host.policy
    extra = [r for r in base.rules if r is not base.allowlist and not isinstance(r, EffectApproval)]
    allow, deny = base.allowlist.allow, base.allowlist.deny
    label = make_labeler(trust, own)
    if spec.mode == "reference":
        from tether.policy._references import ReferencePolicy, References

        references = References(trust, own)
        host.policy = ReferencePolicy(rules, references, allow=allow, deny=deny, extra=extra)
        host.labeler = references.labeler(label)
    else:
        host.policy = ProvenancePolicy(rules, allow=allow, deny=deny, extra=extra)
        host.labeler = label


def _provenance_rules(af: AgentFile, spec: ProvenanceSpec, local: list[Any]) -> tuple[Any, Any, list[Any]]:
    """The file's trust, rules and own sources, its provenance file read (declarations checked
    against the local tools). Raises ``ConfigError``."""
    from tether.policy._provenance_labels import Directory, TrustConfig
    from tether.policy._provenance_rules import ProvenanceRules, check_declarations, rules_from_dict

    data: dict[str, Any] = spec.model_dump(exclude={"file", "mode"})
    if spec.file is not None:
        loaded = _yaml_file(af.resolve(spec.file), f"{af.label()}: policy.provenance.file {spec.file}") or {}
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
    own = list(data["own"] or [])
    return trust, ProvenanceRules(declared, trust, directory=directory, own=own), own


def _otel_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard ``OTEL_*`` variables ask for OTLP trace export: an endpoint, or
    ``OTEL_TRACES_EXPORTER`` naming ``otlp``; never with ``OTEL_SDK_DISABLED=true`` or an exporter
    list without ``otlp`` (cheap: nothing imported otherwise). Raises ``ConfigError`` when they do
    and the ``otel`` extra is missing, or name an OTLP protocol other than HTTP."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = [e.strip() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    if exporters and "otlp" not in exporters:
        return False
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not (endpoint or exporters):
        return False
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    if protocol and protocol != "http/protobuf":
        raise ConfigError(f"OTLP protocol {protocol!r}: tether exports traces over HTTP (http/protobuf)")
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError:
        raise ConfigError("OTEL_* variables ask for trace export: pip install 'tether[otel]'") from None
    return True


def _catalog(af: AgentFile) -> Any:
    p = af.spec.policy
    entries: Any = p.catalog
    if p.catalog_file is not None:
        path = af.resolve(p.catalog_file)
        entries = _yaml_file(path, f"{af.label()}: policy.catalog_file: cannot read {path}")
        try:
            TypeAdapter(dict[str, dict[str, str]]).validate_python(entries, strict=True)
        except ValidationError:
            raise ConfigError(
                f"{af.label()}: policy.catalog_file: expected {{kind: {{id: tenant}}}} in {path}"
            ) from None
    if entries is None:
        return None
    from tether.policy._trusted import DictCatalog

    return DictCatalog(entries)


def _yaml_file(path: Path, where: str) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{where}: {err}") from None


def _memory(af: AgentFile, m: MemorySpec) -> Any:
    from tether.memory import SqliteMemory

    policy = _memory_policy(af, m)
    path = af.resolve(m.db)
    path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteMemory(path, policy=policy)


def _memory_policy(af: AgentFile, m: MemorySpec) -> Any:
    """The store's write rules; a subject in ``memory.subjects`` or ``memory.disabled`` of a shape
    the store never holds (``order 742`` for ``order:742``) is refused: it would recall, or
    disable, nothing, silently."""
    import re

    from tether.memory import MemoryPolicy

    policy = MemoryPolicy(approved_sources=frozenset(m.approved_sources))
    for where in ("subjects", "disabled"):
        for i, subject in enumerate(getattr(m, where)):
            if not re.fullmatch(policy.subject_pattern, subject):
                raise ConfigError(
                    f"{af.label()}: memory.{where}[{i}]: {subject!r} is not a subject the store holds: "
                    "write KIND:ID in lower-case kind, e.g. 'order:742' or 'customer:acme'"
                )
    return policy


def _sqlite_file(af: AgentFile, where: str, name: str) -> None:
    """Refuse a store file a run could not open (a folder, a file that is no SQLite database),
    read-only: the check neither makes nor changes it (one not there yet is made by the run)."""
    from tether.sql._sqlite import not_a_database

    path = af.resolve(name)
    if (why := not_a_database(path)) is not None:
        raise ConfigError(f"{af.label()}: {where}: {path} {why}")


def _trace_dir(af: AgentFile) -> Path:
    """The folder of the run's traces (made when missing), refused before anything starts when it
    cannot be written: a run would fail at its first event, its effects' trace lost."""
    folder = af.resolve(af.spec.trace.dir)
    if (why := unwritable(folder)) is not None:
        raise ConfigError(
            f"{af.label()}: trace.dir: {folder} cannot be written ({why}): each run's trace is "
            "written there; set trace.dir to a folder this process may write"
        )
    return folder


def unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be made or written (a file in its place, a read-only mount, a folder
    this process may not write), or None when it can."""
    probe = folder
    while not probe.exists() and probe != probe.parent:  # not made yet: where it would be made
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    if os.statvfs(probe).f_flag & os.ST_RDONLY:
        return f"{probe} is on a read-only file system"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"this process may not write {probe}"
    return None


def _hooks(af: AgentFile, host: Any) -> dict[str, Any]:
    """The agent's hooks: imported by path, the claim check and the trace resolver built in."""
    h = af.spec.hooks
    out: dict[str, Any] = {}
    for name in ("verify", "handoff", "remember"):
        ref = getattr(h, name)
        if ref is not None:
            out[name] = _hook(af, f"hooks.{name}", ref)
    if h.resolve_evidence == "trace":
        from tether.core.handoff import resolve_from_trace

        out["resolve_evidence"] = resolve_from_trace
    elif h.resolve_evidence is not None:
        out["resolve_evidence"] = _hook(af, "hooks.resolve_evidence", h.resolve_evidence)
    if h.check_claims:
        from tether.core.handoff import claim_check

        claims = claim_check(lambda: {s.name: s.effect for s in host.offered()})
        own = out.get("verify")
        out["verify"] = claims if own is None else lambda s, answer: claims(s, answer) or own(s, answer)
    return out


# What the run passes each hook, by position.
_HOOK_ARGUMENTS = {
    "hooks.verify": ("state", "answer"),
    "hooks.handoff": ("state", "answer"),
    "hooks.remember": ("state",),
    "hooks.resolve_evidence": ("ref", "state"),
}


def _hook(af: AgentFile, where: str, ref: str) -> Any:
    """The hook ``ref`` names, refused unless it takes what the run passes it: a wrong signature
    would pass every check and crash the run at its end, after its effects."""
    import inspect

    if not _IMPORT_PATH.match(ref):
        raise ConfigError(f"{af.label()}: {where}: {ref!r} is not module:function")
    found = import_ref(ref, f"{af.label()}: {where}")
    if not callable(found):
        raise ConfigError(f"{af.label()}: {where}: {ref} is not callable")
    wanted = _HOOK_ARGUMENTS[where]
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):  # no signature to read (some builtins): called as it is
        return found
    try:
        signature.bind(*wanted)
    except TypeError as err:
        raise ConfigError(
            f"{af.label()}: {where}: {ref} takes ({', '.join(signature.parameters)}); the run calls "
            f"it with ({', '.join(wanted)}): {err}"
        ) from None
    return found


def trusted_context(af: AgentFile) -> TrustedContext:
    """The tenant, roles, user and permissions the file's policy gives its runs."""
    from tether.policy._trusted import Permissions, TrustedContext

    p = af.spec.policy
    perms = Permissions(read=frozenset(p.permissions.read), write=frozenset(p.permissions.write))
    return TrustedContext(tenant=p.tenant, roles=frozenset(p.roles), user=p.user, permissions=perms)
