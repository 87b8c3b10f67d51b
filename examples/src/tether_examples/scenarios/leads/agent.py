"""S2 in the agent loop: the model proposes ``prepare_draft``; the run pauses for approval.

``build(db)`` is the application factory ``tether resume`` calls to rebuild the host and the
agent in another process (the checkpoint names it). The model stand-in is a pure function of
the request, so a resumed run continues exactly where the paused one stopped.
"""

from __future__ import annotations

from pathlib import Path

from tether.core.messages import AssistantMessage, ToolCall
from tether.host import Host
from tether.models._base import ModelRequest
from tether.policy import Approvals, Policy, SqliteApprovalStore, TrustedContext
from tether.runs._values import Agent
from tether.testing import FunctionModel, call, final, tool_results
from tether_examples.scenarios.leads.drafts import DraftBook, catalog

__all__ = ["APP", "BODY", "CONTEXT", "OBJECTIVE", "build"]

APP = "tether_examples.scenarios.leads.agent:build"
OBJECTIVE = "Prepare a follow-up draft for lead-alpha."
BODY = "Hello from org-alpha: a synthetic follow-up for review."
CONTEXT = TrustedContext(tenant="org-alpha", user="alpha-sales")


def _model(request: ModelRequest) -> AssistantMessage | ToolCall:
    results = tool_results(request)
    if not results:
        return call("prepare_draft", lead_id="lead-alpha", body=BODY)
    return final("A draft for lead-alpha was prepared in memory; nothing was sent.")


def build(db: Path) -> tuple[Host, Agent]:
    """The lead-draft host (approval store at ``db``) and its agent."""
    book = DraftBook()
    approvals = Approvals(SqliteApprovalStore(db), reconcilers={"prepare_draft": book.lookup}, app=APP)
    host = Host(
        policy=Policy(allow={"prepare_draft"}, catalog=catalog()),
        approvals=approvals,
        trace_dir=Path(db).parent / "traces",
    )
    host.add_tools(book.prepare_draft)
    agent = Agent(
        instructions="You prepare drafts for leads of your organisation. Drafts are never sent.",
        model=FunctionModel(_model, name="leads-stand-in"),
        name="lead-drafter",
        tools=["prepare_draft"],
    )
    return host, agent
