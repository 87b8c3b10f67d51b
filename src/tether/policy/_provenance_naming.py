"""Records the user named: which records the run read the request names, through the naming
fields their sources declare (``SourceTrust.naming``: a file's name, an event's title, a
payment's counterparty). ``ProvenanceIndex`` (``_provenance``) answers this for the rules
(``named:<class>`` origins, bounds and dates of named records).

A naming field of a class no source vouches for (a title, a file name: ``third_party`` or
less in ``TRUST_ORDER``) is written by whoever created the record, so anyone can make it a
phrase of the request: an invitation titled "the budget notes", or "Budget review meeting",
when the request is "email the budget notes to the participants of the Budget review
meeting". A request names one record of a kind by one name; when the records the run read
take two different names of one such field (``field_name``) from the request, the request
no longer tells which of them it meant, and none of those names vouches (*contested*) but a
name the request quotes whole ("pay the invoice 'Q3 services'"): the user wrote it as a name,
so a record it names is theirs to name, however many others the request names, unless records
of another naming field carry it too (an invitation titled as the file the request quotes:
the quote does not say which kind it names). A name is contested too where another record the
run read, of the same field, has a name with two or more words the request gives, wherever it
gives them, or every word of the first (the user's "Budget Review (Q3)" or "Budget Review Q3
sync" beside a stranger's "Budget review meeting", "review meeting" or "budget notes", when the
request says "email the budget notes to … the Budget review meeting"; "Lunch with Sarah" beside
"Lunch"), unless the user wrote the record the request names whole (its author is theirs):
the request may mean that one. The
same name on several records (a recurring meeting, one record read twice) is one name; a
name the run wrote itself is the run's, no claim of its own; a name a source vouches for (a
sender's address, an account) is the source's, not anyone's choice of words.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tether.policy._provenance_labels import MIN_CONTAINED, TRUST_ORDER, Segment, SourceLabel, normalise
from tether.policy._provenance_text import (
    ALPHA_WORD,
    EXTENSION,
    STOP,
    as_written,
    contains_whole,
    name_forms,
)
from tether.policy._provenance_values import compose

__all__ = ["VOUCHING", "Naming"]

VOUCHING = frozenset(TRUST_ORDER[: TRUST_ORDER.index("third_party")])
"""Classes a source vouches for (a vendor's listing), before anyone's words in ``TRUST_ORDER``."""

# A span the request quotes: quote marks at the edges of words (not the apostrophe of "Ann's").
_QUOTED = re.compile(r"(?:^|(?<=[\s(\[:,]))[\"'“‘«`]([^\"'“”‘’«»`]{1,80})[\"'”’»`](?=$|[\s.,;:!?)\]])")


class Naming:
    """The naming questions of ``ProvenanceIndex``, over the state it builds (declared here)."""

    objective: str
    user_text: str
    segments: list[Segment]
    _user_names: set[str]
    _user_words: set[str]
    _records: dict[tuple[str, str, str], list[Segment]]
    _named: dict[tuple[str, str, str], bool]
    _cased: dict[str, set[str]] | None
    _claims: dict[str, set[str]] | None
    _quoted: frozenset[str] | None
    _twins: dict[tuple[str, str], dict[str, set[tuple[str, str]]]] | None
    _free_names: list[Segment] | None

    if TYPE_CHECKING:

        def written(self, seg: Segment) -> bool: ...

    def record_named_by_user(self, label: SourceLabel) -> bool:
        """Whether the record a value came from is one the user named, through one of the
        naming fields its source declares, by a name no other record contests (see the module
        docstring). A name the run wrote names its record only when it is the user's own words, whole."""
        if label.record_id is None:
            return False
        key = (label.call_id, label.tool, label.record_id)
        if key not in self._named:
            segs = self._records.get(key, [])
            self._named[key] = any(self._names(seg) and not self._contested(seg) for seg in segs)
        return self._named[key]

    def twins_state(self, label: SourceLabel) -> bool:
        """Whether every other record the run read under a name of ``label``'s record that the
        request gives (a title anyone can repeat: an invitation titled as the user's meeting)
        states, in the same field, the value ``label`` points at. Where the records of one name
        differ, the request does not tell which one it meant: a value only some of them state
        is not one the user named (a recurring meeting's participants are the same in each)."""
        if label.record_id is None:
            return True
        segs = self._records.get((label.call_id, label.tool, label.record_id), [])
        value = next((s for s in segs if s.label == label), None)
        if value is None or value.text == normalise(label.record_id):
            return True  # a record's own id: which of them the call acts on is the target's rules
        if self._twins is None:
            self._twins = {}
            for seg in self.segments:
                if seg.naming != "whole" or seg.label.record_id is None or self.written(seg):
                    continue
                if self._names(seg):  # a case twin the request does not write is not named
                    key = (seg.label.call_id, seg.label.tool, seg.label.record_id)
                    records = self._twins.setdefault((seg.field_name, seg.text), {})
                    stated = records.setdefault(seg.label.record_id, set())
                    stated.update((o.field_name, o.text) for o in self._records.get(key, []))
        pair = (value.field_name, value.text)
        for seg in segs:
            if seg.naming != "whole" or seg.label.trust in VOUCHING or not self._names(seg):
                continue
            for record, stated in self._twins.get((seg.field_name, seg.text), {}).items():
                if record != label.record_id and pair not in stated:
                    return False
        return True

    def named_records(self) -> list[list[Segment]]:
        """The segments of every record the user named."""
        return [segs for segs in self._records.values() if segs and self.record_named_by_user(segs[0].label)]

    def _contested(self, seg: Segment) -> bool:
        """Whether the request names, through ``seg``'s field, records of two different names,
        or may mean another record than the one ``seg`` names (``_near``); a name it quotes is
        the user's unless records of another naming field carry it too (``_other_kind``). ``seg``
        is a field anyone may write: see the module docstring."""
        if seg.naming != "whole" or seg.label.trust in VOUCHING:
            return False
        if self._quoted_whole(seg) and not self._other_kind(seg):
            return False
        if self._claims is None:
            self._claims = {}
            for other in self._free():
                if self._names(other):
                    self._claims.setdefault(other.field_name, set()).add(other.text)
        return len(self._claims.get(seg.field_name, ())) > 1 or self._near(seg)

    def _free(self) -> list[Segment]:
        """The naming fields anyone may write of the records the run read (not the run's own)."""
        if self._free_names is None:
            self._free_names = [
                s
                for s in self.segments
                if s.naming == "whole"
                and s.label.trust not in VOUCHING
                and s.label.record_id is not None
                and not self.written(s)
            ]
        return self._free_names

    def _other_kind(self, seg: Segment) -> bool:
        """Whether a record of another naming field carries one of ``seg``'s name forms (an event
        titled as the file the request quotes): the quote does not tell which kind it names."""
        forms = name_forms(seg.text)
        return any(
            o.field_name != seg.field_name and not forms.isdisjoint(name_forms(o.text)) for o in self._free()
        )

    def _near(self, seg: Segment) -> bool:
        """Whether another record the run read names, in ``seg``'s field, a different name the
        request may mean: one whose words the request all gives, one of them a word of ``seg``'s
        name ("the Budget review meeting" for the user's "Budget Review (Q3)"); and, unless the
        user wrote ``seg``'s record (``Segment.own``: a name of their own words, no stranger's
        decoy), one that has two or more words the request gives, wherever it gives them (the
        user's "Budget Review Q3 sync", whose "sync" the request lacks, beside a stranger's
        "Budget review meeting", "review meeting" or "budget notes"), or every word of ``seg``'s
        name ("Lunch with Sarah" beside "Lunch"). A file's extension is no word of its name,
        and a file name the request writes whole, extension and all, is exact."""
        mine = self._significant(EXTENSION.sub("", seg.text))
        exact = seg.own or bool(EXTENSION.search(seg.text) and contains_whole(self.user_text, seg.text))
        for other in self._free():
            if other.field_name != seg.field_name or other.text == seg.text:
                continue
            words = self._significant(EXTENSION.sub("", other.text))
            if len(words) >= 2 and words <= self._user_words and not words.isdisjoint(mine):
                return True
            if not exact and (len(words & self._user_words) >= 2 or (mine and mine <= words)):
                return True
        return False

    @staticmethod
    def _significant(text: str) -> set[str]:
        return {w for w in ALPHA_WORD.findall(text) if len(w) >= 3 and w not in STOP}

    def _quoted_whole(self, seg: Segment) -> bool:
        """Whether the request quotes one of ``seg``'s name forms whole."""
        if self._quoted is None:
            spans = (
                normalise(m.group(1)).strip(" .,;:!?") for m in _QUOTED.finditer(compose(self.objective))
            )
            self._quoted = frozenset(spans)
        return not self._quoted.isdisjoint(name_forms(seg.text))

    def _names(self, seg: Segment) -> bool:
        if seg.naming == "whole" and self._case_twins(seg):
            return as_written(self.objective, seg.raw)  # only the twin written as the user wrote it
        if seg.naming == "whole":
            for form in name_forms(seg.text):
                if len(form) < 3:
                    continue
                if len(form) < MIN_CONTAINED:
                    if form.isalpha() and form in self._user_names:
                        return True
                elif contains_whole(self.user_text, form):
                    return True
        elif seg.naming == "word" and not self.written(seg):
            words = {w for w in ALPHA_WORD.findall(seg.text) if len(w) >= 4 and w not in STOP}
            return bool(words & self._user_words)
        return False

    def _case_twins(self, seg: Segment) -> bool:
        """Whether another record the run read is named as ``seg`` names its own but for case
        (``Draft.txt`` and ``draft.txt``): a tool tells them apart, so a name the request writes
        names only the twin written as it writes it."""
        if self._cased is None:
            self._cased = {}
            for other in self.segments:
                if other.naming == "whole":
                    self._cased.setdefault(other.text, set()).add(compose(other.raw))
        return len(self._cased.get(seg.text, ())) > 1
