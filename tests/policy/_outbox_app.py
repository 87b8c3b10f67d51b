"""A host whose only side-effecting tool writes rows into a separate SQLite "outbox" file.

The outbox has no uniqueness constraint, so a repeated effect would show as a second row: the
tests count rows to prove exactly-once. Used in-process and from subprocesses
(``python _outbox_app.py DB OUTBOX COMMAND ...``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
from pydantic import Field

from tether.host import Host
from tether.policy import (
    Approvals,
    DictCatalog,
    Policy,
    Reviewer,
    SqliteApprovalStore,
    TrustedContext,
)
from tether.runners._desk import ProposalDesk
from tether.tools import Effect, Target, ToolContext, tool

ALPHA = TrustedContext(tenant="org-alpha", user="alpha-ops")
BETA = TrustedContext(tenant="org-beta", user="beta-ops")
REVIEWER = Reviewer("alpha-manager", tenants=frozenset({"org-alpha"}))
CATALOG = DictCatalog({"order": {"order-1": "org-alpha", "order-2": "org-alpha", "order-9": "org-beta"}})


class Outbox:
    def __init__(self, path: Path, *, crash: str = "") -> None:
        self.path = Path(path)
        self.crash = crash  # "" | "before" | "after": os._exit around the effect
        with sqlite3.connect(self.path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS effects (key TEXT, order_id TEXT, note TEXT, pid INTEGER)"
            )

    def rows(self) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.path) as conn:
            return list(conn.execute("SELECT key, order_id, note, pid FROM effects ORDER BY rowid"))

    @tool(effect=Effect.WRITE, target=Target("order_id", "order"))
    def add_note(
        self,
        order_id: Annotated[str, Field(min_length=1, max_length=40, description="Order id.")],
        note: Annotated[str, Field(min_length=1, max_length=500, description="Note text, stored verbatim.")],
        ctx: ToolContext,
    ) -> dict[str, Any]:
        """Append a note to an order (a side effect)."""
        if self.crash == "before":
            os._exit(17)
        with sqlite3.connect(self.path, timeout=30) as conn:
            conn.execute(
                "INSERT INTO effects VALUES (?, ?, ?, ?)", (ctx.idempotency_key, order_id, note, os.getpid())
            )
        if self.crash == "after":
            os._exit(17)  # the effect happened; its outcome is never recorded
        return {"order_id": order_id, "note": note, "key": ctx.idempotency_key}

    def lookup(self, key: str) -> dict[str, Any] | None:
        with sqlite3.connect(self.path) as conn:
            row = conn.execute("SELECT order_id, note FROM effects WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        data = {"order_id": row[0], "note": row[1], "key": key}
        return {"tool": "add_note", "text": json.dumps(data), "data": data, "is_error": False}


def build(db: Path, outbox: Path, *, crash: str = "", reconcile: bool = True) -> tuple[Host, Outbox]:
    box = Outbox(outbox, crash=crash)
    reconcilers = {"add_note": box.lookup} if reconcile else {}
    host = Host(
        policy=Policy(allow={"add_note"}, catalog=CATALOG),
        approvals=Approvals(SqliteApprovalStore(db), reconcilers=reconcilers, wait_s=60),
    )
    host.add_tools(box.add_note)
    return host, box


async def _main(argv: list[str]) -> None:
    db, outbox, command, *rest = argv
    crash = os.environ.get("OUTBOX_CRASH", "")
    host, _ = build(
        Path(db), Path(outbox), crash=crash, reconcile=os.environ.get("OUTBOX_RECONCILE", "1") == "1"
    )
    await host.start()
    desk = ProposalDesk(host)
    if command == "propose-approve-hold":
        p = await desk.propose(
            ALPHA, json.dumps({"tool": "add_note", "arguments": {"order_id": "order-1", "note": rest[0]}})
        )
        await desk.approve(REVIEWER, p.id)
        print(p.id, flush=True)
        sys.stdin.readline()  # held until the test kills this process
    elif command == "resume":
        loop_host, agent = build_loop(Path(db))
        try:
            result = await loop_host.resume(agent, rest[0])
        finally:
            await loop_host.aclose()
        print(json.dumps({"stop_reason": str(result.stop_reason)}), flush=True)
    elif command == "execute":
        print("ready", flush=True)
        sys.stdin.readline()  # a start line from the test: every worker begins together
        ex = await desk.execute(ALPHA, rest[0])
        print(json.dumps({"replayed": ex.replayed, "data": ex.data, "pid": os.getpid()}), flush=True)


# -- the same tool in the agent loop: a model stand-in that is a pure function of the request --

LOOP_APP = "_outbox_app:build_loop"


def _note_model(request: Any) -> Any:
    from tether.testing import call, final, tool_results

    if not tool_results(request):
        return call("add_note", order_id="order-1", note="Customer asked for a call back.")
    return final("The note was added to order-1.")


def build_loop(db: Path) -> tuple[Host, Any]:
    """Factory for ``tether resume``: the host (outbox next to ``db``) and the agent."""
    from tether.runs._values import Agent
    from tether.testing import FunctionModel

    host, _ = build(Path(db), Path(db).with_name("outbox.db"), crash=os.environ.get("OUTBOX_CRASH", ""))
    assert host.approvals is not None
    host.approvals.app = LOOP_APP
    host.trace_dir = Path(db).parent / "traces"
    agent = Agent(
        instructions="Add notes to orders.", model=FunctionModel(_note_model, name="notes"), name="noter"
    )
    return host, agent


if __name__ == "__main__":
    anyio.run(_main, sys.argv[1:])
