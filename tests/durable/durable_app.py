"""The app the durable tests and bench/distributed.py submit: a deterministic model that follows
a plan written in the objective, and tools whose effects land in their own log file.

Objective grammar: ``<tag>: step; step; …`` with steps ``read ID``, ``log TEXT`` (a write that
needs no approval), ``note TEXT`` (the same, but its tool has no reconciler), ``pay N`` (a write
that needs a person's approval), ``both TEXT`` (a read and a log in one turn), ``ghost X`` (a
call to a tool no one offers: refused), ``gone X`` (a read whose upstream is unavailable),
``down X`` (the run's first model call fails, once per X: the run stops ``model_error``),
``flaky X`` (a write whose effect happens, then the tool raises: its outcome is unknown). The model asks
for the next step's calls until the plan is done, then answers. It is a pure function of the
request, so a recovered run that asks again gets the same answer; it appends one line per call
to ``$DURABLE_DIR/model.log`` so tests can count them.

Effects: ``append_log``, ``notify`` and ``send_payment`` append ``key<TAB>tool<TAB>arg<TAB>pid`` to
``$DURABLE_DIR/effects.log`` (no uniqueness: a repeated effect shows as a second line), then
linger ``$DURABLE_EFFECT_S`` seconds (a kill in that window leaves the outcome unrecorded);
the reconciler of the first and last looks the key up in that same log. An effect whose argument is listed in
``$DURABLE_CRASH_ON`` SIGKILLs its own process right after it happened, the first time.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Annotated, Any

import anyio
from pydantic import Field

from tether import Agent, Host, Policy
from tether.core.messages import AssistantMessage, ToolCall, ToolMessage
from tether.errors import DependencyUnavailable, ModelError
from tether.models._base import ModelRequest
from tether.policy import Approvals
from tether.testing import FunctionModel
from tether.tools import Effect, ToolContext, tool

APP = "durable_app:build"


def _dir() -> Path:
    path = Path(os.environ.get("DURABLE_DIR", "tether-output/durable"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _append(name: str, line: str) -> None:
    # One write of one short line to a file opened for appending: whole lines, never torn.
    fd = os.open(_dir() / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def effects() -> list[list[str]]:
    path = _dir() / "effects.log"
    return [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []


def lookup(key: str) -> dict[str, Any] | None:
    """The reconciler: the tool's own record of the effect with this key, if it happened."""
    for row in effects():
        if row[0] == key:
            return {
                "text": json.dumps({"done": row[2], "key": key}),
                "data": {"done": row[2]},
                "is_error": False,
            }
    return None


async def _effect(tool_name: str, arg: str, ctx: ToolContext) -> dict[str, Any]:
    _append("effects.log", f"{ctx.idempotency_key}\t{tool_name}\t{arg}\t{os.getpid()}")
    crash = os.environ.get("DURABLE_CRASH_ON", "")
    marker = _dir() / f"crashed-{arg.replace(':', '_')}"
    if arg in crash.split(",") and not marker.exists():
        # The effect happened; the process dies before its outcome is recorded (once per arg).
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    await anyio.sleep(float(os.environ.get("DURABLE_EFFECT_S", "0")))
    return {"done": arg, "key": ctx.idempotency_key}


@tool(effect=Effect.READ)
async def read_item(item_id: Annotated[str, Field(description="Item id, e.g. 'a1'.")]) -> dict[str, Any]:
    """Read one item."""
    return {"item": item_id, "text": f"contents of {item_id}"}


@tool(effect=Effect.READ)
async def read_remote(item_id: Annotated[str, Field(description="Item id.")]) -> dict[str, Any]:
    """Read one item from a remote system (down in these tests)."""
    raise DependencyUnavailable(f"remote system down for {item_id}")


@tool(effect=Effect.WRITE, needs_approval=False)
async def flaky_log(entry: Annotated[str, Field(description="The line to append.")], ctx: ToolContext) -> Any:
    """Append a line to a log whose reply gets lost (the effect happens, then an error)."""
    await _effect("flaky_log", entry, ctx)
    raise ConnectionResetError("the log service dropped the connection")


