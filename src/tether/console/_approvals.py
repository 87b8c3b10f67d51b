"""The approval queue: exactly what would run (the stored arguments and their content hash),
where each argument came from, the rule that asked, the run's objective and proposing turn; and
the decisions, through ``Approvals`` (which checks the reviewer's tenant again), audited.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

import anyio

from tether.console._render import hidden_chars, names_in, pretty_json, reorders
from tether.console._runs import SHOWN_DEPTH, nests_deeper, shallow
from tether.console._sources import ConsoleSources
from tether.console._users import Denied, Hidden, Principal
from tether.core._confusables import check_name, find_names, skeleton
from tether.core.messages import AssistantMessage
from tether.errors import ApprovalError
from tether.policy._decisions import HumanDecision, decide_proposal
from tether.policy._record import read_policy_record
from tether.policy._store import ProposalStatus, StoredProposal
from tether.runs._checkpoint import state_from_json
from tether.trace._sanitize import Redactor, redact_value

__all__ = ["QUEUE_SHOWN", "Denied", "Hidden", "proposal_view", "queue", "queue_tenants", "review_proposal"]

SHOWN_CHARS = 4000  # a longer argument is shown cut, with its full length
QUEUE_SHOWN = 500  # proposals a queue page or API answer lists: the newest (filter to see others)
QUEUE_TRACED = 50  # queue rows whose argument provenance is traced from the checkpoint
# Argument names (whole words) that usually say what a call acts on: shown in the queue's row.
_TARGET_WORDS = frozenset(
    {
        "to",
        "recipient",
        "recipients",
        "email",
        "address",
        "destination",
        "url",
        "link",
        "path",
        "file",
        "amount",
        "total",
        "price",
        "account",
        "iban",
        "target",
        "host",
        "domain",
        "order",
        "customer",
        "user",
        "id",
        "cc",
        "bcc",
        "phone",
        "quantity",
        "currency",
    }
)
_WORDS = re.compile(r"[a-z]+|[0-9]+")


async def queue(
    sources: ConsoleSources, principal: Principal, *, status: str = "pending", tenant: str = ""
) -> list[dict[str, Any]]:
    """The newest ``QUEUE_SHOWN`` proposals the principal may see (of ``tenant`` if given), newest
    first, with their key targets and risk flags: the store's query chooses them, so a store of
    millions costs a page what one of ``QUEUE_SHOWN`` does."""
    if sources.approvals is None:
        return []
    wanted = None if status == "all" else ProposalStatus(status)
    tenants = principal.tenants("viewer")
    if tenant:
        tenants = frozenset({tenant}) if principal.sees(tenant) else frozenset()
    if tenants is not None and not tenants:
        return []
    rows: list[dict[str, Any]] = []
    for p in await sources.approvals.store.list_proposals(status=wanted, tenants=tenants, newest=QUEUE_SHOWN):
        if not principal.sees(p.tenant):  # the query chose them; checked again here
            continue
        # Provenance the policy did not record is traced from the checkpoint: first rows only.
        state = await _state(sources, p) if len(rows) < QUEUE_TRACED else None
        facts = await _Facts.of(sources, p, state)
        rows.append({**_row(p), "targets": facts.targets(), "flags": facts.flags()})
    rows.reverse()
    return rows


async def queue_tenants(sources: ConsoleSources, principal: Principal) -> list[str]:
    """The tenants to filter the queue by: the principal's own, or for a grant on every tenant,
    those with proposals (the store names them: no proposal is read for this)."""
    if sources.approvals is None:
        return []
    if (visible := principal.tenants("viewer")) is not None:
        return sorted(visible)
    return [t for t in await sources.approvals.store.proposal_tenants() if t]


def _row(p: StoredProposal) -> dict[str, Any]:
    return {
        "id": p.id,
        "tenant": p.tenant,
        "tool": p.tool,
        "effect": p.effect,
        "status": str(p.status),
        "run_id": p.run_id,
        "step": p.step,
        # One numbering everywhere (queue, proposal, run timeline): the run's Nth model turn.
        "turn_number": p.step + 1 if p.step is not None else None,
        "created_at": p.created_at.isoformat(timespec="seconds"),
        "content_hash": p.content_hash,
        "decided_by": p.decided_by,
    }


async def _visible(sources: ConsoleSources, principal: Principal, proposal_id: str) -> StoredProposal:
    """The stored row (tampered or not: see ``_Facts.intact``). Raises ``Hidden``."""
    if sources.approvals is None:
        raise Hidden("proposal")
    found = await sources.approvals.store.get_proposal(proposal_id)
    if found is None or not principal.sees(found.tenant):
        raise Hidden("proposal")
    return found


def _words(name: str) -> list[str]:
    return _WORDS.findall(re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower())


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):  # keys too: a nested key is read like a value
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@dataclass
class _Facts:
    """One proposal read once: its arguments, the policy's record, which values are secret."""

    p: StoredProposal
    arguments: dict[str, Any]
    policy: dict[str, Any] | None
    masked: frozenset[str]
    redactor: Redactor
    intact: bool
    provenance: dict[str, list[dict[str, Any]]]
    provenance_source: str
    deep: list[str]  # arguments nested deeper than ``SHOWN_DEPTH``: read and shown cut

    @classmethod
    async def of(cls, sources: ConsoleSources, p: StoredProposal, state: Any = None) -> _Facts:
        assert sources.approvals is not None
        arguments, deep = await anyio.to_thread.run_sync(_arguments, p.arguments)
        policy: dict[str, Any] | None = None
        for event in await sources.approvals.store.events(p.id):
            if event.op == "policy":  # of a record an earlier release cut mid-way, its whole part
                rule = event.actor.removeprefix("rule:")
                policy = read_policy_record(event.detail) or {"rule": rule, "reason": event.detail}
                policy.setdefault("rule", rule)
        declared = (policy or {}).get("masked_arguments")
        masked = frozenset(str(n) for n in declared) if isinstance(declared, list) else frozenset()
        redactor = Redactor()
        redactor.declare(p.tool, masked)
        redactor.learn(p.tool, arguments)
        if state is not None and masked:  # the same tool's other calls in the run: their secrets too
            for message in state.trajectory:
                if isinstance(message, AssistantMessage):
                    for c in message.tool_calls:
                        if c.name == p.tool:
                            redactor.learn(p.tool, shallow(c.arguments))
        recorded = (policy or {}).get("provenance")
        if isinstance(recorded, dict):
            provenance, source = _recorded_provenance(recorded), "recorded by the policy when proposed"
        elif state is not None:
            try:
                provenance = await anyio.to_thread.run_sync(_computed_provenance, arguments, state)
                source = "traced now from the run's checkpoint (default trust classes)"
            except RecursionError:
                provenance, source = {}, "not traced: the run's state nests too deep to read"
        else:
            provenance, source = {}, "no run state: proposed through the desk, not by a model"
        intact = await anyio.to_thread.run_sync(_intact, sources.approvals, p)
        return cls(p, arguments, policy, masked, redactor, intact, provenance, source, deep)

    def repeats_secret(self, value: Any) -> bool:
        """Whether a shown argument's value hides text because it repeats a declared secret's (the
        model wrote both: what it hides there, nobody reviews unless it is said)."""
        return bool(self.masked) and redact_value(value, self.redactor, keys=True) != value

    def targets(self) -> list[dict[str, Any]]:
        """Up to four arguments that name what the call acts on (recipient, amount, path …)."""
        out = []
        for name, value in self.arguments.items():
            if not (set(_words(name)) & _TARGET_WORDS) and len(self.arguments) > 3:
                continue
            if name in self.masked:
                out.append({"name": name, "value": f"[secret, {len(str(value))} characters]"})
            else:
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                out.append({"name": self.redactor.text(name), "value": self.redactor.text(text)})
            if len(out) == 4:
                break
        return out

    def flags(self) -> list[dict[str, str]]:
        """Risk flags, each ``{"kind", "text"}``: where arguments came from, look-alike names,
        hidden characters, a declared secret, a row that no longer matches its hash."""
        untrusted, composed, looks, hidden, copies, turned, cut = set(), set(), [], [], [], [], []
        for arg, items in self.provenance.items():
            for item in items:
                origins = [str(o) for o in item.get("origins") or []]
                if any(o.startswith("nowhere") for o in origins):
                    composed.add(str(arg))
                if any("untrusted" in o for o in origins):
                    untrusted.add(str(arg))
        for name, value in self.arguments.items():
            if hidden_chars(name):  # a key the reviewer reads as another one
                hidden.append(name)
            if name in self.masked:
                continue
            if any(map(reorders, [name, *_strings(value)])):  # a browser draws it in another order
                turned.append(name)
            if self.repeats_secret({name: value}):
                copies.append(name)
            if len(pretty_json(redact_value(value, self.redactor, keys=True))) > SHOWN_CHARS:  # shown in part
                cut.append(name)
            for text in _strings(value):
                for found in find_names(text, limit=10):
                    check = check_name(found)
                    if check.suspicious:
                        looks.append(f"{name}: {check.unicode or check.host} ({check.ascii})")
                if hidden_chars(text):
                    hidden.append(name)
        # A tool, argument or tenant name written with other letters reads as the one it imitates
        # (a tenant an application names from a sign-up: ``tenant-\u0430`` in a reviewer's queue).
        named = [
            ("tool", self.p.tool),
            ("tenant", self.p.tenant),
            *(("argument", str(k)) for k in self.arguments),
        ]
        for what, name in named:
            if not name.isascii():
                looks.append(f"{what} name {name} is not plain ASCII (reads as {skeleton(name)})")
        flags = [{"kind": "tampered", "text": "changed after it was proposed: deny or invalidate"}]
        flags = flags if not self.intact else []
        for kind, text, names in (
            ("deep", f"nested deeper than {SHOWN_DEPTH} levels, shown cut: ", ", ".join(self.deep)),
            ("cut", f"longer than {SHOWN_CHARS} characters, only its start shown: ", ", ".join(cut)),
            ("untrusted", "from untrusted content: ", ", ".join(sorted(untrusted))),
            ("composed", "composed by the model: ", ", ".join(sorted(composed))),
            ("lookalike", "look-alike name: ", "; ".join(dict.fromkeys(looks))),
            ("hidden", "hidden characters in: ", ", ".join(dict.fromkeys(hidden))),
            ("reordered", "right-to-left letters, shown in stored order: ", ", ".join(turned)),
            ("secret", "secret (not shown): ", ", ".join(sorted(self.masked))),
            ("secret_copy", "repeats a secret's value, shown [REDACTED]: ", ", ".join(copies)),
        ):
            if names:  # an argument's name, or a name found in a value, may hold a secret's text
                flags.append({"kind": kind, "text": self.redactor.text(text + names)})
        return flags


