"""Confidential data leaving in a call (``no_flow``): looked for in each argument, and across
the arguments a reader reads together (a mail's subject and its body), so a secret split
between two of them is still the secret; and across the calls that carried data out before it
(``sent_before``), so a secret split between two mails is the secret too. A handle or a link
written into a store in pieces is looked for in what those pieces make together
(``joined_handles``, ``joined_links``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tether.core.types import Effect
from tether.policy._provenance import ProvenanceIndex
from tether.policy._provenance_decoding import converted, decoded, decoded_forms
from tether.policy._provenance_display import displayed
from tether.policy._provenance_kept import as_grouped, kept_numbers, keypad
from tether.policy._provenance_labels import Origin, Segment, shape_kind, split_values, trust_parts
from tether.policy._provenance_run import SENT, calls_before, history
from tether.policy._provenance_spelled import spelled_forms, spelled_numbers, turned_links
from tether.policy._provenance_text import BARE, ascii_digits, contains_whole, holds_secret, shown, unfolded
from tether.policy._provenance_values import (
    Link,
    find_handles,
    find_links,
    find_numbers,
    link_key,
    public_suffix,
    undated,
    unfold,
)

__all__ = [
    "carried_records",
    "confidential_flow",
    "contained_segments",
    "joined_handles",
    "joined_links",
    "party_handles",
    "sent_before",
]


def sent_before(
    state: Any, call_id: str, rules_of: Callable[[str], Any], classes: Iterable[str], tools: Any = None
) -> dict[str, Any]:
    """The arguments of the request's calls before ``call_id`` (``calls_before``: its turn-mates
    too) of tools that may carry none of ``classes`` out either, keyed ``tool#call.argument``:
    what went out in them, to be read with what would go out now (a turn-mate's as its tool
    receives it, where ``tools`` says)."""
    wanted = frozenset(classes)
    out: dict[str, Any] = {}
    for record in calls_before(state, call_id, tools):
        rules = rules_of(record.tool)
        if rules is None or record.status not in SENT or not isinstance(record.arguments, Mapping):
            continue
        if rules.no_flow & wanted:
            out.update({f"{record.tool}#{record.call_id}.{a}": v for a, v in record.arguments.items()})
    return out


def carried_records(
    state: Any, call_id: str, rules_of: Callable[[str], Any], records: Iterable[str], tools: Any = None
) -> dict[str, Any]:
    """What the request's earlier writes put into a record a call acts on (``records``: the
    values of its target and name arguments), keyed ``tool#call.argument``: the arguments of
    each write, before ``call_id``, whose arguments or result hold one of ``records`` whole
    (``create_file`` answered the id ``share_file`` is given, or was given the name it shares).
    Sharing, sending or publishing that record carries out what the run wrote into it, though
    the call that does it receives only its id."""
    wanted = {r.casefold() for r in records if r.strip()}
    if not wanted:
        return {}
    results: dict[str, list[str]] = {}
    for seen in history(state, "observations"):
        results.setdefault(seen.call_id, []).extend(split_values(seen.data))
    out: dict[str, Any] = {}
    for record in calls_before(state, call_id, tools):
        rules = rules_of(record.tool)
        if rules is None or rules.effect == "read" or record.status not in SENT:
            continue
        if not isinstance(record.arguments, Mapping):
            continue
        held = [*split_values(record.arguments), *results.get(record.call_id, ())]
        if wanted & {v.casefold() for v in held}:
            out.update({f"{record.tool}#{record.call_id}.{a}": v for a, v in record.arguments.items()})
    return out


def confidential_flow(
    index: ProvenanceIndex,
    arguments: Mapping[str, Any],
    schemas: Mapping[str, Any],
    classes: Iterable[str],
    *,
    each: bool = True,
    sent: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The ``confidential_flow`` problems of a call whose ``arguments`` may carry no value of
    ``classes`` out: one per argument that holds one, else one for the arguments together when
    their values, read one after the other in either order, hold one across a boundary
    ("hunter2" in the subject, "Vx9" opening the body; "48" and "21"). ``each=False``: only
    across them (each was looked at already). ``sent``: what earlier calls carried out, read
    before the arguments (``sent_before``): a value this call completes (``_completed``)."""
    wanted = frozenset(classes)
    if not wanted:
        return []
    found: list[dict[str, Any]] = []
    leaves: list[str] = []
    for arg, value in arguments.items():
        elements = split_values(value, schemas.get(arg))
        leaves.extend(elements)
        for element in elements if each else ():
            leaked = contained_segments(index, element, wanted)
            if leaked:
                found.append(
                    {"argument": arg, "problem": "confidential_flow", "from": leaked[0].label.describe()}
                )
                break
    if found or (len(leaves) < 2 and not sent):
        return found
    leaked = _completed(index, _by_call(sent), leaves, wanted) if sent else _across(index, leaves, wanted)
    if leaked:
        across = ", ".join(a for a, v in arguments.items() if v is not None)
        return [{"argument": across, "problem": "confidential_flow", "from": leaked[0].label.describe()}]
    return found


