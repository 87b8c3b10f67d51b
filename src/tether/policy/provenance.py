"""Provenance: where each value the host sees came from.

Two halves. *Labelling*: every tool observation is split into labelled segments — each
leaf of its structured result (or its whole text) carries a ``SourceLabel``: tool, server,
record id, field, author where the data names one, and a trust class taken from a
``TrustConfig`` (per tool and field, written by the application, never by the model).
*Tracing*: each argument value of a proposed call is traced back to its origins — the
user's request, trusted host context (a directory of known recipients, say), a labelled
tool segment, or nowhere (the model composed it).

Matching compares whole values, never words: a value traces to the request when the whole
value appears there (on word boundaries), to a tool result when it *is* a structured field
or appears whole inside its text. It is robust to formatting (Unicode normalisation, case
folding, whitespace, surrounding quotes, JSON/YAML re-encoding of lists, numeric forms such
as ``98.7`` vs ``98.70``) and deliberately blind to short coincidences: a value shorter than
``MIN_CONTAINED`` characters counts only when it *is* a whole structured field (an id, a
name), or, for alphabetic words, a whole word of the user's request; it never counts as
"contained" in free text. So the attacker's "delete file 13" cannot borrow provenance from
"13 May" in the user's request.

A record is **named by the user** only through the naming fields its source declares (a
file's name, an event's title, a payment's counterparty): the field's whole value appears in
the request. Text the user wrote themselves (``self_naming`` fields of records whose author is
one of the user's own identities, e.g. the subject of their own payment) may name a record by
one of its words. Nothing else names a record: not a status, not a body, not a word of a
field someone else wrote.
"""

from __future__ import annotations

import ast
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from tether.policy.provenance_values import DateMention, date_mentions, figures, find_links, parse_date

__all__ = [
    "MIN_CONTAINED",
    "Origin",
    "ProvenanceIndex",
    "Segment",
    "SourceLabel",
    "SourceTrust",
    "TrustConfig",
    "label_observation",
    "normalise",
    "split_values",
]


MIN_CONTAINED = 5
"""Shortest value (after normalisation) that may count as contained in longer text."""

USER = "user"
DIRECTORY = "directory"
MODEL = "model"  # composed by the model: traced nowhere


@dataclass(frozen=True, slots=True)
class SourceLabel:
    """Where one segment of an observation came from."""

    tool: str
    server: str
    trust: str
    path: str = ""  # field path inside the result, e.g. "[2].body"
    record_id: str | None = None
    author: str | None = None
    call_id: str = ""

    def describe(self) -> str:
        parts = [f"{self.tool}@{self.server}", self.trust]
        if self.record_id is not None:
            parts.append(f"record {self.record_id}")
        if self.path:
            parts.append(f"field {self.path}")
        if self.author:
            parts.append(f"by {self.author}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "server": self.server,
            "trust": self.trust,
            "path": self.path,
            "record_id": self.record_id,
            "author": self.author,
        }


@dataclass(frozen=True, slots=True)
class Segment:
    """A labelled piece of an observation: a structured leaf (``whole``) or free text."""

    raw: str
    text: str  # normalised
    label: SourceLabel
    whole: bool
    field_name: str = ""
    naming: str = ""  # "whole": names its record by its whole value; "word": by one of its words


Kind = Literal["user", "host", "tool", "nowhere"]
Match = Literal["exact", "contained", "word", "template"]


@dataclass(frozen=True, slots=True)
class Origin:
    """One origin of one value. ``trust`` is the class policy rules reason about:
    ``user``, ``directory``, ``model`` (nowhere), or a tool segment's trust class."""

    kind: Kind
    trust: str
    match: Match
    label: SourceLabel | None = None

    def describe(self) -> str:
        if self.kind == "user":
            return f"the user's request ({self.match})"
        if self.kind == "host":
            return "trusted host context (directory)"
        if self.kind == "nowhere":
            return "nowhere: composed by the model"
        assert self.label is not None
        return f"{self.label.describe()} ({self.match})"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "trust": self.trust, "match": self.match}
        if self.label is not None:
            out["source"] = self.label.to_json()
        return out


