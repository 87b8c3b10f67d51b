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

from tether.policy._provenance_values import (
    DateMention,
    Link,
    amounts,
    date_mentions,
    find_links,
    link_key,
    parse_date,
    unfold,
)

__all__ = [
    "MIN_CONTAINED",
    "Directory",
    "Origin",
    "ProvenanceIndex",
    "Segment",
    "SourceLabel",
    "SourceTrust",
    "TrustConfig",
    "Written",
    "contains_whole",
    "label_observation",
    "normalise",
    "shape_kind",
    "split_values",
]


DATA_KEY = "key"
"""Field name of a mapping key that is data (a hotel's name keying its reviews)."""

MIN_CONTAINED = 5
"""Shortest value (after normalisation) that may count as contained in longer text."""

USER = "user"
USER_WORD = "user:word"  # a single word of the request that the request does not use as a name
DIRECTORY = "directory"
MODEL = "model"  # composed by the model: traced nowhere
EXTRACTOR = "quarantined_extractor"
"""The tool name of a plan's extracted values (``planexec``): a copy of a value taken from
earlier results, labelled with its sources' least trusted class. It neither mentions a value
nor shows where the system assigned it; its sources, in the same run, do."""


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


ASSIGNED = frozenset({"system", "address"})
"""Default classes of values the system assigns (ids, times, senders): data that names or
counts things but carries no words anyone chose to steer a reader."""


@dataclass(frozen=True)
class TrustConfig:
    """Trust classes per source (tool), configurable by the application. ``assigned``: the
    classes whose values the system assigns (an id, a timestamp, a sender's address); every
    other class is text someone chose, which can steer a model that reads it."""

    sources: Mapping[str, SourceTrust] = field(default_factory=dict)
    default: SourceTrust = field(default_factory=SourceTrust)
    assigned: frozenset[str] = ASSIGNED

    def for_tool(self, tool: str) -> SourceTrust:
        return self.sources.get(tool, self.default)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrustConfig:
        sources = {str(k): SourceTrust.from_dict(v or {}) for k, v in (data.get("sources") or {}).items()}
        default = SourceTrust.from_dict(data.get("default") or {})
        assigned = data.get("assigned")
        if assigned is not None and (
            not isinstance(assigned, list | tuple) or not all(isinstance(a, str) for a in assigned)
        ):
            raise ValueError("trust.assigned must be a list of class names")
        return cls(
            sources=sources,
            default=default,
            assigned=frozenset(assigned) if assigned is not None else ASSIGNED,
        )


# -- normalisation -------------------------------------------------------------------------

_WS = re.compile(r"[ \t\r\n]+")
_NUMBER = re.compile(r"^[+-]?\d+(?:[.,]\d+)?$")


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def normalise(value: str) -> str:
    """The form values are compared in: canonically composed (NFC), ASCII letters in lower
    case, runs of ASCII whitespace made one space and trimmed. Nothing else is removed or
    replaced: a zero-width, full-width or look-alike character, a quote or a trailing dot
    stays, and no other letter is folded (``ß`` is not ``ss``, the Kelvin sign is not
    ``k``), so a value matches only what the tool would receive as the same text."""
    return _WS.sub(" ", unicodedata.normalize("NFC", value).translate(_ASCII_LOWER)).strip(" ")


def _number(value: str) -> float | None:
    v = value.strip().replace(",", "") if value.count(",") == 1 and "." in value else value.strip()
    if not _NUMBER.match(v):
        return None
    try:
        return float(v.replace(",", "."))
    except ValueError:
        return None


def _structured(schema: Any) -> bool:
    """Whether a JSON Schema admits an object or an array (no schema: it may)."""
    if not isinstance(schema, Mapping):
        return True
    kind = schema.get("type")
    if kind is None:
        alternatives = [*schema.get("anyOf", ()), *schema.get("oneOf", ())]
        return not alternatives or any(_structured(alt) for alt in alternatives)
    kinds = {kind} if isinstance(kind, str) else set(kind)
    return bool(kinds & {"object", "array"})