def _across(index: ProvenanceIndex, leaves: list[str], wanted: frozenset[str]) -> list[Segment]:
    """The segments of ``wanted`` classes that ``leaves`` hold, read one after the other in
    either order."""
    if not leaves:
        return []
    forward = contained_segments(index, " ".join(leaves), wanted)
    return forward + contained_segments(index, " ".join(reversed(leaves)), wanted)


def _completed(
    index: ProvenanceIndex, calls: dict[str, list[str]], mine: list[str], wanted: frozenset[str]
) -> list[Segment]:
    """The secrets the leaves of this call (``mine``) complete: held by them read after the
    pieces that went out before, not by those pieces alone. A secret's pieces are the leaves of
    the earlier calls that did not carry it whole by themselves: one that did was judged (and
    reviewed) as it was, and a reviewer who let the door code go to one person let no one else
    have it in pieces later."""
    whole = {c: {seg.text for seg in _across(index, leaves, wanted)} for c, leaves in calls.items()}
    out: list[Segment] = []
    for seg in _across(index, [*(leaf for leaves in calls.values() for leaf in leaves), *mine], wanted):
        pieces = [leaf for c, leaves in calls.items() if seg.text not in whole[c] for leaf in leaves]
        after = {s.text for s in _across(index, [*pieces, *mine], wanted)}
        if seg.text in after and seg.text not in {s.text for s in _across(index, pieces, wanted)}:
            out.append(seg)
    return out


def _by_call(sent: Mapping[str, Any]) -> dict[str, list[str]]:
    """``sent_before``'s arguments (``tool#call.argument``) as each call's leaves."""
    calls: dict[str, list[str]] = {}
    for key, value in sent.items():
        calls.setdefault(key.rpartition(".")[0], []).extend(split_values(value))
    return calls


def contained_segments(index: ProvenanceIndex, value: str, trust: Iterable[str]) -> list[Segment]:
    """Segments of the given trust classes whose whole value appears inside ``value`` (to
    follow confidential data into an outgoing message; ``holds_secret``). A value the request
    or the directory also holds is no secret of that source. Compared as a reader reads both
    (case, width, invisible characters and the script of digits folded: ``ｈｕｎｔｅｒ２２``
    is ``hunter22``, ``٤٨٢١`` is ``4821``)."""
    wanted = set(trust)
    views = _reader_views(value)
    return [
        s
        for s in index.segments
        if trust_parts(s.label.trust) & wanted
        and s.whole
        and _shown_in(index.unfolded_text(s), views)
        and s.text not in index.directory
        and not contains_whole(index.user_text, s.text)
    ]


def _reader_views(value: str) -> list[tuple[str, str, str]]:
    """``value`` as written (``unfolded``, digits of any script as ASCII) and as its reader sees
    it (``shown``: character references rendered, look-alike letters read as the ones they
    imitate), each with its ``BARE`` form, and whether it is the reader's view."""
    text = ascii_digits(unfolded(value))
    views = [(text, BARE.sub("", text), "")]
    if (look := shown(value)) != text:
        views.append((look, BARE.sub("", look), "shown"))
    return views


def _shown_in(secret: str, views: list[tuple[str, str, str]]) -> bool:
    """Whether ``secret`` (unfolded) stands in one of ``views`` (``_reader_views``), the
    reader's view compared with the secret as it looks (``shown``)."""
    return any(holds_secret(shown(secret) if how else secret, text, bare) for text, bare, how in views)


_JOINED_CHARS = 512  # the run's earlier pieces looked at: more than any address or account needs


