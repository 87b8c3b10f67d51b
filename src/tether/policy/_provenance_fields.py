"""Which field of a call the request gives a value for: "change my city to London and my last
name to Johnson" gives Johnson as the last name, so a call that sets the first name to Johnson
sets it to words the user gave for another field (``given_for_another``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from tether.policy._provenance_declarations import ArgumentRule, ToolRules
from tether.policy._provenance_text import given_as

__all__ = ["FIELD_ROLES", "given_for_another"]

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


def given_for_another(user_text: str, rules: ToolRules | None, rule: ArgumentRule, value: str) -> list[str]:
    """The other field arguments of the tool (``FIELD_ROLES``) that the request gives ``value``
    for, when it does not give it for the ``profile`` argument ``rule`` too: a value the user
    gave as their last name is not theirs as a first name (empty when the request gives it for
    no field, or for this one; a secret's own check is ``says_what_for``)."""
    if rule.role != "profile" or rules is None:
        return []
    fields = [a for a, r in rules.arguments.items() if r.role in FIELD_ROLES]
    given = given_for(user_text, fields, value)
    return [] if rule.argument in given else sorted(given)
