"""Agents from a file: ``tether run --agent agent.yaml "objective"`` (YAML or TOML).

The file names everything a run needs (docs/reference/agent-file.md); relative paths are
relative to its folder. ``load_agent_file`` validates it (``ConfigError`` naming the file and
the field) against the models of ``tether.agents._spec``; ``tether.agents._build.build_agent``
builds the ``Host`` and ``Agent``; a run that may pause records the file beside the approval
store (``tether.agents._record``), so ``tether resume RUN`` rebuilds the same agent."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tether.agents._spec import SCRIPTED, AgentSpec
from tether.core._config_file import read_config_file
from tether.core._imports import import_ref
from tether.core._names import is_agent_file as is_agent_file  # re-exported: commands that load agent files
from tether.core._problems import validation_problems
from tether.errors import ConfigError

__all__ = [
    "AgentFile",
    "agent_digest",
    "is_agent_file",
    "load_agent_file",
    "mcp_agent",
    "mcp_config",
    "parse_agent",
    "with_overrides",
]


@dataclass(frozen=True)
class AgentFile:
    """A validated agent file: its spec, where it lives, and exactly what it said."""

    spec: AgentSpec
    path: Path | None  # None: built from command-line options (tether mcp run)
    base_dir: Path
    text: str
    sha256: str
    files: Mapping[Path, bytes] = field(default_factory=dict)

    def resolve(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)

    def read_bytes(self, path: Path) -> bytes:
        """A file it depends on: from the snapshot if it holds it, else from disk."""
        held = self.files.get(path)
        return held if held is not None else path.read_bytes()

    def label(self) -> str:
        return str(self.path) if self.path is not None else "(command line)"


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
        raise ConfigError(f"{where}: {validation_problems(err, model=AgentSpec)}") from None
    body = text if text is not None else json.dumps(spec.model_dump(mode="json"), sort_keys=True)
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    return AgentFile(spec, path, base_dir.resolve(), body, digest)


def load_agent_file(path: str | Path) -> AgentFile:
    """Read a YAML (``.yaml``/``.yml``) or TOML (``.toml``) agent file. Raises ``ConfigError``."""
    path = Path(path)
    raw, text, data = read_config_file(path, "agent file")
    af = parse_agent(data, base_dir=path.resolve().parent, path=path.resolve(), text=text)
    return replace(af, sha256=hashlib.sha256(raw).hexdigest())  # of the bytes on disk


def with_overrides(agent_file: AgentFile, **model: Any) -> AgentFile:
    """The same file with model settings replaced (command-line options; ``None`` keeps the file's).
    They name the primary model; ``streaming: false`` (``--no-stream``: whole responses, whatever
    the file asks) holds for each model of ``model.fallback`` too, so a run that falls back does not
    stream after all."""
    spec = agent_file.spec
    changes = {k: v for k, v in model.items() if v is not None and k != "limits"}
    limits = {k: v for k, v in (model.get("limits") or {}).items() if v is not None}
    data = spec.model_dump(mode="json")
    data["model"].update(changes)
    if changes.get("streaming") is False:
        for backend in data["model"]["fallback"]:
            backend["streaming"] = False
    if str(data["model"]["name"]).startswith(SCRIPTED):
        data["model"].pop("base_url", None)
    data["model"]["limits"] = {**data["model"]["limits"], **limits}
    if not changes and not limits:
        return agent_file
    try:
        new = AgentSpec.model_validate(data)
    except ValidationError as err:
        problems = validation_problems(err, model=AgentSpec)
        raise ConfigError(f"{agent_file.label()} with the command line's options: {problems}") from None
    return replace(agent_file, spec=new)


def _import(ref: str, where: str) -> Any:
    return import_ref(ref, where)


def _python_path(af: AgentFile) -> None:
    for entry in reversed(af.spec.python_path):
        folder = str(af.resolve(entry).resolve())
        if folder not in sys.path:
            sys.path.insert(0, folder)


def agent_digest(af: AgentFile) -> str:
    """sha256 of the agent file and every file it depends on that can be found (instructions,
    model script, MCP config, the modules of its tools and reconcilers): a durable run is bound to it."""
    h = hashlib.sha256(af.sha256.encode())
    for path in _dependencies(af):
        h.update(str(path).encode() + b"\0")
        h.update(af.read_bytes(path) if path in af.files or path.is_file() else b"<missing>")
    return h.hexdigest()


def snapshot(af: AgentFile) -> AgentFile:
    """``af`` holding the files it depends on as they are now, its tools' modules imported now, so
    what is built from it later is this version. Raises ``ConfigError`` for an entry that does not import."""
    _python_path(af)
    for i, ref in enumerate(af.spec.tools):
        for target in (ref.function, ref.reconciler):
            if target:
                _import(target, f"{af.label()}: tools[{i}] ({target})")
    held = {path: path.read_bytes() for path in _dependencies(af) if path.is_file()}
    return replace(af, files=held)


def _dependencies(af: AgentFile) -> list[Path]:
    """The files ``agent_digest`` covers, sorted (see there)."""
    spec = af.spec
    files: list[Path] = []
    for value in (spec.instructions_file, spec.model.scripted, spec.mcp.config if spec.mcp else None):
        if value:
            files.append(af.resolve(value))
    _python_path(af)
    folders = [str(af.resolve(entry).resolve()) for entry in af.spec.python_path]
    for ref in spec.tools:
        for target in (ref.function, ref.reconciler):
            found = _module_file(target.partition(":")[0], folders) if target else None
            if found is not None:
                files.append(found)
    return sorted(set(files))


def _module_file(name: str, folders: list[str]) -> Path | None:
    """The file of module ``name`` as the agent file's ``python_path`` (``folders``) finds it,
    else as this process finds it. Not the module of that name this process imported before: in
    a process that read another agent file (a ``tools`` module of another folder), that one
    would be digested, the run bound to a version no worker serves, and left queued for good."""
    import importlib.machinery
    import importlib.util

    top, _, rest = name.partition(".")
    finder = importlib.machinery.PathFinder
    found = finder.find_spec(top, folders)
    for part in rest.split(".") if rest else ():
        below = found.submodule_search_locations if found is not None else None
        found = finder.find_spec(f"{found.name}.{part}", list(below)) if found is not None and below else None
    if found is None:
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
    origin = found.origin if found is not None else None
    return Path(origin) if origin and Path(origin).is_file() else None


def mcp_config(af: AgentFile) -> Any:
    from tether.mcp._config import McpConfig, load_config

    mcp = af.spec.mcp
    assert mcp is not None
    if mcp.config is not None:
        path = af.resolve(mcp.config)
        return load_config(path, raw=af.files.get(path))
    data = {"servers": mcp.servers, "host": mcp.host or {}, "base_dir": af.base_dir}
    try:
        return McpConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{af.label()}: mcp: {validation_problems(err, model=McpConfig)}") from None


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
