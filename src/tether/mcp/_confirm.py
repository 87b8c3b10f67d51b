"""The "confirm first" pattern for destructive tools of an MCP server (X5).

For server authors using ``mcp.server.MCPServer``: a parameter annotated with
``confirm_first("Delete record {record_id}?")`` is filled by asking the person through
elicitation before the tool body runs, which then checks ``confirmed(outcome)``. Anything but an
explicit ``accept`` with ``confirm: true`` means no.
"""

from __future__ import annotations

import inspect
import string
from typing import Any

from mcp.server.elicitation import AcceptedElicitation
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel, Field

__all__ = ["Confirmation", "confirm_first", "confirmed"]


class Confirmation(BaseModel):
    confirm: bool = Field(description="true to go ahead; false to stop")


def confirm_first(template: str) -> Resolve:
    """A resolver marker asking ``template`` (formatted with the named tool arguments)."""
    fields = sorted({f for _, f, _, _ in string.Formatter().parse(template) if f})

    def ask(**arguments: Any) -> Elicit[Confirmation]:
        return Elicit(template.format(**arguments), Confirmation)

    # The SDK passes tool arguments to a resolver by parameter name: give it exactly those.
    ask.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(f, inspect.Parameter.KEYWORD_ONLY, annotation=Any) for f in fields],
        return_annotation=Elicit[Confirmation],
    )
    ask.__annotations__ = {**{f: Any for f in fields}, "return": Elicit[Confirmation]}
    return Resolve(ask)


def confirmed(outcome: Any) -> bool:
    """True only for an explicit accept with ``confirm: true``."""
    return isinstance(outcome, AcceptedElicitation) and bool(getattr(outcome.data, "confirm", False))
