"""Which field of a call the request gives a value for: "change my city to London and my last
name to Johnson" gives Johnson as the last name, so a call that sets the first name to Johnson
sets it to words the user gave for another field (``given_for_another``). Likewise for whom or
what an effect reaches: "refund GB29… and fix my Spotify order's subject" gives GB29… as whom
to refund, not as the order's new payee, and "summarize file 130 and delete draft 131" gives
130 for no deletion (``given_for_another_effect``); and for its days: "book Hotel Beta from
May 13 to May 17; I fly home May 20" gives May 20 for no stay (``dated_for_another``)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from datetime import date

from tether.policy._provenance_dates import DateMention, date_mentions, is_month, undated_words
from tether.policy._provenance_declarations import ArgumentRule, ToolRules
from tether.policy._provenance_labels import USER_WORD, normalise, shape_kind
from tether.policy._provenance_mentions import placed
from tether.policy._provenance_text import STOP, actions, asks_for, contains_whole, given_as, request_names
from tether.policy._provenance_values import unfold

__all__ = ["FIELD_ROLES", "dated_for_another", "given_for_another", "given_for_another_effect"]

# The roles of arguments the user gives values for by naming the field: facts about them, secrets.
FIELD_ROLES = frozenset({"profile", "secret"})
# The roles of the parties of an effect: whom it reaches, the record it acts on.
_PARTIES = frozenset({"destination", "target"})


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
    request: str,
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
    (``given_for_another_effect``); for a party the request may give as a plain word
    (``user:word``: a channel), the words it places as one ("post it *in random*") count as
    its names, so "read general and post a summary in random" gives general for no post."""
    user_text = normalise(request)
    if rule.role in _PARTIES and tools is not None:
        names = request_names(request)
        if USER_WORD in rule.allow | rule.approve:  # a plain word the request places: "post in random"
            names |= {w for w in set(_WORD.findall(user_text)) if w not in STOP and placed(user_text, w)}
        return given_for_another_effect(user_text, tools, rules, rule, value, names)
    if rule.role != "profile" or rules is None:
        return []
    fields = [a for a, r in rules.arguments.items() if r.role in FIELD_ROLES]
    given = given_for(user_text, fields, value)
    return [] if rule.argument in given else sorted(given)


def given_for_another_effect(
    user_text: str,
    tools: Mapping[str, ToolRules],
    rules: ToolRules | None,
    rule: ArgumentRule,
    value: str,
    names: Iterable[str] = (),
) -> list[str]:
    """Why the request (``user_text``, normalised) gives ``value``, a party of a tool with an
    effect (``rule``: a destination or a target), for something else than this tool's action:

    * every place the request asks for this action (its ``requested_by`` phrases, used as
      actions) names the parties it governs, and ``value`` is none of them (``governed``):
      "summarize file 130 and *delete* the old draft 131" asks to delete 131, not 130, and
      "read bob@…'s mail and *email* alice@… a summary" to mail Alice, not Bob. An action that
      names no party ("read file 130 and *delete* it") governs whatever the request points at;
    * else, for a destination of a write (whom a standing order pays, who an event invites) or
      a target, wherever the value stands whole the last of the declared phrases the request
      asks for in its sentence before it is another tool's only ("please *refund* GB29…, and fix
      the subject of my order": GB29… is whom to refund, not the order's new payee).

    Empty where the request gives the value for this tool ("*change* the recipient … to GB29…"),
    or with no action before it ("my new landlord's account is CA13…"): the request's own
    choice. Each entry names the other tool, or this tool's action and the parties it governs."""
    if rule.role not in _PARTIES or rules is None or rules.effect in (None, "read") or not rules.requested_by:
        return []
    phrases = {p for r in tools.values() for p in r.requested_by}
    alone = sum(r.role in _PARTIES for r in rules.arguments.values()) == 1  # its names are this party's
    named = frozenset(n for n in names if n not in STOP and not is_month(n)) if alone else None
    governed = _governed(user_text, phrases, rules.requested_by, value, named)
    if governed is not None:
        return [f"{a} {', '.join(parties)}" for a, parties in governed]
    if rule.role == "destination" and rules.effect != "write":
        return []
    needle, own = normalise(value), set(rules.requested_by)
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


def dated_for_another(
    request: str, tools: Mapping[str, ToolRules], rules: ToolRules | None, day: date
) -> bool:
    """Whether the request gives ``day``, a date of a tool with an effect, only for something
    else than this tool's action: every place it asks for the action (``requested_by``) names
    days in its clause (up to the next action asked for) and none is ``day``. "Book Hotel Beta
    from May 13 to May 17; I fly home May 20" gives May 20 for no stay. A place that names no
    day ("book it") leaves the request's days to the action, as before."""
    if rules is None or rules.effect in (None, "read") or not rules.requested_by:
        return False
    text = normalise(request)
    phrases = {p for r in tools.values() for p in r.requested_by}
    spans = list(_spans(text, phrases, rules.requested_by))
    days = [_days(span) for _, span in spans]
    return bool(spans) and all(days) and not any(m.matches(day) for ms in days for m in ms)


