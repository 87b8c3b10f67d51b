"""What the payments of a request add up to, for ``cumulative`` amounts: what the calls before a
proposed one paid (``paid_before``) and what its own other amount arguments pay with it
(``paid_beside``), each argument read as its tool receives it: one a call leaves out is its
schema's default (``amount_defaults``), which the tool pays as surely as a figure the model gave.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tether.core.types import ProposedCall
from tether.policy._provenance_dates import currency_code, is_currency, paid
from tether.policy._provenance_declarations import ArgumentRule, ToolRules, key_name
from tether.policy._provenance_labels import Segment, normalise, split_values
from tether.policy._provenance_run import SENT, calls_before
from tether.policy._provenance_schema import branch_of, inline_refs
from tether.policy._provenance_text import party_key

if TYPE_CHECKING:
    from tether.policy._provenance import ProvenanceIndex

__all__ = [
    "PAUSED",
    "SEVERAL",
    "TOOLS_OWN",
    "amount_defaults",
    "as_received",
    "filled",
    "home_currency",
    "named_bounds",
    "named_inside",
    "of_parties",
    "paid_before",
    "paid_beside",
    "paid_in",
    "parties_of",
    "with_defaults",
]


def amount_defaults(
    rules: ToolRules, parameters: Mapping[str, Any] | None, roles: Iterable[str] = ("amount",)
) -> dict[str, Any]:
    """The arguments of a tool in ``roles`` that its schema gives a default: what it receives
    when a call leaves them out (``top_up()`` tops up its default 50; ``share(folder)`` of a
    tool that makes a public link unless told otherwise makes one). Judged as received."""
    properties = (parameters or {}).get("properties") or {}
    out: dict[str, Any] = {}
    for rule in rules.arguments.values():
        schema = properties.get(rule.argument)
        if rule.role in roles and isinstance(schema, Mapping) and schema.get("default") is not None:
            out[rule.argument] = schema["default"]
    return out


def with_defaults(arguments: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` as the tool receives them: the ``defaults`` of those left out, or sent as
    ``null``, which a tool may read as "not told" (``options ?? defaults``) and so apply the
    default (a share that makes a public link unless told not to, a top-up of its default 50)."""
    return {**defaults, **{k: v for k, v in arguments.items() if v is not None or k not in defaults}}


def as_received(
    rules: ToolRules,
    arguments: Mapping[str, Any],
    parameters: Mapping[str, Any] | None,
    defaults: Mapping[str, Any],
) -> dict[str, Any]:
    """``arguments`` as the tool receives them (``with_defaults``), each amount and option that
    is an object or a list filled in below with the defaults its schema gives (``filled``): a
    share told ``settings: {}`` makes the public link its settings' schema makes by default."""
    out = with_defaults(arguments, defaults)
    properties = (parameters or {}).get("properties") or {}
    for rule in rules.arguments.values():
        if rule.role in ("amount", "option") and isinstance(out.get(rule.argument), Mapping | list):
            once = rule.role == "amount"  # a count left at one pays its figure once (``filled``)
            out[rule.argument] = filled(out[rule.argument], properties.get(rule.argument), once=once)
    return out


_DEPTH = 32