# -- configuration -------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceTrust:
    """How to label one tool's results.

    ``default``: trust class of every leaf not named in ``fields``; ``fields``: class by
    field name (the last key of the leaf's path); ``record_id``: field names that identify
    a record; ``author``: field names naming who wrote a record; ``naming``: fields by which
    the user can name a record (whole value in the request); ``self_naming``: fields that
    name a record by one of their words, only in records whose author is one of the user's
    own identities (text the user wrote).
    """

    default: str = "third_party"
    fields: Mapping[str, str] = field(default_factory=dict)
    record_id: tuple[str, ...] = ("id_", "id")
    author: tuple[str, ...] = ()
    naming: tuple[str, ...] = ()
    self_naming: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceTrust:
        unknown = set(data) - {"default", "fields", "record_id", "author", "naming", "self_naming"}
        if unknown:
            raise ValueError(f"unknown source trust keys: {sorted(unknown)}")
        return cls(
            default=str(data.get("default", "third_party")),
            fields={str(k): str(v) for k, v in (data.get("fields") or {}).items()},
            record_id=tuple(data.get("record_id", ("id_", "id"))),
            author=tuple(data.get("author", ())),
            naming=tuple(data.get("naming", ())),
            self_naming=tuple(data.get("self_naming", ())),
        )


@dataclass(frozen=True)
class TrustConfig:
    """Trust classes per source (tool), configurable by the application."""

    sources: Mapping[str, SourceTrust] = field(default_factory=dict)
    default: SourceTrust = field(default_factory=SourceTrust)

    def for_tool(self, tool: str) -> SourceTrust:
        return self.sources.get(tool, self.default)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrustConfig:
        sources = {str(k): SourceTrust.from_dict(v or {}) for k, v in (data.get("sources") or {}).items()}
        default = SourceTrust.from_dict(data.get("default") or {})
        return cls(sources=sources, default=default)


# -- normalisation -------------------------------------------------------------------------

_WS = re.compile(r"\s+")
_EDGE = " \t\n\"'`.,;:!?()[]{}<>"
_NUMBER = re.compile(r"^[+-]?\d+(?:[.,]\d+)?$")


_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)


def normalise(value: str) -> str:
    """Case-folded, NFKC, invisible characters dropped, whitespace collapsed, surrounding
    quotes and punctuation stripped: two values that read the same compare equal."""
    text = unicodedata.normalize("NFKC", value).translate(_INVISIBLE).casefold()
    return _WS.sub(" ", text).strip(_EDGE)


def _number(value: str) -> float | None:
    v = value.strip().replace(",", "") if value.count(",") == 1 and "." in value else value.strip()
    if not _NUMBER.match(v):
        return None
    try:
        return float(v.replace(",", "."))
    except ValueError:
        return None


def split_values(value: Any) -> list[str]:
    """The scalar values inside an argument: lists and dicts are walked, and a string that is
    itself a JSON or Python/YAML list re-encoding (``"['a@b.com']"``) is decoded first."""
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, Mapping):
            for item in v.values():
                walk(item)
        elif isinstance(v, list | tuple | set | frozenset):
            for item in v:
                walk(item)
        elif isinstance(v, bool) or v is None:
            return
        elif isinstance(v, str):
            s = v.strip()
            if s[:1] in "[{" and s[-1:] in "]}":
                decoded = _decode(s)
                if decoded is not None:
                    walk(decoded)
                    return
            out.append(v)
        else:
            out.append(str(v))

    walk(value)
    return out


def _decode(text: str) -> Any:
    for loader in (json.loads, ast.literal_eval, yaml.safe_load):
        try:
            value = loader(text)
        except Exception:
            continue
        if isinstance(value, list | dict):
            return value
    return None


# -- labelling -----------------------------------------------------------------------------