def _child(schema: Any, key: str | None) -> Any:
    if not isinstance(schema, Mapping):
        return None
    if key is None:
        items = schema.get("items")
        return items if isinstance(items, Mapping) else None
    props = schema.get("properties")
    if isinstance(props, Mapping) and key in props:
        return props[key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def _declared(schema: Any, key: str) -> bool:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return isinstance(props, Mapping) and key in props


def split_values(value: Any, schema: Any = None) -> list[str]:
    """The scalar values a tool receives in one argument, judged one by one: every leaf of a
    list or mapping, every key that is data (not a property the schema declares), and a
    string always whole, as it is. A string that itself encodes a list or mapping
    (``"['a@b.com']"``) is decoded *in addition* when the schema lets the parameter be
    structured — never instead of the raw string, which is what the tool receives."""
    out: list[str] = []

    def walk(v: Any, node: Any) -> None:
        if isinstance(v, Mapping):
            for k, item in v.items():
                if not _declared(node, str(k)):
                    out.append(str(k))
                walk(item, _child(node, str(k)))
        elif isinstance(v, list | tuple | set | frozenset):
            for item in v:
                walk(item, _child(node, None))
        elif isinstance(v, bool) or v is None:
            return
        elif isinstance(v, str):
            out.append(v)
            s = v.strip()
            if s[:1] in "[{" and s[-1:] in "]}" and _structured(node):
                decoded = _decode(s)
                if decoded is not None:
                    walk(decoded, None)
        else:
            out.append(str(v))

    walk(value, schema)
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


# -- curated host context ---------------------------------------------------------------------

_EMAIL_SHAPE = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_ACCOUNT_SHAPE = re.compile(r"[a-z]{2}\d{2}[a-z0-9]{10,30}")
_LINK_SHAPE = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?[^\s/@]+\.[^\s/@]+(?:/\S*)?")
SHAPE_KINDS = ("mailbox", "account", "link")


def shape_kind(value: str) -> str:
    """The kind of destination a value is shaped as: ``mailbox`` (an e-mail address),
    ``account`` (IBAN-shaped), ``link``, or ``name`` (anything else: a person, a channel)."""
    v = normalise(value)
    if _EMAIL_SHAPE.fullmatch(v):
        return "mailbox"
    if _ACCOUNT_SHAPE.fullmatch(v.replace(" ", "")):
        return "account"
    if _LINK_SHAPE.fullmatch(v) and not v.replace(".", "").isdigit():
        return "link"
    return "name"


_PLAIN_NAME = re.compile(r"[^\x00-\x1f\x7f<>{}\[\]]{1,100}")


def _well_formed(kind: str, text: str) -> bool:
    """Whether an entry is a plain value of its kind, fit to vouch: an address, an account or a
    link of that shape; for any other kind (a member, a channel) a short name on one line with
    no link, address or markup inside — a name that carries a link or an instruction was chosen
    to be read, and vouches for nothing."""
    if kind in SHAPE_KINDS:
        return shape_kind(text) == kind
    if not _PLAIN_NAME.fullmatch(text) or "@" in text:
        return False
    from tether.policy._provenance_values import find_links

    return not find_links(text)


class Directory:
    """What the deployment vouches for, by kind: each entry vouches for one kind of
    destination only (a mailbox for a mailbox, a channel for a channel, a link for a link).
    Built from a mapping ``{kind: [entries]}``, or from plain entries whose kind is their
    shape (``shape_kind``). Entries that outsiders can create (a channel anyone may open)
    do not belong here: they are third-party data."""

    def __init__(self, entries: Mapping[str, Iterable[str]] | Iterable[str] = ()) -> None:
        self.kinds: dict[str, set[str]] = {}
        if isinstance(entries, Mapping):
            for kind, values in entries.items():
                if isinstance(values, str):
                    raise TypeError(f"directory kind {kind!r}: a list of entries, not a string")
                for v in values:
                    self._add(str(kind), v)
        else:
            for v in entries:
                self._add(shape_kind(v), v)

    def _add(self, kind: str, value: str) -> None:
        text = normalise(value)
        if text and _well_formed(kind, text):
            self.kinds.setdefault(kind, set()).add(text)

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def __contains__(self, text: object) -> bool:
        return any(text in values for values in self.kinds.values())

    def vouches(self, text: str, kind: str | None = None) -> bool:
        """Whether the normalised ``text`` is an entry of ``kind`` (by default, the kind its
        shape says; a ``name`` is vouched for by an entry of any kind that is not a shape)."""
        kind = kind or shape_kind(text)
        if kind == "name":
            return any(text in v for k, v in self.kinds.items() if k not in SHAPE_KINDS)
        return text in self.kinds.get(kind, ())

    def entries(self, kind: str) -> set[str]:
        return self.kinds.get(kind, set())


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

    def leaf(
        raw: str, path: str, key: str, record: str | None, author: str | None, field_name: str | None = None
    ) -> None:
        trust = source.fields.get(key, source.default)
        naming = ""
        if record is not None and key in source.naming:
            naming = "whole"
        elif record is not None and key in source.self_naming and author is not None:
            naming = "word" if normalise(author) in mine else ""
        label = SourceLabel(tool, server, trust, path, record, author, call_id)
        name = key if field_name is None else field_name
        segments.append(Segment(raw, normalise(raw), label, whole=True, field_name=name, naming=naming))

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
                    leaf(k, f"{path}.{k}" if path else k, key, rec, auth, field_name=DATA_KEY)
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


def contains_whole(haystack: str, needle: str) -> bool:
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


@dataclass(frozen=True, slots=True)
class Written:
    """A value the run itself sent to a tool (an argument leaf of a call that ran), and when:
    ``position`` is the number of observations the run had made before that call."""

    text: str  # normalised
    position: int
    links: frozenset[str] = frozenset()  # keys of the links inside it


_QUOTED = re.compile(r"[\"'“”‘’«»`]([^\"'“”‘’«»`]{1,80})[\"'“”‘’«»`]")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n]\s*|\s-\s)$")