def filled(value: Any, schema: Any, depth: int = 0, *, once: bool = False) -> Any:
    """``value`` as a tool that applies its schema's defaults receives it: each property an object
    leaves out (or sends as ``null``) that the schema gives a default takes it, in objects and
    lists nested at any depth (a zod or JSON Schema validator fills them in so), an optional
    object's by its object branch (``branch_of``). ``schema`` has its ``$ref`` references inlined.
    ``once`` (an amount's record): a default of one is left out, for a count left at one pays the
    figure beside it once (a line's quantity); any other default (seven nights) is filled in."""
    schema = branch_of(schema, value)
    if depth > _DEPTH or not isinstance(schema, Mapping):
        return value
    if isinstance(value, list):
        return [filled(item, schema.get("items"), depth + 1, once=once) for item in value]
    properties = schema.get("properties")
    if not isinstance(value, Mapping) or not isinstance(properties, Mapping):
        return value
    out = dict(value)
    for key, sub in properties.items():
        default = sub.get("default") if isinstance(sub, Mapping) else None
        unit = once and type(default) in (int, float) and default == 1
        if out.get(key) is None and default is not None and not unit:
            out[key] = default
        if key in out:
            out[key] = filled(out[key], sub, depth + 1, once=once)
    return out


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
    it, each tool's read by its rules however they name it (``rules_of``). An amount a call left
    out is its tool's default (``defaults_of``: learned as its calls are checked; else read from
    the host's catalog, ``spec_of``: a run resumed in another process counts what its calls before
    the pause paid by default). A call paused for a person's answer (``PAUSED``: its server was
    told to cancel) is run again when its run resumes, under its id: that attempt and the call
    run again are one payment, counted once (the user's own deposit, paused for the bank's
    question, needed a reviewer once resumed). A figure that is no number counts as unbounded."""
    total = 0.0
    records = calls_before(call.state, call.call_id, call.tools)
    again = {(call.call_id, call.spec.name)}
    again |= {(r.call_id, r.tool) for r in records if r.status in SENT and r.reason != PAUSED}
    for record in records:
        rules = rules_of(record.tool)
        if rules is None or record.status not in SENT or not isinstance(record.arguments, Mapping):
            continue
        if record.reason == PAUSED and (record.call_id, record.tool) in again:
            continue  # a paused attempt run again: the run again counts (or is being judged)
        defaults = defaults_of(record.tool) or _schema_defaults(rules, call.tools, record.tool)
        arguments = with_defaults(record.arguments, defaults)
        total += sum(paid(arguments.get(r.argument)) for r in rules.cumulative_amounts)
    return total


def _schema_defaults(rules: ToolRules, catalog: Any, tool: str) -> dict[str, Any]:
    """The defaults of ``tool``'s amount arguments as its schema in the host's ``catalog`` states
    them (``amount_defaults``); none where the catalog does not know the tool."""
    spec = getattr(catalog, "spec_of", lambda _: None)(tool)
    parameters = getattr(spec, "parameters", None)
    return amount_defaults(rules, inline_refs(parameters)) if isinstance(parameters, Mapping) else {}


def paid_beside(rules: ToolRules | None, arguments: Mapping[str, Any], rule: ArgumentRule) -> float:
    """What a call's other amount arguments pay with ``rule``'s (a deposit and a tip, an amount
    and a fee): one call paying in two arguments makes one payment of their sum, cumulative or
    not (as a list of figures in one argument is their sum)."""
    others = (
        [r for r in rules.arguments.values() if r.role == "amount" and r.argument != rule.argument]
        if rules
        else []
    )
    return sum(paid(arguments.get(r.argument)) for r in others)


PAUSED = "input_pending"
"""The error kind of a call paused for a person's answer (``mcp._calling.InputPending``): the
host told its server to cancel and runs the call again, under its id, when the run resumes."""


TOOLS_OWN = "the tool's own"
"""The currency of an amount whose tool takes a currency but was given none it reads: left out
where its schema states no default, ``null``, or no code (a number, a list). The tool pays in a
currency of its own choosing, which no code the request states is: only a figure stated with no
currency bounds it (``bounding``)."""


SEVERAL = "several currencies"
"""The currency of an amount told two different ones (inside its value and in the argument the
rule names, or in two of its records): which the tool pays in is unknown, so no code the
request states bounds it."""


def paid_in(rules: ToolRules | None, call: ProposedCall, rule: ArgumentRule) -> str | None:
    """The currency ``rule``'s amount is paid in: one its own value names (``named_inside``:
    ``{"value": 200, "currency": "KWD"}``, as payment services take an amount) or an argument
    of the call that names a currency and that the rule does not name (a ``currency`` option
    beside an amount declared in euros: the tool pays in what it is told), else the code
    the rule declares, or the value of the argument it names as the tool receives it
    (``home_currency`` where the call leaves it out; ``TOOLS_OWN`` where that gives none, or the
    tool receives ``null`` or no text); None where the tool takes no currency (``bounding`` then
    reads every currency the request names). Told two (``SEVERAL``), it is none of them: a
    currency named beside the code the rule declares or the argument's default (the service may
    read either), or, where the tool takes its own, beside a field only its text makes one (the
    service may read no currency there: ``{"value": 200, "note": "EUR"}``)."""
    told = _told(rules, call, rule)
    inside, by_name = _named(rules, call, rule, by_text=True), _named(rules, call, rule, by_text=False)
    if not inside:
        return told
    if rules is not None and rule.currency in rules.arguments and rule.currency in call.arguments:
        inside.add(told or TOOLS_OWN)  # told in an argument too: which one the tool reads is unknown
    elif told not in (None, TOOLS_OWN) or (told == TOOLS_OWN and inside - by_name):
        inside.add(told or TOOLS_OWN)  # its own currency, or a field the tool may not read as one
    return inside.pop() if len(inside) == 1 else SEVERAL


def _named(rules: ToolRules | None, call: ProposedCall, rule: ArgumentRule, *, by_text: bool) -> set[str]:
    """The currencies the amount's value and the call's other arguments name (``named_inside``),
    fields named for a currency only unless ``by_text`` (any field whose text is one too)."""
    found = named_inside(call.arguments.get(rule.argument), by_text=by_text)
    for name, value in call.arguments.items():  # a currency argument the rule does not name
        if name not in (rule.argument, rule.currency) and _names_currency(name, value if by_text else None):
            found.add(_code(value))
    return found


def named_inside(value: Any, *, by_text: bool = True) -> set[str]:
    """The currencies an amount's value names in a field of its own that names one
    (``currency``, ``currencyCode``, ``Currency_Code``, ``ccy``, or any field whose text is a
    currency: ``"unit": "KWD"``; ``_names_currency``), at any depth, as ``currency_code`` reads
    them; empty for a figure or a record that names none. Not ``by_text``: only fields named for
    a currency (a field whose text is one may be no currency to the tool: a note)."""
    found: set[str] = set()

    def walk(v: Any, depth: int) -> None:
        if depth > _DEPTH:
            return
        items = v.items() if isinstance(v, Mapping) else enumerate(v) if isinstance(v, list | tuple) else ()
        for k, item in items:
            if isinstance(k, str) and _names_currency(k, item if by_text else None):
                found.add(_code(item))
            else:
                walk(item, depth + 1)

    walk(value, 0)
    return found


def _names_currency(key: str, value: Any = None) -> bool:
    """Whether a field ``key`` holding ``value`` names a currency: by its name (``currency``,
    ``currencyCode``, ``Payment_Currency``, ``ccy``; not a thing of one:
    ``cryptocurrency_address``), or whatever its name by its text, a currency code, sign or name
    (``"unit": "KWD"``, ``"denomination": "€"``): a service reads a currency where it takes one."""
    name = key_name(key)
    if name.endswith(("currency", "currencycode", "currencyiso", "ccy")) or name in _CURRENCY_KEYS:
        return True
    return isinstance(value, str) and is_currency(value)


_CURRENCY_KEYS = frozenset({"cur", "curr", "currencies"})


def _code(value: Any) -> str:
    """The currency a field that names one says, as ``currency_code`` reads it (``TOOLS_OWN``
    where it is no text: the tool's own choice)."""
    return currency_code(value) if isinstance(value, str) and value.strip() else TOOLS_OWN


def _told(rules: ToolRules | None, call: ProposedCall, rule: ArgumentRule) -> str | None:
    """``paid_in`` as the rule's declaration and its currency argument say it."""
    if rule.currency is None or rules is None or rule.currency not in rules.arguments:
        return home_currency(rules, call, rule)
    if rule.currency not in call.arguments:
        return home_currency(rules, call, rule) or TOOLS_OWN
    value = call.arguments[rule.currency]
    return currency_code(value) if isinstance(value, str) and value.strip() else TOOLS_OWN


def home_currency(rules: ToolRules | None, call: ProposedCall, rule: ArgumentRule) -> str | None:
    """The currency the tool pays ``rule``'s amount in when told none: the code the rule
    declares, or the schema's default of the argument that carries it; None where it has none. A
    figure said with no currency is a sum in it (``bounding``): "pay the 30000 deposit" to a bank
    that pays in yen unless told bounds no payment of 30000 euros."""
    if rule.currency is None:
        return None
    if rules is None or rule.currency not in rules.arguments:
        return currency_code(rule.currency)
    schema = ((inline_refs(call.spec.parameters) or {}).get("properties") or {}).get(rule.currency)
    value = schema.get("default") if isinstance(schema, Mapping) else None
    return currency_code(value) if isinstance(value, str) and value.strip() else None


# A figure a record states as its amount: a plain decimal numeral of ASCII digits (a JSON number
# as it prints), never ``NaN``, ``Infinity`` or an exponent that ``float`` would also take.
_PLAIN = re.compile(r"[+-]?\d+(?:\.\d+)?", re.ASCII)
_UNKNOWN = "?"  # a currency the run itself wrote into the record: no one's statement


def named_bounds(
    index: ProvenanceIndex,
    fields: Iterable[str],
    currency: str | None,
    home: str | None = None,
    parties: Iterable[str] = (),
) -> list[tuple[float, str]]:
    """The amounts that records the user named state in ``fields`` (never one the run wrote, nor
    one of a record it acted on before it read it: ``Steering.changed``), each with its record,
    that bound a payment in ``currency``: a figure only where it is a plain finite numeral
    (``_PLAIN``), and only from a record that states that currency or none (in a field whose
    name holds "currency", as ``currency_code`` reads it) — a record that states none only a
    payment in the tool's ``home`` currency, where it has one; where the payment's currency is
    unknown (None), whatever currency the record states. Where some named record holds one of
    the call's ``parties`` (whom it pays, the record it changes: ``of_parties``), only those
    records bound it: a sum stated for another party is not this one's ("refund Bob what he
    sent, and check my rent" allows Bob what Bob sent, not the rent)."""
    names = set(fields)
    out: list[tuple[float, str]] = []
    for segs in of_parties(index.named_records(), parties, names):
        if index.changed(segs):
            continue  # the run acted on it before reading it: its sums may be what it made them
        stated = {
            _UNKNOWN if index.written(seg) else currency_code(seg.raw)
            for seg in segs
            if seg.whole and "currency" in seg.field_name.lower() and seg.raw.strip()
        }
        if currency is not None and (stated - {currency} or (not stated and home not in (None, currency))):
            continue  # a sum in another currency is no bound on this one
        for seg in segs:
            if not seg.whole or seg.field_name not in names or index.written(seg):
                continue
            if not index.twins_state(seg.label):
                continue  # another record of its name states another sum: which one is unsaid
            if _PLAIN.fullmatch(seg.raw.strip()) and math.isfinite(value := abs(float(seg.raw))):
                out.append((value, seg.label.describe()))
    return out


def of_parties(
    records: list[list[Segment]], parties: Iterable[str], amounts: Iterable[str] = ()
) -> list[list[Segment]]:
    """The ``records`` (each a list of its segments) that hold one of ``parties`` whole in a
    field other than ``amounts`` (as written, normalised, or by the letters and digits of an
    account: ``party_key``); all of them where none does. A call's amount bounded by what a
    named record states is paid to or set on that record's party, not another record's."""
    wanted = {normalise(p) for p in parties if normalise(p)}
    keys = {k for p in parties if (k := party_key(p))}
    if not wanted:
        return records
    skip = set(amounts)

    def holds(segs: list[Segment]) -> bool:
        return any(
            s.whole and s.field_name not in skip and (s.text in wanted or (keys and party_key(s.raw) in keys))
            for s in segs
        )

    held = [segs for segs in records if holds(segs)]
    return held or records


def parties_of(rules: ToolRules | None, arguments: Mapping[str, Any]) -> list[str]:
    """The values of a call's ``destination`` and ``target`` arguments: whom it pays, the record
    it changes (``of_parties``)."""
    roles = ("destination", "target")
    found = [r.argument for r in (rules.arguments.values() if rules is not None else ()) if r.role in roles]
    return [v for a in found for v in split_values(arguments.get(a))]
