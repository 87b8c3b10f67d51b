"""A process that traces a run and is killed (SIGKILL) at a chosen point.

    python _trace_crash_app.py TRACE_DIR MODE POINT

MODE is the host's ``trace_flush``; POINT is where the process dies:
``model`` (during the second model turn), ``tool`` (inside a side-effecting tool),
``read_tool`` (inside a read-only tool),
``after_stop`` (after the run returned, before a normal exit), ``after_flush`` (right after
``Tracer.flush()``), ``no_flush`` (right after emitting, without it).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import anyio
from pydantic import Field

from tether import Agent, Effect, Host, Policy, TrustedContext, tool
from tether.models._base import ModelRequest
from tether.testing import FunctionModel, call, tool_results
from tether.trace._events import EventKind

TRACE_DIR, MODE, POINT = Path(sys.argv[1]), sys.argv[2], sys.argv[3]


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@tool(effect=Effect.WRITE)
def add_note(
    order_id: Annotated[str, Field(description="The order.")],
    note: Annotated[str, Field(description="The note.")],
) -> str:
    """Add a note to an order."""
    if POINT == "tool":
        die()  # the process dies inside the effect
    return f"noted on {order_id}"


@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="The order.")]) -> str:
    """Read an order."""
    die()  # the process dies inside a read
    return "open"


def model(request: ModelRequest) -> object:
    if not tool_results(request):
        if POINT == "read_tool":
            return call("read_order", order_id="742")
        return call("add_note", order_id="742", note="call back")
    if POINT == "model":
        die()  # the process dies while the model is asked again
    return "Noted."


async def main() -> None:
    host = Host(
        policy=Policy(allow={"add_note", "read_order"}, automatic_effects=(Effect.READ, Effect.WRITE)),
        trace_dir=TRACE_DIR,
        trace_flush=MODE,  # type: ignore[arg-type]
    )
    host.add_tools(add_note, read_order)
    if POINT in ("after_flush", "no_flush"):
        tracer, _ = host.new_tracer("run-1")
        tracer.emit(EventKind.TOOL_PROPOSED, call_id="c1", tool="add_note", arguments="{}")
        if POINT == "after_flush":
            tracer.flush()  # what the host does before every side effect
        die()
    result = await host.run(Agent(instructions="Take notes.", model=FunctionModel(model)), "Note it.",
                            context=TrustedContext("org-alpha"))  # fmt: skip
    print(result.run_id, flush=True)
    if POINT == "after_stop":
        die()


if __name__ == "__main__":
    anyio.run(main)
