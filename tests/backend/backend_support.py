"""Helpers for the model-backend tests: a host with two read tools, a recording sleep."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from tether import Effect, Host, Policy, TrustedContext, tool

ORDER_CALLS: list[str] = []
CONTEXT = TrustedContext(tenant="shopping-a")


@tool(effect=Effect.READ)
async def read_order(
    order_id: Annotated[str, Field(description="Work order id, e.g. '742'.")],
) -> dict[str, Any]:
    """Read one work order."""
    ORDER_CALLS.append(order_id)
    return {"order_id": order_id, "status": "open", "ref": f"orders/{order_id}"}


@tool(effect=Effect.READ)
async def read_history(
    order_id: Annotated[str, Field(description="Work order id, e.g. '742'.")],
) -> dict[str, Any]:
    """Read the history of one work order."""
    return {"order_id": order_id, "note": "awaiting part P-17"}


def make_host(tmp_path: Path, **kw: Any) -> Host:
    host = Host(policy=Policy(allow={"read_order", "read_history"}), trace_dir=tmp_path / "traces", **kw)
    host.add_tools(read_order, read_history)
    return host


class Sleeps:
    """An injected sleep that records the waits instead of taking them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