@tool(effect=Effect.WRITE, needs_approval=False)
async def append_log(
    entry: Annotated[str, Field(description="The line to append.")], ctx: ToolContext
) -> dict[str, Any]:
    """Append a line to the team log (a side effect that needs no approval)."""
    return await _effect("append_log", entry, ctx)


@tool(effect=Effect.WRITE, needs_approval=False)
async def notify(
    message: Annotated[str, Field(description="The message to send.")], ctx: ToolContext
) -> dict[str, Any]:
    """Notify the team (a side effect no one can look up afterwards: no reconciler)."""
    return await _effect("notify", message, ctx)


@tool(effect=Effect.WRITE)
async def send_payment(
    amount: Annotated[str, Field(description="Amount in USD, e.g. '10'.")], ctx: ToolContext
) -> dict[str, Any]:
    """Send a payment (a side effect a person approves first)."""
    return await _effect("send_payment", amount, ctx)


def plan(objective: str) -> tuple[str, list[list[tuple[str, dict[str, str]]]]]:
    tag, _, rest = objective.partition(":")
    turns: list[list[tuple[str, dict[str, str]]]] = []
    for step in filter(None, (s.strip() for s in rest.split(";"))):
        verb, _, arg = step.partition(" ")
        if verb == "read":
            turns.append([("read_item", {"item_id": arg})])
        elif verb == "log":
            turns.append([("append_log", {"entry": f"{tag.strip()}:{arg}"})])
        elif verb == "note":
            turns.append([("notify", {"message": f"{tag.strip()}:{arg}"})])
        elif verb == "pay":
            turns.append([("send_payment", {"amount": arg})])
        elif verb == "ghost":
            turns.append([("ghost_tool", {"x": arg})])
        elif verb == "flaky":
            turns.append([("flaky_log", {"entry": f"{tag.strip()}:{arg}"})])
        elif verb == "gone":
            turns.append([("read_remote", {"item_id": arg})])
        elif verb == "both":
            turns.append([("read_item", {"item_id": arg}), ("append_log", {"entry": f"{tag.strip()}:{arg}"})])
    return tag.strip(), turns


async def model_function(request: ModelRequest) -> AssistantMessage:
    objective = next(str(m.content) for m in request.messages if m.kind == "user")
    tag, turns = plan(objective.split("\n")[0] if ":" in objective else objective)
    done = sum(1 for m in request.messages if isinstance(m, AssistantMessage) and m.tool_calls)
    _append("model.log", f"{tag}\t{done}\t{os.getpid()}")
    for step in objective.split("\n")[0].partition(":")[2].split(";"):
        verb, _, arg = step.strip().partition(" ")
        marker = _dir() / f"model-down-{arg}"
        if verb == "down" and not marker.exists():
            marker.write_text(str(os.getpid()))
            raise ModelError(f"the model provider is down ({arg})")
    await anyio.sleep(float(os.environ.get("DURABLE_MODEL_S", "0")))
    if done < len(turns):
        return AssistantMessage(
            tool_calls=tuple(
                ToolCall(f"c{done}_{i}", name, json.dumps(args)) for i, (name, args) in enumerate(turns[done])
            )
        )
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    return AssistantMessage(content=f"{tag} done after {len(results)} results")


def build(url: str, run_id: str | None = None) -> tuple[Host, Agent]:
    from tether.durable import stores_for

    stores = stores_for(url)
    approvals = Approvals(
        stores.approvals, reconcilers={"append_log": lookup, "send_payment": lookup}, app=APP
    )
    traces = os.environ.get("DURABLE_TRACES")
    host = Host(policy=Policy(), approvals=approvals, trace_dir=traces or None)
    host.add_tools(read_item, read_remote, flaky_log, append_log, notify, send_payment)
    agent = Agent("Follow the plan.", FunctionModel(model_function, name="plan-model"))
    return host, agent
