"""The approval queue: what a reviewer sees about a proposal, and the decisions they take.

A reviewer sees exactly what would run (the stored arguments, verbatim, with the content hash),
where each argument came from, the rule that asked for approval, the run's objective and the
turn that proposed the call. Decisions go through ``Approvals`` (which checks the reviewer's
tenant again and moves the proposal atomically) and are audited with the content hash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tether.console.sources import ConsoleSources
from tether.console.users import Principal
from tether.errors import ApprovalError
from tether.policy.store import ProposalStatus, StoredProposal
from tether.trace.sanitize import Redactor

__all__ = ["Denied", "Hidden", "decide", "proposal_view", "queue"]

ACTIONS = ("approve", "deny", "invalidate")
_REDACT = Redactor()


class Hidden(ApprovalError):
    """Not visible to this principal: answered exactly like an unknown id."""

    def __init__(self, what: str) -> None:
        super().__init__("not_found", f"no {what} here")


class Denied(ApprovalError):
    """Visible, but the principal's role for that tenant does not allow the action."""


def queue(
    sources: ConsoleSources, principal: Principal, *, status: str = "pending", tenant: str = ""
) -> list[dict[str, Any]]:
    """Proposals the principal may see, newest first."""
    if sources.approvals is None:
        return []
    wanted = None if status == "all" else ProposalStatus(status)
    rows = []
    for p in sources.approvals.store.list_proposals(status=wanted):
        if not principal.sees(p.tenant) or (tenant and p.tenant != tenant):
            continue
        rows.append(_row(p))
    rows.reverse()
    return rows


def _row(p: StoredProposal) -> dict[str, Any]:
    return {
        "id": p.id,
        "tenant": p.tenant,
        "tool": p.tool,
        "effect": p.effect,
        "status": str(p.status),
        "run_id": p.run_id,
        "step": p.step,
        "created_at": p.created_at.isoformat(timespec="seconds"),
        "content_hash": p.content_hash,
        "decided_by": p.decided_by,
    }


def _visible(sources: ConsoleSources, principal: Principal, proposal_id: str) -> StoredProposal:
    if sources.approvals is None:
        raise Hidden("proposal")
    found = sources.approvals.store.get_proposal(proposal_id)
    if found is None or not principal.sees(found.tenant):
        raise Hidden("proposal")
    return sources.approvals.get(proposal_id)  # re-derives the content hash: "tampered" if edited


