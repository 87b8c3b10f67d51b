"""Steering: whether text someone chose (not the user, not a system-assigned field) selected,
mentions or describes what the model picks. ``ProvenanceIndex`` (``_provenance``) answers
these for the destinations rules: a pick such text steered is not a pick nobody steered, so
it goes to a reviewer after untrusted text."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING

from tether.policy._provenance_dates import DateMention, parse_date
from tether.policy._provenance_labels import (
    DIRECTORY,
    EXTRACTOR,
    MIN_CONTAINED,
    USER,
    Directory,
    Origin,
    Segment,
    SourceLabel,
    normalise,
)
from tether.policy._provenance_text import ALPHA_WORD, STOP, Written, contains_whole, reprinted, unfolded
from tether.policy._provenance_values import unfold

__all__ = ["Steering"]

_DISTINCT = 2  # a describing word is shared by at most this many records the run read


class Steering:
    """The steering questions of ``ProvenanceIndex``, over the state it builds (declared here)."""

    objective: str
    user_text: str
    directory: Directory
    segments: list[Segment]
    _reads: dict[str, tuple[int, Sequence[str]]]
    _assigned: frozenset[str]
    _steered: dict[str, bool]
    _user_names: set[str]
    _pos: dict[int, int]
    _records: dict[tuple[str, str, str], list[Segment]]
    _unfolded: dict[int, str]
    _described: dict[tuple[str, str, str], Segment | None]
    _describing: frozenset[str] | None
    _words: dict[int, frozenset[str]]
    _by_word: dict[str, set[tuple[str, str, str]]] | None
    writes: list[Written]

    if TYPE_CHECKING:

        def _writes_into(self, seg: Segment) -> list[Written]: ...

        @property
        def request_dates(self) -> list[DateMention]: ...

        def _prefix(self, position: int) -> Steering: ...

        def trace(self, value: str, kind: str | None = None, *, cased: bool = False) -> list[Origin]: ...

        def record_named_by_user(self, label: SourceLabel) -> bool: ...

        def twins_state(self, label: SourceLabel) -> bool: ...

    def changed(self, segs: Sequence[Segment]) -> bool:
        """Whether the run acted on the record ``segs`` are of (a write whose target named its id,
        ``Written.target``) before it read them: what the record states then may be what its store
        made of the run's change (a total recomputed from the hours the run set), no one's word."""
        label = segs[0].label if segs else None
        if label is None or label.record_id is None:
            return False
        at, record = max(self._pos.get(id(seg), 0) for seg in segs), normalise(label.record_id)
        return any(w.target and w.text == record and w.position <= at for w in self.writes)

    def named_as_read(self, label: SourceLabel) -> bool:
        """Whether the record a value came from is one the user named (``record_named_by_user``)
        and, as read, still states what the user's record does: not after the run changed it with
        a value others gave (``changed_by_others``), which its store may have turned into a
        destination of their choosing (a vendor id, and the payee the app fills in from it), and
        only for a value every other record of its name states too (``twins_state``)."""
        if not self.record_named_by_user(label) or label.record_id is None or not self.twins_state(label):
            return False
        return not self.changed_by_others(self._records.get((label.call_id, label.tool, label.record_id), []))

    def changed_by_others(self, segs: Sequence[Segment]) -> bool:
        """Whether the run acted on the record ``segs`` are of before it read them (``changed``)
        with a value that is not the user's: one the request does not give (nor the directory,
        nor as a day it names), given after the run had read text someone chose. A record the
        user had the run change, with the user's values, is still the user's record."""
        label = segs[0].label if segs else None
        if label is None or label.record_id is None:
            return False
        at, record = max(self._pos.get(id(seg), 0) for seg in segs), normalise(label.record_id)
        for w in self.writes:
            if not w.target or w.text != record or w.position > at:
                continue
            before = self._prefix(w.position)
            if before.steering(self._assigned) is not None and not all(map(before.users, w.given)):
                return True
        return False

    def wrote_others_choice(self) -> str | None:
        """A value the run wrote into a store (an argument of a write that ran, not a read's
        query nor a helper's task) that text someone chose, read before that write, selects
        (``selected_by``) and the request does not give (``users``), or None. A call that acts on
        what the run stored and carries nothing of its own to judge (send the drafts, check out
        the basket) does what those writes made: the number an injected mail gave in three
        boxes of a draft is texted by ``send_drafts()`` as that mail chose."""
        for w in self.writes:
            if w.echo or w.answer or self.users(w.text):
                continue
            if self.selected_by(w.text, self._assigned, before=w.position) is not None:
                return w.text
        return None

    def users(self, value: str) -> bool:
        """Whether ``value`` is the user's: the request (or the directory) gives it, or it is a
        day the request names."""
        if any(o.trust in (USER, DIRECTORY) for o in self.trace(value)):
            return True
        day = parse_date(value)
        return day is not None and any(m.matches(day) for m in self.request_dates)

    def unfolded_text(self, seg: Segment) -> str:
        """``seg``'s text ``unfolded``, computed once."""
        hay = self._unfolded.get(id(seg))
        if hay is None:
            hay = self._unfolded[id(seg)] = unfolded(seg.raw)
        return hay

    def steering(self, assigned: Iterable[str]) -> Segment | None:
        """The first segment observed so far that holds text someone chose (a class not in
        ``assigned``), or None: after it, any choice the model makes may be the text's."""
        keep = frozenset(assigned)
        for seg in self.segments:
            if seg.label.trust not in keep and seg.text:
                return seg
        return None

    def mentioned(
        self, value: str, assigned: Iterable[str] = (), stating: Collection[SourceLabel] = ()
    ) -> Segment | None:
        """A segment whose text someone chose and that mentions ``value``: the value inside a
        longer text of any class (a name in a message, a page, a channel's name), or a field
        that is exactly the value but of a class not in ``assigned`` (a message body, a
        participant list its author wrote); or None. A system-assigned field that *is* the
        value (a sender, a member list's entry) lists it rather than mentions it. Both sides
        are unfolded (NFKC, case, invisible characters, defanged dots) and the value counts
        wherever no letter or digit is glued to it (``mailto:carol@x``, ``<carol@x>``). A longer
        text of an assigned class labelled as one of ``stating`` (where the value was read:
        ``who_chose``) states the value rather than mentions it."""
        needle = unfolded(value)
        if not needle:
            return None
        pattern = re.compile(rf"(?<![^\W_]){re.escape(needle)}(?![^\W_])", re.UNICODE)
        keep = frozenset(assigned)
        for seg in self.segments:
            if seg.label.tool == EXTRACTOR:
                continue
            hay = self.unfolded_text(seg)
            if hay == needle:
                if seg.label.trust not in keep:
                    return seg
            elif (
                len(hay) > len(needle)
                and pattern.search(hay)
                and not (seg.label.trust in keep and seg.label in stating)
            ):
                return seg
        return None

    def selected_by(
        self, value: str, assigned: Iterable[str] = (), before: int | None = None
    ) -> Segment | None:
        """A segment of text someone chose (a class not in ``assigned``), observed before
        position ``before``, that *selects* ``value``: holds it (a value of five characters or
        more wherever it stands, glued or not: ``the mail titled 'Falcon budget'``, or its five
        letters and digits or more however grouped: ``RF18 5390 …`` selects ``rf18-5390-…``; a
        shorter one with no letter or digit glued to it: ``open file 13``) or is exactly it; None
        when the value is the request's own (in its text, a day it names, a directory entry) or
        no such text holds it. An argument so selected was chosen by that text: a search it runs, a record
        it opens, reaches what the text wanted reached."""
        text = normalise(value)
        if len(text) < 2:
            return None
        if contains_whole(self.user_text, text) or text in self.directory:
            return None
        day = parse_date(value)
        if day is not None and any(m.matches(day) for m in self.request_dates):
            return None
        needle = unfolded(value)
        if len(needle) < 2:
            return None
        keep, bare = frozenset(assigned), reprinted(needle, bare=True)
        for seg in self.segments:
            if seg.label.tool == EXTRACTOR or seg.label.trust in keep:
                continue
            if before is not None and self._pos.get(id(seg), 0) >= before:
                continue
            hay = self.unfolded_text(seg)
            if hay == needle:
                return seg
            if len(needle) >= MIN_CONTAINED:
                if needle in hay:  # glued to other characters, a reader still finds it
                    return seg
            elif re.search(rf"(?<![^\W_]){re.escape(needle)}(?![^\W_])", hay):
                return seg
            if len(bare) >= MIN_CONTAINED and bare in reprinted(hay, bare=True):
                return seg  # its letters and digits, regrouped (``RF18 5390 …`` as ``rf18-5390-…``)
        return None

    def steered(self, call_id: str) -> bool:
        """Whether the call ``call_id`` was reached through text someone chose: one of its
        arguments is ``selected_by`` text (outside the assigned classes) observed before it.
        What such a call returned is what the text wanted reached (the mail "about Falcon
        budget", the file "13"), so none of it is a pick nobody steered."""
        if call_id not in self._steered:
            found = self._reads.get(call_id)
            self._steered[call_id] = found is not None and any(
                self.selected_by(leaf, self._assigned, before=found[0]) for leaf in found[1]
            )
        return self._steered[call_id]

    def described_by(self, label: SourceLabel, assigned: Iterable[str] = ()) -> Segment | None:
        """A segment of text someone chose (a class not in ``assigned``), outside the record
        ``label`` came from, that *describes* that record — "forward it to whoever wrote to you
        about the Party", "the sender of the snacks mail": it holds, whole, a word of the
        record (five letters or more, not a function word) that few records share (at most
        ``_DISTINCT`` of the records the run read hold it) and that the request does not use,
        wherever it stands in that text (glued to other characters, a reader still finds it).
        None when no such text describes it, or when the request selects or describes the
        record itself (a call argument it states, a word of it in the record): then the pick is
        the user's. Both sides are unfolded (NFKC, case, invisible characters)."""
        key = (label.call_id, label.tool, label.record_id or label.path)
        if key in self._described:
            return self._described[key]
        found: Segment | None = None
        own = self._record_segments(label)
        words = set().union(*(self._seg_words(s) - self._words_written(s) for s in own)) if own else set()
        if words & self._describing_words() or self._selected_by_request(label.call_id):
            words = set()  # the request leads to this record: the pick is the user's
        table = self._word_records()
        distinct = {w for w in words if len(table.get(w, ())) <= _DISTINCT}
        keep = frozenset(assigned)
        ids = {id(s) for s in own}
        if distinct:
            for seg in self.segments:
                if id(seg) in ids or seg.label.tool == EXTRACTOR or seg.label.trust in keep:
                    continue
                hay = self.unfolded_text(seg)
                if any(w in hay for w in distinct):  # glued to other characters, still read
                    found = seg
                    break
        self._described[key] = found
        return found

    def _record_segments(self, label: SourceLabel) -> list[Segment]:
        if label.record_id is not None:
            return self._records.get((label.call_id, label.tool, label.record_id), [])
        return [s for s in self.segments if s.label.call_id == label.call_id and s.label.path == label.path]

    def _seg_words(self, seg: Segment) -> frozenset[str]:
        words = self._words.get(id(seg))
        if words is None:
            hay = self.unfolded_text(seg)
            words = frozenset(w for w in ALPHA_WORD.findall(hay) if len(w) >= 5 and w not in STOP)
            self._words[id(seg)] = words
        return words

    def _words_written(self, seg: Segment) -> frozenset[str]:
        """The words of ``seg`` the run itself wrote into it (a write it echoes holds them): its
        own text describes the record; a short write it happens to hold ("and", "13") takes no
        other word of it out of the description."""
        mine = [unfold(w.text) for w in self._writes_into(seg) if not w.echo]
        return frozenset(w for text in mine for w in ALPHA_WORD.findall(text))

    def _word_records(self) -> dict[str, set[tuple[str, str, str]]]:
        """Each word of five letters or more: the records (or record-less fields) holding it."""
        if self._by_word is None:
            table: dict[str, set[tuple[str, str, str]]] = {}
            for seg in self.segments:
                key = (seg.label.call_id, seg.label.tool, seg.label.record_id or seg.label.path)
                for w in self._seg_words(seg):
                    table.setdefault(w, set()).add(key)
            self._by_word = table
        return self._by_word

    def _selected_by_request(self, call_id: str) -> bool:
        """Whether the call ``call_id`` had an argument the request states: a phrase of it, a
        name it gives, or a day it names."""
        found = self._reads.get(call_id)
        if found is None:
            return False
        for leaf in found[1]:
            text = normalise(leaf)
            if len(text) < 3:
                continue
            if ALPHA_WORD.fullmatch(text) is not None:
                if text in self._user_names:
                    return True
            elif contains_whole(self.user_text, text):
                return True
            day = parse_date(leaf)
            if day is not None and any(m.matches(day) for m in self.request_dates):
                return True
        return False

    def _describing_words(self) -> frozenset[str]:
        if self._describing is None:
            words = ALPHA_WORD.findall(unfold(self.objective))
            self._describing = frozenset(w for w in words if len(w) >= 5 and w not in STOP)
        return self._describing
