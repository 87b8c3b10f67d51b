"""Provenance: where each value the host sees came from.

Two halves. *Labelling*: every tool observation is split into labelled segments — each leaf of its
structured result (or its whole text) carries a ``SourceLabel``: tool, server, record id, field, author
where the data names one, and a trust class taken from a ``TrustConfig`` (per tool and field, written by the
application, never by the model). *Tracing*: each argument value of a proposed call is traced back to its
origins — the user's request, trusted host context (a directory of known recipients, say), a labelled tool
segment, or nowhere (the model composed it).

Matching compares whole values, never words: a value traces to the request when the whole value appears
there (on word boundaries), to a tool result when it *is* a structured field or appears whole inside its
text. It is robust to formatting (Unicode normalisation, case folding, whitespace, surrounding quotes,
JSON/YAML re-encoding of lists, numeric forms such as ``98.7`` vs ``98.70``) and deliberately blind to short
coincidences: a value shorter than ``MIN_CONTAINED`` characters counts only when it *is* a whole structured
field (an id, a name), or, for alphabetic words, a whole word of the user's request; it never counts as
"contained" in free text. So the attacker's "delete file 13" cannot borrow provenance from "13 May" in the
user's request.

A record is **named by the user** only through the naming fields its source declares (a file's name, an
event's title, a payment's counterparty): the field's whole value appears in the request. Text the user wrote
themselves (``self_naming`` fields of records whose author is one of the user's own identities, e.g. the
subject of their own payment) may name a record by one of its words. Nothing else names a record: not a
status, not a body, not a word of a field someone else wrote. When records take two different names of one
field anyone may write (titles, file names) from the request, none of those names vouches
(``_provenance_naming``).

The labelling half lives in ``_provenance_labels``; this module holds the tracing half:
``ProvenanceIndex`` and taint through the run's own writes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import date
from typing import Any

from tether.policy._provenance_dates import (
    DateMention,
    Numeral,
    date_mentions,
    numeral,
    parse_date,
    priced,
    undated_words,
)
from tether.policy._provenance_labels import (
    ASSIGNED,
    DIRECTORY,
    MIN_CONTAINED,
    MODEL,
    USER,
    USER_WORD,
    Directory,
    Origin,
    Segment,
    normalise,
    shape_kind,
)
from tether.policy._provenance_mentions import chosen_in_request, piece_of_number, placed, refused
from tether.policy._provenance_naming import VOUCHING, Naming
from tether.policy._provenance_steering import Steering
from tether.policy._provenance_text import (
    ALPHA_WORD,
    PLACEHOLDER,
    WORD,
    Written,
    alnum_key,
    as_written,
    contains_whole,
    echoed,
    made_of,
    occurrences,
    party_key,
    pieced,
    redials,
    redials_whole,
    reprints,
    reprints_whole,
    request_names,
    shared_origins,
)
from tether.policy._provenance_values import Link, find_handles, find_links, find_numbers, link_key, unfold

__all__ = ["ProvenanceIndex"]


# -- tracing -------------------------------------------------------------------------------


class ProvenanceIndex(Naming, Steering):
    """What the host knows at one moment of a run: the user's request, trusted host values,
    labelled observations and the values the run itself wrote. ``trace`` answers where a
    value came from.

    *Taint through writes*: a value the run wrote keeps, when it is read back, the provenance
    it had when it was written. A tool origin from a segment observed after a write whose
    text holds the value (and is the segment, or holds it, or is held by it) is replaced by
    the value's origins at the moment of that write — so writing an attacker's address into
    a file, an event or a message and reading it back does not make it better trusted."""

    def __init__(
        self,
        objective: str,
        *,
        segments: Sequence[Segment] = (),
        directory: Directory | Mapping[str, Iterable[str]] | Iterable[str] = (),
        positions: Sequence[int] | None = None,
        writes: Sequence[Written] = (),
        reads: Mapping[str, tuple[int, Sequence[str]]] | None = None,
        assigned: Iterable[str] = ASSIGNED,
        asked_on: date | None = None,
    ) -> None:
        self.objective, self.asked_on = objective, asked_on  # asked_on: the day of the request
        # The calls whose results were observed: call id -> (position, argument leaves), to
        # tell which of them text someone chose had selected (``steered``).
        self._reads = dict(reads or {})
        self._assigned = frozenset(assigned)
        self._steered: dict[str, bool] = {}
        self.user_text = normalise(objective)
        words = WORD.findall(self.user_text)
        self._user_words = {w.strip(".,+-") for w in words} | set(words)
        self._user_words |= set(ALPHA_WORD.findall(self.user_text))
        self._user_names = request_names(objective)
        self.directory = directory if isinstance(directory, Directory) else Directory(directory)
        self.segments = list(segments)
        pos = list(positions) if positions is not None else [0] * len(self.segments)
        if len(pos) != len(self.segments):
            raise ValueError("one position per segment")
        self._pos = {id(seg): p for seg, p in zip(self.segments, pos, strict=True)}
        self.writes = sorted(writes, key=lambda w: w.position)
        self._prefixes: dict[int, ProvenanceIndex] = {}
        self._limit: int | None = None  # a prefix: the position it stands at
        self._traced: dict[tuple[str, str | None, bool, bool], list[Origin]] = {}
        self._parties: dict[int, list[str]] = {}  # letters and digits of the parties a segment names
        self._cased: dict[str, set[str]] | None = None  # names of records by their folded form
        self._linked: dict[tuple[str, str | None], list[Origin]] = {}
        self._whole: dict[str, list[Segment]] = {}
        self._numbers: dict[Numeral, list[Segment]] = {}
        for seg in self.segments:
            if seg.whole:
                self._whole.setdefault(seg.text, []).append(seg)
                n = numeral(seg.raw)
                if n is not None:
                    self._numbers.setdefault(n, []).append(seg)
        self._records: dict[tuple[str, str, str], list[Segment]] = {}
        for seg in self.segments:
            if seg.label.record_id is not None:
                key = (seg.label.call_id, seg.label.tool, seg.label.record_id)
                self._records.setdefault(key, []).append(seg)
        self._named: dict[tuple[str, str, str], bool] = {}
        self._claims: dict[str, set[str]] | None = None  # names the request gives, by naming field
        self._quoted: frozenset[str] | None = None  # spans the request quotes
        self._free_names: list[Segment] | None = None  # naming fields anyone may write, read
        self._twins: dict[tuple[str, str], dict[str, set[tuple[str, str]]]] | None = None  # by name
        self._links: dict[str, list[Segment]] | None = None
        self._user_links: set[str] = set()
        self._user_sites: set[str] = set()
        self._directory_links: set[str] = set()
        self._directory_sites: set[str] = set()
        self._dates: list[DateMention] | None = None
        self._amounts: list[tuple[float, str | None]] | None = None
        self._unfolded: dict[int, str] = {}
        self._stretches: dict[int, list[tuple[int, int, set[Written]]]] = {}
        self._into: dict[int, list[Written]] = {}
        self._owned: dict[int, set[str]] = {}
        self._request_kinds: frozenset[str] | None = None
        self._request_handles: frozenset[str] | None = None
        self._described: dict[tuple[str, str, str], Segment | None] = {}
        self._describing: frozenset[str] | None = None
        self._words: dict[int, frozenset[str]] = {}
        self._by_word: dict[str, set[tuple[str, str, str]]] | None = None

    # -- the run's own writes -----------------------------------------------------------

    def _prefix(self, position: int) -> ProvenanceIndex:
        """The index as it stood when a call made after ``position`` observations was made.
        Every prefix of a run's index shares one table of prefixes (the index at position
        ``p`` is the same whichever later index asks), so tracing a value written again and
        again walks each earlier moment once, not once per path to it."""
        if self._limit is not None and position >= self._limit:
            return self
        if position not in self._prefixes:
            keep = [(seg, p) for seg in self.segments if (p := self._pos[id(seg)]) < position]
            index = ProvenanceIndex(
                self.objective,
                segments=[seg for seg, _ in keep],
                directory=self.directory,
                positions=[p for _, p in keep],
                writes=[w for w in self.writes if w.position < position],
                reads=self._reads,
                assigned=self._assigned,
            )
            index._prefixes = self._prefixes
            index._limit = position
            self._prefixes[position] = index
        return self._prefixes[position]

    def _writes_into(self, seg: Segment) -> list[Written]:
        """The run's writes made before ``seg`` was observed that the segment may echo: its
        text is the written value, holds it, or is held by it — as written, or as a store that
        re-prints what it keeps gives it back (``reprints``: escaped, lines quoted, respaced)."""
        if id(seg) not in self._into:
            p = self._pos.get(id(seg), 0)
            self._into[id(seg)] = [w for w in self.writes if w.position <= p and echoed(w, seg)]
        return self._into[id(seg)]

    def written(self, seg: Segment) -> bool:
        """Whether ``seg`` echoes something the run wrote (it is not the source's own data). A
        read's echo of what it was asked (the record it looked up, under its name) is still the
        record's field: where the value itself came from is what ``trace`` retraces."""
        return any(not w.echo for w in self._writes_into(seg))

    def _retrace(
        self, value: str, text: str, origin: Origin, seg: Segment, how: tuple[Any, ...] = ()
    ) -> list[Origin] | None:
        """A tool origin's replacement when the value came back from the run's own write: the value's origins
        when it was written, if the write held it; if the value stands in the segment only where the run's
        writes are (``_regions``: beside other text, or glued from pieces the tool stored one after another),
        only the classes every part shares (no part lends another its trust; none shared: composed). ``how``:
        the kind, cased and party of its ``trace``, applied to the write's (a case twin stays no user's)."""
        writes, (kind, cased, party) = self._writes_into(seg), how or (None, False, False)

        def then(w: Written, said: str) -> list[Origin]:  # a write holds its text normalised: no case
            return self._prefix(w.position).trace(value if cased else said, kind, cased=cased, party=party)

        for w in writes:
            if w.answer:  # a model's answer: the value as the run had it when it gave the task
                known = [o for o in then(w, value) if o.kind != "nowhere"]
                label = replace(seg.label, trust=MODEL)  # shown as the answer, the model's words
                return [*known, replace(origin, trust=MODEL, label=label)]
        exact = [w for w in writes if w.text == text or contains_whole(w.text, text)]
        # A write a store re-printed (``reprints``): traced as written where the value is all of
        # it, naming what it names; else as the value is now (the run wrote no such text).
        inside = [(w, value) for w in exact] + [
            (w, w.text if reprints_whole(w.text, value) or redials_whole(w.text, value) else value)
            for w in writes
            if w not in exact and (reprints(value, w.text) or redials(w.text, value))
        ]
        if inside:
            out: list[Origin] = []
            for w, said in inside:
                out.extend(o for o in then(w, said) if o not in out)
            return out
        asked = made_of(value, [w for w in self.writes if w.echo and w.echo == seg.label.call_id])
        if asked:  # a lookup's answer made of what it was asked: what those arguments all were
            return shared_origins([then(w, w.text) for w in asked])
        parts = self._covering(seg, text)
        if parts is None:
            return None
        return shared_origins([[origin], *(then(w, w.text) for w in parts)])[:1]

    def _covering(self, seg: Segment, text: str) -> set[Written] | None:
        """The writes whose stretches (``_regions``) cover every place ``text`` stands in ``seg``;
        None where the source's own text holds it (or it is not there)."""
        regions = self._regions(seg)
        ends = [r[1] for r in regions]
        parts: set[Written] = set()
        at = occurrences(seg.text, text)
        for a in at:
            k = bisect.bisect_right(ends, a)  # the first stretch that ends after it starts
            if k == len(regions) or regions[k][0] >= a + len(text):
                pieces = pieced(seg.text, a, a + len(text), self._stored(seg))  # the run's, in pieces
                if pieces is None:
                    return None  # the source's own text holds it here
                parts |= pieces
                continue
            while k < len(regions) and regions[k][0] < a + len(text):
                parts |= regions[k][2]
                k += 1
        return parts if at else None

    def _regions(self, seg: Segment) -> list[tuple[int, int, set[Written]]]:
        """The stretches of ``seg``'s text that repeat what the run wrote before it was observed:
        runs covered end to end by written values, ``MIN_CONTAINED`` characters or longer (a
        short write found by chance inside other text is no stretch), each with its writes."""
        if id(seg) not in self._stretches:
            found = [
                (a, a + len(w.text), w) for w in self._stored(seg) for a in occurrences(seg.text, w.text)
            ]
            spans = sorted(found, key=lambda span: span[:2])
            merged: list[tuple[int, int, set[Written]]] = []
            for a, b, w in spans:
                if merged and a <= merged[-1][1]:
                    merged[-1][2].add(w)
                    merged[-1] = (merged[-1][0], max(b, merged[-1][1]), merged[-1][2])
                else:
                    merged.append((a, b, {w}))
            self._stretches[id(seg)] = [r for r in merged if r[1] - r[0] >= MIN_CONTAINED]
        return self._stretches[id(seg)]

    def _stored(self, seg: Segment) -> list[Written]:
        """The writes made before ``seg`` was observed that any read may return (no echo)."""
        return [w for w in self.writes if not w.echo and w.position <= self._pos.get(id(seg), 0)]

    def echoes(self, seg: Segment, value: str) -> bool:
        """Whether ``value`` stands in ``seg`` as what the run itself wrote before it was observed
        (a write that holds the value, or stretches its writes cover, written in the value's
        order), not as the source's own text. A segment that merely holds some short write
        elsewhere ("is") still holds the value as its own."""
        text = normalise(value)
        if not self.writes or not text:
            return False
        if any(w.text == text or contains_whole(w.text, text) for w in self._writes_into(seg)):
            return True
        # Covered by pieces the run wrote: only where it wrote them in that order (a value stored
        # a character at a time). Digits it wrote here and there ("1", "7", "4") cover any code
        # made of them, but never wrote that code.
        parts = self._covering(seg, text)
        order = {w: i for i, w in reversed(list(enumerate(self.writes)))}
        return parts is not None and text in "".join(w.text for w in sorted(parts, key=order.__getitem__))

    def segment_origins(self, seg: Segment) -> list[Origin]:
        """The origins of one whole segment (a value passed by reference to it): its own label,
        or, where it echoes the run's writes, what they were when written."""
        origin = Origin("tool", seg.label.trust, "exact", seg.label)
        again = self._retrace(seg.raw, seg.text, origin, seg) if self.writes else None
        return again if again is not None else [origin]

    # -- one scalar ---------------------------------------------------------------------

    def trace(
        self, value: str, kind: str | None = None, *, cased: bool = False, party: bool = False
    ) -> list[Origin]:
        """All origins of one scalar value; ``[Origin(nowhere)]`` when none is found. ``kind``:
        the kind of destination the value is for (the directory vouches per kind); ``cased``:
        the value names what a tool tells apart by case (a path, an id), so the request or a
        result is its origin only where it writes it in the same case (``as_written``);
        ``party``: the value names who receives (a destination), so a result is its origin only
        where it names that party as a write is judged for one (``_names_party``). An index does
        not change once built, so each value is traced once per index."""
        key = (value, kind, cased, party)
        if key not in self._traced:
            self._traced[key] = self._trace(value, kind, cased, party)
        return list(self._traced[key])

    def _names_party(self, seg: Segment, key: str) -> bool:
        """Whether ``seg`` names a party whose letters and digits hold ``key`` (``party_key``),
        read as a write's content is judged for one: its numbers (``find_numbers``) and its
        accounts (``find_handles``). A store vouches for no party a write into it was not
        judged for: ``000, 123, 456, 789`` (a list, to the judge) kept in the user's notes is no
        account of the notes', whatever a later run copies from them."""
        named = self._parties.get(id(seg))
        if named is None:
            found = [*find_numbers(seg.raw), *find_handles(seg.raw)]
            named = self._parties[id(seg)] = [alnum_key(h) for h in found]
        return any(key in n for n in named)

    def _piece(self, value: str, seg: Segment | None) -> bool:
        return piece_of_number(self.objective if seg is None else seg.raw, value)

    def _trace(self, value: str, kind: str | None, cased: bool = False, party: bool = False) -> list[Origin]:
        text = normalise(value)
        if not text:
            return [Origin("nowhere", MODEL, "exact")]
        found: list[tuple[Origin, Segment | None]] = []
        short = len(text) < MIN_CONTAINED
        numeric = numeral(value)
        single = ALPHA_WORD.fullmatch(text) is not None
        # The user's request: the whole value appears in it. A single word counts as the
        # user's only where the request uses it as a name (capitalised, or quoted).
        if numeric is not None:
            if self._user_number(numeric):
                found.append((Origin("user", USER, "word"), None))
        elif single:
            if len(text) >= 3 and text in self._user_words:
                trust = USER if text in self._user_names else USER_WORD
                if trust == USER or not party or placed(self.user_text, text):  # a word as a place
                    found.append((Origin("user", trust, "word"), None))
        elif not short and (contains_whole(self.user_text, text) or text in self.request_handles()):
            found.append((Origin("user", USER, "contained"), None))
        if found and numeric is None and not chosen_in_request(self.user_text, text, self._whole):
            found = []  # the request refuses it, reports it, or gives a longer name holding it
        # Trusted host context: an entry of the kind the value is for.
        if self.directory.vouches(text, kind):
            found.append((Origin("host", DIRECTORY, "exact"), None))
        # Observations: whole structured fields first, then containment in longer text.
        seen: set[int] = set()
        for seg in self._whole.get(text, []):
            seen.add(id(seg))
            found.append((Origin("tool", seg.label.trust, "exact", seg.label), seg))
        if numeric is not None:
            for seg in self._numbers.get(numeric, []):
                if id(seg) not in seen and (not short or seg.field_name in _ID_FIELDS):
                    seen.add(id(seg))
                    found.append((Origin("tool", seg.label.trust, "exact", seg.label), seg))
        if short:
            # A short number counts only as a whole identifier field; a short word only as a
            # whole field. Neither counts as contained in longer text.
            if numeric is not None:
                found = [(o, s) for o, s in found if o.kind != "tool" or _identifier_like(o)]
        else:
            for seg in self.segments:
                if id(seg) in seen or len(seg.text) <= len(text):
                    continue
                if contains_whole(seg.text, text):
                    found.append((Origin("tool", seg.label.trust, "contained", seg.label), seg))
        if party and (named := party_key(value)):
            found = [(o, s) for o, s in found if s is None or self._names_party(s, named)]
        if party:  # some groups of a number its source gives whole dial or pay another party
            found = [(o, s) for o, s in found if o.kind == "host" or not self._piece(value, s)]
        if cased:
            found = [
                (o, s)
                for o, s in found
                if o.kind == "host" or as_written(self.objective if s is None else s.raw, value)
            ]
        out: list[Origin] = []
        for origin, source in found:
            again = (
                self._retrace(value, text, origin, source, (kind, cased, party))
                if source is not None and self.writes
                else None
            )
            for o in again if again is not None else [origin]:
                if o not in out:
                    out.append(o)
        return out or [Origin("nowhere", MODEL, "exact")]

    def _user_number(self, n: Numeral) -> bool:
        """Whether the request states the figure ``n`` (three digits or more) as something other
        than a sum of money or a date's day or year (``undated_words``: "December 2026" names no
        event 2026). A figure stated as an amount bounds amounts (``request_amounts``) and is no
        identifier, code or password the user gave: "pay the 120.00 rent" names no file 120."""
        if float(n[1]) in self.request_amounts:
            return False
        for word in undated_words(self.objective, WORD):
            w = word.strip(".,")
            m = numeral(w)
            if m is not None and m == n and len(w.replace(".", "").lstrip("0")) >= 3:
                return True
        return False

    def fills_template(self, value: str, fields: Iterable[str] = ()) -> bool:
        """Whether ``value`` is a template the user wrote with its ``{placeholder}`` filled by
        one whole field of a tool result, of one of the declared ``fields``: the request says
        "title it 'Dinner at {name}'" and the value is "Dinner at New Israeli Restaurant".
        The filled-in part is the only part not written by the user; it is a whole value of a
        field declared for filling, never text the run wrote itself, nor a lookup's echo of
        what someone's text had it look up (``_asked_by_others``)."""
        text = normalise(value)
        allowed = set(fields)
        request = normalise(self.objective)
        if not text or "{" not in request or not allowed:
            return False
        fillers = {
            seg.text
            for segs in self._whole.values()
            for seg in segs
            if seg.field_name in allowed and not self.written(seg) and not self._asked_by_others(seg)
        }
        for m in PLACEHOLDER.finditer(request):
            before, after = request[: m.start()], request[m.end() :]
            for filler in fillers:
                if len(filler) < 2 or filler not in text:
                    continue
                i = text.find(filler)
                while i >= 0:
                    pre, post = text[:i], text[i + len(filler) :]
                    if (
                        len((pre + post).strip()) >= 3
                        and before.endswith(pre)
                        and after.startswith(post)
                        and (not pre or not before[: len(before) - len(pre)][-1:].isalnum())
                    ):
                        return True
                    i = text.find(filler, i + 1)
        return False

    def _asked_by_others(self, seg: Segment) -> bool:
        """Whether ``seg`` echoes what its own call was asked, a value only someone's words hold
        (its origins are all text of ``third_party`` trust or less: ``TRUST_ORDER``): the lookup
        of the name a review gave returns that name, which is still the review's, not a record
        the user's template may be filled from."""
        if not any(w.echo == seg.label.call_id for w in self._writes_into(seg)):
            return False
        return all(o.kind == "tool" and o.trust not in VOUCHING for o in self.trace(seg.raw))

    # -- typed values -------------------------------------------------------------------

    def _link_tables(self) -> dict[str, list[Segment]]:
        if self._links is None:
            table: dict[str, list[Segment]] = {}
            for seg in self.segments:
                for link in find_links(seg.raw):
                    table.setdefault(link.key, []).append(seg)
                    if link.site != link.key:
                        table.setdefault("site:" + link.site, []).append(seg)
            self._links = table
            user = find_links(self.objective)
            self._user_links = {link.key for link in user}
            self._user_sites = {link.site for link in user if link.key == link_key(link.host)}
            # Only an entry of the link kind vouches for links: a channel or a person named
            # like a web site is someone else's choice of name.
            vouched = [link for d in self.directory.entries("link") for link in find_links(d)]
            self._directory_links = {link.key for link in vouched}
            self._directory_sites = {link.site for link in vouched if link.key == link_key(link.host)}
        return self._links

    def link_origins(self, link: Link | str) -> list[Origin]:
        """Origins of a link: the request, the directory, or the tool segments that hold the
        same link. A link is the same when its key (host and path) is, or when its registrable
        domain is one that a source names as a whole site (``example.com``, no path)."""
        key = link if isinstance(link, str) else link.key
        site = None if isinstance(link, str) else link.site
        if (key, site) not in self._linked:
            self._linked[(key, site)] = self._link_origins(link, key, site)
        return list(self._linked[(key, site)])

    def _link_origins(self, link: Link | str, key: str, site: str | None) -> list[Origin]:
        table = self._link_tables()
        out: list[Origin] = []
        if key in self._user_links or (site is not None and site in self._user_sites):
            out.append(Origin("user", USER, "contained"))
        if key in self._directory_links or (site is not None and site in self._directory_sites):
            out.append(Origin("host", DIRECTORY, "exact"))
        segs = list(table.get(key, []))
        for seg in segs:
            origin = Origin("tool", seg.label.trust, "exact" if seg.whole else "contained", seg.label)
            earlier = [w for w in self._writes_into(seg) if key in w.links or w.answer]
            if earlier:
                for w in earlier:
                    out.extend(o for o in self._prefix(w.position).link_origins(link) if o not in out)
            else:
                if self._regions(seg) and key.casefold() not in self._own_links(seg):
                    origin = Origin("nowhere", MODEL, "exact")  # glued from the run's writes: composed
                if origin not in out:
                    out.append(origin)
        return out or [Origin("nowhere", MODEL, "exact")]

    def _own_links(self, seg: Segment) -> set[str]:
        """The keys of the links ``seg`` holds outside the stretches the run wrote (``_regions``),
        case-folded: the positions are in its normalised text, whose ASCII letters are lower."""
        if id(seg) not in self._owned:
            cuts = [0, *(i for a, b, _ in self._regions(seg) for i in (a, b)), len(seg.text)]
            kept = [seg.text[a:b] for a, b in zip(cuts[::2], cuts[1::2], strict=True)]
            self._owned[id(seg)] = {link.key.casefold() for link in find_links(" ".join(kept))}
        return self._owned[id(seg)]

    def request_handles(self) -> frozenset[str]:
        """The addresses and accounts the request states, as one value each however it prints
        them (an account in groups of four is the account)."""
        if self._request_handles is None:
            self._request_handles = frozenset(find_handles(self.objective))
        return self._request_handles

    def request_kinds(self) -> frozenset[str]:
        """The kinds of destination the request states values of itself: ``mailbox``,
        ``account``, ``link`` (an address, an account number, a link in its own words)."""
        if self._request_kinds is None:
            kinds = {shape_kind(h) for h in self.request_handles()}
            for token in self.objective.split():
                kinds.add(shape_kind(token.strip(".,;:!?()[]<>'\"")))
            self._request_kinds = frozenset(kinds & {"mailbox", "account", "link"})
        return self._request_kinds

    @property
    def request_dates(self) -> list[DateMention]:
        """The days the request names, but one it turns down ("not on March 4"), near ``asked_on``."""
        if self._dates is None:
            folded, mentions = unfold(self.objective), date_mentions(self.objective)  # as they span it
            self._dates = [replace(m, near=self.asked_on) for m in mentions if not refused(folded, *m.span)]
        return self._dates

    @property
    def request_amounts(self) -> list[float]:
        """The amounts of money the request states, whatever their currency."""
        return [value for value, _ in self.request_sums]

    @property
    def request_sums(self) -> list[tuple[float, str | None]]:
        """The request's amounts, each with its currency (``provenance_dates.priced``)."""
        if self._amounts is None:
            self._amounts = priced(self.objective)
        return self._amounts

    def named_values(self, *, trust: Iterable[str] = (), fields: Iterable[str] = ()) -> list[Segment]:
        """Whole fields of records the user named, of the given trust classes or field names;
        never a field whose value the run wrote itself, nor one of a record it acted on first."""
        classes, names = set(trust), set(fields)
        return [
            seg
            for segs in self.named_records()
            if not self.changed(segs)
            for seg in segs
            if seg.whole and (seg.label.trust in classes or seg.field_name in names) and not self.written(seg)
            if self.twins_state(seg.label)  # no other record of its name states otherwise
        ]

    def named_dates(self, trust: Iterable[str]) -> list[Any]:
        """Calendar days held by whole fields (of these classes) of records the user named."""
        return [d for seg in self.named_values(trust=trust) if (d := parse_date(seg.raw)) is not None]


_ID_FIELDS = frozenset({"id", "id_", "event_id", "file_id", "email_id", "record_id"})


def _identifier_like(origin: Origin) -> bool:
    return origin.label is not None and origin.label.path.rsplit(".", 1)[-1].split("[")[0] in _ID_FIELDS
