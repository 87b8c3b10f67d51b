"""The ids of child runs: derived from the parent's, so a resumed parent finds its children."""

from __future__ import annotations

import hashlib
from typing import Any

from tether.runs._values import RunState

__all__ = ["child_run_id", "subagent_run_id"]


def child_run_id(parent: RunState, part: str, call_id: str | None = None, agent: str = "") -> str:
    """The id of the child run ``parent`` starts for ``part`` (``node3``: a workflow's third
    step; ``sub2``: a subagent called in the parent's third turn, by the call ``call_id``,
    which the model named, to the subagent ``agent``; the id holds both only as a digest): the
    same when the parent is resumed and starts it again, so the child is resumed, not started
    twice. The call id is the model's: the subagent's name is part of the id, so a call to
    another subagent under a call id a paused child's call had never resumes that child under
    the other subagent (its tools, its instructions)."""
    if call_id is None:
        return f"{parent.run_id}-{part}"
    named = f"{agent}\0{call_id}" if agent else call_id
    digest = hashlib.sha256(named.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{parent.run_id}-{part}-{digest}"


async def subagent_run_id(host: Any, parent: RunState, part: str, call_id: str, agent: str) -> str:
    """``child_run_id`` of a subagent's run; or, where none was stored under it, the id an
    earlier release gave (without the subagent's name) when a child it paused there still waits:
    a run paused inside a subagent before an upgrade is continued, not started again (its
    subagent cannot be told from what an earlier release stored)."""
    child = child_run_id(parent, part, call_id, agent)
    if not agent or host.approvals is None:
        return child
    store = host.approvals.store
    if await store.load_checkpoint(child) is not None:
        return child
    earlier = child_run_id(parent, part, call_id)
    saved = await store.load_checkpoint(earlier)
    return earlier if saved is not None and saved.status != "finished" else child
