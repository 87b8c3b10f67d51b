"""What the payments of a request add up to, for ``cumulative`` amounts: what the calls before a
proposed one paid (``paid_before``) and what its own other amount arguments pay with it
(``paid_beside``), each argument read as its tool receives it: one a call leaves out is its
schema's default (``amount_defaults``), which the tool pays as surely as a figure the model gave.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tether.core.types import ProposedCall
from tether.policy._provenance_dates import currency_code, paid
from tether.policy._provenance_declarations import ArgumentRule, ToolRules
from tether.policy._provenance_run import SENT, calls_before

__all__ = ["amount_defaults", "paid_before", "paid_beside", "paid_in", "with_defaults"]


def amount_defaults(rules: ToolRules, parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """The amount and option arguments of a tool that its schema gives a default: what it pays
    or chooses when a call leaves them out (``top_up()`` tops up its default 50; ``share(f, to)``
    makes the public link its ``public_link`` defaults to)."""
    properties = (parameters or {}).get("properties") or {}
    out: dict[str, Any] = {}
    for rule in rules.arguments.values():
        schema = properties.get(rule.argument)
        if rule.role in ("amount", "option") and isinstance(schema, Mapping) and "default" in schema:
            out[rule.argument] = schema["default"]
    return out


def with_defaults(arguments: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` as the tool receives them: the ``defaults`` of those left out."""
    return {**defaults, **arguments}


def paid_before(
    call: ProposedCall,
    rules_of: Callable[[str], ToolRules | None],
    defaults_of: Callable[[str], Mapping[str, Any]],
) -> float:
    """What the request's calls that reached their tool may already have paid: every cumulative
    amount argument of every tool (a payment split between two tools that pay is still one sum),
    a call that failed after it reached its tool included (it may have paid before it failed:
    paying again needs a reviewer), and those of the runs of the request before it (``history``:
    a parent's, a subagent's, an earlier workflow node's) and of the call's own model turn before
    it, each tool's read by its rules however they name it (``rules_of``). A figure that is no
    number counts as unbounded."""
    total = 0.0
    for record in calls_before(call.state, call.call_id):
        rules = rules_of(record.tool)
        if rules is None or record.status not in SENT or not isinstance(record.arguments, Mapping):
            continue
        arguments = with_defaults(record.arguments, defaults_of(record.tool))
        total += sum(paid(arguments.get(r.argument)) for r in rules.cumulative_amounts)
    return total


def paid_beside(rules: ToolRules | None, arguments: Mapping[str, Any], rule: ArgumentRule) -> float:
    """What a call's other cumulative amount arguments pay with ``rule``'s (a deposit and a tip,
    an amount and a fee): one call paying in two arguments pays their sum."""
    others = [r for r in rules.cumulative_amounts if r.argument != rule.argument] if rules else []
    return sum(paid(arguments.get(r.argument)) for r in others)


def paid_in(rules: ToolRules | None, call: ProposedCall, rule: ArgumentRule) -> str | None:
    """The currency ``rule``'s amount is paid in: the code it declares, or the value of the
    argument it names as the tool receives it (its schema's default where the call leaves it
    out); None where nothing says (``bounding`` then reads every currency the request names)."""
    if rule.currency is None:
        return None
    if rules is None or rule.currency not in rules.arguments:
        return currency_code(rule.currency)
    value = call.arguments.get(rule.currency)
    if value is None:
        schema = ((call.spec.parameters or {}).get("properties") or {}).get(rule.currency)
        value = schema.get("default") if isinstance(schema, Mapping) else None
    return currency_code(value) if isinstance(value, str) and value.strip() else None