def _masked(key: str, value: Any) -> Any:
    """Values under secret-looking keys are not rendered (their length and hash stay checkable)."""
    if isinstance(value, dict):
        return {k: _masked(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(key, v) for v in value]
    if key and isinstance(value, str) and _REDACT.is_secret_key(key):
        return f"[not shown: {len(value)} characters under a secret-looking key]"
    return value


def proposal_view(sources: ConsoleSources, principal: Principal, proposal_id: str) -> dict[str, Any]:
    """Everything the reviewer sees about one proposal. Raises ``Hidden`` for another tenant's."""
    p = _visible(sources, principal, proposal_id)
    assert sources.approvals is not None
    store = sources.approvals.store
    arguments = json.loads(p.arguments)
    history = store.events(p.id)
    policy = None
    for event in history:
        if event.op == "policy":
            try:
                policy = json.loads(event.detail)
            except ValueError:
                policy = {"rule": event.actor.removeprefix("rule:"), "reason": event.detail}
    state = _state(sources, p.run_id)
    recorded = (policy or {}).get("provenance") if isinstance(policy, dict) else None
    if isinstance(recorded, dict):
        provenance, provenance_source = _recorded_provenance(recorded), "recorded by the policy when proposed"
    elif state is not None:
        provenance, provenance_source = (
            _computed_provenance(arguments, state),
            ("traced now from the run's checkpoint (default trust classes)"),
        )
    else:
        provenance, provenance_source = {}, "no run state: proposed through the desk, not by a model"
    rule = _rule(policy, p)
    turn = _turn(state, p.call_id) if state is not None else None
    objective = getattr(state, "objective", None)
    if objective is None and sources.traces is not None and p.run_id:
        run = sources.traces.get(p.run_id)
        objective = run.objective if run else None
    return {
        **_row(p),
        "call_id": p.call_id,
        "proposed_by": p.proposed_by,
        "decided_at": p.decided_at.isoformat(timespec="seconds") if p.decided_at else None,
        "decision_reason": p.decision_reason,
        "arguments": [
            {"name": k, "value": _masked(k, v), "provenance": provenance.get(k, [])}
            for k, v in arguments.items()
        ],
        "provenance_source": provenance_source,
        "rule": rule,
        "objective": objective,
        "turn": turn,
        "history": [
            {"op": e.op, "actor": e.actor, "at": e.at.isoformat(timespec="seconds"), "detail": e.detail}
            for e in history
            if e.op != "policy"
        ],
        "executions": [
            {"key": x.key, "status": str(x.status), "attempts": x.attempts, "note": x.note}
            for x in store.ledger_for(p.id)
        ],
        "can_decide": principal.may(p.tenant, "reviewer"),
        "resumable": _resumable(sources, p),
    }


def _resumable(sources: ConsoleSources, p: StoredProposal) -> bool:
    if sources.resume is None or sources.approvals is None or not p.run_id:
        return False
    cp = sources.approvals.store.load_checkpoint(p.run_id)
    return cp is not None and cp.status == "paused" and bool(cp.app)


def _state(sources: ConsoleSources, run_id: str | None) -> Any:
    if not run_id or sources.approvals is None:
        return None
    cp = sources.approvals.store.load_checkpoint(run_id)
    if cp is None:
        return None
    from tether.checkpoint import state_from_json

    try:
        return state_from_json(cp.state)
    except (ApprovalError, ValueError, KeyError, TypeError):
        return None


def _rule(policy: Any, p: StoredProposal) -> dict[str, Any]:
    if isinstance(policy, dict) and policy.get("rule"):
        problems = policy.get("problems") if isinstance(policy.get("problems"), list) else []
        return {
            "name": str(policy["rule"]),
            "reason": str(policy.get("reason") or ""),
            "problems": problems,
            "recorded": True,
        }
    # The host recorded no rule for this proposal: under the default Policy the only rule that
    # asks for approval is the effect rule (a side-effecting tool). Said as an inference.
    return {
        "name": "effect",
        "reason": f"declared effect {p.effect!r} needs approval",
        "problems": [],
        "recorded": False,
    }


def _turn(state: Any, call_id: str | None) -> dict[str, Any] | None:
    """The assistant turn that proposed ``call_id``: its text, its calls, what it had seen."""
    from tether.messages import AssistantMessage

    if not call_id:
        return None
    for index, message in enumerate(state.trajectory):
        if isinstance(message, AssistantMessage) and any(c.id == call_id for c in message.tool_calls):
            seen = {m.tool_call_id for m in state.trajectory[:index] if hasattr(m, "tool_call_id")}
            return {
                "text": message.content or "",
                "calls": [
                    {"id": c.id, "name": c.name, "arguments": c.arguments, "this": c.id == call_id}
                    for c in message.tool_calls
                ],
                "observations_before": [
                    {"tool": o.tool, "source": o.source, "trust": o.trust, "call_id": o.call_id}
                    for o in state.observations
                    if o.call_id in seen
                ],
                "position": sum(isinstance(m, AssistantMessage) for m in state.trajectory[: index + 1]),
            }
    return None


def _recorded_provenance(recorded: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for arg, items in recorded.items():
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                origins = [str(o) for o in item.get("origins") or []]
                out.setdefault(str(arg), []).append({"value": str(item.get("value", "")), "origins": origins})
    return out


def _computed_provenance(arguments: dict[str, Any], state: Any) -> dict[str, list[dict[str, Any]]]:
    from tether.policy.provenance import TrustConfig, normalise, split_values
    from tether.policy.provenance_rules import index_for

    index = index_for(state, TrustConfig())
    memory = [(r, normalise(r.claim)) for r in getattr(state, "memory", []) or []]
    out: dict[str, list[dict[str, Any]]] = {}
    for arg, value in arguments.items():
        for element in split_values(value):
            origins = []
            for o in index.trace(element)[:5]:
                text = o.describe()
                if o.label is not None and o.label.call_id:
                    text += f", call {o.label.call_id}"
                origins.append(text)
            wanted = normalise(element)
            for record, claim in memory:
                if wanted and (wanted == claim or (len(wanted) >= 5 and wanted in claim)):
                    src = record.source
                    where = f"{src.system} {src.record}" if src is not None else "no source"
                    origins.append(f"memory record {record.id or '?'} ({record.confidence}, from {where})")
            if len(origins) > 1:
                origins = [o for o in origins if not o.startswith("nowhere")]
            out.setdefault(arg, []).append({"value": element[:200], "origins": origins})
    return out


@dataclass(frozen=True, slots=True)
class Decision:
    proposal_id: str
    status: str
    decided_by: str | None
    decided_at: str | None
    content_hash: str
    run_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.proposal_id,
            "status": self.status,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at,
            "content_hash": self.content_hash,
            "run_id": self.run_id,
        }


def decide(
    sources: ConsoleSources,
    principal: Principal,
    proposal_id: str,
    action: str,
    *,
    reason: str,
    content_hash: str | None,
) -> Decision:
    """Approve, deny or invalidate one proposal, audited either way.

    Raises ``Hidden`` (unknown or another tenant's), ``Denied`` (not a reviewer there),
    ``ApprovalError`` (``content_changed``, ``reason_required``, ``already_<status>`` …)."""
    actor = f"{principal.via}:{principal.name}"
    tenant, seen_hash = "", content_hash or ""
    try:
        if action not in ACTIONS:
            raise ApprovalError("bad_action", f"action must be one of {', '.join(ACTIONS)}")
        p = _visible(sources, principal, proposal_id)
        assert sources.approvals is not None
        tenant = p.tenant
        if not principal.may(p.tenant, "reviewer"):
            raise Denied("not_reviewer", f"{principal.name} is not a reviewer for this tenant")
        if action == "approve" and not content_hash:
            raise ApprovalError("content_hash_required", "approve names the content hash that was reviewed")
        if content_hash and content_hash != p.content_hash:
            raise ApprovalError(
                "content_changed", "the proposal is not the one reviewed (content hash differs)"
            )
        reason = reason.strip()
        if action == "deny" and not reason:
            raise ApprovalError("reason_required", "a denial needs a reason")
        reviewer = principal.reviewer()
        if action == "approve":
            done = sources.approvals.approve(reviewer, p.id, reason=reason)
        elif action == "deny":
            done = sources.approvals.deny(reviewer, p.id, reason=reason)
        else:
            done = sources.approvals.invalidate(reviewer, p.id, reason=reason or "invalidated")
    except ApprovalError as err:
        sources.users.audit(
            actor, action, tenant=tenant, target=proposal_id, content_hash=seen_hash,
            outcome=f"refused:{err.reason}", detail=str(err),
        )  # fmt: skip
        raise
    sources.users.audit(
        actor, action, tenant=done.tenant, target=done.id, content_hash=done.content_hash,
        outcome=str(done.status), detail=reason,
    )  # fmt: skip
    return Decision(
        done.id,
        str(done.status),
        done.decided_by,
        done.decided_at.isoformat(timespec="seconds") if done.decided_at else None,
        done.content_hash,
        done.run_id,
    )
