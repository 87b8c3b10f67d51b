"""The console's "resume" action: continue a paused run (or one stopped on a transient failure)
by the rule ``tether resume`` uses (``resume_point``), through ``ConsoleSources.resume``.

The run's tenant is read from its checkpoint, never from the request; only a reviewer of that
tenant may resume it. Every resume and every refusal is audited.
"""

from __future__ import annotations

import logging
from typing import Any

from tether.console._sources import ConsoleSources
from tether.console._users import Denied, Hidden, Principal
from tether.errors import ApprovalError, TetherError
from tether.runners._scope import resume_point

__all__ = ["ANSWERED", "resume_run"]

_log = logging.getLogger(__name__)

# What a resume's answer tells whoever resumed: the run's own facts (its page and ``/api/runs/ID``
# show them too) and, on a deployment, its queued continuation. Nothing of the console's host: a
# run's summary names its trace file's path there (``trace``), which no page or API shows.
ANSWERED = frozenset(
    {
        "run_id",
        "design",
        "stop_reason",
        "answer",
        "detail",
        "steps",
        "llm_calls",
        "tool_calls",
        "tokens",
        "cost_usd",
        "elapsed_s",
        "handoff",
        "pending_proposals",
        "workflow_id",
        "status",
        "enqueued",
    }
)


async def resume_run(sources: ConsoleSources, principal: Principal, run_id: str) -> dict[str, Any]:
    """Resume ``run_id``; returns the run's summary (or the enqueued continuation's on a
    deployment), its keys among ``ANSWERED``. Raises ``Hidden``, ``Denied``, ``ApprovalError``
    (``resume_disabled``, ``run_finished``, ``not_resumable``, ``app_not_allowed``,
    ``run_cancelled``, ``not_durable`` …)."""
    if sources.approvals is None:
        raise Hidden("run")
    checkpoint, tenant = await sources.checkpoint(run_id)
    if checkpoint is None or tenant is None or not principal.sees(tenant):
        raise Hidden("run")
    actor = principal.actor
    try:
        if not principal.may(tenant, "reviewer"):
            raise Denied("not_reviewer", f"{principal.name} may not resume runs of this tenant")
        if sources.resume is None:
            raise ApprovalError(
                "resume_disabled", f"this console does not resume runs: tether resume {run_id}"
            )
        resume_point(checkpoint, run_id)  # the one rule: paused or stopped, never finished
        summary = await sources.resume(run_id)
    except TetherError as err:  # a refusal, or a factory that cannot rebuild the run
        sources.users.refused(actor, "resume", err, tenant=tenant, target=run_id)
        raise
    except Exception as err:  # the factory's or the run's own code failed: the run may have acted
        # Audited like any resume (who continued it, and that it failed), told as a refusal with
        # the error's kind only (its text may name paths or values: in the console's log).
        _log.exception("resuming run %s for %s failed", run_id, actor)
        failed = f"failed:{type(err).__name__}"
        sources.users.audit(actor, "resume", tenant=tenant, target=run_id, outcome=failed[:80])
        raise ApprovalError(
            "resume_failed",
            f"the run's continuation failed ({type(err).__name__}): the console's log says why",
        ) from None
    outcome = str(summary.get("stop_reason") or "")
    if summary.get("enqueued"):
        outcome = f"enqueued:{summary.get('workflow_id', '')}"
    sources.users.audit(actor, "resume", tenant=tenant, target=run_id, outcome=outcome)
    return {key: value for key, value in summary.items() if key in ANSWERED}
