"""The console's "resume" action: continue a paused run once its approvals are decided.

The run's tenant is read from its checkpoint (what the host recorded), never from the request;
only a reviewer of that tenant may resume it. The run is rebuilt and continued by the
``ConsoleSources.resume`` callable (by default the application factory the checkpoint names,
exactly as ``tether resume`` does).
"""

from __future__ import annotations

import json
from typing import Any

from tether.console.approvals import Denied, Hidden
from tether.console.sources import ConsoleSources
from tether.console.users import Principal
from tether.errors import ApprovalError, TetherError

__all__ = ["resume_run"]


def _tenant(state: str) -> str | None:
    try:
        return str(json.loads(state)["context"]["tenant"])
    except (ValueError, KeyError, TypeError):
        return None


async def resume_run(sources: ConsoleSources, principal: Principal, run_id: str) -> dict[str, Any]:
    """Resume ``run_id``; returns the run's summary. Raises ``Hidden``, ``Denied``, ``ApprovalError``."""
    if sources.approvals is None:
        raise Hidden("run")
    checkpoint = await sources.approvals.store.load_checkpoint(run_id)
    tenant = _tenant(checkpoint.state) if checkpoint is not None else None
    if checkpoint is None or tenant is None or not principal.sees(tenant):
        raise Hidden("run")
    actor = f"{principal.via}:{principal.name}"
    try:
        if not principal.may(tenant, "reviewer"):
            raise Denied("not_reviewer", f"{principal.name} may not resume runs of this tenant")
        if sources.resume is None:
            raise ApprovalError(
                "resume_disabled", f"this console does not resume runs: tether resume {run_id}"
            )
        if checkpoint.status != "paused":
            raise ApprovalError("not_paused", f"run {run_id} is {checkpoint.status}")
        result = await sources.resume(run_id)
    except TetherError as err:  # an approval state, or a factory that cannot rebuild the run
        reason = getattr(err, "reason", "") or type(err).__name__
        sources.users.audit(actor, "resume", tenant=tenant, target=run_id, outcome=f"refused:{reason}",
                            detail=str(err)[:500])  # fmt: skip
        raise
    sources.users.audit(actor, "resume", tenant=tenant, target=run_id, outcome=str(result.stop_reason))
    summary: dict[str, Any] = result.summary()
    return summary
