"""Who chose a value the policy accepted: the user, or text someone else chose."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.policy._provenance import ProvenanceIndex
from tether.policy._provenance_declarations import ArgumentRule
from tether.policy._provenance_labels import (
    EXTRACTOR,
    SHAPE_KINDS,
    USER,
    USER_WORD,
    Origin,
    normalise,
    shape_kind,
)
from tether.policy._provenance_values import find_numbers

__all__ = ["Pick", "who_chose"]


@dataclass(frozen=True, slots=True)
class Pick:
    """One accepted value of one argument, as ``who_chose`` asks about it: the run's index, the
    trust configuration's ``assigned`` classes, the argument's rule, the value's text and
    origins, the classes of those the rule accepts, whether the call has an effect and whether
    the request asks for it."""

    index: ProvenanceIndex
    assigned: frozenset[str]
    rule: ArgumentRule
    text: str
    origins: Sequence[Origin]
    accepted: set[str]
    effectful: bool
    asked: bool


def who_chose(pick: Pick) -> dict[str, Any] | None:
    """Who chose the value. A class that *designates* it — the user's words (``user``,
    ``user:word``, a ``template`` the user wrote), or a field of a record the user named
    (``named:…``) — says the user picked it. Every other accepted class (``directory``, a
    system-assigned field) only *vouches* that it is a valid destination of its kind; the
    choice among such values is the model's. It goes to a reviewer when text someone
    chose may have made it: the value is mentioned inside longer text the run read (a
    member named in a message, a page, a channel's name), or, once the run has read text
    outside the trust configuration's ``assigned`` classes, the value was not read from
    an assigned field at all (it is only the directory's, or a field its record's author
    chose: a participant list, a mail's recipients), or only from what a call returned
    whose arguments such text had selected (``ProvenanceIndex.steered``: "forward it to
    whoever sent the mail about X" — the search for X reached the record the text wanted).
    A record the user named designates its values, except where the request states its
    own destinations of the value's kind and the call has an effect: the request chose
    those and named the record for something else (the call's target, say), so after
    untrusted text the record's other values are the model's pick. Likewise a record the
    user named designates its values as *destinations* of an effect only when the request
    asks for that effect (the tool's ``requested_by`` phrases, used as actions): the user
    who asks "how long until my lunch with Sarah?" named the lunch to ask about it, not to
    mail, invite or share with its participants. The same holds for a value that only
    vouches: a destination of an effect the request does not ask for is the model's pick
    after untrusted text, however it was read. A tool that declares no phrase is never
    asked, so after untrusted text such a pick always goes to a reviewer.

    Returns the problem a reviewer is shown (``chosen_after_untrusted`` and why), or None."""
    designating = {c for c in pick.accepted if _designates(c)}
    return _designated(pick, designating) if designating else _vouched(pick)


def _designates(cls: str) -> bool:
    """Whether an accepted class says the user chose the value (see ``who_chose``)."""
    return cls in (USER, USER_WORD, "template") or cls.startswith("named:")


def _designated(pick: Pick, designating: set[str]) -> dict[str, Any] | None:
    """``who_chose`` for a value a designating class holds: the problem, if any."""
    index, rule, effectful, asked = pick.index, pick.rule, pick.effectful, pick.asked
    kind = shape_kind(pick.text)
    named_only = not designating - {c for c in designating if c.startswith("named:")}
    why: dict[str, Any] = {}
    if named_only and effectful and rule.role == "destination" and not asked:
        # The user named the record, but not for this effect: who among its values
        # receives it is the model's pick.
        why = {"effect_not_requested": True}
    elif named_only and effectful and kind in index.request_kinds():
        # Only a record the user named designates the value, yet the request states
        # its own destinations of this kind: it chose those, and named the record
        # for something else (as the target of the call, say). Which of the record's
        # values goes with them is the model's pick.
        why = {"request_states": kind}
    steering = index.steering(pick.assigned) if why else None
    if steering is None:
        return None
    return {"problem": "chosen_after_untrusted", "after": steering.label.describe(), **why}


def _vouched(pick: Pick) -> dict[str, Any] | None:
    """``who_chose`` for a value accepted classes only vouch for: the problem, if any. Before
    the run read any text someone chose, a longer text of an assigned class the rule accepts
    that states a party's handle ("Deposit account: …" in the user's notes) is where it was
    read, not a mention of it: a write that kept such a handle in a store was judged for it
    (``_judged_when_kept``); a name, which no write is judged for, is still mentioned there."""
    index, assigned, text, origins, accepted = (
        pick.index,
        pick.assigned,
        pick.text,
        pick.origins,
        pick.accepted,
    )
    steering = index.steering(assigned)
    stating = (
        {o.label for o in origins if o.label is not None and o.trust in accepted}
        if steering is None and _judged_when_kept(text)
        else set()
    )
    if (mention := index.mentioned(text, assigned, stating)) is not None:
        return {"problem": "chosen_after_untrusted", "mentioned_in": mention.label.describe()}
    if steering is None:
        return None
    # Read from an assigned field, by a call no one's text selected: a call whose
    # query, record or day such text chose reached what the text wanted reached.
    # Nor did such text describe the record it was read from ("whoever wrote to you
    # about the Party"): a pick by that description is the text's.
    read = [
        o
        for o in origins
        if o.kind == "tool"
        and o.match == "exact"
        and o.trust in assigned
        and (o.label is None or (o.label.tool != EXTRACTOR and not index.steered(o.label.call_id)))
    ]
    described = [d for o in read if o.label is not None and (d := index.described_by(o.label, assigned))]
    after = {"problem": "chosen_after_untrusted", "after": steering.label.describe()}
    if not read or len(described) == len(read):
        if any(o.label is not None and index.steered(o.label.call_id) for o in origins):
            return {**after, "reached_through": "a call that text someone chose had selected"}
        return {**after, "described_in": described[0].label.describe()} if described else after
    if pick.effectful and pick.rule.role == "destination" and not pick.asked:
        # Vouched for and read where the system put it, but nobody asked for this
        # effect: who receives it is the model's pick, as for a named record's values.
        return {**after, "effect_not_requested": True}
    return None


def _judged_when_kept(text: str) -> bool:
    """Whether ``text`` is a party's handle a write is judged for when it keeps it (an address,
    an IBAN-shaped account, a link, a number of eight digits or more: ``party_handles``)."""
    return shape_kind(text) in SHAPE_KINDS or any(normalise(n) == normalise(text) for n in find_numbers(text))
