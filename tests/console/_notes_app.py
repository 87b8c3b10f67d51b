"""A host whose side-effecting tool appends notes to a SQLite "outbox" beside the approval store,
for two tenants (tenant-a owns order-a1, tenant-b owns order-b1), and an agent whose model
stand-in is a pure function of the request: it proposes one note for the order named in the
objective, then answers. ``build(db)`` is the application factory a resume calls.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from tether.host import Host
from tether.models._base import ModelRequest
from tether.policy import Approvals, DictCatalog, Policy, SqliteApprovalStore, TrustedContext
from tether.runs._values import Agent
from tether.testing import FunctionModel, call, final, tool_results
from tether.tools import Effect, Target, ToolContext, tool

APP = "_notes_app:build"
TENANT_A = TrustedContext(tenant="tenant-a", user="ops-a")
TENANT_B = TrustedContext(tenant="tenant-b", user="ops-b")
CATALOG = DictCatalog({"order": {"order-a1": "tenant-a", "order-b1": "tenant-b"}})


class Outbox:
    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS notes (key TEXT, order_id TEXT, note TEXT)")

    def rows(self) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.path) as conn:
            return list(conn.execute("SELECT key, order_id, note FROM notes ORDER BY rowid"))

    @tool(effect=Effect.WRITE, target=Target("order_id", "order"))
    def add_note(
        self,
        order_id: Annotated[str, Field(min_length=1, max_length=40, description="Order id.")],
        note: Annotated[str, Field(min_length=1, max_length=500, description="Note text, stored verbatim.")],
        ctx: ToolContext,
    ) -> dict[str, Any]:
        """Append a note to an order (a side effect)."""
        with sqlite3.connect(self.path) as conn:
            conn.execute("INSERT INTO notes VALUES (?, ?, ?)", (ctx.idempotency_key, order_id, note))
        return {"order_id": order_id, "note": note}


def _model(request: ModelRequest) -> Any:
    if tool_results(request):
        return final("The note was added.")
    user = next(m.content for m in request.messages if getattr(m, "kind", "") == "user")
    order = re.search(r"order-[ab]1", user)
    note = user.split(":", 1)[1].strip() if ":" in user else "Customer asked for a call back."
    return call("add_note", order_id=order.group(0) if order else "order-a1", note=note)


def build(db: Path) -> tuple[Host, Agent]:
    db = Path(db)
    box = Outbox(db.with_name("outbox.db"))
    host = Host(
        policy=Policy(allow={"add_note"}, catalog=CATALOG),
        approvals=Approvals(SqliteApprovalStore(db), app=APP),
        trace_dir=db.parent / "traces",
    )
    host.add_tools(box.add_note)
    agent = Agent(
        instructions="Add notes to orders.", model=FunctionModel(_model, name="notes-stand-in"), name="noter"
    )
    return host, agent
