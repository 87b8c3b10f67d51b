"""One home for a person's answer to a paused question (accept / decline / cancel).

Every entry point that answers (the console, ``tether runs answer``, ``tether mcp resume``) calls
``answer_question``: the answer is checked against the stored question the same way
(``store_answer``: still pending, an answerable schema, the content valid for it, recorded once)
and audited the same way in the log the entry point hands in (``elicitation_<action>``: who,
which tenant's run, which question, the fields answered), refused or not."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether.errors import ApprovalError
from tether.mcp._elicitation import store_answer
from tether.mcp._pauses import Pause
from tether.policy._decisions import DecisionAudit

__all__ = ["answer_question"]


async def answer_question(
    store: Any,
    pause_id: str,
    action: str,
    content: dict[str, Any] | None,
    *,
    answered_by: str,
    actor: str,
    audit: DecisionAudit | None,
    tenant: str = "",
    redact: Callable[[str], str] | None = None,
) -> Pause:
    """Validate and record an answer in ``store`` as ``answered_by`` (the pause's record), audited
    as ``actor`` either way; ``redact`` hides the paused call's secrets in what is audited or
    raised (a question's choices and fields may hold them). Raises ``ApprovalError``
    (``not_pending``, ``invalid_answer``, ``not_a_question``, ``unknown_pause`` …); a refused answer
    changes nothing but the audit log."""
    hide = redact or (lambda text: text)
    try:
        stored = await store_answer(store, pause_id, action, content, actor=answered_by)
    except ApprovalError as err:
        shown = hide(str(err))
        refusal = err if shown == str(err) else ApprovalError(err.reason, shown)
        if audit is not None:
            audit.refused(actor, f"elicitation_{action}", refusal, tenant=tenant, target=pause_id)
        if refusal is err:
            raise
        raise refusal from None
    if audit is not None:
        fields = sorted(hide(str(k)) for k in content or {})
        audit.audit(
            actor,
            f"elicitation_{action}",
            tenant=tenant,
            target=pause_id,
            outcome="answered",
            detail=f"fields: {', '.join(fields)}" if fields else "",
        )
    return stored