def _request_names(objective: str) -> set[str]:
    """Words the request uses as names: capitalised (a function word opening a sentence is
    not), or quoted. "Invite Dora" names Dora; "her website" does not make "website" a name."""
    text = unicodedata.normalize("NFC", objective)
    names: set[str] = set()
    for m in _ALPHA_WORD.finditer(text):
        word = m.group(0)
        if word[:1].isupper() and not (
            normalise(word) in _STOP and _SENTENCE_START.search(text[: m.start()])
        ):
            names.add(normalise(word))
    for m in _QUOTED.finditer(text):
        names |= {normalise(w) for w in _ALPHA_WORD.findall(m.group(1))}
    return names


class ProvenanceIndex:
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
    ) -> None:
        self.objective = objective
        self.user_text = normalise(objective)
        words = _WORD.findall(self.user_text)
        self._user_words = {w.strip(".,+-") for w in words} | set(words)
        self._user_words |= set(_ALPHA_WORD.findall(self.user_text))
        self._user_names = _request_names(objective)
        self.directory = directory if isinstance(directory, Directory) else Directory(directory)
        self.segments = list(segments)
        pos = list(positions) if positions is not None else [0] * len(self.segments)
        if len(pos) != len(self.segments):
            raise ValueError("one position per segment")
        self._pos = {id(seg): p for seg, p in zip(self.segments, pos, strict=True)}
        self.writes = sorted(writes, key=lambda w: w.position)
        self._prefixes: dict[int, ProvenanceIndex] = {}
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
        self._user_sites: set[str] = set()
        self._directory_links: set[str] = set()
        self._directory_sites: set[str] = set()
        self._dates: list[DateMention] | None = None
        self._amounts: list[float] | None = None
        self._unfolded: dict[int, str] = {}

    # -- the run's own writes -----------------------------------------------------------

    def _prefix(self, position: int) -> ProvenanceIndex:
        """The index as it stood when a call made after ``position`` observations was made."""
        if position not in self._prefixes:
            keep = [(seg, p) for seg in self.segments if (p := self._pos[id(seg)]) < position]
            self._prefixes[position] = ProvenanceIndex(
                self.objective,
                segments=[seg for seg, _ in keep],
                directory=self.directory,
                positions=[p for _, p in keep],
                writes=[w for w in self.writes if w.position < position],
            )
        return self._prefixes[position]

    def _writes_into(self, seg: Segment) -> list[Written]:
        """The run's writes made before ``seg`` was observed that the segment may echo: its
        text is the written value, holds it, or is held by it."""
        p = self._pos.get(id(seg), 0)
        return [
            w
            for w in self.writes
            if w.position <= p
            and (w.text == seg.text or contains_whole(seg.text, w.text) or contains_whole(w.text, seg.text))
        ]

    def written(self, seg: Segment) -> bool:
        """Whether ``seg`` echoes something the run wrote (it is not the source's own data)."""
        return bool(self._writes_into(seg))

    def _retrace(self, value: str, text: str, origin: Origin, seg: Segment) -> list[Origin] | None:
        """A tool origin's replacement when the value came back from the run's own write: the
        value's origins when it was written, if the write held it; if the value holds a write
        beside other text, only the classes every part shares (no part lends another its
        trust; none shared: composed)."""
        writes = self._writes_into(seg)
        inside = [w for w in writes if w.text == text or contains_whole(w.text, text)]
        if inside:
            out: list[Origin] = []
            for w in inside:
                out.extend(o for o in self._prefix(w.position).trace(value) if o not in out)
            return out
        holds = [w for w in writes if len(w.text) >= MIN_CONTAINED and contains_whole(text, w.text)]
        if not holds:
            return None
        shared = {origin.trust}
        for w in holds:
            shared &= {o.trust for o in self._prefix(w.position).trace(w.text)}
        return [origin] if shared else [Origin("nowhere", MODEL, "exact")]

    def segment_origins(self, seg: Segment) -> list[Origin]:
        """The origins of one whole segment (a value passed by reference to it): its own label,
        or, where it echoes the run's writes, what they were when written."""
        origin = Origin("tool", seg.label.trust, "exact", seg.label)
        again = self._retrace(seg.raw, seg.text, origin, seg) if self.writes else None
        return again if again is not None else [origin]

    # -- one scalar ---------------------------------------------------------------------

    def trace(self, value: str, kind: str | None = None) -> list[Origin]:
        """All origins of one scalar value; ``[Origin(nowhere)]`` when none is found. ``kind``:
        the kind of destination the value is for (the directory vouches per kind)."""
        text = normalise(value)
        if not text:
            return [Origin("nowhere", MODEL, "exact")]
        found: list[tuple[Origin, Segment | None]] = []
        short = len(text) < MIN_CONTAINED
        numeric = _number(value)
        single = _ALPHA_WORD.fullmatch(text) is not None
        # The user's request: the whole value appears in it. A single word counts as the
        # user's only where the request uses it as a name (capitalised, or quoted).
        if numeric is not None and self._user_number(numeric):
            found.append((Origin("user", USER, "word"), None))
        elif single:
            if len(text) >= 3 and text in self._user_words:
                trust = USER if text in self._user_names else USER_WORD
                found.append((Origin("user", trust, "word"), None))
        elif not short and contains_whole(self.user_text, text):
            found.append((Origin("user", USER, "contained"), None))
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
        out: list[Origin] = []
        for origin, source in found:
            again = self._retrace(value, text, origin, source) if source is not None and self.writes else None
            for o in again if again is not None else [origin]:
                if o not in out:
                    out.append(o)
        return out or [Origin("nowhere", MODEL, "exact")]

    def _user_number(self, n: float) -> bool:
        for word in _WORD.findall(self.user_text):
            w = word.strip(".,")
            m = _number(w)
            if m is not None and m == n and len(w.replace(".", "").lstrip("0")) >= 3:
                return True
        return False

    def fills_template(self, value: str, fields: Iterable[str] = ()) -> bool:
        """Whether ``value`` is a template the user wrote with its ``{placeholder}`` filled by
        one whole field of a tool result, of one of the declared ``fields``: the request says
        "title it 'Dinner at {name}'" and the value is "Dinner at New Israeli Restaurant".
        The filled-in part is the only part not written by the user; it is a whole value of a
        field declared for filling, never text the run wrote itself."""
        text = normalise(value)
        allowed = set(fields)
        request = normalise(self.objective)
        if not text or "{" not in request or not allowed:
            return False
        fillers = {
            seg.text
            for segs in self._whole.values()
            for seg in segs
            if seg.field_name in allowed and not self.written(seg)
        }
        for m in _PLACEHOLDER.finditer(request):
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

    # -- records the user named ---------------------------------------------------------

    def record_named_by_user(self, label: SourceLabel) -> bool:
        """Whether the record a value came from is one the user named, through one of the
        naming fields its source declares (see the module docstring). A name the run wrote
        names its record only when it is the user's own words, whole."""
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
                    if form.isalpha() and form in self._user_names:
                        return True
                elif contains_whole(self.user_text, form):
                    return True
        elif seg.naming == "word" and not self.written(seg):
            words = {w for w in _ALPHA_WORD.findall(seg.text) if len(w) >= 4 and w not in _STOP}
            return bool(words & self._user_words)
        return False

    def named_records(self) -> list[list[Segment]]:
        """The segments of every record the user named."""
        return [segs for segs in self._records.values() if segs and self.record_named_by_user(segs[0].label)]

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
        table = self._link_tables()
        key = link if isinstance(link, str) else link.key
        site = None if isinstance(link, str) else link.site
        out: list[Origin] = []
        if key in self._user_links or (site is not None and site in self._user_sites):
            out.append(Origin("user", USER, "contained"))
        if key in self._directory_links or (site is not None and site in self._directory_sites):
            out.append(Origin("host", DIRECTORY, "exact"))
        segs = list(table.get(key, []))
        for seg in segs:
            origin = Origin("tool", seg.label.trust, "exact" if seg.whole else "contained", seg.label)
            earlier = [w for w in self._writes_into(seg) if key in w.links]
            if earlier:
                for w in earlier:
                    out.extend(o for o in self._prefix(w.position).link_origins(link) if o not in out)
            elif origin not in out:
                out.append(origin)
        return out or [Origin("nowhere", MODEL, "exact")]

    def steering(self, assigned: Iterable[str]) -> Segment | None:
        """The first segment observed so far that holds text someone chose (a class not in
        ``assigned``), or None: after it, any choice the model makes may be the text's."""
        keep = frozenset(assigned)
        for seg in self.segments:
            if seg.label.trust not in keep and seg.text:
                return seg
        return None

    def mentioned(self, value: str, assigned: Iterable[str] = ()) -> Segment | None:
        """A segment whose text someone chose and that mentions ``value``: the value inside a
        longer text of any class (a name in a message, a page, a channel's name), or a field
        that is exactly the value but of a class not in ``assigned`` (a message body, a
        participant list its author wrote); or None. A system-assigned field that *is* the
        value (a sender, a member list's entry) lists it rather than mentions it. Both sides
        are unfolded (NFKC, case, invisible characters, defanged dots) and the value counts
        wherever no letter or digit is glued to it (``mailto:carol@x``, ``<carol@x>``)."""
        needle = unfold(value).strip()
        if not needle:
            return None
        pattern = re.compile(rf"(?<![^\W_]){re.escape(needle)}(?![^\W_])", re.UNICODE)
        keep = frozenset(assigned)
        for seg in self.segments:
            if seg.label.tool == EXTRACTOR:
                continue
            hay = self._unfolded.get(id(seg))
            if hay is None:
                hay = self._unfolded[id(seg)] = unfold(seg.raw).strip()
            if hay == needle:
                if seg.label.trust not in keep:
                    return seg
            elif len(hay) > len(needle) and pattern.search(hay):
                return seg
        return None

    @property
    def request_dates(self) -> list[DateMention]:
        """The calendar days the request names."""
        if self._dates is None:
            self._dates = date_mentions(self.objective)
        return self._dates

    @property
    def request_amounts(self) -> list[float]:
        """The amounts of money the request states (``provenance_values.amounts``)."""
        if self._amounts is None:
            self._amounts = amounts(self.objective)
        return self._amounts

    def named_values(self, *, trust: Iterable[str] = (), fields: Iterable[str] = ()) -> list[Segment]:
        """Whole fields of records the user named, of the given trust classes or field names;
        never a field whose value the run wrote itself."""
        classes, names = set(trust), set(fields)
        return [
            seg
            for segs in self.named_records()
            for seg in segs
            if seg.whole and (seg.label.trust in classes or seg.field_name in names) and not self.written(seg)
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
            and not contains_whole(self.user_text, s.text)
        ]


_ID_FIELDS = frozenset({"id", "id_", "event_id", "file_id", "email_id", "record_id"})


def _identifier_like(origin: Origin) -> bool:
    return origin.label is not None and origin.label.path.rsplit(".", 1)[-1].split("[")[0] in _ID_FIELDS
