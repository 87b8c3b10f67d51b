"""Provenance: where each value the host sees came from.

Two halves. *Labelling*: every tool observation is split into labelled segments — each
leaf of its structured result (or its whole text) carries a ``SourceLabel``: tool, server,
record id, field, author where the data names one, and a trust class taken from a
``TrustConfig`` (per tool and field, written by the application, never by the model).
*Tracing*: each argument value of a proposed call is traced back to its origins — the
user's request, trusted host context (a directory of known recipients, say), a labelled
tool segment, or nowhere (the model composed it).

Matching is robust to formatting (Unicode normalisation, case folding, whitespace,
surrounding quotes, JSON/YAML re-encoding of lists, numeric forms such as ``98.7`` vs
``98.70``) and deliberately blind to short coincidences: a value shorter than
``MIN_CONTAINED`` characters counts only when it *is* a whole structured field (an id, a
name), or, for alphabetic words, a whole word of the user's request; it never counts as
"contained" in free text. So the attacker's "delete file 13" cannot borrow provenance from
"13 May" in the user's request.
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


Kind = Literal["user", "host", "tool", "nowhere"]
Match = Literal["exact", "contained", "word", "partial"]


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
    a record; ``author``: field names naming who wrote a record; ``author_trust``: class for
    *text* leaves of records whose author is in the trusted directory (say, a colleague's
    message) — only leaves whose class is ``default`` are raised, named fields keep theirs.
    """

    default: str = "third_party"
    fields: Mapping[str, str] = field(default_factory=dict)
    record_id: tuple[str, ...] = ("id_", "id")
    author: tuple[str, ...] = ()
    author_trust: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceTrust:
        unknown = set(data) - {"default", "fields", "record_id", "author", "author_trust"}
        if unknown:
            raise ValueError(f"unknown source trust keys: {sorted(unknown)}")
        return cls(
            default=str(data.get("default", "third_party")),
            fields={str(k): str(v) for k, v in (data.get("fields") or {}).items()},
            record_id=tuple(data.get("record_id", ("id_", "id"))),
            author=tuple(data.get("author", ())),
            author_trust=data.get("author_trust"),
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


def normalise(value: str) -> str:
    """Case-folded, NFKC, whitespace collapsed, surrounding quotes and punctuation stripped."""
    text = unicodedata.normalize("NFKC", value).casefold()
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
    directory: Iterable[str] = (),
    call_id: str = "",
) -> list[Segment]:
    """Split one tool result into labelled segments. Structured ``data`` gives one segment per
    leaf; without it the whole text is one segment of the tool's default class."""
    source = config.for_tool(tool)
    known = {normalise(d) for d in directory}
    segments: list[Segment] = []

    def leaf(raw: str, path: str, key: str, record: str | None, author: str | None) -> None:
        trust = source.fields.get(key, source.default)
        if (
            key not in source.fields
            and source.author_trust
            and author is not None
            and normalise(author) in known
        ):
            trust = source.author_trust
        label = SourceLabel(tool, server, trust, path, record, author, call_id)
        segments.append(Segment(raw, normalise(raw), label, whole=True, field_name=key))

    def walk(v: Any, path: str, key: str, record: str | None, author: str | None) -> None:
        if isinstance(v, Mapping):
            rec = record
            for k in source.record_id:
                if k in v and isinstance(v[k], str | int) and not isinstance(v[k], bool):
                    rec = str(v[k])
                    break
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
_STOP_WORDS = "a an the to of in on at for and or with from by is are be it this that my me i you your "
_STOP_WORDS += "please can could would will as if so do not"
_STOP = frozenset(_STOP_WORDS.split(" "))