def label_observation(
    tool: str,
    server: str,
    data: Any,
    text: str,
    config: TrustConfig,
    *,
    own: Iterable[str] = (),
    call_id: str = "",
) -> list[Segment]:
    """Split one tool result into labelled segments. Structured ``data`` gives one segment per
    leaf; without it the whole text is one segment of the tool's default class. ``own``: the
    user's own identities (their address, their account), for ``self_naming`` fields."""
    source = config.for_tool(tool)
    mine = {normalise(o) for o in own if normalise(o)}
    segments: list[Segment] = []

    def leaf(raw: str, path: str, key: str, record: str | None, author: str | None) -> None:
        trust = source.fields.get(key, source.default)
        naming = ""
        if record is not None and key in source.naming:
            naming = "whole"
        elif record is not None and key in source.self_naming and author is not None:
            naming = "word" if normalise(author) in mine else ""
        label = SourceLabel(tool, server, trust, path, record, author, call_id)
        segments.append(Segment(raw, normalise(raw), label, whole=True, field_name=key, naming=naming))

    def walk(v: Any, path: str, key: str, record: str | None, author: str | None) -> None:
        if isinstance(v, Mapping):
            rec = record
            for k in source.record_id:
                if k in v and isinstance(v[k], str | int) and not isinstance(v[k], bool):
                    rec = str(v[k])
                    break
            else:
                if any(k in v for k in (*source.naming, *source.self_naming)):
                    rec = f"@{path or '.'}"  # a record without an id: the mapping itself
            auth = author
            for k in source.author:
                if isinstance(v.get(k), str):
                    auth = v[k]
                    break
            for k, item in v.items():
                k = str(k)
                if not k.isidentifier():
                    # A key that is data (a hotel's name, an e-mail address) is a leaf too.
                    leaf(k, f"{path}.{k}" if path else k, key, rec, auth)
                walk(item, f"{path}.{k}" if path else k, k, rec, auth)
        elif isinstance(v, list | tuple):
            for i, item in enumerate(v):
                walk(item, f"{path}[{i}]", key, record, author)
        elif v is None or isinstance(v, bool):
            return
        else:
            leaf(str(v), path, key, record, author)

    if data is not None and not isinstance(data, str):
        walk(data, "", "", None, None)
    else:
        raw = data if isinstance(data, str) else text
        segments.append(
            Segment(raw, normalise(raw), SourceLabel(tool, server, source.default, call_id=call_id), False)
        )
    return segments


# -- tracing -------------------------------------------------------------------------------

_WORD = re.compile(r"[\w@.+-]+", re.UNICODE)
_ALPHA_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_STOP_WORDS = "a an the to of in on at for and or with from by is are be it this that my me i you your "
_STOP_WORDS += "please can could would will as if so do not our we us his her their them they its"
_STOP = frozenset(_STOP_WORDS.split(" "))
_PLACEHOLDER = re.compile(r"\{[^{}\s]{1,40}\}")
_EXTENSION = re.compile(r"\.[a-z0-9]{1,5}$")


_JOINERS = "@._+-/:"  # characters that join parts of one token (an address, a link, a file name)


def _contains(haystack: str, needle: str) -> bool:
    """``needle`` appears in ``haystack`` as a whole: not inside a longer word, nor at the end
    of a longer token, so ``smith@x.example`` is not in ``alice.smith@x.example``. After it,
    a full stop or a colon may end the sentence (prompts write "www.site.com.They")."""
    start = 0
    n = len(needle)
    while (i := haystack.find(needle, start)) >= 0:
        start = i + 1
        before = haystack[i - 1] if i > 0 else " "
        after = haystack[i + n] if i + n < len(haystack) else " "
        if before.isalnum() or (before in _JOINERS and needle[:1].isalnum()):
            continue
        if after.isalnum() or (after in _JOINERS and after not in ".:" and needle[-1:].isalnum()):
            continue
        return True
    return False


def _name_forms(text: str) -> set[str]:
    """A naming value and its spoken forms: ``grocery-list.docx`` is also ``grocery list``."""
    forms = {text}
    stem = _EXTENSION.sub("", text)
    spoken = re.sub(r"[-_]+", " ", stem)
    if " " in spoken:  # a one-word stem ("list") would let any word of the request name it
        forms |= {stem, spoken}
    return forms


