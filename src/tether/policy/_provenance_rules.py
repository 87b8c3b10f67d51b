"""Policy rules over provenance: each proposed call checked against its tool's declaration.

The declarations (roles, sources, bounds) are described in ``provenance_declarations``; this
module applies them to a run: it labels observations, builds the run's provenance index
(``_provenance_run``, re-exported here), and decides allow / approve / deny for each call
with the provenance of every argument in the decision, so a reviewer sees where each value
came from. An undeclared side-effecting tool or argument is denied at call time (and refused
at load time by ``check_declarations``). No rule here knows any scenario or benchmark task:
rules are data.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.core._confusables import check_name
from tether.core._names import SEPARATOR, offered_name
from tether.policy._provenance import ProvenanceIndex
from tether.policy._provenance_choice import Pick, who_chose
from tether.policy._provenance_dates import bounding, figure, parse_date
from tether.policy._provenance_declarations import (
    RELAY_SPAN,
    ROLES,
    ArgumentRule,
    ToolRules,
    check_declarations,
    declared_rules,
    rules_from_dict,
)
from tether.policy._provenance_elements import Pieces, judged_elements, outside_keys, pieces
from tether.policy._provenance_fields import dated_for_another, given_for_another
from tether.policy._provenance_flow import (
    carried_records,
    confidential_flow,
    joined_links,
    party_handles,
    sent_before,
)
from tether.policy._provenance_labels import (
    DIRECTORY,
    TRUST_ORDER,
    USER,
    USER_WORD,
    Directory,
    Origin,
    Segment,
    TrustConfig,
    shape_kind,
    split_values,
    trust_parts,
)
from tether.policy._provenance_mentions import chooses_option
from tether.policy._provenance_paid import (
    amount_defaults,
    as_received,
    home_currency,
    named_bounds,
    paid_before,
    paid_beside,
    paid_in,
    parties_of,
)
from tether.policy._provenance_run import (
    ERROR,
    RunIndex,
    index_for,
    make_labeler,
    observation_segments,
    writes_per_rules,
)
from tether.policy._provenance_schema import inline_refs
from tether.policy._provenance_text import asks_for, contains_whole, said, says_what_for, shown, unfolded
from tether.policy._provenance_times import at_stated_time
from tether.policy._provenance_values import find_links
from tether.policy._rules import Allowlist, Decision, Policy, ProposedCall, Rule
from tether.policy._trusted import TrustedContext

__all__ = [
    "ROLES",
    "ArgumentRule",
    "ProvenancePolicy",
    "ProvenanceRules",
    "ToolRules",
    "check_declarations",
    "index_for",
    "make_labeler",
    "observation_segments",
    "rules_from_dict",
]

_RANK = {"allow": 0, "approve": 1, "deny": 2}


# -- the rule -------------------------------------------------------------------------------


def classes_of(index: ProvenanceIndex, origins: Sequence[Origin]) -> set[str]:
    """Trust classes of a value's origins, plus ``named:<class>`` for origins in a record the
    user named (a whole field or text inside it) that no one else had the run change: ``named_as_read``."""
    out = {o.trust for o in origins}
    for o in origins:
        if o.kind == "tool" and o.label is not None and index.named_as_read(o.label):
            out.add(f"named:{o.trust}")
    return out


@dataclass
class _Verdict:
    verdict: str = "allow"
    problems: list[dict[str, Any]] = field(default_factory=list)

    def worse(self, v: str, problem: dict[str, Any]) -> None:
        self.problems.append(problem)
        if _RANK[v] > _RANK[self.verdict]:
            self.verdict = v


@dataclass
class _Element:
    """One element of one argument being judged, and where its verdict and evidence go."""

    index: ProvenanceIndex
    call: ProposedCall
    rule: ArgumentRule
    element: Any
    text: str  # the element as the policy reads it (JSON for what is not a string)
    classes: set[str]  # the trust classes its origins give it
    out: _Verdict
    shown: dict[str, Any]
    before: Pieces = ()  # the argument's elements before it, as a store may keep them (``pieces``)


class ProvenanceRules:
    """A ``Rule``: checks each proposed call against its tool's declared arguments."""

    name = "provenance"

    def __init__(
        self,
        tools: Mapping[str, ToolRules],
        config: TrustConfig,
        *,
        directory: Directory | Mapping[str, Iterable[str]] | Iterable[str] = (),
        own: Iterable[str] = (),
    ) -> None:
        self.tools = dict(tools)
        self.config = config
        self.directory = directory if isinstance(directory, Directory) else Directory(directory)
        self.own = list(own)
        writes = writes_per_rules(self.tools)
        self._index = RunIndex(
            lambda state: index_for(state, self.config, self.directory, self.own, writes, self._targets)
        )
        self._remote: dict[str, str] = {}  # the host's name of each tool checked: its source's
        self._defaults: dict[str, dict[str, Any]] = {}  # each tool checked: amount and option defaults

    def _rules_of(self, tool: str) -> ToolRules | None:
        """The rules of a call already made to the tool the host names ``tool``: declared under
        that name, or under its source's name for it (learned as its calls are checked, or, in a
        run resumed elsewhere, the declared name it is offered as: ``offered_name``, hashed too)."""
        found = declared_rules(self.tools, tool, self._remote.get(tool))
        if found is None:
            servers = [tool[:i] for i in range(len(tool)) if tool.startswith(SEPARATOR, i)]
            named = next((n for n in self.tools for s in servers if offered_name(s, n) == tool), None)
            if named is not None:
                self._remote[tool], found = named, self.tools[named]
        return found

    def _defaults_of(self, tool: str) -> dict[str, Any]:
        """The defaults of the amount arguments of the tool the host names ``tool`` (learned as
        its calls are checked): what its earlier calls paid where they left them out."""
        return self._defaults.get(tool, {})

    def _targets(self, tool: str) -> list[str]:
        """The arguments of ``tool`` that name the record it acts on (``role: target``)."""
        rules = self._rules_of(tool)
        return [a for a, rule in rules.arguments.items() if rule.role == "target"] if rules else []

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None:
        spec = call.spec
        self._remote.update({spec.name: spec.remote_name} if spec.remote_name else {})
        rules = declared_rules(self.tools, spec.name, spec.remote_name)
        effectful = spec.effect.side_effecting
        if rules is None or (effectful and rules.effect == "read"):  # a read's rules are no effect's
            if effectful:
                return Decision("deny", self.name, "undeclared_tool", {"tool": spec.name})
            return None
        undeclared = sorted(a for a in call.arguments if a not in rules.arguments)
        if undeclared and effectful:
            return Decision(
                "deny", self.name, "undeclared_argument", {"tool": spec.name, "arguments": undeclared}
            )
        parameters = inline_refs(spec.parameters)  # a nested object's schema, not its ``$ref``
        self._defaults[spec.name] = amount_defaults(rules, parameters)
        defaults = {**amount_defaults(rules, parameters, ("option",)), **self._defaults[spec.name]}
        received = as_received(rules, call.arguments, parameters, defaults)  # judged as received
        given, call = call.arguments, dataclasses.replace(call, arguments=received)
        index = self._index(call.state)
        out = _Verdict()
        asked = _effect_asked(index, rules, bool(given or self._defaults[spec.name]))
        if effectful and rules.requested_by and not asked:
            # The request itself must ask for this effect, whatever the call carries.
            out.worse("approve", {"problem": "effect_not_requested", "phrases": list(rules.requested_by)})
        shown: dict[str, list[dict[str, Any]]] = {}
        properties = (parameters or {}).get("properties") or {}
        for arg in [a for a in call.arguments if a not in rules.arguments]:  # a read's undeclared query
            for problem in confidential_flow(index, {arg: call.arguments[arg]}, properties, rules.no_flow):
                out.worse("approve", problem)
        judged = False  # whether a declared argument carried a value its rule restricts
        for arg, value in call.arguments.items():
            rule = rules.arguments.get(arg)
            if rule is None or value is None:
                continue
            schema = properties.get(arg)
            elements = judged_elements(value, rule, schema)
            judged = judged or (arg in given and rule.says_wanted(elements))  # what the model gave
            figures = [figure(e) for e in elements] if rule.role == "amount" and len(elements) > 1 else []
            if figures and None not in figures:  # figures paid together: their sum is bounded too
                elements.append(sum(abs(f) for f in figures if f is not None))
            if not elements and rule.restricts and _has_content(value):
                # Something the tool receives that yields nothing to judge: fail closed.
                out.worse(rule.otherwise, {"argument": arg, "problem": "nothing_to_judge"})
            for element, before in zip(elements, pieces(value, elements), strict=True):
                shown.setdefault(arg, []).append(self._judge(index, call, rule, element, out, before))
            if rule.keys:
                # The rest of what the tool receives (another attachment, an event's text) is no
                # target, but text it carries on: links and addresses in it are judged as content's.
                carried = dataclasses.replace(rule, role="content", keys=(), links_from=None, currency=None)
                for leaf in outside_keys(value, rule):
                    shown.setdefault(arg, []).append(self._judge(index, call, carried, leaf, out))
            for problem in confidential_flow(index, {arg: value}, properties, rules.no_flow):
                out.worse("approve", problem)
            if rules.no_relay and rule.role == "content":
                for element in split_values(value, schema):
                    relayed = _relayed(index, element, rules.no_relay)
                    if relayed is not None:
                        out.worse(
                            "approve",
                            {"argument": arg, "problem": "relayed_text", "from": relayed.label.describe()},
                        )
                        break
        if rules.no_flow and not any(p["problem"] == "confidential_flow" for p in out.problems):
            for problem in self._whole_call_flow(index, call, rules, properties):
                out.worse("approve", problem)
        if effectful and not judged and (chosen := index.wrote_others_choice()) is not None:
            out.worse("approve", {"problem": "acts_on_others_choice", "written": chosen[:200]})
        if effectful and not rules.requested_by and not judged:
            # It carries nothing its rules restrict (no arguments, or only free text, safe options,
            # dates; what the run stored is checked above) and no phrase of the request asks for it.
            out.worse("approve", {"problem": "effect_not_requested", "phrases": []})
        if out.verdict == "allow":
            return None
        return Decision(
            "deny" if out.verdict == "deny" else "approve",
            self.name,
            out.problems[0]["problem"],
            {"tool": spec.name, "problems": out.problems, "provenance": shown},
        )

    # -- one element of one argument --------------------------------------------------------

    def _whole_call_flow(
        self, index: ProvenanceIndex, call: ProposedCall, rules: ToolRules, properties: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """``confidential_flow`` across the whole call, once no one argument held a secret: a
        secret split between two arguments (with what the run sent before), else one the run
        wrote into the record the call shares or sends (``_carried_flow``)."""
        sent = sent_before(call.state, call.call_id, self._rules_of, rules.no_flow, call.tools)
        split = confidential_flow(index, call.arguments, properties, rules.no_flow, each=False, sent=sent)
        return split or self._carried_flow(index, call, rules)

    def _carried_flow(
        self, index: ProvenanceIndex, call: ProposedCall, rules: ToolRules
    ) -> list[dict[str, Any]]:
        """``confidential_flow`` in what the run wrote into the records ``call`` shares or sends
        by id or name (``carried_records``): a file created holding the door code, then shared."""
        named = [r.argument for r in rules.arguments.values() if r.role in ("target", "name")]
        values = [v for a in named for v in split_values(call.arguments.get(a))]
        carried = carried_records(call.state, call.call_id, self._rules_of, values, call.tools)
        problems = confidential_flow(index, carried, {}, rules.no_flow) if carried else []
        return [{**p, "argument": ", ".join(named)} for p in problems[:1]]

    def _judge(
        self,
        index: ProvenanceIndex,
        call: ProposedCall,
        rule: ArgumentRule,
        element: Any,
        out: _Verdict,
        before: Pieces = (),
    ) -> dict[str, Any]:
        text = element if isinstance(element, str) else json.dumps(element)
        origins = (
            index.trace(text, rule.kind, cased=rule.cased(text), party=rule.role == "destination")
            if not isinstance(element, bool)
            else []
        )
        classes = classes_of(index, origins)
        if USER not in classes and "template" in rule.allow and index.fills_template(text, rule.fill_from):
            classes.add("template")
        shown: dict[str, Any] = {
            "value": text[:200],
            "role": rule.role,
            "origins": [o.describe() for o in origins[:5]] + sorted(c for c in classes if ":" in c),
        }
        case = _Element(index, call, rule, element, text, classes, out, shown, before)
        arg = rule.argument
        if rule.role == "content":
            self._links(case)
        elif rule.role == "amount":
            self._amount(case)
        elif rule.role == "option":
            encoded = json.dumps(element)
            phrases = rule.requested_by.get(encoded, ())
            if encoded not in rule.safe and not any(chooses_option(index.user_text, p) for p in phrases):
                out.worse(
                    rule.otherwise, {"argument": arg, "problem": "option_not_requested", "value": element}
                )
        elif rule.role == "date":
            if not rule.any:
                self._date(case)
        else:
            links = find_links(text) if rule.role == "destination" else []
            if links:
                shown["registered"] = [link.registered for link in links]
            if rule.role == "destination":
                _look_alike(arg, text, out, shown)
            judged = classes & rule.allow and (rule.kind == "link" or shape_kind(text) == "link")
            for link in links if judged else []:
                # A link is compared as a browser opens it (its path as written), not as the value
                # is normalised: bit.ly/grandhotel is not the bit.ly/GrandHotel the user gave.
                link_classes = classes_of(index, index.link_origins(link))
                if not link_classes & rule.allow:
                    v = "approve" if link_classes & rule.approve else rule.otherwise
                    out.worse(v, {"argument": arg, "problem": "untrusted_link", "link": link.raw[:200]})
            if rule.role == "name":  # a title filled from a template carries no foreign link either
                self._links(case)
            if rule.role == "secret" and USER in classes and not says_what_for(index.user_text, arg, text):
                # The user's words, but not given as this secret: "pay the rent to <IBAN>" sets
                # no password to the IBAN (nor to any other value the request holds).
                out.worse(rule.otherwise, {"argument": arg, "problem": "secret_not_requested"})
            elif classes & {USER, USER_WORD} and (
                other := given_for_another(
                    index.objective, self._rules_of(call.spec.name), rule, text, self.tools
                )
            ):
                out.worse(rule.otherwise, {"argument": arg, "problem": "given_for_another", "fields": other})
            elif not classes & rule.allow:
                v = "approve" if classes & rule.approve else rule.otherwise
                out.worse(v, {"argument": arg, "problem": "untrusted_origin", "origins": sorted(classes)})
            else:
                effectful = call.spec.effect.side_effecting
                asked = rule.role == "destination" and self._asked(index, call)
                accepted = classes & rule.allow
                # Who chose the value: a reviewer's, when text someone chose may have made the pick.
                assigned = self.config.assigned
                chosen = who_chose(Pick(index, assigned, rule, text, origins, accepted, effectful, asked))
                if chosen is not None:
                    shown["chosen"] = {k: v for k, v in chosen.items() if k != "problem"}
                    out.worse("approve", {"argument": arg, "vouched_by": sorted(accepted), **chosen})
        return shown

    def _asked(self, index: ProvenanceIndex, call: ProposedCall) -> bool:
        """Whether the request asks for the effect of the called tool (``_effect_asked``)."""
        rules = declared_rules(self.tools, call.spec.name, call.spec.remote_name)
        return rules is not None and _effect_asked(index, rules, bool(call.arguments))

    def _links(self, case: _Element) -> None:
        index, rule, text, out, shown = case.index, case.rule, case.text, case.out, case.shown
        arg = rule.argument
        allowed = rule.links_from if rule.links_from is not None else frozenset({USER, DIRECTORY})
        # An address or account number in text points the reader at a party, as a link does (so
        # does one this write makes with the run's earlier pieces in the same store).
        for handle, origins in party_handles(index, case.call, arg, text, self._rules_of, case.before):
            _look_alike(arg, handle, out, shown)
            handle_classes = classes_of(index, origins)
            if not handle_classes & allowed:
                shown.setdefault("handles", []).append(handle)
                out.worse(
                    "approve",
                    {
                        "argument": arg,
                        "problem": "untrusted_handle",
                        "handle": handle[:200],
                        "origins": sorted(handle_classes),
                    },
                )
        for link in [*find_links(text), *joined_links(case.call, arg, text, self._rules_of, case.before)]:
            _look_alike(arg, link.raw, out, shown)
            link_classes = classes_of(index, index.link_origins(link))
            if not link_classes & allowed:
                shown.setdefault("links", []).append(link.registered)
                out.worse(
                    "approve",
                    {
                        "argument": arg,
                        "problem": "untrusted_link",
                        "link": link.raw[:200],
                        "registered": link.registered,
                        "origins": sorted(link_classes),
                    },
                )

    def _date(self, case: _Element) -> None:
        index, call, rule, out, shown = case.index, case.call, case.rule, case.out, case.shown
        day = parse_date(case.element)
        if day is None:
            return _unreadable(rule, out, "not_a_date")
        elsewhere = dated_for_another(index.objective, self.tools, self._rules_of(call.spec.name), day)
        ok = USER in rule.allow and not elsewhere and any(m.matches(day) for m in index.request_dates)
        ok = ok and (rule.same_day_as is not None or at_stated_time(index.objective, case.element))
        named = {c.split(":", 1)[1] for c in rule.allow if c.startswith("named:")}
        if not ok and named:
            ok = day in index.named_dates(named)
        if not ok and rule.same_day_as is not None:
            ok = parse_date(call.arguments.get(rule.same_day_as)) == day
        if not ok and rule.allow - {USER} - {c for c in rule.allow if c.startswith("named:")}:
            ok = bool(case.classes & rule.allow)
        shown["day"] = day.isoformat()
        if not ok:
            out.worse(
                rule.otherwise,
                {
                    "argument": rule.argument,
                    "problem": "date_not_requested",
                    "day": day.isoformat(),
                    "requested": sorted(
                        {f"{m.year or '*'}-{m.month:02}-{m.day:02}" for m in index.request_dates}
                    ),
                },
            )

    def _amount(self, case: _Element) -> None:
        index, call, rule, out, shown = case.index, case.call, case.rule, case.out, case.shown
        value = figure(case.element)
        if value is None:
            return _unreadable(rule, out, "not_an_amount")
        rules = declared_rules(self.tools, call.spec.name, call.spec.remote_name)
        currency, home = paid_in(rules, call, rule), home_currency(rules, call, rule)  # home: if none said
        users = bounding(index.request_sums, currency, home) if USER in rule.bound else []
        stated = [(f, "the request") for f in users]
        parties = parties_of(rules, call.arguments)  # whom it pays, what it changes: their records bound it
        stated += named_bounds(index, rule.fields, currency, home, parties) if "named" in rule.bound else []
        bound, by = max(stated, default=(0.0, "nothing"))
        spent = paid_beside(rules, call.arguments, rule)  # one call's amounts are one payment
        if rule.cumulative:
            spent += paid_before(call, self._rules_of, self._defaults_of)
        shown.update({"currency": currency, "bound": bound, "stated_by": by, "already": spent})
        if value < 0 or value + spent > bound + 1e-9:
            out.worse(
                rule.otherwise,
                {
                    "argument": rule.argument,
                    "problem": "amount_over_bound",
                    "amount": value,
                    "already_this_run": spent,
                    "bound": bound,
                    "stated_by": by,
                },
            )


def _look_alike(arg: str, name: str, out: _Verdict, shown: dict[str, Any]) -> None:
    """A domain, address or link that can pass for another (mixed scripts, a TR39 skeleton of
    another ASCII name) goes to a reviewer, shown in both forms — whatever it traces to. The
    same check (``tether.core._confusables``) marks it on the console's pages."""
    if name.isascii() and "xn--" not in name.lower():
        return
    check = check_name(name)
    if check.suspicious:
        shown.setdefault("look_alikes", []).append(check.to_json())
        out.worse(
            "approve",
            {
                "argument": arg,
                "problem": "look_alike",
                "name": name[:200],
                "registered": check.ascii,
                "looks_like": check.looks_like,
            },
        )


def _has_content(value: Any) -> bool:
    """Whether a value carries anything at all (an empty list or mapping does not)."""
    if isinstance(value, Mapping):
        return bool(value)
    if isinstance(value, list | tuple | set | frozenset):
        return bool(value)
    return value is not None


def _relayed(index: ProvenanceIndex, value: str, classes: frozenset[str]) -> Segment | None:
    """A segment of ``classes`` that ``value`` repeats, at any length: a run of ``RELAY_SPAN``
    characters or more found verbatim in the segment (windows of two thirds of the span,
    every third of it, find every such repeat); or, in a shorter value, the whole value, or
    one of its tokens that carries digits (a code, an amount, an identifier; a date is a
    fact, not a relay), found in the segment as a whole and not stated by the user or the
    directory. Both are compared as a reader reads them (case, width and invisible characters
    folded: the same words in full width are the same relay), and as the reader sees them
    (``shown``: a copy in look-alike letters, or in HTML character references, is the same
    text on the recipient's screen). Text of a class less trusted than one of ``classes``
    (``_no_better``: a page of the web, a tool's error message) is no more to be relayed than
    theirs."""
    text = unfolded(value)
    segments = [s for s in index.segments if _no_better(s.label.trust, classes)]
    if not text or not segments:
        return None
    found = _repeats(index, text, [(s, index.unfolded_text(s)) for s in segments], index.user_text)
    if found is None and (look := shown(value)) != text:
        found = _repeats(index, look, [(s, shown(s.raw)) for s in segments], shown(index.objective))
    return found


def _repeats(
    index: ProvenanceIndex, text: str, sources: list[tuple[Segment, str]], user_text: str
) -> Segment | None:
    """``_relayed`` for one reading of the value (``text``) and of the segments (``sources``)."""
    width, stride = 2 * RELAY_SPAN // 3, RELAY_SPAN // 3
    if len(text) >= RELAY_SPAN:
        long = [(s, hay) for s, hay in sources if len(hay) >= width]
        for start in range(0, len(text) - width + 1, stride):
            window = text[start : start + width]
            for seg, hay in long:
                if window in hay:
                    return seg
    pieces = [text] if len(text) < RELAY_SPAN else []
    pieces += [t for t in _TOKEN.findall(text) if any(c.isdigit() for c in t) and len(t) >= 4]
    for piece in pieces:
        if len(piece) < 3 or parse_date(piece) is not None:
            continue
        if contains_whole(user_text, piece) or piece in index.directory:
            continue
        for seg, hay in sources:
            if (hay == piece or contains_whole(hay, piece)) and not index.echoes(seg, piece):
                return seg
    return None


def _no_better(trust: str, classes: frozenset[str]) -> bool:
    """Whether ``trust`` is one of ``classes`` or less trusted than one of them: later in
    ``TRUST_ORDER``, or a tool's error message (``ERROR``). A class outside the order names
    whose data it is (``private``: the user's own), not how far to trust someone's words. A copy
    of several classes (``least_trusted``: ``private+web``) is no better than any of them."""
    parts, listed = trust_parts(trust), [TRUST_ORDER.index(c) for c in classes if c in TRUST_ORDER]
    if parts & classes or not listed:
        return bool(parts & classes)
    return any(t == ERROR or (t in TRUST_ORDER and TRUST_ORDER.index(t) > min(listed)) for t in parts)


_TOKEN = re.compile(r"[\w@.+/:-]*\w", re.UNICODE)


def _effect_asked(index: ProvenanceIndex, rules: ToolRules, has_arguments: bool) -> bool:
    """Whether the request asks for the tool's effect through one of its ``requested_by``
    phrases. For a tool with arguments the phrases name its action ("send", "share", "add"),
    so a phrase counts only where the request uses it as one (``asks_for``): "what is in the
    email from Lily" asks for no mail. A tool without arguments names a state ("unread", "new
    mail"), which counts wherever it stands. A tool that declares no phrase is never asked."""
    if has_arguments:
        return any(asks_for(index.user_text, p) for p in rules.requested_by)
    return any(said(index.user_text, p) for p in rules.requested_by)


class ProvenancePolicy(Policy):
    """Allowlist, then provenance rules, then any extra rules. Unlike ``Policy`` it does not
    ask approval for every effect: the provenance rules decide which calls need a reviewer."""

    def __init__(
        self,
        rules: ProvenanceRules,
        *,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] = (),
        extra: Iterable[Rule] = (),
    ) -> None:
        super().__init__(allow=allow, deny=deny)
        self.provenance = rules
        self.allowlist = Allowlist(frozenset(allow) if allow is not None else None, frozenset(deny))
        self.rules = (self.allowlist, rules, *extra)


def _unreadable(rule: ArgumentRule, out: _Verdict, problem: str) -> None:
    """A value that is not what its role reads (a date, an amount): as the rule says otherwise."""
    out.worse(rule.otherwise, {"argument": rule.argument, "problem": problem})
