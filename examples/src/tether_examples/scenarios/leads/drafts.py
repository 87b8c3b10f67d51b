"""The lead-draft tool and its trusted catalog. Everything here is fictitious.

``prepare_draft`` is the only tool: it prepares a draft in memory for a lead of the caller's
tenant. It sends nothing, collects nothing and calls nothing. The tenant comes from the host's
``ToolContext``, never from the arguments; the body is stored verbatim as data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from tether.errors import ToolInputError
from tether.policy._trusted import DictCatalog
from tether.tools._contract import Effect, Target, ToolContext, render_result, tool

__all__ = ["LEADS", "Draft", "DraftBook", "catalog"]

# lead id -> owning tenant (the host's trusted catalog)
LEADS: dict[str, str] = {
    "lead-alpha": "org-alpha",
    "lead-alpha-2": "org-alpha",
    "lead-beta": "org-beta",
}


def catalog() -> DictCatalog:
    return DictCatalog({"lead": LEADS})


@dataclass(frozen=True, slots=True)
class Draft:
    draft_id: str
    tenant: str
    lead_id: str
    body: str
    idempotency_key: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "draft_id": self.draft_id,
            "tenant": self.tenant,
            "lead_id": self.lead_id,
            "body": self.body,
            "idempotency_key": self.idempotency_key,
        }


class DraftBook:
    """Drafts held in memory, indexed by idempotency key (the tool's own guard against repeats)."""

    def __init__(self) -> None:
        self.drafts: list[Draft] = []
        self._by_key: dict[str, Draft] = {}

    @tool(effect=Effect.WRITE, target=Target("lead_id", "lead"), needs_approval=True)
    def prepare_draft(
        self,
        lead_id: Annotated[
            str,
            Field(min_length=1, max_length=80, description="Id of the lead to draft for, e.g. 'lead-alpha'."),
        ],
        body: Annotated[
            str, Field(min_length=1, max_length=2000, description="Text of the draft; stored as written.")
        ],
        ctx: ToolContext,
    ) -> dict[str, Any]:
        """Prepare (never send) a message draft for one lead of your organisation."""
        key = ctx.idempotency_key
        if key is None:
            raise ToolInputError("prepare_draft needs an idempotency key from the host")
        if key in self._by_key:  # the same call again: same draft, no second one
            return self._by_key[key].as_dict()
        draft = Draft(f"draft-{len(self.drafts) + 1}", ctx.tenant, lead_id, body, key)
        self.drafts.append(draft)
        self._by_key[key] = draft
        return draft.as_dict()

    def lookup(self, key: str) -> dict[str, Any] | None:
        """Reconciler: the recorded result of the draft made under ``key``, or None if none was."""
        draft = self._by_key.get(key)
        if draft is None:
            return None
        data = draft.as_dict()
        return {"tool": "prepare_draft", "text": render_result(data), "data": data, "is_error": False}
