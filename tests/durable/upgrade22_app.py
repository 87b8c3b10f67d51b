"""The app of the twenty-second rolling-upgrade round: ``durable_app``'s plan, model and tools,
with two gates a test holds to stop a worker mid-call. While ``$DURABLE_DIR/model-gate`` exists a
model call waits (after logging ``model-held``); while ``effect-gate`` exists ``append_log`` waits
after its effect happened (logged in ``effects.log``), before it returns its outcome."""

from __future__ import annotations

import os
from typing import Annotated, Any

import anyio
import durable_app
from durable_app import _append, _dir
from pydantic import Field

from tether import Agent, Host, Policy
from tether.core.messages import AssistantMessage
from tether.models._base import ModelRequest
from tether.policy import Approvals
from tether.testing import FunctionModel
from tether.tools import Effect, ToolContext, tool

APP = "upgrade22_app:build"


async def _hold(gate: str, note: str) -> None:
    if (_dir() / gate).exists():
        _append("held.log", f"{note}\t{os.getpid()}")
        while (_dir() / gate).exists():
            await anyio.sleep(0.05)


@tool(effect=Effect.WRITE, needs_approval=False)
async def append_log(
    entry: Annotated[str, Field(description="The line to append.")], ctx: ToolContext
) -> dict[str, Any]:
    """Append a line to the team log; the outcome waits while the test holds the effect gate."""
    _append("effects.log", f"{ctx.idempotency_key}\tappend_log\t{entry}\t{os.getpid()}")
    await _hold("effect-gate", f"effect {entry}")
    return {"done": entry, "key": ctx.idempotency_key}


async def gated_model(request: ModelRequest) -> AssistantMessage:
    await _hold("model-gate", "model")
    return await durable_app.model_function(request)


def build(url: str, run_id: str | None = None) -> tuple[Host, Agent]:
    from tether.durable import stores_for

    stores = stores_for(url)
    approvals = Approvals(stores.approvals, reconcilers={"append_log": durable_app.lookup}, app=APP)
    host = Host(policy=Policy(), approvals=approvals)
    host.add_tools(durable_app.read_item, append_log, durable_app.send_payment)
    agent = Agent("Follow the plan.", FunctionModel(gated_model, name="plan-model"))
    return host, agent