def _earlier(
    call: Any, argument: str, rules_of: Callable[[str], Any] | None = None, before: Sequence[str] = ()
) -> list[str]:
    """What the run's earlier calls that wrote ``call``'s store (and those beside it in its turn)
    gave as ``argument``, then the elements of ``argument`` before the one judged (``before``: a
    store joins a list's lines), the last ``_JOINED_CHARS`` of it, piece by piece: nothing for a
    read (it keeps nothing). A store is its tool's, or, for tools that declare the kind of record
    they act on (``ToolSpec.target``: ``create_file`` and ``append_to_file`` both on a ``file``),
    every side-effecting tool's of that kind, whose arguments of ``argument``'s role
    (``rules_of``) are the pieces: a file created with one half of an account and appended the
    other holds it."""
    if not call.spec.effect.side_effecting or argument in call.reshaped:
        return []  # a value its tool reshapes is joined as the store keeps it (``judged_as_received``)
    earlier: list[str] = []
    for record in calls_before(call.state, call.call_id, call.tools):
        if record.status in SENT and isinstance(record.arguments, Mapping):
            for name in _written_as(call, argument, record.tool, rules_of):
                earlier.extend(split_values(record.arguments.get(name)))
    earlier.extend(before)
    kept: list[str] = []
    size = 0
    for piece in reversed(earlier):
        if size >= _JOINED_CHARS:
            break
        kept.append(piece)
        size += len(piece)
    return kept[::-1]


def _written_as(call: Any, argument: str, tool: str, rules_of: Callable[[str], Any] | None) -> list[str]:
    """The arguments of ``tool`` that write into ``call``'s store what ``call``'s ``argument``
    does: ``argument`` itself for its own tool; for another tool of the same kind of record
    (``_earlier``), the ones its rules give ``argument``'s role, else one of the same name."""
    if tool == call.spec.name:
        return [argument]
    kind = call.spec.target.kind if call.spec.target is not None else None
    spec = call.tools.spec_of(tool) if kind is not None and call.tools is not None else None
    if spec is None or spec.target is None or spec.target.kind != kind or not spec.effect.side_effecting:
        return []
    mine, theirs = (rules_of(call.spec.name), rules_of(tool)) if rules_of is not None else (None, None)
    rule = mine.arguments.get(argument) if mine is not None else None
    if rule is None or theirs is None:
        return [argument]
    return [a for a, r in theirs.arguments.items() if r.role == rule.role] or [argument]


def party_handles(
    index: ProvenanceIndex,
    call: Any,
    argument: str,
    value: str,
    rules_of: Callable[[str], Any] | None = None,
    before: Sequence[Sequence[str]] = (),
) -> list[tuple[str, list[Origin]]]:
    """What in ``value`` (``argument`` of ``call``) points at a party, as written and in each
    form a store may keep it (``decoded``: escapes undone, markup rendered), each with its
    origins (``handle_origins``) to be judged: its addresses and accounts (``find_handles``),
    its long numbers (``find_numbers``: a phone, an account of digits) but those that are
    digits of an account the store makes with the run's earlier pieces, what it makes with
    those pieces (``joined_handles``), and the digits a write opens and closes with
    (``edge_fragments``, ``closing_fragment``)."""
    joined = joined_handles(call, argument, value, rules_of, before)
    accounts = [j for j in joined if "@" not in j]
    # As written, and as a store that undoes an escape or renders markup keeps it (``decoded``:
    # ``%30%30…``, ``&#48;…``, ``000<b>123</b>456789`` are the account they show). Its base64
    # is judged as elements of their own (``self_decoded``), and a value its tool reshapes as
    # the tool receives it (``judged_as_received``); and as its reader sees it (``displayed``).
    forms = [value, *(_stored(value) if argument not in call.reshaped else ())]
    forms += [drawn for drawn in (displayed(value),) if drawn not in forms]
    numbers = [n for f in forms for n in find_numbers(f) if not any(_digits(n) in a for a in accounts)]
    handles = dict.fromkeys([*(h for f in forms for h in find_handles(f)), *numbers, *joined])
    if call.spec.effect is Effect.WRITE and argument not in call.reshaped:
        held = [_digits(h) for h in handles]
        edges = [e for f in forms for e in edge_fragments(f)]
        handles.update(dict.fromkeys(e for e in edges if not any(_digits(e) in d for d in held)))
    found = [(h, handle_origins(index, h)) for h in handles]
    if call.spec.effect is Effect.WRITE and argument not in call.reshaped:
        found += _closing(index, forms, [_digits(h) for h in handles])
        found += _kept_as_numbers(index, forms, [_digits(h) for h in handles])
    # Spelled so no party is seen: a store keeps it, a message's reader reads it (``_spelled``).
    found += _spelled(index, value, forms) if argument not in call.reshaped else []
    # A link this write makes with the run's own pieces is judged as that link (``_links``).
    writes = call.spec.effect is Effect.WRITE and argument not in call.reshaped
    if writes and not joined_links(call, argument, value, rules_of, before):
        found += link_pieces(index, value)
    return found


