"""Which agent a paused run uses, recorded so ``tether resume RUN`` rebuilds it in another process.

``<db>.agents/<run_id>.json``, beside the approval store, holds the file's path, sha256, content
and the spec with the command line's overrides (the key's variable name, never the key).
``rebuild`` is the factory the checkpoint names. The record is host authority, like the store."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.agents._build import build_agent, unwritable
from tether.agents._file import AgentFile, agent_digest, load_agent_file, parse_agent, snapshot
from tether.errors import ConfigError

if TYPE_CHECKING:
    from tether.host import Host
    from tether.runs._values import Agent

__all__ = ["AgentFileApp", "RecordSink", "load_record", "rebuild", "record_path", "record_run"]


def record_path(db: Path, run_id: str) -> Path:
    """Where the agent of run ``run_id`` is recorded: beside the approval store."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", run_id) or run_id.startswith("."):
        raise ConfigError(f"not a run id: {run_id!r}")
    return Path(str(db) + ".agents") / f"{run_id}.json"


def record_run(db: Path, run_id: str, af: AgentFile) -> Path:
    """Record which agent a run uses (path, sha256, content — never a key), once per run."""
    path = record_path(db, run_id)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "run_id": run_id,
        "agent_file": str(af.path) if af.path is not None else None,
        "base_dir": str(af.base_dir),
        "sha256": af.sha256,
        "text": af.text,
        # With the command line's overrides applied; fields at their defaults left out, as a file
        # that does not name them, so a release that does not know a newer field still resumes it.
        "spec": af.spec.model_dump(mode="json", exclude_defaults=True),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return path


class RecordSink:
    """A trace sink that records the agent when its run starts (a crash after a checkpoint leaves it)."""

    def __init__(self, db: Path, af: AgentFile) -> None:
        self.db = db
        self.af = af
        self.done: set[str] = set()

    def write(self, event: Any) -> None:
        if event.run_id not in self.done:
            self.done.add(event.run_id)
            record_run(self.db, event.run_id, self.af)

    def close(self) -> None:
        pass


def load_record(db: Path, run_id: str) -> AgentFile:
    """The agent a run recorded; a changed file on disk is reported, the recorded one is used."""
    path = record_path(Path(db), run_id)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"run {run_id} has no recorded agent ({path} is missing): was it started with --agent and an "
            "approval store?"
        ) from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read the recorded agent {path}: {err}") from None
    af = parse_agent(data["spec"], base_dir=Path(data["base_dir"]), text=data["text"])
    original = data.get("agent_file")
    af = replace(af, path=Path(original) if original else None, sha256=data["sha256"])
    if original and Path(original).is_file():
        now = hashlib.sha256(Path(original).read_bytes()).hexdigest()
        if now != data["sha256"]:
            print(
                f"note: {original} changed since run {run_id} started; resuming with the recorded version",
                file=sys.stderr,
            )
    return af


def rebuild(db: Path, run_id: str | None = None) -> tuple[Host, Agent]:
    """The factory ``tether resume`` calls: the host and agent recorded for ``run_id``."""
    if run_id is None:
        raise ConfigError("tether.agents._record:rebuild needs the run id (use tether resume RUN)")
    built = build_agent(load_record(Path(db), run_id), approvals_db=Path(db))
    return built.host, built.agent


class AgentFileApp:
    """A durable worker's app for one agent file (``tether worker --app agent.yaml``).

    The file and what it depends on are read once, when the worker starts; ``digest`` covers them
    (``agent_digest``), and a worker whose digest differs from the submitted one refuses the run.
    Each run is built with the deployment's stores, shared by every worker."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).resolve()
        self.agent_file = snapshot(load_agent_file(self.path))
        self.digest = agent_digest(self.agent_file)
        self.name = str(self.path)
        _writable(self.agent_file.resolve(self.agent_file.spec.trace.dir), self.name)

    def __call__(self, url: str, run_id: str | None = None) -> tuple[Host, Agent]:
        from tether.durable._runtime import stores_for

        built = build_agent(self.agent_file, stores=stores_for(url), app=self.name)
        return built.host, built.agent


def _writable(folder: Path, app: str) -> None:
    """Raise ``ConfigError`` when the app's trace folder cannot be made or written (a read-only
    mount, a folder this process may not write): a worker would take each run and fail it there;
    refused at its start, the runs wait in the queue for a worker that can write."""
    if (why := unwritable(folder)) is None:
        return
    raise ConfigError(
        f"{app}: its trace folder {folder} cannot be written ({why}): each run's trace is written"
        " there. Mount it read-write, or set trace.dir in the agent file to a folder this worker"
        " may write; nothing was served"
    )