def _contains(haystack: str, needle: str) -> bool:
    """Containment on word boundaries for short needles, plain for long ones."""
    if len(needle) >= 16:
        return needle in haystack
    start = 0
    while (i := haystack.find(needle, start)) >= 0:
        before = haystack[i - 1] if i > 0 else " "
        after = haystack[i + len(needle)] if i + len(needle) < len(haystack) else " "
        if not (before.isalnum() or after.isalnum()):
            return True
        start = i + 1
    return False


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
        self._user_words = set(_WORD.findall(self.user_text))
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
        self._records: dict[tuple[str, str, str | None], list[Segment]] = {}
        for seg in self.segments:
            if seg.label.record_id is not None:
                key = (seg.label.call_id, seg.label.tool, seg.label.record_id)
                self._records.setdefault(key, []).append(seg)

    # -- one scalar ---------------------------------------------------------------------

    def trace(self, value: str) -> list[Origin]:
        """All origins of one scalar value; ``[Origin(nowhere)]`` when none is found."""
        text = normalise(value)
        if not text:
            return [Origin("nowhere", MODEL, "exact")]
        out: list[Origin] = []
        short = len(text) < MIN_CONTAINED
        numeric = _number(value)
        # The user's request.
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

    # -- anchoring ----------------------------------------------------------------------

    def _phrase_in_request(self, text: str) -> bool:
        """A run of two or more words of ``text`` (two of them not stop words, 8+ characters)
        appears in the request, or one distinctive token does (8+ characters holding a digit,
        ``@`` or ``.``: a date, an IBAN, an address)."""
        words = _WORD.findall(text)
        for w in words:
            if len(w) >= 8 and any(c.isdigit() or c in "@." for c in w) and w in self._user_words:
                return True
        for size in (4, 3, 2):
            for i in range(len(words) - size + 1):
                run = words[i : i + size]
                if sum(w not in _STOP for w in run) < 2:
                    continue
                phrase = " ".join(run)
                if len(phrase) >= 8 and _contains(self.user_text, phrase):
                    return True
        return False

    def user_overlap(self, value: str) -> bool:
        """Whether a significant part of ``value`` was written by the user: a phrase or a
        distinctive token of the request appears in it, or what is left once whole tool
        fields are taken out (a template such as "Dinner at {name}") is in the request."""
        text = normalise(value)
        if self._phrase_in_request(text):
            return True
        rest = text
        for seg in self.segments:
            if seg.whole and len(seg.text) >= MIN_CONTAINED and seg.text in rest:
                rest = rest.replace(seg.text, " ")
        rest = _WS.sub(" ", rest).strip(_EDGE)
        return rest != text and len(rest) >= MIN_CONTAINED and _contains(self.user_text, rest)

    def record_named_by_user(self, label: SourceLabel) -> bool:
        """Whether the record a value came from is one the user named: one of its other
        whole fields (a title, a file name) appears in the user's request."""
        if label.record_id is None:
            return False
        for seg in self._records.get((label.call_id, label.tool, label.record_id), []):
            if seg.label.path == label.path or seg.field_name in _ID_FIELDS or len(seg.text) > 80:
                continue
            if len(seg.text) >= MIN_CONTAINED and _contains(self.user_text, seg.text):
                return True
            if self._phrase_in_request(seg.text):
                return True
            # A short name ("Rent") counts only as a whole word of the request.
            if len(seg.text) >= 4 and seg.text.isalpha() and seg.text in self._user_words:
                return True
        return False

    def contained_segments(self, value: str, trust: Iterable[str]) -> list[Segment]:
        """Segments of the given trust classes whose whole value appears inside ``value``
        (to follow confidential data into an outgoing message)."""
        wanted = set(trust)
        text = normalise(value)
        return [
            s
            for s in self.segments
            if s.label.trust in wanted and s.whole and len(s.text) >= MIN_CONTAINED and s.text in text
        ]


_ID_FIELDS = frozenset({"id", "id_", "event_id", "file_id", "email_id", "record_id"})


def _identifier_like(origin: Origin) -> bool:
    return origin.label is not None and origin.label.path.rsplit(".", 1)[-1].split("[")[0] in _ID_FIELDS