def _stored(value: str) -> list[str]:
    """The forms of ``value`` a store may keep (``decoded``) but its base64 (``decoded_forms``),
    and those a trusted converter makes of it (``converted``: base32, another base's numbers)."""
    own = decoded_forms(value)
    return [form for form in (*decoded(value), *converted(value)) if form not in own]


_LINK_MARKS = frozenset(".[]/:@")
_BRACKETS = str.maketrans("", "", "[]()")


def link_pieces(index: ProvenanceIndex, value: str) -> list[tuple[str, list[Origin]]]:
    """The first word of ``value``, written to a store, when it holds a mark of a link or an
    address (``.``, ``/``, ``:``, ``@``, a defanging bracket) and is a piece of the links or
    addresses the request or a result holds (read without brackets, case folded), with their
    origins: the store joins it with what earlier runs kept before it (``secure-systems[`` kept
    by one run, ``.]example/deal`` by the next), which ``joined_links`` (this run's pieces)
    never sees. So is the last word that holds an ``@``, as a piece of an address: one cut
    after its ``@`` or its dot (``billing@secure-systems.``, then ``example``) leaves a next
    piece with no mark, where a link's next piece still holds its dot or slash. A last word's
    full stop ends its sentence; a last word that is a whole link or address is judged as one.
    A word no link or address holds is no piece of any."""
    words = value.split()
    out: list[tuple[str, list[Origin]]] = []
    for word, closing in [*((w, False) for w in words[:1]), *((w, True) for w in words[1:][-1:])]:
        marked = word.rstrip(".,;!?") if closing else word
        core = _bare(marked).translate(_BRACKETS).rstrip(",;!?")
        if len(core.strip(".")) < 3 or not _LINK_MARKS & set(marked):
            continue
        if closing and ("@" not in core or find_links(marked) or find_handles(marked)):
            continue  # no piece of an address's name (``a.m.``), or a whole one: judged as one
        texts = [t for t in (index.objective, *(seg.raw for seg in index.segments)) if core in _held(t)]
        links = [] if closing else [link for t in texts for link in find_links(t) if core in _held(link.raw)]
        addresses = [a for t in texts for a in find_handles(t) if "@" in a and core in _held(a)]
        origins = [o for link in links for o in index.link_origins(link)]
        origins += [o for a in dict.fromkeys(addresses) for o in handle_origins(index, a)]
        if origins:
            out.append((word, origins))
    return out


def _held(text: str) -> str:
    """``text`` as ``link_pieces`` finds a piece in it: as a reader reads it, without brackets."""
    return _bare(text).translate(_BRACKETS)


FRAGMENT_DIGITS = 4  # the digits at a write's edge judged as a piece of a number the store may make
_EDGE_CHARS = 64
# Digits and what a number is printed with between them (``find_numbers``): a comma or an
# apostrophe only where it groups thousands.
_MARKS = r"\s()+./_\-\u00b7\u2010-\u2015\u2212"
_RUN = re.compile(rf"(?:[\d{_MARKS}]|[,'\u2019](?=\d{{3}}))*")
_CENTS_AT_END = re.compile(r"(?<=\d)\.\d\d$")
_EDGE_MARKS = " ()+./_-\u00b7\u2010\u2011\u2012\u2013\u2014\u2015\u2212"


def edge_fragments(value: str) -> list[str]:
    """The run of digits ``value``, written to a store, opens with (separators before it, a day
    and a sum's cents left out), of ``FRAGMENT_DIGITS`` or more: the store joins it with what it
    already holds, kept by earlier runs this one never sees (``joined_handles`` reads only this
    run's pieces), so an injected account appended one piece a run, or appended to the piece a
    read of the notes showed, is read back whole as the notes' own. Whatever the cut, the piece
    after it opens with digits. Judged where it came from like a number (``handle_origins``)."""
    text = undated(unfold(value, fold_case=False))
    head = _RUN.match(text[:_EDGE_CHARS])
    raw = _CENTS_AT_END.sub("", " ".join(head.group(0).split()).strip(_EDGE_MARKS)) if head else ""
    return [raw] if len(_digits(raw)) >= FRAGMENT_DIGITS else []


