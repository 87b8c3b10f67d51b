"""``tether mcp run --db``: an MCP run that ``tether resume RUN`` can continue in another process.

``tether resume`` calls the checkpoint's factory with the approval store's path only, so the
MCP config that built the host is recorded beside the store (``<db>.mcp-config``, one config per
store). The factory rebuilds the host from that config with nobody at the keyboard (another
unanswered question pauses again) and an agent driven by the scripted stand-in, which answers
with what it observed: a run started with a real model (``tether run --model``) is not rebuilt here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tether.errors import ConfigError

if TYPE_CHECKING:
    from tether.host import Host
    from tether.policy import Approvals
    from tether.run import Agent

__all__ = ["APP", "approvals_for", "rebuild"]

APP = "tether.mcpapp.resumable:rebuild"


def _sidecar(db: Path) -> Path:
    return db.with_name(db.name + ".mcp-config")


def approvals_for(db: Path, config_path: Path) -> Approvals:
    """The approval store at ``db`` for an MCP run, with the config recorded for ``rebuild``.

    Raises ``ConfigError`` when the store already belongs to another MCP config."""
    from tether.policy import Approvals, SqliteApprovalStore

    db = Path(db)
    config_path = Path(config_path).resolve()
    sidecar = _sidecar(db)
    if sidecar.exists() and (recorded := sidecar.read_text(encoding="utf-8").strip()) != str(config_path):
        raise ConfigError(f"approval store {db} belongs to MCP config {recorded}; use another --db")
    db.parent.mkdir(parents=True, exist_ok=True)
    store = SqliteApprovalStore(db)
    if not sidecar.exists():
        sidecar.write_text(str(config_path) + "\n", encoding="utf-8")
    return Approvals(store, app=APP)


def rebuild(db: Path) -> tuple[Host, Agent]:
    """The application factory ``tether resume`` calls: host and agent of an MCP run."""
    from tether.mcp.config import load_config
    from tether.mcpapp.hosting import build_host
    from tether.mcpapp.runner import INSTRUCTIONS, StandIn
    from tether.run import Agent
    from tether.testing import FunctionModel

    sidecar = _sidecar(Path(db))
    if not sidecar.exists():
        raise ConfigError(f"no MCP config recorded for approval store {db} ({sidecar} is missing)")
    config_path = Path(sidecar.read_text(encoding="utf-8").strip())
    config = load_config(config_path)
    host = build_host(config, responder=None, approvals=approvals_for(Path(db), config_path))
    model = FunctionModel(StandIn([]), name="mcp-stand-in")
    return host, Agent(instructions=INSTRUCTIONS, model=model, name="mcp-agent")