class ProvenanceIndex:
    """What the host knows at one moment of a run: the user's request, trusted host values and
    labelled observations. ``trace`` answers where a value came from."""

    def __init__(
        self,
        objective: str,
        *,
        segments: Sequence[Segment] = (),
        directory: Iterable[str] = (),
    ) -> None:
        self.objective = objective
        self.user_text = normalise(objective)
        words = _WORD.findall(self.user_text)
        self._user_words = {w.strip(".,+-") for w in words} | set(words)
        self._user_words |= set(_ALPHA_WORD.findall(self.user_text))
        self.directory = {normalise(d) for d in directory if normalise(d)}
        self.segments = list(segments)
        self._whole: dict[str, list[Segment]] = {}
        self._numbers: dict[float, list[Segment]] = {}
        for seg in self.segments:
            if seg.whole:
                self._whole.setdefault(seg.text, []).append(seg)
                n = _number(seg.raw)
                if n is not None:
                    self._numbers.setdefault(n, []).append(seg)
        self._records: dict[tuple[str, str, str], list[Segment]] = {}
        for seg in self.segments:
            if seg.label.record_id is not None:
                key = (seg.label.call_id, seg.label.tool, seg.label.record_id)
                self._records.setdefault(key, []).append(seg)
        self._named: dict[tuple[str, str, str], bool] = {}
        self._links: dict[str, list[Segment]] | None = None
        self._user_links: set[str] = set()
        self._directory_links: set[str] = set()
        self._dates: list[DateMention] | None = None
        self._figures: list[float] | None = None

    # -- one scalar ---------------------------------------------------------------------

    def trace(self, value: str) -> list[Origin]:
        """All origins of one scalar value; ``[Origin(nowhere)]`` when none is found."""
        text = normalise(value)
        if not text:
            return [Origin("nowhere", MODEL, "exact")]
        out: list[Origin] = []
        short = len(text) < MIN_CONTAINED
        numeric = _number(value)
        # The user's request: the whole value appears in it.
        if numeric is not None and self._user_number(numeric):
            out.append(Origin("user", USER, "word"))
        elif short:
            if text.isalpha() and len(text) >= 3 and text in self._user_words:
                out.append(Origin("user", USER, "word"))
        elif _contains(self.user_text, text):
            out.append(Origin("user", USER, "contained"))
        # Trusted host context.
        if text in self.directory:
            out.append(Origin("host", DIRECTORY, "exact"))
        # Observations: whole structured fields first, then containment in longer text.
        seen: set[int] = set()
        for seg in self._whole.get(text, []):
            seen.add(id(seg))
            out.append(Origin("tool", seg.label.trust, "exact", seg.label))
        if numeric is not None:
            for seg in self._numbers.get(numeric, []):
                if id(seg) not in seen and (not short or seg.field_name in _ID_FIELDS):
                    seen.add(id(seg))
                    out.append(Origin("tool", seg.label.trust, "exact", seg.label))
        if short:
            # A short number counts only as a whole identifier field; a short word only as a
            # whole field. Neither counts as contained in longer text.
            if numeric is not None:
                out = [o for o in out if o.kind != "tool" or _identifier_like(o)]
        else:
            for seg in self.segments:
                if id(seg) in seen or len(seg.text) <= len(text):
                    continue
                if _contains(seg.text, text):
                    out.append(Origin("tool", seg.label.trust, "contained", seg.label))
        return out or [Origin("nowhere", MODEL, "exact")]

    def _user_number(self, n: float) -> bool:
        for word in _WORD.findall(self.user_text):
            w = word.strip(".,")
            m = _number(w)
            if m is not None and m == n and len(w.replace(".", "").lstrip("0")) >= 3:
                return True
        return False

    def fills_template(self, value: str) -> bool:
        """Whether ``value`` is a template the user wrote with its ``{placeholder}`` filled by
        one whole field of a tool result: the request says "title it 'Dinner at {name}'" and
        the value is "Dinner at New Israeli Restaurant". The filled-in part is the only part
        not written by the user, and it is a whole value, not free composition."""
        text = normalise(value)
        request = _WS.sub(" ", unicodedata.normalize("NFKC", self.objective).casefold())
        if not text or "{" not in request:
            return False
        for m in _PLACEHOLDER.finditer(request):
            before, after = request[: m.start()], request[m.end() :]
            for filler in self._whole:
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

    # -- records the user named ---------------------------------------------------------

    def record_named_by_user(self, label: SourceLabel) -> bool:
        """Whether the record a value came from is one the user named, through one of the
        naming fields its source declares (see the module docstring)."""
        if label.record_id is None:
            return False
        key = (label.call_id, label.tool, label.record_id)
        if key not in self._named:
            self._named[key] = any(self._names(seg) for seg in self._records.get(key, []))
        return self._named[key]

    def _names(self, seg: Segment) -> bool:
        if seg.naming == "whole":
            for form in _name_forms(seg.text):
                if len(form) < 3:
                    continue
                if len(form) < MIN_CONTAINED:
                    if form.isalpha() and form in self._user_words:
                        return True
                elif _contains(self.user_text, form):
                    return True
        elif seg.naming == "word":
            words = {w for w in _ALPHA_WORD.findall(seg.text) if len(w) >= 4 and w not in _STOP}
            return bool(words & self._user_words)
        return False

    def named_records(self) -> list[list[Segment]]:
        """The segments of every record the user named."""
        return [segs for segs in self._records.values() if segs and self.record_named_by_user(segs[0].label)]

    # -- typed values -------------------------------------------------------------------

    def link_origins(self, key: str) -> list[Origin]:
        """Origins of a link (by ``provenance_values.Link.key``): the request, the directory,
        or the tool segments that hold the same link."""
        if self._links is None:
            table: dict[str, list[Segment]] = {}
            for seg in self.segments:
                for link in find_links(seg.raw):
                    table.setdefault(link.key, []).append(seg)
            self._links = table
            self._user_links = {link.key for link in find_links(self.objective)}
            # Only an entry that *is* a link vouches for it: a link inside a longer entry (a
            # channel named by whoever created it) is someone else's text.
            self._directory_links = {
                link.key for d in self.directory for link in find_links(d) if normalise(link.raw) == d
            }
        out: list[Origin] = []
        if key in self._user_links:
            out.append(Origin("user", USER, "contained"))
        if key in self._directory_links:
            out.append(Origin("host", DIRECTORY, "exact"))
        for seg in self._links.get(key, []):
            out.append(Origin("tool", seg.label.trust, "exact" if seg.whole else "contained", seg.label))
        return out or [Origin("nowhere", MODEL, "exact")]

    @property
    def request_dates(self) -> list[DateMention]:
        """The calendar days the request names."""
        if self._dates is None:
            self._dates = date_mentions(self.objective)
        return self._dates

    @property
    def request_figures(self) -> list[float]:
        """The numbers the request states (not days, years or parts of identifiers)."""
        if self._figures is None:
            self._figures = figures(self.objective)
        return self._figures

    def named_values(self, *, trust: Iterable[str] = (), fields: Iterable[str] = ()) -> list[Segment]:
        """Whole fields of records the user named, of the given trust classes or field names."""
        classes, names = set(trust), set(fields)
        return [
            seg
            for segs in self.named_records()
            for seg in segs
            if seg.whole and (seg.label.trust in classes or seg.field_name in names)
        ]

    def named_dates(self, trust: Iterable[str]) -> list[Any]:
        """Calendar days held by whole fields (of these classes) of records the user named."""
        return [d for seg in self.named_values(trust=trust) if (d := parse_date(seg.raw)) is not None]

    def contained_segments(self, value: str, trust: Iterable[str]) -> list[Segment]:
        """Segments of the given trust classes whose whole value appears inside ``value``
        (to follow confidential data into an outgoing message). A value the request or the
        directory also holds is no secret of that source."""
        wanted = set(trust)
        text = normalise(value)
        return [
            s
            for s in self.segments
            if s.label.trust in wanted
            and s.whole
            and len(s.text) >= MIN_CONTAINED
            and s.text in text
            and s.text not in self.directory
            and not _contains(self.user_text, s.text)
        ]


_ID_FIELDS = frozenset({"id", "id_", "event_id", "file_id", "email_id", "record_id"})


def _identifier_like(origin: Origin) -> bool:
    return origin.label is not None and origin.label.path.rsplit(".", 1)[-1].split("[")[0] in _ID_FIELDS
