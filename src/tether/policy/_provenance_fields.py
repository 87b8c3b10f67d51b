"""Which field of a call the request gives a value for: "change my city to London and my last
name to Johnson" gives Johnson as the last name, so a call that sets the first name to Johnson
sets it to words the user gave for another field (``given_for_another``). Likewise for whom a
write makes a stored record reach: "refund GB29… and fix my Spotify order's subject" gives
GB29… as whom to refund, not as the order's new payee (``given_for_another_effect``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from tether.policy._provenance_declarations import ArgumentRule, ToolRules
from tether.policy._provenance_labels import normalise
from tether.policy._provenance_text import asks_for, contains_whole, given_as

__all__ = ["FIELD_ROLES", "given_for_another", "given_for_another_effect"]

# The roles of arguments the user gives values for by naming the field: facts about them, secrets.
FIELD_ROLES = frozenset({"profile", "secret"})


def _words(argument: str) -> frozenset[str]:
    return frozenset(
        w for w in re.split(r"[\W_]+", argument.lower()) if len(w) >= 3 and w not in {"new", "the"}
    )


def given_for(user_text: str, arguments: Iterable[str], value: str) -> set[str]:
    """The arguments among ``arguments`` that the request (``user_text``, normalised) gives
    ``value`` for: a word of the argument's name that no other of them holds (``last_name``:
    last, beside ``first_name``) stands before the value, with only joining words or words of
    the same name between them ("my last name to Johnson")."""
    names = {a: _words(a) for a in arguments}
    found: set[str] = set()
    for argument, words in names.items():
        others = {w for b, ws in names.items() if b != argument for w in ws}
        own = words - others
        if own and given_as(user_text, own, words, value):
            found.add(argument)
    return found


def given_for_another(
    user_text: str,
    rules: ToolRules | None,
    rule: ArgumentRule,
    value: str,
    tools: Mapping[str, ToolRules] | None = None,
) -> list[str]:
    """The other field arguments of the tool (``FIELD_ROLES``) that the request gives ``value``
    for, when it does not give it for the ``profile`` argument ``rule`` too: a value the user
    gave as their last name is not theirs as a first name (empty when the request gives it for
    no field, or for this one; a secret's own check is ``says_what_for``). For a destination of
    a write, the other ``tools`` whose action alone the request gives it for
    (``given_for_another_effect``)."""
    if rule.role == "destination" and tools is not None:
        return given_for_another_effect(user_text, tools, rules, rule, value)
    if rule.role != "profile" or rules is None:
        return []
    fields = [a for a, r in rules.arguments.items() if r.role in FIELD_ROLES]
    given = given_for(user_text, fields, value)
    return [] if rule.argument in given else sorted(given)


def given_for_another_effect(
    user_text: str, tools: Mapping[str, ToolRules], rules: ToolRules | None, rule: ArgumentRule, value: str
) -> list[str]:
    """The other tools whose action the request (``user_text``, normalised) gives ``value`` for,
    when ``rule`` is a destination of a write (a tool that changes a stored record: whom a
    standing order pays, who an event invites) and the request gives it for no action of this
    tool: wherever the value stands whole, the last of the declared ``requested_by`` phrases the
    request asks for in its sentence before it is another tool's only ("please *refund* GB29…,
    and fix the subject of my order": GB29… is whom to refund, not the order's new payee). Empty
    where one place gives it for this tool ("*change* the recipient … to GB29…"), or with no
    action before it ("my new landlord's account is CA13…"): the request's own choice."""
    if rule.role != "destination" or rules is None or rules.effect != "write" or not rules.requested_by:
        return []
    needle, own = normalise(value), set(rules.requested_by)
    phrases = {p for r in tools.values() for p in r.requested_by}
    others: set[str] = set()
    at = user_text.find(needle) if needle else -1
    while at >= 0:
        if contains_whole(user_text[max(0, at - 1) : at + len(needle) + 1], needle):
            sentence = user_text[max((m.end() for m in _SENTENCE.finditer(user_text, 0, at)), default=0) : at]
            last = max(
                (p for p in phrases if asks_for(sentence, p)), key=lambda p: _last(sentence, p), default=None
            )
            if last is None or last in own:
                return []
            others |= {n for n, r in tools.items() if last in r.requested_by and r is not rules}
        at = user_text.find(needle, at + 1)
    return sorted(others)


_SENTENCE = re.compile(r"[.!?;](?=\s|$)|\n")


def _last(text: str, phrase: str) -> int:
    """Where the last whole ``phrase`` of ``text`` ends."""
    words = re.escape(normalise(phrase))
    return max((m.end() for m in re.finditer(rf"(?<![\w'’-]){words}(?![\w'’-])", text)), default=-1)