def _arguments(text: str) -> tuple[dict[str, Any], list[str]]:
    """A proposal's stored arguments as its reviewer reads them: each cut past ``SHOWN_DEPTH``
    levels (``shallow``: a model may nest hundreds deep, past what rendering, redacting and
    encoding them can recurse), and the names of those cut (flagged)."""
    try:
        loaded = json.loads(text)
    except (ValueError, RecursionError):
        return {"(unreadable arguments)": text}, []
    arguments = loaded if isinstance(loaded, dict) else {"(arguments)": loaded}
    deep = [str(k) for k, v in arguments.items() if nests_deeper(v)]
    return {k: shallow(v) for k, v in arguments.items()}, deep


def _intact(approvals: Any, p: StoredProposal) -> bool:
    """``Approvals.intact``, in a worker thread (its own stack: the stored arguments are parsed
    and hashed whole); arguments nested past what can be hashed again are not vouched for."""
    try:
        return bool(approvals.intact(p))
    except RecursionError:
        return False


def _argument(facts: _Facts, name: str, value: Any, provenance: list[dict[str, Any]]) -> dict[str, Any]:
    if name in facts.masked:
        chars = len(value) if isinstance(value, str) else len(json.dumps(value, ensure_ascii=False))
        return {
            "name": name,
            "value": None,
            "secret": True,
            "repeats_secret": False,
            "chars": chars,
            "cut": False,
            "shown": "",
            "provenance": [],
            "names": [],
            "hidden": [],
        }
    repeats = facts.repeats_secret({name: value})
    value = redact_value(value, facts.redactor, keys=True)
    text = pretty_json(value)
    return {
        "name": facts.redactor.text(name),
        "value": value,
        "secret": False,
        "repeats_secret": repeats,
        "chars": len(value) if isinstance(value, str) else len(text),
        "cut": len(text) > SHOWN_CHARS,
        "shown": text[:SHOWN_CHARS],
        "provenance": redact_value(provenance, facts.redactor),
        "names": names_in(value),
        "hidden": hidden_chars(text),
    }


