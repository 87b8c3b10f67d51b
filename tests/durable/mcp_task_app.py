"""A durable app over one MCP server whose tool runs only as a long task (``task_server.py`` of
tests/mcp_host, mode ``durable``): the stand-in model calls it once, then answers with what it
observed. Each run's server keeps its task in ``$DURABLE_DIR/<run id>/`` and completes it once
the file ``done`` appears there, so a test decides when."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

from tether import Agent, Host
from tether.mcp._config import load_config
from tether.mcphost._build import build_host
from tether.mcphost._runner import INSTRUCTIONS, ScriptStep, StandIn
from tether.policy import Approvals
from tether.testing import FunctionModel

APP = "mcp_task_app:build"
SERVER = Path(__file__).parent.parent / "mcp_host" / "task_server.py"


def folder(run_id: str) -> Path:
    path = Path(os.environ["DURABLE_DIR"]) / run_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def build(url: str, run_id: str | None = None) -> tuple[Host, Agent]:
    from tether.durable import stores_for

    assert run_id is not None
    stores = stores_for(url)
    here = folder(run_id)
    server = {"name": "t", "transport": "stdio", "command": [sys.executable, str(SERVER)], "mode": "legacy",
              "effects": {"research": "read"}, "timeout_s": 2, "sandbox": "none",
              "env": {"TASK_MODE": "durable", "TASK_LOG": str(here / "task.log"),
                      "TASK_SIGNAL": str(here / "done")}}  # fmt: skip
    path = here / "mcp.yaml"
    path.write_text(yaml.safe_dump({"host": {"trace_dir": "traces"}, "servers": [server]}), encoding="utf-8")
    approvals = Approvals(stores.approvals, app=APP)
    host = build_host(load_config(path), use_pins=False, approvals=approvals, pauses=stores.pauses)
    script = [ScriptStep(calls=(("t__research", {"topic": "tides"}),))]
    model = FunctionModel(StandIn(script), name="stand-in")
    return host, Agent(INSTRUCTIONS, model)