def _days(span: str) -> list[DateMention]:
    """The days ``span`` names: the first, and those after it with only list words, the words
    of a range ("from May 13 *to* May 17") or the words that led to the first between them;
    "book it for May 13, and check my flight on May 20" ends before "check"."""
    folded, days = unfold(span), date_mentions(span)
    leading = set(_WORD.findall(folded[: days[0].span[0]])) if days else set()
    kept = days[:1]
    for prior, mention in itertools.pairwise(days):
        if not set(_WORD.findall(folded[prior.span[1] : mention.span[0]])) <= leading | _LIST_WORDS | _RANGE:
            break
        kept.append(mention)
    return kept


def _spans(text: str, phrases: Iterable[str], own: Iterable[str]) -> Iterable[tuple[str, str]]:
    """Each place the request (``text``) asks for this tool's action (one of ``own``) and the
    clause it governs: up to the next action asked for (of any tool in ``phrases``) or the end
    of its sentence."""
    starts = sorted(s for p in phrases for s, _ in actions(text, p))
    for phrase in own:
        for _, end in actions(text, phrase):
            ends = [s for s in starts if s >= end] + [m.start() for m in _SENTENCE.finditer(text, end)]
            yield phrase, text[end : min(ends, default=len(text))]


def _governed(
    text: str, phrases: Iterable[str], own: Iterable[str], value: str, names: frozenset[str] | None
) -> list[tuple[str, list[str]]] | None:
    """The places the request (``text``) asks for this tool's action (one of ``own``) and the
    parties shaped as ``value`` (an address, an account, a link, a number) each governs, when
    every such place names some and none names ``value``; else None (no such place, a value of
    no such shape, one place that names none or names ``value``). An action governs the parties
    that follow it in its sentence up to the next action asked for (of any tool in ``phrases``):
    the first, and the ones after it joined by only list words or the words that led to the
    first ("delete *file* 130 and *file* 131"); "delete draft 131 and summarize 130" ends at
    "summarize". A value with letters and no such shape (a hotel, a member) is governed by the
    clause when ``names`` (the request's names, for a tool with this one party) holds one of its
    words ("*book* Hotel Beta from May 13"), else by nothing the clause names."""
    kind = _kind(value) or ("name" if names and _LETTER.search(value) else None)  # no phone's digits
    if kind is None:
        return None
    needle, found = normalise(value), []
    for phrase, span in _spans(text, phrases, own):
        parties = _named(span, names or frozenset()) if kind == "name" else _parties(span, kind)
        if not parties or any(contains_whole(p, needle) for p in parties):  # "www.x.com.They"
            return None
        found.append((phrase, parties))
    return found or None


def _kind(value: str) -> str | None:
    """The shape a party is named by in a request: ``mailbox``, ``account``, ``link``, or
    ``number`` (a record's id); None for a name, whose words no shape marks out."""
    kind = shape_kind(value)
    if kind != "name":
        return kind
    return "number" if _NUMBER.fullmatch(normalise(value)) else None


def _parties(span: str, kind: str) -> list[str]:
    """The tokens of ``span`` shaped as ``kind``, outside its dates (``undated_words``: "move it
    to May 13" names no record 13): the first, and those after it with only list words or the
    words that led to the first between them."""
    parties: list[str] = []
    leading: set[str] = set()
    for token in (t.strip(_AROUND).rstrip(".") for t in undated_words(span, _TOKEN)):
        shaped = bool(token) and (
            _NUMBER.fullmatch(token) is not None if kind == "number" else shape_kind(token) == kind
        )
        words = set(re.findall(r"[\w'’]+", token))
        if shaped:
            parties.append(token)
        elif not parties:
            leading |= words
        elif not words <= leading | _LIST_WORDS:
            break
    return parties


def _named(span: str, names: frozenset[str]) -> list[str]:
    """The part of ``span`` that names a party when it holds a word the request uses as a name
    (``request_names``: "book *Hotel Beta* from May 13"), else nothing ("book it for May 13": a
    month is no name). It ends where a comma or a joining word opens a clause on a word that is
    no name: "book Le Baratin for May 14, 2024 *and check* the reviews of Chez Nous" names Le
    Baratin only; "book Hotel Alpha and Hotel Beta" both, "post it in general and in random" both."""
    cut = next((m.start() for m in _JOIN.finditer(span) if m.group(1) not in names | _INTO), len(span))
    return [span[:cut]] if any(w in names for w in _WORD.findall(span[:cut])) else []


_NUMBER, _LETTER = re.compile(r"\d+"), re.compile(r"[^\W\d_]")
_TOKEN, _WORD = re.compile(r"\S+"), re.compile(r"[\w'’]+")
_AROUND = "\"'“”‘’()[]<>{},;:!?#"
_LIST_WORDS = frozenset({"and", "or", "also", "plus", "as", "well", "both", "either"})
_JOIN = re.compile(r"(?:[,:]|\b(?:and|then|but|so|after|before|while)\b)\s+([^\W\d]['’\w]*)")
_INTO = frozenset({"in", "into", "to", "on", "onto", "at", "via"})  # "… and *in* random": the list goes on
_RANGE = frozenset({"from", "to", "until", "till", "through", "thru", "between"})
_SENTENCE = re.compile(r"[.!?;](?=\s|$)|\n")


def _last(text: str, phrase: str) -> int:
    """Where the last whole ``phrase`` of ``text`` ends."""
    words = re.escape(normalise(phrase))
    return max((m.end() for m in re.finditer(rf"(?<![\w'’-]){words}(?![\w'’-])", text)), default=-1)