async def proposal_view(sources: ConsoleSources, principal: Principal, proposal_id: str) -> dict[str, Any]:
    """Everything the reviewer sees about one proposal; declared secrets redacted everywhere on it."""
    p = await _visible(sources, principal, proposal_id)
    assert sources.approvals is not None
    store = sources.approvals.store
    state = await _state(sources, p)
    facts = await _Facts.of(sources, p, state)
    turn = _turn(state, p.call_id) if state is not None else None
    if turn is not None:
        await _traced_calls(sources, p, turn["calls"])
        for c in turn["calls"]:  # the model's own data: its keys too (the view's keys are ours)
            c["arguments"] = redact_value(c["arguments"], facts.redactor, keys=True)
    objective = getattr(state, "objective", None)
    if objective is None and sources.traces is not None and p.run_id:
        run = await sources.summary(p.run_id)
        objective = run.objective if run and run.tenant == p.tenant else None
    view = {
        **_row(p),
        "targets": facts.targets(),
        "flags": facts.flags(),
        "intact": facts.intact,
        "call_id": p.call_id,
        "proposed_by": p.proposed_by,
        "decided_at": p.decided_at.isoformat(timespec="seconds") if p.decided_at else None,
        "decision_reason": p.decision_reason,
        "masked_arguments": sorted(facts.masked),
        # Names in the text around the call (the objective, the model's turn) get the same check.
        "other_names": names_in(objective or "", (turn or {}).get("text", "")),
        "provenance_source": facts.provenance_source,
        "rule": _rule(facts.policy, p),
        "objective": objective,
        "turn": turn,
        "history": [
            {"op": e.op, "actor": e.actor, "at": e.at.isoformat(timespec="seconds"), "detail": e.detail}
            for e in await store.events(p.id)
            if e.op != "policy"
        ],
        "executions": [
            {"key": x.key, "status": str(x.status), "attempts": x.attempts, "note": x.note}
            for x in await store.ledger_for(p.id)
        ],
        "can_decide": principal.may(p.tenant, "reviewer"),
        "resumable": await _resumable(sources, p),
    }
    out: dict[str, Any] = redact_value(view, facts.redactor)
    provenance = facts.provenance  # each argument is redacted with its own care
    out["arguments"] = [_argument(facts, k, v, provenance.get(k, [])) for k, v in facts.arguments.items()]
    return out