_TAIL = re.compile(rf"(?:[\d{_MARKS}]|[,'\u2019](?=\d{{3}}))*\Z")  # the run a value closes with
NOWHERE_CLOSING = 6  # the closing digits judged even where nothing the run read holds them


def closing_fragment(value: str) -> str:
    """The run of digits ``value`` closes with (as ``edge_fragments`` reads the one it opens
    with), of ``FRAGMENT_DIGITS`` or more, else "": a store may put what it already holds after
    it (a store that prepends; a find-and-replace writing ``Deposit 000123`` over the
    ``Deposit `` of ``Deposit 456789``, or taking the word out of ``000123 NOTE456789``)."""
    text = undated(unfold(value, fold_case=False))
    tail = _TAIL.search(text[-_EDGE_CHARS:])
    raw = _CENTS_AT_END.sub("", " ".join(tail.group(0).split()).strip(_EDGE_MARKS)) if tail else ""
    return raw if len(_digits(raw)) >= FRAGMENT_DIGITS else ""


def _closing(index: ProvenanceIndex, forms: list[str], held: list[str]) -> list[tuple[str, list[Origin]]]:
    """The digits the forms of a write close with (``closing_fragment``), judged where they are
    a piece of what a result or the request holds (``handle_origins``), or, traced nowhere (an
    account a review gave in words or reversed, written out in figures), where they are
    ``NOWHERE_CLOSING`` digits or more: a short figure the model wrote (``Trip done, 4711``)
    closes many a note, where few open with one."""
    out: list[tuple[str, list[Origin]]] = []
    for raw in dict.fromkeys(closing_fragment(f) for f in forms):
        if raw and not any(_digits(raw) in d for d in held):
            origins = handle_origins(index, raw)
            if len(_digits(raw)) >= NOWHERE_CLOSING or any(o.kind != "nowhere" for o in origins):
                out.append((raw, origins))
    return out


def _kept_as_numbers(
    index: ProvenanceIndex, forms: list[str], held: list[str]
) -> list[tuple[str, list[Origin]]]:
    """What the forms of a write make as a store that keeps numbers as their digits keeps them
    (``kept_numbers``: ``000:123:456:789``, ``800-FLOWERS``) but a number already judged, each
    with the origins of it as written and of the number it makes (``handle_origins``): judged
    where the request or a result holds either; so are the digits a piece opens or closes with
    as the store joins them (``as_grouped``). One traced nowhere is left alone: ratings and room
    numbers listed (``4, 5, 3, 5, 4, 5, 5, 4``) name no party the run read anywhere."""
    out: list[tuple[str, list[Origin]]] = []
    # The digits a piece opens or closes with as that store joins them with what it holds
    # (``Deposit 000:123`` kept by one run, ``:456:789`` by the next): ``edge_fragments``.
    grouped = [as_grouped(unfold(f, fold_case=False)) for f in forms]
    edges = [e for g in grouped for e in (*edge_fragments(g), closing_fragment(g)) if e]
    seen = [*held, *(_digits(e) for f in forms for e in (*edge_fragments(f), closing_fragment(f)) if e)]
    for raw in dict.fromkeys([*(n for f in forms for n in kept_numbers(f)), *edges]):
        digits = _digits(keypad(raw))
        if any(digits in d for d in seen):
            continue
        seen.append(digits)
        origins = [
            o for o in (*handle_origins(index, raw), *handle_origins(index, digits)) if o.kind != "nowhere"
        ]
        if origins:
            out.append((raw, origins))
    return out


def _spelled(index: ProvenanceIndex, value: str, forms: list[str]) -> list[tuple[str, list[Origin]]]:
    """What a write keeps spelled so that no party is seen in it, as the next run's reader (its
    model, a trusted words-to-figures or decoding tool) makes it: a number spelled a digit a
    word (``spelled_numbers``), judged as the number where it came from somewhere, or where
    words spell ``NOWHERE_CLOSING`` of its digits or more; addresses and links with letters set
    apart, in hexadecimal or ``at`` for ``@`` (``spelled_forms``), each judged where it came from;
    links reversed or with their marks spaced (``turned_forms``) where a source holds them."""
    out: list[tuple[str, list[Origin]]] = []
    for _, digits, worded in dict.fromkeys(n for f in forms for n in spelled_numbers(f)):
        origins = handle_origins(index, digits)
        if worded >= NOWHERE_CLOSING or any(o.kind != "nowhere" for o in origins):
            out.append((digits, origins))  # the number the store's reader makes of the words
    spelled, seen = spelled_forms(value), {*find_handles(value), *(h for h, _ in out)}
    handles = dict.fromkeys(h for f in spelled for h in find_handles(f) if h not in seen)
    shown = {link.key for link in find_links(value)}
    links = {link.key: link for f in spelled for link in find_links(f) if link.key not in shown}
    out += [(h, handle_origins(index, h)) for h in handles]
    out += [(link.raw, index.link_origins(link)) for link in links.values()]
    return out + turned_links(index, value)  # reversed, or its marks spaced


def handle_origins(index: ProvenanceIndex, handle: str) -> list[Origin]:
    """Where ``handle`` (``party_handles``) came from: its own origins, and for a number, those
    of the accounts (IBAN-shaped) and numbers the request or a result holds whose digits hold all of its: a
    piece of an account (a note of the user's IBAN written in three parts) names no party of its
    own."""
    origins = index.trace(handle, shape_kind(handle))
    if not _NUMERAL.fullmatch(handle):
        return origins
    digits = _digits(handle)
    texts = [index.objective, *(seg.raw for seg in index.segments if digits in _digits(keypad(seg.raw)))]
    held = [a for t in texts for a in find_handles(t) if "@" not in a and digits in a]
    # A piece of a number a text holds (``edge_fragments``: the listing's account of digits
    # kept in two appends) is that number's; so is one of a number a store keeps as its digits
    # (``kept_numbers``: ``+44:7700:900555``, ``1-800-FLOWERS``, as the request gave it).
    held += [n for t in texts for n in find_numbers(t) if n != handle and digits in _digits(n)]
    held += [n for t in texts for n in kept_numbers(t) if n != handle and digits in _digits(keypad(n))]
    # A text that spells it a digit a word (``spelled_numbers``: the user's account in words).
    every = (index.objective, *(seg.raw for seg in index.segments))
    held += [n for t in every for n, spelled, _ in spelled_numbers(t) if digits in spelled]
    return [*origins, *(o for a in dict.fromkeys(held) for o in index.trace(a, shape_kind(a)))]


_NUMERAL = re.compile(rf"[\d{_MARKS},'\u2019]+")


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def joined_handles(
    call: Any,
    argument: str,
    value: str,
    rules_of: Callable[[str], Any] | None = None,
    before: Sequence[Sequence[str]] = (),
) -> list[str]:
    """Addresses and accounts (``find_handles``) that ``value``, given as ``argument`` to the
    side-effecting ``call`` (a ``ProposedCall``), makes with what the run's earlier calls of its
    tool (and those beside it in its turn) gave as the same argument, and that no piece holds (a
    read keeps nothing: none for it). A store that keeps what it is given (a file appended to, a
    note, a memory) joins them: an account an injected page gave, written in two appends of ten
    and thirteen digits, is read back whole from the user's own notes, by this run or by a later
    run that never saw the page."""
    found: dict[str, str] = {}
    for pieces in before or [()]:  # each way a store may keep the argument's elements before it
        for h in _joined_handles(_earlier(call, argument, rules_of, pieces), value):
            found.setdefault(_digits(h) if "@" not in h and _NUMERAL.fullmatch(h) else h, h)
    return list(found.values())


def _joined_handles(kept: list[str], value: str) -> list[str]:
    if not kept:
        return []
    alone = {h for piece in (*kept, value) for h in find_handles(piece)}
    alone |= {h.partition("@")[2] for h in alone if "@" in h}
    numbers = {n for piece in (*kept, value) for n in find_numbers(piece)}
    days_out = [undated(piece) for piece in (*kept, value)]  # two days that touch make no number
    found: dict[str, str] = {}
    for glue in _GLUES:  # what the earlier pieces made together was judged with the last
        text, joined = glue.join(kept), glue.join([*kept, value])
        before = set(find_handles(text))
        # One a piece holds (or its address's domain), extended by what follows it
        # (``…@gmail.com`` + ``done``), is that one's.
        for h in find_handles(joined):
            if h not in before and not any(a in h or h in a for a in alone):
                found.setdefault(h, h)
        # A number is a piece's only where the piece holds it (more digits make another), and
        # one whatever the store glued its pieces with: judged once, as first found.
        before_numbers = {_digits(n) for n in find_numbers(glue.join(days_out[:-1]))}
        for n in find_numbers(glue.join(days_out)):
            if _digits(n) not in before_numbers and not any(n in m for m in numbers):
                found.setdefault(_digits(n), n)
    return list(found.values())