async def _resumable(sources: ConsoleSources, p: StoredProposal) -> bool:
    if sources.resume is None or sources.approvals is None or not p.run_id:
        return False
    cp, tenant = await sources.checkpoint(p.run_id)
    if cp is None or tenant != p.tenant:
        return False
    return cp.status == "paused" and bool(cp.app)


async def _state(sources: ConsoleSources, p: StoredProposal) -> Any:
    """The state of the run that proposed ``p``, only if that run is of the proposal's tenant."""
    if not p.run_id or sources.approvals is None:
        return None
    cp = await sources.approvals.store.load_checkpoint(p.run_id)
    if cp is None:
        return None
    try:
        state = await anyio.to_thread.run_sync(state_from_json, cp.state)  # a run's state may be long
    except (ApprovalError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return state if getattr(state.context, "tenant", None) == p.tenant else None


_PROBLEMS = {
    "effect_not_requested": "the user's request does not ask for this kind of action",
    "confidential_flow": "confidential data would leave through this argument",
    "relayed_text": "text from a tool result would be passed on as is",
    "option_not_requested": "this option was not in the user's request",
    "untrusted_origin": "this value comes from untrusted content (a tool result, a web page, an e-mail)",
    "untrusted_handle": "this handle comes from untrusted content",
    "untrusted_link": "this link comes from untrusted content",
    "not_a_date": "this is not a date",
    "date_not_requested": "this date is not one the user asked for",
    "not_an_amount": "this is not an amount",
    "amount_over_bound": "this amount is over the allowed bound",
}


def _problem_words(problem: Any) -> str:
    if not isinstance(problem, dict):
        return str(problem)
    what = _PROBLEMS.get(str(problem.get("problem", "")), str(problem.get("problem", "")).replace("_", " "))
    arg = problem.get("argument")
    return f"{arg}: {what}" if arg else what


def _rule(policy: Any, p: StoredProposal) -> dict[str, Any]:
    """The rule that asked for approval, and why, in words a reviewer reads."""
    if isinstance(policy, dict) and policy.get("rule"):
        listed = policy.get("problems")
        problems: list[Any] = listed if isinstance(listed, list) else []
        name, reason = str(policy["rule"]), str(policy.get("reason") or "")
        recorded = True
    else:
        # No rule recorded: under the default Policy only the effect rule asks (said as an inference).
        name, reason, problems, recorded = "effect", "approval_required", [], False
    if name == "effect":
        words = (
            f"The tool declares the effect \u201c{p.effect}\u201d: a call that changes something outside "
            "the run needs a person's approval before it runs."
        )
    elif problems:
        words = f"The {name} rule asks a person to look: {'; '.join(map(_problem_words, problems))}."
    else:
        words = f"The {name} rule asks a person to approve this call ({reason.replace('_', ' ')})."
    return {
        "name": name,
        "reason": reason,
        "words": words,
        "problems": problems,
        "problem_words": [_problem_words(x) for x in problems],
        "recorded": recorded,
    }


def _turn(state: Any, call_id: str | None) -> dict[str, Any] | None:
    """The assistant turn that proposed ``call_id``: its text, its calls, what it had seen."""
    if not call_id:
        return None
    for index, message in enumerate(state.trajectory):
        if isinstance(message, AssistantMessage) and any(c.id == call_id for c in message.tool_calls):
            seen = {m.tool_call_id for m in state.trajectory[:index] if hasattr(m, "tool_call_id")}
            # One per call, its latest: the model read a paused call's answer, not the pause.
            latest = {o.call_id: o for o in state.observations if o.call_id in seen}
            return {
                "text": message.content or "",
                "calls": [
                    {"id": c.id, "name": c.name, "arguments": shallow(c.arguments), "this": c.id == call_id}
                    for c in message.tool_calls
                ],
                "observations_before": [
                    {"tool": o.tool, "source": o.source, "trust": o.trust, "call_id": o.call_id}
                    for o in latest.values()
                ],
                "position": sum(isinstance(m, AssistantMessage) for m in state.trajectory[: index + 1]),
            }
    return None


async def _traced_calls(sources: ConsoleSources, p: StoredProposal, calls: list[dict[str, Any]]) -> None:
    """The other calls' arguments as the run's trace recorded them (redacted by every tool's
    declared secrets, which the console does not know); another tool's untraced call: hidden."""
    traced: dict[str, Any] = {}
    wanted = {str(c["id"]) for c in calls}
    # The turn's calls only, read as a stream (never the whole trace held), from a trace of the
    # proposal's tenant only: a file of another tenant's under the run id shows nothing here.
    if p.run_id and await sources.trace_of(p.run_id, p.tenant):
        for e in await sources.scan(
            p.run_id, ["tool_proposed"], lambda e: bool(e.get("call_id")) and str(e["call_id"]) in wanted
        ):
            traced[str(e["call_id"])] = e.get("arguments")
    for c in calls:
        if c["id"] in traced:
            c["arguments"] = shallow(traced[c["id"]])
        elif c["name"] != p.tool:  # this tool's secrets are redacted with the rest of the page
            c["arguments"] = "(not shown: the run's trace does not record this call)"


def _recorded_provenance(recorded: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for arg, items in recorded.items():
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                origins = [str(o) for o in item.get("origins") or []]
                out.setdefault(str(arg), []).append({"value": str(item.get("value", "")), "origins": origins})
    return out


def _computed_provenance(arguments: dict[str, Any], state: Any) -> dict[str, list[dict[str, Any]]]:
    from tether.policy._provenance_labels import TrustConfig, normalise, split_values
    from tether.policy._provenance_rules import index_for

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
class ReviewedProposal:
    id: str  # the proposal's
    status: str
    decided_by: str | None
    decided_at: str | None
    content_hash: str
    run_id: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def review_proposal(
    sources: ConsoleSources,
    principal: Principal,
    proposal_id: str,
    action: str,
    *,
    reason: str,
    content_hash: str | None,
    read: dict[str, str] | None = None,
) -> ReviewedProposal:
    """Approve, deny or invalidate one proposal, audited either way. An approval is of the
    ``content_hash`` read, and of the ``effect`` and ``tenant`` in ``read`` where given (the hash
    covers the tool and its arguments only). Raises ``Hidden``, ``Denied``, ``ApprovalError``
    (``content_changed``, ``reason_required`` …)."""
    if sources.approvals is None:
        raise Hidden("proposal")

    async def admit(found: StoredProposal | None) -> None:
        if found is None or not principal.sees(found.tenant):
            raise Hidden("proposal")
        if not principal.may(found.tenant, "reviewer"):
            raise Denied("not_reviewer", f"{principal.name} is not a reviewer for this tenant")

    # Checked, held to what was read and audited in the one home of a person's decision.
    done = await decide_proposal(
        sources.approvals,
        principal.reviewer(),
        HumanDecision(action, proposal_id, reason, content_hash, read or {}),
        actor=principal.actor,
        audit=sources.users,
        require_hash=True,
        admit=admit,
    )
    decided_at = done.decided_at.isoformat(timespec="seconds") if done.decided_at else None
    return ReviewedProposal(
        done.id, str(done.status), done.decided_by, decided_at, done.content_hash, done.run_id
    )