_GLUES = ("", " ", "\n")  # how a store may join what it is given


def joined_links(
    call: Any,
    argument: str,
    value: str,
    rules_of: Callable[[str], Any] | None = None,
    before: Sequence[Sequence[str]] = (),
) -> list[Link]:
    """Links (``find_links``) that ``value``, written by the store ``call`` (a tool declared
    ``write``: a file appended to, a note, a memory), makes with the run's earlier pieces of the
    same argument (as ``joined_handles``) and that no piece holds: ``secure-systems[`` then
    ``.]example/deal`` are read back from the notes as one link. Not one that is a link of an
    earlier piece run on into ``value`` (``_extends``), nor prose run together (``_run_on``)."""
    if call.spec.effect is not Effect.WRITE:
        return []
    found: dict[str, Link] = {}
    for pieces in before or [()]:  # each way a store may keep the argument's elements before it
        for link in _joined_links(_earlier(call, argument, rules_of, pieces), value):
            found.setdefault(link.key, link)
    return list(found.values())


def _joined_links(kept: list[str], value: str) -> list[Link]:
    if not kept:
        return []
    alone = {link.key for piece in (*kept, value) for link in find_links(piece)}
    found: dict[str, Link] = {}
    for glue in _GLUES:
        text = glue.join(kept)
        before = find_links(text)
        keys = {link.key for link in before}
        joined = text + glue + value
        for link in find_links(joined):
            if link.key in keys or link.key in alone or _extends(link, before) or _run_on(link, text, joined):
                continue
            found.setdefault(link.key, link)
    return list(found.values())


def _run_on(link: Link, before: str, joined: str) -> bool:
    """Whether ``link`` is one sentence's or label's last word and the next one's first, run
    together where a piece ends (``the sea.`` + ``Rooms are big``, ``Deposit paid:`` + ``done``,
    ``200.`` + ``Breakfast``): its last label (a URI: what follows its last colon) opens at or before
    where the new piece begins, is no domain suffix, and ends the link (no path, no port). A URI's
    last label is what follows its last colon or dot: ``remember: bob@x.example..`` + ``done`` ran
    a note's address on into the next note's word, as ``….com`` + ``done`` does a host."""
    folded = _bare(joined)
    at = min(len(_bare(before)), len(folded) - len(_bare(joined[len(before) :])))
    raw = _bare(link.raw)
    start = folded.find(raw, max(0, at - len(raw)))
    if start < 0 or not start < at < start + len(raw):
        return False
    host = unfold(link.host).rstrip(".")
    if host:
        if link.key != link_key(link.host) or not raw.rstrip(".").endswith(host):
            return False  # a path, a port, or read in another form: a link of its own
        last = host.rpartition(".")[2]
        opens = start + len(raw.rstrip(".")) - len(last)
    else:
        last = re.split(r"[:.]", raw)[-1]  # the word after the URI's last colon or dot ("…:done")
        opens = start + len(raw) - len(last)
        if not last.isalpha():
            return False
    return opens <= at and not public_suffix([last.casefold()])


def _bare(text: str) -> str:
    """``text`` as a reader reads it (NFKC, case folded, no invisible marks), without spaces:
    a piece's place in the store is the same whatever glue the store put before it."""
    return "".join(unfold(text).split())


def _extends(link: Link, before: list[Link]) -> bool:
    """Whether ``link`` is one of ``before`` (judged with its own piece) run on into what
    follows: its path grown (``…/rooms`` + ``Quiet``), or its last label grown into no domain
    suffix (``….com`` + ``done``). One grown into another suffix (``….example`` +
    ``s.evil.com``) is a link of its own."""
    raw = link.raw.casefold()
    grown = [earlier for earlier in before if raw.startswith(earlier.raw.casefold())]
    suffix = public_suffix([link.registered.rpartition(".")[2]])
    return any(link.host == earlier.host or not suffix for earlier in grown)
